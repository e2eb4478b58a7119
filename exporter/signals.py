"""Window -> derived diagnostic numbers (:class:`Signals`).

Every rate and ratio comes from deltas inside the window, never from lifetime counters.
A value is ``None`` when its inputs are absent or the window holds no such traffic; the
names of absent inputs are listed in ``missing`` so nothing reads as zero.

``Signals`` is a composition of small frozen groups (traffic, KV, scheduler, latency, CPU,
GPU, speculative decoding), each filled by its own function over the window. The JSON ``signals`` object is a
contract (docs/method.md, "The JSON signals object"): :meth:`Signals.to_dict` flattens the
groups into one object, in the order of the dataclasses' fields (``FLAT_KEYS``, derived from them):
a new signal is one new field of its group.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar

from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.snapshot import LabelSet, Snapshot, label_value
from exporter.window import HistogramDelta, Window

QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)
LATENCY_FAMILIES: tuple[str, ...] = ("ttft", "itl", "e2e")


@dataclass(frozen=True, slots=True)
class HostInputs:
    """CPU and GPU readings from outside vLLM's /metrics, already reduced to shares.

    Shares are 0..1 over the recent horizon (``recent_evaluations``: the host as it is now, which
    the rules judge); ``window`` holds the same readings over the whole window, when the source keeps
    them (published beside the recent ones). ``sources`` says where each came from (for the evidence).
    """

    cpu_wait_share: float | None = None  # run-queue wait / (run + wait) of the vLLM threads
    cpu_busy_cores: float | None = None  # run time of those threads / window: how much CPU they used
    cpu_throttled_share: float | None = None  # throttled CFS periods / periods
    cpu_psi_share: float | None = None  # PSI cpu 'some' avg10 / 100
    gpu_utilization: float | None = None  # DCGM GPU utilisation, 0..1, mean over the recent horizon
    sources: tuple[str, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()  # (source, reason) of reads that failed this time
    window: HostInputs | None = None  # the same readings over the whole window


@dataclass(frozen=True, slots=True)
class CacheFacts:
    """KV-cache configuration read from ``vllm:cache_config_info`` labels."""

    block_size: int | None = None
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_size_tokens: int | None = None
    enable_prefix_caching: bool | None = None


# -- the groups --------------------------------------------------------------------------------
# Each group names its fields for what they are inside the group (``kv.usage_max``); ``FLAT``
# maps the fields whose JSON key differs (``kv_cache_usage_max``). Unmapped fields keep their name.


@dataclass(frozen=True, slots=True)
class Traffic:
    """Requests and tokens through the engine over the window."""

    requests_finished: float | None = None
    requests_per_second: float | None = None
    first_tokens: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    prompt_length_mean: float | None = None
    prompt_length_p95: float | None = None
    prompt_length_mean_recent: float | None = None  # over the newest recent_evaluations steps
    generation_length_mean: float | None = None
    prefill_token_share: float | None = None  # computed prompt / (computed prompt + generated) tokens
    admission_rejections_per_second: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {}


@dataclass(frozen=True, slots=True)
class Kv:
    """KV-cache occupancy, preemptions and prefix-cache reuse over the window."""

    preemptions: float | None = None
    preemptions_recent: float | None = None  # over the newest recent_evaluations steps only
    preemption_rate: float | None = None
    preemptions_per_request: float | None = None
    usage: float | None = None
    usage_max: float | None = None
    usage_mean: float | None = None
    full_fraction: float | None = None  # share of scrapes at or above the high mark
    prefix_queried_tokens: float | None = None
    prefix_hit_ratio: float | None = None
    prefix_hit_ratio_recent: float | None = None  # over the newest recent_evaluations steps: the cache now
    # The lowest recent hit ratio of any evaluation the window holds (set by the pipeline): the prefix was
    # broken at some time the window covers, so the first tokens of those scrapes are the cache's.
    prefix_hit_ratio_recent_low: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "usage": "kv_cache_usage", "usage_max": "kv_cache_usage_max", "usage_mean": "kv_cache_usage_mean",
        "full_fraction": "kv_full_fraction", "prefix_queried_tokens": "prefix_cache_queried_tokens",
        "prefix_hit_ratio": "prefix_cache_hit_ratio", "prefix_hit_ratio_recent": "prefix_cache_hit_ratio_recent",
        "prefix_hit_ratio_recent_low": "prefix_cache_hit_ratio_recent_low",
    }


@dataclass(frozen=True, slots=True)
class Scheduler:
    """Who runs, who waits, and what each engine step carries."""

    steps_per_second: float | None = None  # engine output batches (about one per step)
    tokens_per_step: float | None = None
    tokens_per_step_p99: float | None = None
    busy_fraction: float | None = None  # steps/s x mean step time (ITL mean stands in for it)
    running: float | None = None
    running_mean: float | None = None
    running_max: float | None = None
    waiting: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    waiting_fraction: float | None = None
    # Share of scrapes where requests wait for engine capacity: the by-reason gauge where vLLM has it
    # (deferred requests wait for a LoRA slot or a KV transfer, not for the scheduler), else all waiting.
    queued_fraction: float | None = None
    queued_recent_fraction: float | None = None  # the same over the newest recent_evaluations scrapes
    # The highest queued_recent_fraction of any evaluation the window holds (set by the pipeline): 1.0 when a
    # queue was waiting in every scrape of some recent horizon the window covers.
    queued_recent_peak: float | None = None
    waiting_capacity: float | None = None
    waiting_deferred: float | None = None
    # Share of scrapes where requests wait deferred: waits no queue rule counts (only A0 names them).
    deferred_fraction: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "steps_per_second": "engine_steps_per_second", "busy_fraction": "engine_busy_fraction",
    }


@dataclass(frozen=True, slots=True)
class Latency:
    """Latency quantiles and means (seconds), and where TTFT and e2e time goes."""

    ttft_quantiles: Mapping[float, float] = field(default_factory=dict)
    itl_quantiles: Mapping[float, float] = field(default_factory=dict)
    e2e_quantiles: Mapping[float, float] = field(default_factory=dict)
    ttft_mean: float | None = None
    itl_mean: float | None = None
    e2e_mean: float | None = None
    tpot_mean: float | None = None
    queue_mean: float | None = None
    prefill_mean: float | None = None
    decode_mean: float | None = None
    inference_mean: float | None = None
    ttft_frontend_mean: float | None = None
    e2e_frontend_mean: float | None = None
    # Estimated part of the frontend means that is the wait for the engine step under way (step_wait).
    step_wait_mean: float | None = None
    ttft_queue_share: float | None = None
    ttft_prefill_share: float | None = None
    # The same two shares over the newest recent_evaluations steps (first tokens of requests admitted now).
    ttft_queue_share_recent: float | None = None
    ttft_prefill_share_recent: float | None = None
    ttft_frontend_share: float | None = None
    e2e_frontend_share: float | None = None
    observations: float | None = None
    unresolved_quantiles: tuple[str, ...] = ()
    # ITL p99 / p50 from quantiles the buckets resolve; a p50 inside the first bucket is replaced by
    # that bucket's upper bound, which makes the ratio a lower bound (see itl_tail_note).
    itl_tail_ratio: float | None = None
    itl_tail_note: str = ""
    itl_tail_ratio_recent: float | None = None  # the same over the newest recent_evaluations steps: the gaps now
    # The window's TTFT and ITL histograms, which the objectives are judged on (exporter/objectives);
    # with no observation yet, their bucket edges alone. Not in the JSON ``signals`` (no flat key).
    ttft_histogram: HistogramDelta | None = None
    itl_histogram: HistogramDelta | None = None
    # First tokens of the newest recent_evaluations steps: an objective missed *now*, beside a cause's recent
    # evidence (vLLM records queue and prefill times when a request finishes, first tokens when they come).
    ttft_histogram_recent: HistogramDelta | None = None

    FLAT: ClassVar[Mapping[str, str]] = {"observations": "latency_observations"}

    def quantile(self, family: str, q: float) -> float | None:
        """The q-quantile of ``family`` (ttft, itl, e2e), None when the window has none."""
        quantiles: Mapping[float, float] = getattr(self, f"{family}_quantiles")
        return quantiles.get(q)


@dataclass(frozen=True, slots=True)
class Cpu:
    """CPU use of the API server and the inputs of the CPU-starvation score."""

    api_server_cores: float | None = None
    inputs: Mapping[str, float] = field(default_factory=dict)
    starvation_score: float | None = None  # over the recent horizon (recent_evaluations): what rules read
    starvation_score_window: float | None = None  # the same over the whole window, when the source keeps it
    # The highest recent score of any evaluation the window holds: the host starved vLLM at some time the window
    # covers (time-aligned: the effects of those scrapes are the starvation's). Set by the pipeline.
    starvation_score_peak: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "api_server_cores": "api_server_cpu_cores", "inputs": "cpu_inputs", "starvation_score": "cpu_starvation_score",
        "starvation_score_window": "cpu_starvation_score_window", "starvation_score_peak": "cpu_starvation_score_peak",
    }


@dataclass(frozen=True, slots=True)
class Gpu:
    """GPU readings: DCGM utilisation and vLLM's per-GPU MFU estimate (None when not enabled)."""

    utilization: float | None = None  # DCGM, over the recent horizon (recent_evaluations)
    read_bytes_per_second: float | None = None
    flops_per_second: float | None = None
    utilization_window: float | None = None  # DCGM, mean over the whole window
    # vLLM's MFU estimate of bytes read per second of engine stepping, over the newest recent_evaluations
    # steps: how fast the kernels move memory now (B4's slow path), whatever the load.
    read_bytes_per_busy_second_recent: float | None = None
    # The lowest such reading of any evaluation the window holds (set by the pipeline): the kernels were slow at
    # some time the window covers, so the token gaps of those scrapes are the GPU's.
    read_bytes_per_busy_second_recent_low: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "utilization": "gpu_utilization", "utilization_window": "gpu_utilization_window",
        "read_bytes_per_second": "read_bytes_per_gpu_per_second",
        "flops_per_second": "flops_per_gpu_per_second",
    }


@dataclass(frozen=True, slots=True)
class Speculative:
    """Speculative decoding over the window (vllm/v1/spec_decode/metrics.py); all None when it is off.

    vLLM registers the spec-decode counters only when the engine runs with ``--speculative-config``,
    so their presence says the feature is on. One output event then carries 1 + the accepted draft
    tokens, and vLLM's inter-token latency histogram observes one gap per output event, not per token:
    ``tokens_per_event`` (generated tokens after the first of each request, over ITL observations) is
    what divides the event gaps to judge the ITL objective per token (``per_token_itl``).
    """

    enabled: bool | None = None
    drafts: float | None = None  # verify steps that carried a draft, in the window
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    acceptance_rate: float | None = None  # accepted / draft tokens (vLLM's "draft acceptance rate")
    mean_accepted_length: float | None = None  # 1 + accepted / drafts (the bonus token included)
    acceptance_per_position: tuple[float, ...] = ()  # accepted at draft position i / drafts
    tokens_per_event: float | None = None  # output tokens per ITL observation (1 without speculation)
    event_gap_mean: float | None = None  # mean ITL observation, per output event (seconds)

    FLAT: ClassVar[Mapping[str, str]] = {
        "enabled": "spec_decode_enabled", "drafts": "spec_decode_drafts",
        "draft_tokens": "spec_decode_draft_tokens", "accepted_tokens": "spec_decode_accepted_tokens",
        "acceptance_rate": "spec_decode_acceptance_rate",
        "mean_accepted_length": "spec_decode_mean_accepted_length",
        "acceptance_per_position": "spec_decode_acceptance_per_position",
        "tokens_per_event": "tokens_per_output_event", "event_gap_mean": "itl_event_mean_seconds",
    }

    @property
    def itl_scale(self) -> float | None:
        """Tokens per output event when the ITL objective is judged per token (speculation on, > 1)."""
        if self.enabled and self.tokens_per_event is not None and self.tokens_per_event > 1.0:
            return self.tokens_per_event
        return None


Group = Traffic | Kv | Scheduler | Latency | Cpu | Gpu | Speculative
GROUPS: tuple[tuple[str, type[Group]], ...] = (
    ("traffic", Traffic), ("kv", Kv), ("scheduler", Scheduler), ("latency", Latency), ("cpu", Cpu), ("gpu", Gpu),
    ("speculative", Speculative),
)

# Grouped fields the JSON ``signals`` leaves out: the objectives' histograms, published judged instead
# (TargetState.objectives).
UNPUBLISHED: frozenset[str] = frozenset({"ttft_histogram", "itl_histogram", "ttft_histogram_recent"})
# The quantile maps, published as one key per quantile (``<family>_p<q>_seconds``) after the others.
QUANTILE_MAPS: frozenset[str] = frozenset(f"{family}_quantiles" for family in LATENCY_FAMILIES)


def _flat_names() -> dict[str, tuple[str, str]]:
    """Flat key -> (group attribute, field), for every grouped field (quantile maps by field name)."""
    out: dict[str, tuple[str, str]] = {}
    for attribute, cls in GROUPS:
        for f in fields(cls):
            out[cls.FLAT.get(f.name, f.name)] = (attribute, f.name)
    return out


FLAT_FIELDS: Mapping[str, tuple[str, str]] = _flat_names()


def _plain(value: Any) -> Any:
    """A field value as the JSON document holds it (lists and dicts, not tuples, mappings and dataclasses)."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


@dataclass(frozen=True, slots=True)
class Signals:
    window_seconds: float
    scrapes: int
    restarts: int = 0
    traffic: Traffic = Traffic()
    kv: Kv = Kv()
    scheduler: Scheduler = Scheduler()
    latency: Latency = Latency()
    cpu: Cpu = Cpu()
    gpu: Gpu = Gpu()
    speculative: Speculative = Speculative()
    cache: CacheFacts = CacheFacts()
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``signals`` object: ``FLAT_KEYS`` in order, then the latency quantiles."""
        data: dict[str, Any] = {}
        for key, (attribute, name) in PUBLISHED.items():
            value = getattr(self, attribute)
            data[key] = _plain(value if name is None else getattr(value, name))
        for family in LATENCY_FAMILIES:
            for q, value in getattr(self.latency, f"{family}_quantiles").items():
                data[f"{family}_p{round(q * 100)}_seconds"] = value
        return data


def _published() -> dict[str, tuple[str, str | None]]:
    """JSON key -> (Signals field, group field or None), in the order of the dataclasses' fields.

    A top-level field is one key; a group is its fields in place, each under its flat key
    (``FLAT``), less the unpublished fields and the quantile maps.
    """
    groups: dict[str, type[Group]] = dict(GROUPS)
    out: dict[str, tuple[str, str | None]] = {}
    for top in fields(Signals):
        group = groups.get(top.name)
        if group is None:
            out[top.name] = (top.name, None)
            continue
        for f in fields(group):
            if f.name not in UNPUBLISHED and f.name not in QUANTILE_MAPS:
                out[group.FLAT.get(f.name, f.name)] = (top.name, f.name)
    return out


PUBLISHED: Mapping[str, tuple[str, str | None]] = _published()
# The JSON ``signals`` keys in their published order (docs/metrics.md lists them), followed by the latency
# quantiles as ``<family>_p<q>_seconds``. Derived: a new field of a group is published under its name.
FLAT_KEYS: tuple[str, ...] = tuple(PUBLISHED)


# -- helpers -------------------------------------------------------------------------------------
def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _clamp01(value: float) -> float:
    return 0.0 if value < 0 else 1.0 if value > 1 else value


def _scale(value: float | None, floor: float, full: float) -> float | None:
    """Map value onto 0..1 between floor (0) and full (1)."""
    if value is None:
        return None
    if full <= floor:
        return 1.0 if value >= full else 0.0
    return _clamp01((value - floor) / (full - floor))


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _hist_mean(hist: HistogramDelta | None) -> float | None:
    return hist.mean() if hist is not None else None


def _share_positive(series: list[float]) -> float | None:
    """Share of scrapes with a value above zero."""
    return _ratio(sum(1 for v in series if v > 0), len(series))


def cache_facts(snapshot: Snapshot | None) -> CacheFacts:
    if snapshot is None:
        return CacheFacts()
    rows = snapshot.info.get(vllm.CACHE_CONFIG_INFO, ())
    if not rows:
        return CacheFacts()
    row = rows[0]

    def number(key: str, kind: type) -> Any:
        try:
            return kind(float(row[key])) if kind is int else kind(row[key])
        except (KeyError, ValueError, TypeError):
            return None

    enable = row.get("enable_prefix_caching")
    return CacheFacts(
        block_size=number("block_size", int),
        # With data parallelism every engine repeats the DP-summed block count: never sum it again.
        num_gpu_blocks=number("num_gpu_blocks", int),
        gpu_memory_utilization=number("gpu_memory_utilization", float),
        kv_cache_size_tokens=number("kv_cache_size_tokens", int),
        enable_prefix_caching=None if enable is None else enable == "True",
    )


def _reason(value: str) -> Callable[[LabelSet], bool]:
    return lambda labels: label_value(labels, "reason") == value


def _position(value: str) -> Callable[[LabelSet], bool]:
    return lambda labels: label_value(labels, "position") == value


def _source(value: str) -> Callable[[LabelSet], bool]:
    return lambda labels: label_value(labels, "source") == value


def _quantiles(hist: HistogramDelta | None, name: str, unresolved: list[str]) -> dict[float, float]:
    if hist is None:
        return {}
    out: dict[float, float] = {}
    for q in QUANTILES:
        value = hist.quantile(q)
        if value is None:
            continue
        out[q] = value
        if not hist.resolves(q):
            unresolved.append(f"{name}_p{round(q * 100)}")
    return out


def itl_tail(itl: HistogramDelta | None) -> tuple[float | None, str]:
    """ITL p99 over p50 from what the buckets resolve, and a note when it is bounded or unknown.

    vLLM's ITL buckets start at 10 ms: a median interpolated inside the first bucket is made up
    (it can be anything from 0 to the bound), so the bound stands in for it and the ratio becomes
    a lower bound. A p99 inside the first bucket means every gap is short: no stutter to measure.
    """
    if itl is None or not itl.bounds:
        return None, ""
    p50, p99 = itl.quantile(0.5), itl.quantile(0.99)
    if p50 is None or p99 is None:
        return None, ""
    first = itl.bounds[0]
    if not itl.resolves(0.99):
        return 1.0, f"ITL p99 is inside the first bucket (<= {first * 1000:.0f} ms): no tail to measure"
    if not itl.resolves(0.5):
        return p99 / first, f"ITL p50 is inside the first bucket (<= {first * 1000:.0f} ms): the ratio is a lower bound"
    if p50 <= 0:
        return None, ""
    return p99 / p50, ""


def step_wait(itl: HistogramDelta | None, steps_per_second: float | None,
              prefill_mean: float | None) -> float | None:
    """Mean wait of a new request for the engine step under way (seconds), estimated.

    vLLM's engine core takes new requests between steps and stamps them QUEUED then, so the time
    from arrival to QUEUED, read as frontend time, also holds the rest of the step under way: half
    a 300 ms prefill step is no tokenizer problem. An arrival lands in a step with probability
    ``busy`` (steps/s x mean step) and then waits its residual, E[S^2] / 2E[S]. The ITL gaps stand
    in for the step durations (uniform inside each bucket; scaled so the first moment matches the
    exact mean). A gap longer than twice the mean prefill time is no single step (a preempted
    request's gap holds its time back in the queue), so gaps count at most that long.
    """
    mean = itl.mean() if itl is not None else None
    if itl is None or mean is None or not steps_per_second or not itl.cumulative or itl.cumulative[-1] <= 0:
        return None
    cap = 2.0 * prefill_mean if prefill_mean else math.inf
    raw, first, second, below, lower = 0.0, 0.0, 0.0, 0.0, 0.0
    for bound, cum in zip(itl.bounds, itl.cumulative):
        upper = lower if math.isinf(bound) else bound  # the +Inf bucket: at the last finite bound
        n = cum - below
        raw += n * (lower + upper) / 2
        lo, hi = min(lower, cap), min(upper, cap)
        first += n * (lo + hi) / 2
        second += n * (lo * lo + lo * hi + hi * hi) / 3
        below, lower = cum, upper
    if raw <= 0 or first <= 0:
        return None
    scale = mean * itl.cumulative[-1] / raw  # exact mean over the buckets' uniform-spread mean
    busy = min(1.0, steps_per_second * first / itl.cumulative[-1] * scale)
    return busy * scale * second / first / 2.0


def cpu_starvation(
    inputs: Mapping[str, float], thresholds: Thresholds
) -> tuple[float | None, dict[str, float]]:
    """0..1 score from the direct CPU inputs, and the per-input scores behind it.

    Only direct evidence (run-queue wait, CFS throttling, PSI of the vLLM processes) makes the
    score: an API server under starvation *looks* calm (its CPU time drops), and time outside the
    engine may be a heavy template as well as a starved core. Without a direct source the score is
    None and the CPU rules abstain, naming the source to enable; the indirect inputs are still
    reported, for the evidence.
    """
    per_input: dict[str, float] = {}
    wait = _scale(inputs.get("run_queue_wait_share"), thresholds.cpu_wait_share_floor, thresholds.cpu_wait_share_full)
    busy = inputs.get("busy_cores")
    if wait is not None and busy is not None and busy < thresholds.cpu_demand_min_cores:
        wait = 0.0  # an idle engine's wait share is noise: nothing asks for CPU, nothing is starved
    direct = {
        "run_queue_wait": wait,
        "cfs_throttling": _scale(inputs.get("cfs_throttled_share"), thresholds.cpu_throttled_floor,
                                 thresholds.cpu_throttled_full),
        "psi": _scale(inputs.get("psi_some_share"), thresholds.cpu_psi_floor, thresholds.cpu_psi_full),
    }
    frontend = _scale(inputs.get("frontend_share"), thresholds.frontend_share / 3,
                      min(1.0, thresholds.frontend_share * 5 / 3))
    api = _scale(inputs.get("api_server_cpu_cores"), thresholds.api_server_busy_cores / 2,
                 thresholds.api_server_busy_cores)
    # A busy API server matters only when requests do spend time in the frontend; alone it
    # may just be a fast engine streaming many tokens.
    if api is not None and not frontend:
        api = 0.0
    indirect = {"frontend_share": frontend, "api_server_cpu": api}
    per_input.update({k: v for k, v in (*direct.items(), *indirect.items()) if v is not None})
    direct_scores = [v for v in direct.values() if v is not None]
    if direct_scores:
        return max(direct_scores), per_input
    return None, per_input


# -- reading the window ------------------------------------------------------------------------
# Every vLLM family the signals read, in the order ``missing`` lists the absent ones.
INPUTS: tuple[str, ...] = (
    vllm.REQUEST_SUCCESS_TOTAL, vllm.TIME_TO_FIRST_TOKEN_SECONDS, vllm.NUM_PREEMPTIONS_TOTAL,
    vllm.PREFIX_CACHE_QUERIES_TOTAL, vllm.PREFIX_CACHE_HITS_TOTAL, vllm.KV_CACHE_USAGE_PERC,
    vllm.NUM_REQUESTS_RUNNING, vllm.NUM_REQUESTS_WAITING, vllm.NUM_REQUESTS_WAITING_BY_REASON,
    vllm.INTER_TOKEN_LATENCY_SECONDS, vllm.E2E_REQUEST_LATENCY_SECONDS, vllm.REQUEST_QUEUE_TIME_SECONDS,
    vllm.REQUEST_PREFILL_TIME_SECONDS, vllm.REQUEST_DECODE_TIME_SECONDS,
    vllm.REQUEST_INFERENCE_TIME_SECONDS, vllm.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS,
    vllm.REQUEST_PROMPT_TOKENS, vllm.REQUEST_GENERATION_TOKENS, vllm.ITERATION_TOKENS_TOTAL,
    vllm.PROMPT_TOKENS_TOTAL, vllm.GENERATION_TOKENS_TOTAL,
)
API_SERVER_CPU_ABSENT = "process_cpu_seconds_total absent (API-server scale-out or non-Python frontend)"


def _increase(window: Window, name: str) -> float | None:
    return window.increase(name) if window.present(name) else None


def _rate(window: Window, name: str) -> float | None:
    return window.rate(name) if window.present(name) else None


def _histogram(window: Window, name: str) -> HistogramDelta | None:
    return window.histogram(name) if window.present(name) else None


def _with_edges(window: Window, name: str, hist: HistogramDelta | None) -> HistogramDelta | None:
    """``hist``, else an empty delta on the latest scrape's bucket edges: a threshold can be checked
    against the edges from the first scrape on, before the window holds a step."""
    if hist is not None:
        return hist
    latest = window.latest
    series = latest.histograms.get(name) if latest is not None else None
    if not series:
        return None
    common = set.intersection(*(set(sample.bounds) for sample in series.values()))
    bounds = tuple(sorted(common))
    return HistogramDelta(bounds, tuple(0.0 for _ in bounds), 0.0, 0.0) if bounds else None


def _series(window: Window, name: str) -> list[float]:
    return window.gauge_series(name) if window.present(name) else []


def _moving_rate(window: Window, name: str) -> float | None:
    """Rate of a counter that vLLM registers always but moves only when a feature is on."""
    if not window.present(name):
        return None
    rate = window.rate(name)
    return rate if rate else None


def missing_inputs(window: Window) -> tuple[str, ...]:
    return tuple(name for name in INPUTS if not window.present(name))


def traffic(window: Window, recent: int = 0) -> Traffic:
    """``recent``: the steps read as now (``recent_evaluations``)."""
    duration = window.duration
    finished = _increase(window, vllm.REQUEST_SUCCESS_TOTAL)
    ttft = _histogram(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    prompt_len = _histogram(window, vllm.REQUEST_PROMPT_TOKENS)
    prompt_rate = _rate(window, vllm.PROMPT_TOKENS_TOTAL)
    generation_rate = _rate(window, vllm.GENERATION_TOKENS_TOTAL)
    prefix_hits = _increase(window, vllm.PREFIX_CACHE_HITS_TOTAL)
    # Prompt tokens the engine computed: all of them minus the ones the prefix cache served.
    computed_prompt_rate = None
    if window.present(vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL):
        computed_prompt_rate = window.rate(vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL, _source("local_compute"))
    elif prompt_rate is not None and prefix_hits is not None and duration > 0:
        computed_prompt_rate = max(0.0, prompt_rate - prefix_hits / duration)
    prefill_share = None
    if computed_prompt_rate is not None and generation_rate is not None:
        prefill_share = _ratio(computed_prompt_rate, computed_prompt_rate + generation_rate)
    return Traffic(
        requests_finished=finished,
        requests_per_second=_ratio(finished, duration),
        first_tokens=ttft.count if ttft is not None else None,
        prompt_tokens_per_second=prompt_rate,
        generation_tokens_per_second=generation_rate,
        prompt_length_mean=_hist_mean(prompt_len),
        prompt_length_p95=prompt_len.quantile(0.95) if prompt_len is not None else None,
        prompt_length_mean_recent=(_hist_mean(window.histogram_recent(vllm.REQUEST_PROMPT_TOKENS, recent))
                                   if recent > 0 else None),
        generation_length_mean=_hist_mean(_histogram(window, vllm.REQUEST_GENERATION_TOKENS)),
        prefill_token_share=prefill_share,
        admission_rejections_per_second=_rate(window, vllm.ADMISSION_REJECTIONS_TOTAL),
    )


def kv(window: Window, thresholds: Thresholds, flow: Traffic) -> Kv:
    duration = window.duration
    recent = int(thresholds.recent_evaluations)
    preemptions = _increase(window, vllm.NUM_PREEMPTIONS_TOTAL)
    # Requests admitted in the window: finished ones, or first tokens when long outputs finish later.
    admitted = max((v for v in (flow.requests_finished, flow.first_tokens) if v is not None), default=None)
    name = vllm.KV_CACHE_USAGE_PERC
    usage = window.gauge_series(name, "max") if window.present(name) else []
    queries = _increase(window, vllm.PREFIX_CACHE_QUERIES_TOTAL)
    hits = _increase(window, vllm.PREFIX_CACHE_HITS_TOTAL)
    return Kv(
        preemptions=preemptions,
        preemptions_recent=window.increase_recent(vllm.NUM_PREEMPTIONS_TOTAL, recent),
        preemption_rate=_ratio(preemptions, duration),
        preemptions_per_request=_ratio(preemptions, admitted) if preemptions else (0.0 if admitted else None),
        usage=usage[-1] if usage else None,
        usage_max=max(usage) if usage else None,
        usage_mean=_mean(usage),
        full_fraction=_ratio(sum(1 for v in usage if v >= thresholds.kv_usage_high), len(usage)),
        prefix_queried_tokens=queries,
        prefix_hit_ratio=_ratio(hits, queries),
        prefix_hit_ratio_recent=_ratio(window.increase_recent(vllm.PREFIX_CACHE_HITS_TOTAL, recent),
                                       window.increase_recent(vllm.PREFIX_CACHE_QUERIES_TOTAL, recent) or None),
    )


def scheduler(window: Window, itl_mean: float | None, recent: int = 0) -> Scheduler:
    """``recent``: the scrapes read as now (``recent_evaluations``)."""
    duration = window.duration
    running = _series(window, vllm.NUM_REQUESTS_RUNNING)
    waiting = _series(window, vllm.NUM_REQUESTS_WAITING)
    by_reason = vllm.NUM_REQUESTS_WAITING_BY_REASON
    has_reason = window.present(by_reason)
    queued = window.gauge_series(by_reason, "sum", _reason("capacity")) if has_reason else waiting
    steps = _histogram(window, vllm.ITERATION_TOKENS_TOTAL)
    busy = None
    if steps is not None and itl_mean is not None and duration > 0:
        busy = min(1.0, steps.count / duration * (itl_mean or 0.0))
    return Scheduler(
        steps_per_second=_ratio(steps.count, duration) if steps is not None else None,
        tokens_per_step=_hist_mean(steps),
        tokens_per_step_p99=steps.quantile(0.99) if steps is not None else None,
        busy_fraction=busy,
        running=running[-1] if running else None,
        running_mean=_mean(running),
        running_max=max(running) if running else None,
        waiting=waiting[-1] if waiting else None,
        waiting_mean=_mean(waiting),
        waiting_max=max(waiting) if waiting else None,
        waiting_fraction=_share_positive(waiting),
        queued_fraction=_share_positive(queued),
        queued_recent_fraction=_share_positive(queued[-recent:]) if recent > 0 else None,
        waiting_capacity=window.gauge(by_reason, "sum", _reason("capacity")) if has_reason else None,
        waiting_deferred=window.gauge(by_reason, "sum", _reason("deferred")) if has_reason else None,
        deferred_fraction=(_share_positive(window.gauge_series(by_reason, "sum", _reason("deferred")))
                           if has_reason else None),
    )


def latency(window: Window, itl: HistogramDelta | None, recent: int = 0) -> Latency:
    """``itl`` is the window's ITL histogram (read once by ``compute``: the step-wait estimate needs it too);
    ``recent``: the steps read as now (``recent_evaluations``), for the recent shares of TTFT."""
    ttft = _histogram(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    e2e = _histogram(window, vllm.E2E_REQUEST_LATENCY_SECONDS)
    queue_mean = _hist_mean(_histogram(window, vllm.REQUEST_QUEUE_TIME_SECONDS))
    prefill_mean = _hist_mean(_histogram(window, vllm.REQUEST_PREFILL_TIME_SECONDS))
    inference_mean = _hist_mean(_histogram(window, vllm.REQUEST_INFERENCE_TIME_SECONDS))
    ttft_mean, e2e_mean = _hist_mean(ttft), _hist_mean(e2e)
    unresolved: list[str] = []
    quantiles = {family: _quantiles(hist, family, unresolved) for family, hist in (("ttft", ttft), ("itl", itl),
                                                                                   ("e2e", e2e))}
    tail_ratio, tail_note = itl_tail(itl)
    # Frontend = time outside the engine: tokenization/templates before QUEUED, IPC and output handling.
    # Bucket-free: means from _sum/_count deltas, so coarse 0.3 s latency buckets do not matter.
    ttft_frontend = None
    if ttft_mean is not None and queue_mean is not None and prefill_mean is not None:
        ttft_frontend = max(0.0, ttft_mean - queue_mean - prefill_mean)
    e2e_frontend = None
    if e2e_mean is not None and queue_mean is not None and inference_mean is not None:
        e2e_frontend = max(0.0, e2e_mean - queue_mean - inference_mean)
    return Latency(
        ttft_quantiles=quantiles["ttft"],
        itl_quantiles=quantiles["itl"],
        e2e_quantiles=quantiles["e2e"],
        ttft_mean=ttft_mean,
        itl_mean=_hist_mean(itl),
        e2e_mean=e2e_mean,
        tpot_mean=_hist_mean(_histogram(window, vllm.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS)),
        queue_mean=queue_mean,
        prefill_mean=prefill_mean,
        decode_mean=_hist_mean(_histogram(window, vllm.REQUEST_DECODE_TIME_SECONDS)),
        inference_mean=inference_mean,
        ttft_frontend_mean=ttft_frontend,
        e2e_frontend_mean=e2e_frontend,
        ttft_queue_share=_ratio(queue_mean, ttft_mean),
        ttft_prefill_share=_ratio(prefill_mean, ttft_mean),
        ttft_queue_share_recent=_recent_share(window, vllm.REQUEST_QUEUE_TIME_SECONDS, recent),
        ttft_prefill_share_recent=_recent_share(window, vllm.REQUEST_PREFILL_TIME_SECONDS, recent),
        ttft_frontend_share=_ratio(ttft_frontend, ttft_mean),
        e2e_frontend_share=_ratio(e2e_frontend, e2e_mean),
        observations=e2e.count if e2e is not None else None,
        unresolved_quantiles=tuple(unresolved),
        itl_tail_ratio=tail_ratio,
        itl_tail_note=tail_note,
        itl_tail_ratio_recent=(itl_tail(window.histogram_recent(vllm.INTER_TOKEN_LATENCY_SECONDS, recent))[0]
                               if recent > 0 else None),
        ttft_histogram=_with_edges(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS, ttft),
        itl_histogram=_with_edges(window, vllm.INTER_TOKEN_LATENCY_SECONDS, itl),
        ttft_histogram_recent=(window.histogram_recent(vllm.TIME_TO_FIRST_TOKEN_SECONDS, recent)
                               if recent > 0 else None),
    )


def _recent_share(window: Window, part: str, recent: int) -> float | None:
    """Mean ``part`` (queue or prefill time) over mean TTFT, both over the newest ``recent`` steps."""
    if recent <= 0:
        return None
    return _ratio(_hist_mean(window.histogram_recent(part, recent)),
                  _hist_mean(window.histogram_recent(vllm.TIME_TO_FIRST_TOKEN_SECONDS, recent)))


def _net_share(outside: float | None, step_wait_s: float | None, total: float | None) -> float | None:
    """Time outside the engine net of the wait for the step under way, as a share of ``total``: vLLM
    stamps QUEUED between steps, so long steps (the budget's doing) read as frontend time otherwise."""
    if outside is None:
        return None
    return _ratio(max(0.0, outside - (step_wait_s or 0.0)), total)


def cpu(window: Window, thresholds: Thresholds, host: HostInputs, frontend_share: float | None) -> Cpu:
    """``frontend_share``: time outside the engine, net of the step wait, as a share of e2e (``_net_share``)."""
    api_cores = _rate(window, "process_cpu_seconds_total")
    inputs = _cpu_inputs(host, frontend_share, api_cores)
    score, _ = cpu_starvation(inputs, thresholds)
    over_window = None
    if host.window is not None:
        over_window, _ = cpu_starvation(_cpu_inputs(host.window, frontend_share, api_cores), thresholds)
    return Cpu(api_server_cores=api_cores, inputs=inputs, starvation_score=score,
               starvation_score_window=over_window)


def _cpu_inputs(host: HostInputs, frontend_share: float | None, api_cores: float | None) -> dict[str, float]:
    inputs: dict[str, float] = {}
    for key, value in (
        ("run_queue_wait_share", host.cpu_wait_share),
        ("busy_cores", host.cpu_busy_cores),
        ("cfs_throttled_share", host.cpu_throttled_share),
        ("psi_some_share", host.cpu_psi_share),
        # Share of e2e, not of TTFT: with a small fast model tokenization is a large share of a
        # tiny TTFT without anything being wrong; A3 reads the TTFT share once TTFT breaches.
        ("frontend_share", frontend_share),
        ("api_server_cpu_cores", api_cores),
    ):
        if value is not None:
            inputs[key] = value
    return inputs


def gpu(window: Window, host: HostInputs, recent: int = 0) -> Gpu:
    """``recent``: the steps read as now (``recent_evaluations``), for the bytes read per second of stepping."""
    per_busy = None
    read = _moving_rate(window, vllm.ESTIMATED_READ_BYTES_PER_GPU_TOTAL)
    if read is not None and recent > 0:
        read_recent = window.increase_recent(vllm.ESTIMATED_READ_BYTES_PER_GPU_TOTAL, recent)
        steps = window.histogram_recent(vllm.ITERATION_TOKENS_TOTAL, recent)
        itl_mean = _hist_mean(window.histogram_recent(vllm.INTER_TOKEN_LATENCY_SECONDS, recent))
        duration = window.duration_recent(recent)
        if read_recent and steps is not None and steps.count and itl_mean and duration > 0:
            # busy seconds = steps x mean step time (the ITL mean stands in for it, as for busy_fraction)
            per_busy = read_recent / min(duration, steps.count * itl_mean)
    return Gpu(
        read_bytes_per_busy_second_recent=per_busy,
        utilization=host.gpu_utilization,
        utilization_window=host.window.gpu_utilization if host.window is not None else None,
        read_bytes_per_second=_moving_rate(window, vllm.ESTIMATED_READ_BYTES_PER_GPU_TOTAL),
        flops_per_second=_moving_rate(window, vllm.ESTIMATED_FLOPS_PER_GPU_TOTAL),
    )


SPEC_DECODE_FAMILIES: tuple[str, ...] = (
    vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL, vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL,
    vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL, vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL,
)


def speculative(window: Window, itl: HistogramDelta | None) -> Speculative:
    """Acceptance and tokens per output event; ``Speculative()`` when no spec-decode family is exported."""
    if not any(window.present(name) for name in SPEC_DECODE_FAMILIES):
        return Speculative()
    drafts = _increase(window, vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL)
    draft_tokens = _increase(window, vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL)
    accepted = _increase(window, vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL)
    per_position: tuple[float, ...] = ()
    name = vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL
    latest = window.latest
    if drafts and latest is not None and window.present(name):
        positions = sorted({int(p) for labels in latest.scalars.get(name, {})
                            if (p := label_value(labels, "position")) is not None and p.isdigit()})
        per_position = tuple((window.increase(name, _position(str(p))) or 0.0) / drafts for p in positions)
    # Every generated token but each request's first arrives in an ITL-observed output event.
    generated = _increase(window, vllm.GENERATION_TOKENS_TOTAL)
    ttft = _histogram(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    per_event = None
    if generated is not None and ttft is not None and itl is not None and itl.count > 0:
        per_event = max(1.0, (generated - ttft.count) / itl.count)
    return Speculative(
        enabled=True, drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
        acceptance_rate=_ratio(accepted, draft_tokens),
        mean_accepted_length=1.0 + accepted / drafts if accepted is not None and drafts else None,
        acceptance_per_position=per_position, tokens_per_event=per_event, event_gap_mean=_hist_mean(itl),
    )


def per_token(itl: HistogramDelta | None, tokens_per_event: float | None) -> HistogramDelta | None:
    """The ITL histogram with each event gap divided by the tokens an event carried on average."""
    if itl is None or tokens_per_event is None:
        return itl
    return HistogramDelta(tuple(b / tokens_per_event for b in itl.bounds), itl.cumulative,
                          itl.sum / tokens_per_event, itl.count)


def compute(window: Window, thresholds: Thresholds, host: HostInputs | None = None) -> Signals:
    """Derive every signal from the window (and optional host readings).

    Under speculative decoding the latency group's ITL (quantiles, mean, the objective's histogram) is
    per token; the engine-step estimates (busy fraction, step wait) keep the per-event gaps.
    """
    host = host or HostInputs()
    recent = int(thresholds.recent_evaluations)
    flow = traffic(window, recent)
    itl = _histogram(window, vllm.INTER_TOKEN_LATENCY_SECONDS)
    spec = speculative(window, itl)
    times = latency(window, per_token(itl, spec.itl_scale), recent)
    steps = scheduler(window, _hist_mean(itl), recent)
    times = replace(times, step_wait_mean=step_wait(itl, steps.steps_per_second, times.prefill_mean))
    cpu_use = cpu(window, thresholds, host, _net_share(times.e2e_frontend_mean, times.step_wait_mean, times.e2e_mean))
    return Signals(
        window_seconds=window.duration,
        scrapes=len(window),
        restarts=window.restarts,
        traffic=flow,
        kv=kv(window, thresholds, flow),
        scheduler=steps,
        latency=times,
        cpu=cpu_use,
        gpu=gpu(window, host, recent),
        speculative=spec,
        cache=cache_facts(window.latest),
        missing=missing_inputs(window),
        notes=() if cpu_use.api_server_cores is not None else (API_SERVER_CPU_ABSENT,),
    )
