"""Which changes to evaluate: the user's ``--what-if KNOB=VALUE`` questions, else the ones the
active causes and the engine facts suggest.

A change is a knob (vLLM's engine argument name in snake case, or ``max_tokens`` for a cap at the
gateway, ``prefix_hit_ratio`` for prompt normalisation, ``replicas``), its current value and the
proposed one. ``apply`` turns a set of changes into the model's engine config, workload and traffic.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from exporter.advisor.calibrate import Calibration
from exporter.advisor.model import Clients, OpenArrivals
from exporter.simulator.engine import EngineConfig
from exporter.simulator.workload import Workload

# Knobs the model can evaluate; the help says what each one changes in it.
KNOBS: dict[str, str] = {
    "max_num_batched_tokens": "token budget per engine step",
    "max_num_seqs": "most requests running at once",
    "num_gpu_blocks_override": "KV-cache blocks",
    "kv_cache_memory_bytes": "KV-cache size in bytes (needs kv_cache_memory_bytes among the engine facts)",
    "max_tokens": "output cap at the gateway (requests' max_tokens)",
    "prefix_hit_ratio": "share of prompt tokens served from the prefix cache (prompt normalisation upstream)",
    "api_server_count": "API-server processes sharing the frontend work (tokenisation, detokenisation)",
    "replicas": "vLLM replicas sharing the traffic (throughput is the fleet's)",
}
NOT_MODELLED: dict[str, str] = {
    "long_prefill_token_threshold": "partial-prefill limits are not in the engine model",
    "max_num_partial_prefills": "partial-prefill limits are not in the engine model",
    "gpu_memory_utilization": "the model sizes KV in blocks: ask with kv_cache_memory_bytes or num_gpu_blocks_override",
    "tensor_parallel_size": "the model does not cover multi-GPU parallelism",
    "pipeline_parallel_size": "the model does not cover multi-GPU parallelism",
}
ALIASES = {"num_gpu_blocks": "num_gpu_blocks_override"}
# The knob moves (knob, "up" or "down") the record on real engines validates: at least six pooled validation
# pairs over at least two engine physics, and the direction right on every cell that moved (docs/advisor.md,
# the pooled record; lab/tests check this set against it). Any other move, and any knob a window of two cores
# cannot test (api_server_count, replicas), is the engine model's prediction alone and says so
# (``validated: false``).
VALIDATED: frozenset[tuple[str, str]] = frozenset({("prefix_hit_ratio", "up"), ("prefix_hit_ratio", "down")})
# What a change costs besides accelerators (a replica is an accelerator more: ``Candidate.accelerators``).
COSTS: dict[str, str] = {
    "max_num_batched_tokens": "no hardware; larger steps stall decodes longer, smaller ones prefill slower",
    "max_num_seqs": "no hardware; fewer requests at once (less throughput when KV has room)",
    "num_gpu_blocks_override": "GPU memory for the added KV blocks",
    "kv_cache_memory_bytes": "GPU memory for the added KV cache",
    "max_tokens": "no hardware; outputs longer than the cap are truncated",
    "prefix_hit_ratio": "no hardware; prompts rebuilt upstream around one template",
    "api_server_count": "CPU cores for the added API-server processes",
    "replicas": "an accelerator per added replica (and its host share)",
}
# A what-if whose prefill pieces are this many times larger (or smaller) than the window's is priced
# by a step cost the window never tested: the prediction says so.
EXTRAPOLATION_FACTOR = 2.0


class BadQuestion(ValueError):
    """A --what-if the advisor cannot answer, with the reason."""


@dataclass(frozen=True, slots=True)
class Change:
    knob: str
    current: float | None
    proposed: float

    def __post_init__(self) -> None:
        # Whole numbers read as the integers vLLM's flags take (256, not 256.0).
        for name in ("current", "proposed"):
            value = getattr(self, name)
            if isinstance(value, float) and value.is_integer():
                object.__setattr__(self, name, int(value))


@dataclass(frozen=True, slots=True)
class Candidate:
    changes: tuple[Change, ...]
    why: str
    answers: frozenset[str] = frozenset()  # the causes (exporter/catalog/symptoms.py) this change is an action for

    @property
    def knob(self) -> str:
        return "+".join(c.knob for c in self.changes)

    @property
    def validated(self) -> bool:
        """Every move it makes is one the record on real engines validates (``VALIDATED``)."""
        return all(c.current is not None and c.proposed != c.current
                   and (c.knob, "up" if c.proposed > c.current else "down") in VALIDATED for c in self.changes)

    @property
    def accelerators(self) -> float:
        """Accelerators after the change per accelerator now: a replica more is one more (TP and PP, which
        would multiply it, are refused by the calibration)."""
        ratio = 1.0
        for change in self.changes:
            if change.knob == "replicas":
                ratio *= float(change.proposed) / float(change.current or 1)
        return ratio

    @property
    def cost(self) -> str:
        return "; ".join(COSTS.get(c.knob, "") for c in self.changes)


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)[bB]?\s*$")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_value(text: str) -> float:
    """A number, with k/M/G/T (decimal) or Ki/Mi/Gi/Ti (binary) and an optional B: 8GiB, 2k, 0.5."""
    match = _SIZE.match(text)
    if not match:
        raise BadQuestion(f"{text!r} is not a number (examples: 6, 2048, 8GiB, 512Mi, 0.9)")
    number, unit, binary = float(match[1]), match[2].lower(), match[3]
    factor = 1024 ** " kmgt".index(unit) if binary else _UNITS[unit]
    return number * factor


def parse_question(text: str) -> tuple[str, float]:
    knob, sep, value = text.partition("=")
    knob = ALIASES.get(knob.strip().replace("-", "_"), knob.strip().replace("-", "_"))
    if not sep:
        raise BadQuestion(f"{text!r}: expected KNOB=VALUE, e.g. max_num_seqs=6")
    if knob in NOT_MODELLED:
        raise BadQuestion(f"{knob}: {NOT_MODELLED[knob]}")
    if knob not in KNOBS:
        raise BadQuestion(f"{knob}: unknown knob (one of {', '.join(KNOBS)})")
    number = parse_value(value)
    if knob == "prefix_hit_ratio" and not 0.0 <= number < 1.0:
        raise BadQuestion(f"{knob}={value}: a ratio in [0, 1)")
    if knob != "prefix_hit_ratio" and number < 1:
        raise BadQuestion(f"{knob}={value}: must be at least 1")
    return knob, number


def current_value(cal: Calibration, knob: str) -> float | None:
    return {
        "max_num_batched_tokens": float(cal.max_num_batched_tokens),
        "max_num_seqs": float(cal.max_num_seqs),
        "num_gpu_blocks_override": float(cal.num_gpu_blocks),
        "kv_cache_memory_bytes": cal.num_gpu_blocks * cal.kv_bytes_per_block if cal.kv_bytes_per_block else None,
        "max_tokens": None,
        "prefix_hit_ratio": cal.shared_prefix_tokens / cal.prompt.mean if cal.prompt.mean else 0.0,
        "api_server_count": 1.0,
        "replicas": 1.0,
    }[knob]


def from_questions(cal: Calibration, questions: list[str]) -> list[Candidate]:
    """Each question alone, then all of them together when there are several."""
    parsed = [parse_question(q) for q in questions]
    changes = []
    for knob, value in parsed:
        if knob == "kv_cache_memory_bytes" and cal.kv_bytes_per_block is None:
            raise BadQuestion("kv_cache_memory_bytes: the engine facts lack kv_cache_memory_bytes; "
                              "ask with num_gpu_blocks_override instead")
        changes.append(Change(knob, current_value(cal, knob), value))
    out = [Candidate((c,), "asked with --what-if") for c in changes]
    if len(changes) > 1:
        out.append(Candidate(tuple(changes), "asked with --what-if, all together"))
    return out


def _pow2_at_least(value: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(value, 1.0))))


def derived(cal: Calibration, active: set[str], waiting_mean: float) -> list[Candidate]:
    """Changes worth predicting for this window: each knob the method names, in the direction the
    active causes (or the observed lengths) point, at a step large enough to matter."""
    out: list[Candidate] = []
    budget, seqs = cal.max_num_batched_tokens, cal.max_num_seqs
    prompt_p95 = cal.prompt.quantile(0.95)
    raise_to = min(max(budget * 4, _pow2_at_least(prompt_p95)), max(cal.max_model_len, budget * 2))
    lower_to = max(seqs, 16, budget // 4)
    why_up = ("A4 active: prompts need several chunks" if "A4" in active else
              f"prompts up to {prompt_p95:.0f} tokens take {math.ceil(prompt_p95 / budget)} steps to prefill")
    why_down = ("B1/B2 active: long prefill steps stall the decodes" if active & {"B1", "B2"} else
                "smaller steps keep decodes flowing while prompts prefill")
    if raise_to > budget:
        out.append(Candidate((Change("max_num_batched_tokens", budget, raise_to),), why_up, frozenset({"A4"})))
    if lower_to < budget:
        out.append(Candidate((Change("max_num_batched_tokens", budget, lower_to),), why_down,
                             frozenset({"B1", "B2"})))
    if seqs >= 2:
        why = "D active: fewer requests hold KV at once" if "D" in active else "fewer requests hold KV at once"
        out.append(Candidate((Change("max_num_seqs", seqs, max(1, seqs // 2)),), why, frozenset({"D"})))
    why_kv = "D active: more KV blocks, fewer preemptions" if "D" in active else "more KV room"
    if cal.kv_bytes_per_block:
        now = cal.num_gpu_blocks * cal.kv_bytes_per_block
        out.append(Candidate((Change("kv_cache_memory_bytes", now, now * 2),), why_kv, frozenset({"D"})))
    else:
        out.append(Candidate((Change("num_gpu_blocks_override", cal.num_gpu_blocks, cal.num_gpu_blocks * 2),), why_kv,
                             frozenset({"D"})))
    out_p90, out_max = cal.output.quantile(0.9), max(cal.output.values)
    if out_max > 1.5 * out_p90:
        out.append(Candidate((Change("max_tokens", None, math.ceil(out_p90)),),
                             f"outputs have a long tail (p90 {out_p90:.0f}, max {out_max:.0f} tokens): cap at p90",
                             frozenset({"C3", "D", "E"})))
    hit = current_value(cal, "prefix_hit_ratio") or 0.0
    if active & {"A5", "F"} and hit < 0.6:
        out.append(Candidate((Change("prefix_hit_ratio", hit, min(0.9, hit + 0.3)),),
                             "A5/F active: one template upstream, so prompts share their prefix",
                             frozenset({"A5", "F"})))
    if "A3" in active or "C1" in active:
        out.append(Candidate((Change("api_server_count", 1, 2),), "CPU-bound frontend: a second API server",
                             frozenset({"A3", "C1"})))
    if waiting_mean >= 1.0 or active & {"A2", "D", "C3"}:
        out.append(Candidate((Change("replicas", 1, 2),), f"{waiting_mean:.1f} requests waiting on average: "
                                                         "a second replica takes half the traffic",
                             frozenset({"A2", "D", "C3"})))
    return out


@dataclass(frozen=True, slots=True)
class Applied:
    config: EngineConfig
    workload: Workload
    traffic: OpenArrivals | Clients
    throughput_scale: float  # fleet throughput per replica's


def apply(cal: Calibration, candidate: Candidate, traffic: OpenArrivals | Clients) -> Applied:
    engine: dict[str, float | int] = {}
    cap: int | None = None
    shared: int | None = None
    frontend = cal.frontend_s
    replicas = 1
    for change in candidate.changes:
        value = change.proposed
        if change.knob in ("max_num_batched_tokens", "max_num_seqs"):
            engine[change.knob] = int(value)
        elif change.knob == "num_gpu_blocks_override":
            engine["num_gpu_blocks_override"] = int(value)
        elif change.knob == "kv_cache_memory_bytes":
            assert cal.kv_bytes_per_block
            engine["num_gpu_blocks_override"] = int(value // cal.kv_bytes_per_block)
        elif change.knob == "max_tokens":
            cap = int(value)
        elif change.knob == "prefix_hit_ratio":
            shared = int(value * cal.prompt.mean) // cal.block_size * cal.block_size
        elif change.knob == "api_server_count":
            frontend = cal.frontend_s / value
        elif change.knob == "replicas":
            replicas = int(value)
        elif change.knob == "enable_prefix_caching":
            # Not a --what-if knob (a window without caching shows no reuse to predict from); the track record
            # (exporter/advisor/track.py) replays a real switch of it.
            engine["enable_prefix_caching"] = bool(value)
    if engine.get("num_gpu_blocks_override", cal.num_gpu_blocks) * cal.block_size < 2 * cal.block_size:
        raise BadQuestion("the KV cache would hold less than two blocks")
    base = cal.engine_config(**engine)
    config = replace(base, costs=replace(base.costs, tokenize_base_s=frontend))
    if replicas > 1:
        traffic = (replace(traffic, rate=traffic.rate / replicas) if isinstance(traffic, OpenArrivals)
                   else replace(traffic, count=max(1, math.ceil(traffic.count / replicas))))
    return Applied(config, cal.workload(output_cap=cap, shared_prefix_tokens=shared), traffic, float(replicas))


def _prefill_pieces(budget: int, cal: Calibration) -> tuple[float, float]:
    """The smallest and largest prefill piece a step carries: a whole prompt, or a budget-sized chunk."""
    return min(budget, cal.prompt.quantile(0.05)), min(budget, cal.prompt.quantile(0.95))


def step_extrapolation(cal: Calibration, candidate: Candidate) -> str:
    """Why the step cost of this what-if is an extrapolation, or "" when the window covered it.

    The step cost is a straight line fitted on the window's steps. A token budget that makes prefill
    pieces much larger or smaller than any the window held prices them off that line, and on real
    hardware the cost per token changes with the piece's size (large steps use the device better; a
    small chunk beside decodes pays for its attention over the context it continues).
    """
    budget = next((int(c.proposed) for c in candidate.changes if c.knob == "max_num_batched_tokens"), None)
    if budget is None:
        return ""
    low, high = _prefill_pieces(cal.max_num_batched_tokens, cal)
    new_low, new_high = _prefill_pieces(budget, cal)
    if new_high > EXTRAPOLATION_FACTOR * high:
        return (f"extrapolated: prefill steps of up to {new_high:.0f} tokens where the window's held at most "
                f"{high:.0f}; their cost is read off a line fitted on the smaller ones (larger steps usually "
                "cost less per token)")
    if new_low * EXTRAPOLATION_FACTOR < low:
        return (f"extrapolated: prefill chunks of {new_low:.0f} tokens where the window's pieces held at least "
                f"{low:.0f}; a small chunk's cost beside decodes is read off a line fitted on larger steps")
    return ""
