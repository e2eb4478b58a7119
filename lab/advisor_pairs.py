"""The advisor scored out of sample: real before/after pairs listed in a committed manifest.

    python -m lab.advisor --manifest lab/data/advisor-pairs/manifest.yaml [--split validation]
    python -m lab.advisor --manifest ... --capture PAIR_ID [--seconds 36]

A pair is one knob move on one workload: its base captured twice (two runs of the same engine and
traffic: the run-to-run noise), its after once, each a folder of sidecar-style captures under the
manifest's ``captures`` folder (``lab.advisor_cases.record_run``), packed once taken into one archive
a run (``lab.pair_archive``). The manifest fixes each pair's
``split`` (``dev`` or ``validation``; ``smoke`` for a pair that only proves the capture command and
is in neither half) before any model change is scored on it.

Scoring a split gives, per pair and per metric (TTFT p95, ITL p95, preemptions/s):

* three predictors on the same cells: the advisor (``vllm-diag advise BASE --what-if KNOB=TO``),
  "nothing changes" (the after is the base) and a single-server queue (``queue_baseline``);
* the advisor's own 80 % prediction interval (the product's, from the one base window) and its coverage
  with a Wilson interval (halves 1-8 were scored with the lab's interval from the two base captures);
* the acceptance cells of issue 27: the direction is right for every metric that moved by more than
  15 % and more than twice its run-to-run noise; the value is within +/-35 % of the measured after
  (for a measured 0 after a non-zero base: at most 10 % of the base); a refusal is a miss.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from lab.advisor_cases import (
    KV_BYTES,
    LONG_OUTPUTS,
    LONG_PROMPTS,
    PRESSURE,
    RunSpec,
    Traffic,
    advise,
    observed,
    record_run,
)
from lab.pair_archive import is_captured, pack_and_remove, run_folders

# ``validation-1`` ... ``validation-7``: the first campaign's and rounds 2-7's validation halves, each scored once
# (at b7af419, da55001, 8d00712, c046e2f, 74e2ea9, bdce395, 9f50abd) and spent: tuned on since, beside ``dev``;
# ``validation`` is round 8's half (scored once at 717f398); ``validation-9`` is issue 49's, fixed in the manifest
# before any model change of that issue and scored once; ``validation-10`` was fixed after validation-9's scoring,
# before any model change made after it; ``validation-11`` was fixed after validation-10's scoring, before the
# wide engine's step-cost change it tests; ``validation-12`` after it, before its scoring; ``validation-13`` after
# validation-12's scoring, before any model change made after it, on a worker with a core of its own;
# ``validation-14`` after validation-13's scoring, its bases' second runs on engine starts of their own;
# ``validation-15`` during validation-14's capture, before any model change made after validation-14's scoring;
# ``validation-16`` after validation-15's scoring, before any model change made after it; ``validation-17``
# after validation-16's scoring, likewise; ``validation-18`` after validation-17's;
# ``validation-19`` after validation-18's; ``validation-20`` after validation-19's; ``validation-21``
# before validation-20's scoring, before any model change made after validation-19's; ``validation-22`` after
# validation-21's scoring; ``validation-23`` during validation-22's capture, before its scoring; ``validation-24``
# after validation-23's scoring; ``validation-25`` after validation-24's; ``validation-26`` and ``validation-27``
# together, before validation-25's capture; ``validation-28`` and ``validation-29`` together, after validation-25's
# scoring; ``validation-30`` to ``validation-32`` together, after validation-29's scoring; ``validation-33`` after
# validation-30's scoring, before any model change made after validation-29's; ``validation-34`` after
# validation-33's scoring, before any model change made after it; ``validation-35`` to ``validation-38`` together,
# after validation-34's scoring, before any model change made after it; ``validation-39`` after validation-38's
# scoring, likewise.
SPLITS = ("dev", "validation", "validation-1", "validation-2", "validation-3", "validation-4", "validation-5",
          "validation-6", "validation-7", "validation-9", "validation-10", "validation-11", "validation-12",
          "validation-13", "validation-14", "validation-15", "validation-16", "validation-17",
          "validation-18", "validation-19", "validation-20", "validation-21", "validation-22",
          "validation-23", "validation-24", "validation-25", "validation-26",
          "validation-27", "validation-28", "validation-29", "validation-30",
          "validation-31", "validation-32", "validation-33", "validation-34",
          "validation-35", "validation-36", "validation-37", "validation-38",
          "validation-39", "smoke")
MAGNITUDE_METRICS = ("ttft_p95_seconds", "itl_p95_seconds", "preemption_rate")
LABELS = {"ttft_p95_seconds": "TTFT p95", "itl_p95_seconds": "ITL p95", "preemption_rate": "preempt/s"}
MOVED = 0.15  # a metric moved when base -> after changed by more than this share ...
NOISE_FACTOR = 2.0  # ... and by more than this many times its run-to-run noise
MAGNITUDE = 0.35  # within +/- this share of the measured after
ZERO_SHARE = 0.10  # a measured 0 after a non-zero base: within this share of the base
PREEMPTION_FLOOR = 0.05  # preemptions/s at or under which a rate counts as 0
WILSON_Z = statistics.NormalDist().inv_cdf(0.975)

# Workloads a pair may name: the traffic of each; the engine is the harness default with the pair's
# ``engine`` flags and the knob at ``from`` (base) or ``to`` (after). A prefix_hit_ratio pair changes
# the prompts instead (one template in front of each, of the ``to`` share of the mean prompt).
# Streams decoding 96-160 tokens while 600-900-token prompts arrive: at a budget over the prompt a whole
# prefill is one step, and every stream beside it waits for that step.
STUTTER = Traffic(prompt_tokens=(600, 900), max_tokens=((96, 0.5), (160, 0.5)), rate=0.9)
# Short and long prompts, short and long answers, at once.
MIXED = Traffic(prompt_tokens=(40, 700), max_tokens=((16, 0.4), (64, 0.3), (160, 0.3)), rate=1.5)
WORKLOADS: dict[str, Traffic] = {
    "long-prompts-queue": LONG_PROMPTS,
    "kv-pressure": PRESSURE,
    "long-outputs": LONG_OUTPUTS,
    "light": Traffic(prompt_tokens=(60, 120), max_tokens=((32, 1.0),), rate=0.5),
    "stutter-long-prefills": STUTTER,
    # The open loads at a lower rate, for an engine slowed by WORKER_CPUS (3-4x slower steps).
    "stutter-long-prefills-slow": replace(STUTTER, rate=0.45),
    # Prompts 450-650 tokens, short answers: TTFT is mostly prefill, which a shared template shortens.
    "shared-prefixes": Traffic(prompt_tokens=(450, 650), max_tokens=((24, 1.0),), rate=2.0),
    "mixed": MIXED,
    "mixed-slow": replace(MIXED, rate=0.6),
    # The long prompts at half the rate for the wide-MLP engine, whose 860-token prefill costs a few hundred ms.
    "long-prompts-queue-wide": replace(LONG_PROMPTS, rate=0.8),
}
BASE_ENGINE: dict[str, Any] = {"max_num_batched_tokens": 1024, "max_num_seqs": 16, "kv_cache_memory_bytes": KV_BYTES}
ENGINE_KNOBS = ("max_num_batched_tokens", "max_num_seqs", "kv_cache_memory_bytes")
TRAFFIC_KNOBS = ("prefix_hit_ratio",)
# A harness condition a pair's ``engine`` may set, not a vLLM flag: the model worker process held to this
# many CPUs by a CFS quota with a short period (1 ms of CPU per slice), so every step runs uniformly
# slower, as on a slower accelerator. On the tiny model most token gaps sit under vLLM's first ITL
# bucket (10 ms), where no knob can move ITL p95; 3-4x slower steps put them in resolved buckets.
WORKER_CPUS = "worker_cpus"
WORKER_PROCESS = "VLLM::Worker"  # the process name vLLM V1 gives the model executor
# Another harness condition: the tiny model with its vocabulary padded to this many tokens, made once beside
# the tiny model by tests/realvllm/make_model.py. Every decode step then reads the whole tied LM head (at
# 524288 tokens, 268 MB: ~10 ms, plus ~1 ms per sequence), as an accelerator's decode step reads the
# weights, while a prefill costs what it did: steady slow steps, without a CPU quota's throttling noise.
PADDED_VOCAB = "padded_vocab"
# A third: the compute-bound model (tests/realvllm/make_model.py --wide, a 16384-wide MLP): a decode step is
# milliseconds of matrix work and a prefill chunk scales with its tokens, as on a GPU serving a real model.
WIDE_MLP = "wide_mlp"
# A fourth, for a quiet measurement rather than a physics: the model worker alone on this core, the engine's
# server, the load and the harness on the others, as an accelerator is the worker's alone. On the shared
# 2-core machine, other work on the worker's core made one half's runs 2-6x apart in speed (validation-11).
WORKER_CORE = "worker_core"
# An engine start on the shared 2-core machine took over the harness's 180 s when other engines ran beside it.
STARTUP_S = 600.0


@dataclass(frozen=True)
class Pair:
    id: str
    workload: str
    knob: str
    before: float
    after_value: float
    base: tuple[str, str]  # two captures of the base engine and traffic
    after: str
    split: str
    engine: dict[str, Any] = field(default_factory=dict)  # flags besides BASE_ENGINE and the knob
    # Engine starts the base's two runs span: 1, both on one start (the first campaign); 2, the second run
    # on an engine start of its own, after every first start, as the after runs on another start too.
    base_starts: int = 1
    # Every capture of the pair on a fresh engine start of its own, run on no other capture: an engine that
    # served heavier loads first runs its steps 15-25 % slower (round 7's light bases), which a base shared
    # with other workloads and an after on a fresh start would read as the knob's effect.
    fresh_starts: bool = False
    scrape_interval: float = 2.0  # seconds between captures (issue 49's half: 4, half the folder's size)

    @property
    def physics(self) -> str:
        """The engine's cost structure: what a leave-one-physics-out score leaves out."""
        if self.engine.get(WIDE_MLP):
            return "wide-mlp"
        if self.engine.get(PADDED_VOCAB):
            return "padded-vocab"
        if self.engine.get(WORKER_CPUS):
            return "cpu-quota"
        return "tiny"

    @property
    def what_if(self) -> str:
        value = self.after_value
        return f"{self.knob}={int(value) if float(value).is_integer() else value}"


def load_manifest(path: Path) -> tuple[Path, list[Pair]]:
    """The captures folder and the pairs; a pair with an unknown split, workload or missing field is refused."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    captures = (path.parent / data.get("captures", ".")).resolve()
    pairs = []
    for item in data.get("pairs", []):
        if item["split"] not in SPLITS:
            raise ValueError(f"pair {item['id']}: split {item['split']!r} is not one of {', '.join(SPLITS)}")
        if item["workload"] not in WORKLOADS:
            raise ValueError(f"pair {item['id']}: unknown workload {item['workload']!r}")
        base = tuple(item["base"])
        if len(base) != 2:
            raise ValueError(f"pair {item['id']}: base lists two captures of the base (the run-to-run noise)")
        starts = int(item.get("base_starts", 1))
        if starts not in (1, 2):
            raise ValueError(f"pair {item['id']}: base_starts is 1 or 2, not {starts}")
        pairs.append(Pair(item["id"], item["workload"], item["knob"], item["from"], item["to"],
                          (str(base[0]), str(base[1])), str(item["after"]), item["split"],
                          dict(item.get("engine") or {}), starts, bool(item.get("fresh_starts", False)),
                          float(item.get("scrape_interval", 2.0))))
    return captures, pairs


# --------------------------------------------------------------------------------------------
# Predictors
# --------------------------------------------------------------------------------------------


def _chunks(prompt: float, budget: float) -> float:
    return max(1.0, math.ceil(prompt / max(budget, 1.0)))


def queue_baseline(window: dict[str, Any], pair: Pair) -> dict[str, float | None]:
    """A single-server queue (M/M/1) with the observed service time, the knob moving only that service time.

    The service time is the observed mean prefill time; a token budget scales it by the chunks the mean
    prompt takes (``ceil(prompt / budget)``), every other knob leaves it. The queue wait follows
    ``rho / (1 - rho) x service`` at the observed arrival rate; TTFT p95 moves with the mean queue wait
    plus service, ITL p95 and preemptions do not move. A saturated what-if (rho >= 1) is a refusal.
    """
    before = window["observed"]
    rate, service, prompt = window.get("requests_per_second"), window.get("prefill_mean"), window.get("prompt_mean")
    out: dict[str, float | None] = {k: before.get(k) for k in MAGNITUDE_METRICS}
    if not rate or not service or before.get("ttft_p95_seconds") is None:
        out["ttft_p95_seconds"] = None
        return out
    new = service
    if pair.knob == "max_num_batched_tokens" and prompt:
        new = service * _chunks(prompt, pair.after_value) / _chunks(prompt, pair.before)

    def latency(s: float) -> float | None:
        rho = rate * s
        return None if rho >= 1.0 else s + rho / (1.0 - rho) * s

    then, now = latency(service), latency(new)
    out["ttft_p95_seconds"] = None if then is None or now is None else before["ttft_p95_seconds"] * now / then
    return out


def _window_numbers(run_dir: Path) -> dict[str, Any]:
    """What the baselines read from a capture folder: the observed outcome and a few means."""
    from exporter import cli
    from exporter.advisor.calibrate import observe
    from exporter.catalog import metrics as vllm

    window = cli._diagnosed(cli.build_parser().parse_args(["advise", str(run_dir)])).window
    prefill, prompt = window.histogram(vllm.REQUEST_PREFILL_TIME_SECONDS), window.histogram(vllm.REQUEST_PROMPT_TOKENS)
    return {"observed": observe(window).to_dict(), "requests_per_second": window.rate(vllm.REQUEST_SUCCESS_TOTAL),
            "prefill_mean": prefill.mean() if prefill is not None else None,
            "prompt_mean": prompt.mean() if prompt is not None else None, "seconds": window.duration}


# --------------------------------------------------------------------------------------------
# The interval, the cells, the coverage
# --------------------------------------------------------------------------------------------


def _log(value: float, pad: float) -> float:
    return math.log(max(value, 0.0) + pad)


def noise_sigma(first: float | None, second: float | None, pad: float) -> float:
    """Run-to-run noise of one run, in log terms, from two runs of the same base: their difference has
    twice one run's variance."""
    if first is None or second is None or first + pad <= 0 or second + pad <= 0:
        return 0.0
    return abs(_log(first, pad) - _log(second, pad)) / math.sqrt(2.0)


def close(predicted: float | None, after: float | None, before: float | None, key: str) -> bool:
    """The magnitude cell: within +/-35 % of the after; a measured 0 after a non-zero base within 10 % of it."""
    if predicted is None or after is None:
        return False
    floor = PREEMPTION_FLOOR if key == "preemption_rate" else 0.0
    if after <= floor and (before or 0.0) > floor:
        return predicted <= ZERO_SHARE * (before or 0.0) + floor
    if after <= floor:
        return predicted <= floor
    return abs(predicted - after) / after <= MAGNITUDE


def wilson(hits: int, n: int) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial share."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    denom = 1 + WILSON_Z ** 2 / n
    centre = (p + WILSON_Z ** 2 / (2 * n)) / denom
    half = WILSON_Z * math.sqrt(p * (1 - p) / n + WILSON_Z ** 2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Cell:
    pair: str
    metric: str
    before: float | None
    after: float | None
    noise: float
    predicted: dict[str, float | None]  # by predictor
    interval: tuple[float, float] | None
    reason: str = ""

    @property
    def moved(self) -> bool:
        """Moved by more than 15 % and more than twice the run-to-run noise (log terms)."""
        if self.before is None or self.after is None:
            return False
        pad = PREEMPTION_FLOOR if self.metric == "preemption_rate" else 0.0
        change = abs(_log(self.after, pad) - _log(self.before, pad))
        return change > math.log1p(MOVED) and change > NOISE_FACTOR * self.noise

    def direction(self, predictor: str) -> bool:
        value = self.predicted.get(predictor)
        if value is None or self.before is None or self.after is None:
            return False
        return (value - self.before) * (self.after - self.before) > 0

    def within(self, predictor: str) -> bool:
        return close(self.predicted.get(predictor), self.after, self.before, self.metric)

    @property
    def covered(self) -> bool:
        return (self.interval is not None and self.after is not None
                and self.interval[0] <= self.after <= self.interval[1])


PREDICTORS = ("advisor", "unchanged", "queue")


def score_pair(pair: Pair, captures: Path) -> list[Cell]:
    with run_folders(captures, [*pair.base, pair.after]) as (base, rerun, after_run):
        first, second = _window_numbers(base), _window_numbers(rerun)
        after = observed(after_run)
        target = advise(base, pair.what_if)
    item = target["advice"][0] if target.get("advice") else None
    reason = "" if item else target.get("reason") or "no prediction"
    queue = queue_baseline(first, pair)
    cells = []
    for key in MAGNITUDE_METRICS:
        pad = PREEMPTION_FLOOR if key == "preemption_rate" else 0.0
        noise = noise_sigma(first["observed"].get(key), second["observed"].get(key), pad)
        model = item["predicted"].get(key) if item else None
        # The product's own 80 % interval, from the one base window the advisor saw (issue 49): its spread of
        # the step-cost parameter, calibration residual, sampling error and the shipped run-to-run noise.
        band = (item.get("interval") or {}).get(key) if item else None
        cells.append(Cell(pair.id, key, first["observed"].get(key), after.get(key), noise,
                          {"advisor": model, "unchanged": first["observed"].get(key), "queue": queue.get(key)},
                          (float(band[0]), float(band[1])) if band else None, reason))
    return cells


def summary(cells: list[Cell]) -> dict[str, Any]:
    """The acceptance numbers per predictor: direction on moved cells, magnitude, mean |log error|; coverage."""
    out: dict[str, Any] = {}
    for predictor in PREDICTORS:
        moved = [c for c in cells if c.moved]
        per_metric = {}
        for key in MAGNITUDE_METRICS:
            mine = [c for c in cells if c.metric == key]
            errors = [abs(_log(c.predicted[predictor] or 0.0, PREEMPTION_FLOOR if key == "preemption_rate" else 1e-6)
                          - _log(c.after or 0.0, PREEMPTION_FLOOR if key == "preemption_rate" else 1e-6))
                      for c in mine if c.predicted.get(predictor) is not None and c.after is not None]
            per_metric[key] = {"within": sum(c.within(predictor) for c in mine), "cells": len(mine),
                               "mean_abs_log_error": statistics.fmean(errors) if errors else None}
        out[predictor] = {"direction": sum(c.direction(predictor) for c in moved), "moved": len(moved),
                          "within": sum(c.within(predictor) for c in cells), "cells": len(cells),
                          "per_metric": per_metric}
    covered = sum(c.covered for c in cells)
    out["coverage"] = {"covered": covered, "cells": len(cells), "wilson95": wilson(covered, len(cells))}
    return out


def _num(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if key.endswith("_seconds") else f"{value:.2f}"


def table(cells: list[Cell], totals: dict[str, Any]) -> str:
    lines = ["| pair | metric | base (noise) | advisor [80 % interval] | unchanged | queue | after | moved | "
             "direction | within |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        band = f" [{_num(c.metric, c.interval[0])}-{_num(c.metric, c.interval[1])}]" if c.interval else ""
        model = _num(c.metric, c.predicted["advisor"]) + band if c.predicted["advisor"] is not None \
            else f"refused: {c.reason}"
        lines.append(f"| {c.pair} | {LABELS[c.metric]} | {_num(c.metric, c.before)} (+/-{c.noise:.0%}) | {model} | "
                     f"{_num(c.metric, c.predicted['unchanged'])} | {_num(c.metric, c.predicted['queue'])} | "
                     f"{_num(c.metric, c.after)} | {'yes' if c.moved else 'no'} | "
                     f"{('yes' if c.direction('advisor') else 'no') if c.moved else 'n/a'} | "
                     f"{'yes' if c.within('advisor') else 'no'} |")
    lines += ["", "| predictor | direction (moved cells) | within +/-35 % | mean abs log error TTFT / ITL / preempt |",
              "|---|---|---|---|"]
    for predictor in PREDICTORS:
        t = totals[predictor]
        errs = " / ".join("-" if m["mean_abs_log_error"] is None else f"{m['mean_abs_log_error']:.2f}"
                          for m in t["per_metric"].values())
        lines.append(f"| {predictor} | {t['direction']}/{t['moved']} | {t['within']}/{t['cells']} | {errs} |")
    cov = totals["coverage"]
    low, high = cov["wilson95"]
    lines += ["", f"80 % interval coverage: {cov['covered']}/{cov['cells']} (Wilson 95 %: {low:.0%}-{high:.0%})"]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Capture one pair on the real vLLM CPU build
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaptureSpec:
    """One capture folder: the engine it runs on, its traffic and the seed of its draws."""

    name: str
    flags: tuple[tuple[str, float], ...]  # sorted engine flags: captures with equal flags share an engine start
    traffic: Traffic
    seed: int
    start: int = 0  # 1: on a second engine start with the same flags, after every first start
    alone: bool = False  # on an engine start of its own, shared with no other capture
    scrape_interval: float = 2.0

    @property
    def engine_start(self) -> tuple[int, tuple[tuple[str, float], ...], str]:
        """Captures with equal keys share one engine start, in this order."""
        return self.start, self.flags, self.name if self.alone else ""


def engine_flags(pair: Pair, value: float) -> dict[str, Any]:
    if pair.knob in TRAFFIC_KNOBS:
        return {**BASE_ENGINE, **pair.engine}
    if pair.knob not in ENGINE_KNOBS:
        raise ValueError(f"{pair.knob}: the capture command changes {', '.join(ENGINE_KNOBS + TRAFFIC_KNOBS)} only")
    return {**BASE_ENGINE, **pair.engine, pair.knob: int(value)}


def traffic(pair: Pair, value: float) -> Traffic:
    base = WORKLOADS[pair.workload]
    return base.with_prefix(value) if pair.knob == "prefix_hit_ratio" else base


def plan(pairs: list[Pair]) -> dict[str, CaptureSpec]:
    """Every capture the pairs name: a base's two runs are seeds 0 and 1, the after is seed 0 (the same
    arrivals as the first base run); with ``base_starts`` 2 the second base run has an engine start of its
    own. A name several pairs share must mean one run; else it is refused."""
    specs: dict[str, CaptureSpec] = {}
    for pair in pairs:
        second_start = 1 if pair.base_starts == 2 else 0
        for name, value, seed, start in ((pair.base[0], pair.before, 0, 0),
                                         (pair.base[1], pair.before, 1, second_start),
                                         (pair.after, pair.after_value, 0, 0)):
            spec = CaptureSpec(name, tuple(sorted(engine_flags(pair, value).items())), traffic(pair, value), seed,
                               start, pair.fresh_starts, pair.scrape_interval)
            if specs.setdefault(name, spec) != spec:
                raise ValueError(f"capture {name}: pair {pair.id} describes it differently from another pair")
    return specs


@contextlib.contextmanager
def _slowed(server: Any, cpus: float | None) -> Iterator[None]:
    """Hold the engine's model worker to ``cpus`` CPUs for the block (no limit when None)."""
    if cpus is None:
        yield
        return
    from tests.realvllm.starve import cpu_quota

    workers = [pid for pid in server.pids() if _process_name(pid) == WORKER_PROCESS]  # a gone pid reads ""
    if not workers:
        raise RuntimeError(f"no {WORKER_PROCESS} process under the engine to slow")
    # 1 ms of CPU per slice: the kernel's smallest quota, so the stalls stay far under a token gap.
    with cpu_quota(workers, float(cpus), period_us=round(1000 / float(cpus))):
        yield


@contextlib.contextmanager
def _off_core(core: float | None) -> Iterator[None]:
    """Keep this process, and the engine it starts, off ``core`` for the block (anywhere when None)."""
    if core is None:
        yield
        return
    before = os.sched_getaffinity(0)
    others = before - {int(core)}
    if not others or int(core) not in before:
        raise RuntimeError(f"worker_core {int(core)}: this process may run on cores {sorted(before)}, so it "
                           "cannot keep the worker's core to itself")
    os.sched_setaffinity(0, others)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _pin_worker(server: Any, core: float | None) -> None:
    """Every thread of the engine's model worker onto ``core`` alone (nothing when None)."""
    if core is None:
        return
    workers = [pid for pid in server.pids() if _process_name(pid) == WORKER_PROCESS]
    if not workers:
        raise RuntimeError(f"no {WORKER_PROCESS} process under the engine to pin")
    for pid in workers:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError):  # a thread that ended since the listing
                os.sched_setaffinity(int(task.name), {int(core)})


def padded_model(vocab: int) -> Path:
    """The tiny model with its vocabulary padded to ``vocab`` tokens, made on first use (seconds)."""
    import subprocess

    from tests.realvllm.engine import REPO, model_dir, vllm_venv

    path = model_dir().parent / f"{model_dir().name}-v{vocab}"
    if not (path / "model.safetensors").is_file():
        subprocess.run([str(vllm_venv() / "bin" / "python"), str(REPO / "tests" / "realvllm" / "make_model.py"),
                        str(path), str(vocab)], check=True)
    return path


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def capture(specs: list[CaptureSpec], captures: Path, seconds: float | None = None) -> dict[str, float]:
    """Run the captures on the real engine, one engine start per distinct set of flags and start index
    (every first start before any second one, so a base's two runs are minutes and engine starts apart, as
    its after is), skipping those already on disk (a folder with its run.json): a campaign interrupted
    resumes. Seconds per phase."""
    from lab.advisor_cases import _warm_up
    from tests.realvllm.engine import RealVLLM

    todo = [s for s in specs if not is_captured(captures, s.name)]
    timings: dict[str, float] = {}
    for key in sorted({s.engine_start for s in todo}):
        start, flags, _ = key
        t0 = time.monotonic()
        engine: dict[str, Any] = dict(flags)
        worker_cpus = engine.pop(WORKER_CPUS, None)
        worker_core = engine.pop(WORKER_CORE, None)
        if (padded := engine.pop(PADDED_VOCAB, None)) is not None:
            engine["model"] = padded_model(int(padded))
        if engine.pop(WIDE_MLP, None):
            from lab.engine_witnesses import ensure_wide_model

            engine["model"] = ensure_wide_model()
        with _off_core(worker_core), RealVLLM(**engine, startup_timeout_s=STARTUP_S) as server, \
                _slowed(server, worker_cpus):
            asyncio.run(_warm_up(server.base_url))
            _pin_worker(server, worker_core)  # after the warm-up: threads a first request starts are pinned too
            timings[f"start {start} {dict(flags)} {key[2]}".rstrip()] = time.monotonic() - t0
            for spec in (s for s in todo if s.engine_start == key):
                t1 = time.monotonic()
                meta = asyncio.run(record_run(server, RunSpec(spec.name, "pair", spec.traffic),
                                              captures / spec.name, seed=spec.seed, seconds=seconds,
                                              interval=spec.scrape_interval))
                if meta["failed_requests"]:
                    raise RuntimeError(f"{spec.name}: {meta['failed_requests']} requests failed")
                pack_and_remove(captures / spec.name)
                timings[f"run {spec.name}"] = time.monotonic() - t1
                print(f"captured {spec.name} in {timings[f'run {spec.name}']:.0f} s", file=sys.stderr, flush=True)
    return timings


def main(manifest: Path, split: str, capture_id: str | None, seconds: float | None) -> int:
    captures, pairs = load_manifest(manifest)
    if capture_id is not None:
        chosen = pairs if capture_id == "all" else [p for p in pairs if capture_id in (p.id, p.split)]
        if not chosen:
            print(f"no pair or split {capture_id} in {manifest}")
            return 2
        print(json.dumps(capture(list(plan(chosen).values()), captures, seconds), indent=1))
        return 0
    wanted = set(split.split(","))
    unknown = wanted - set(SPLITS) - {"all"}
    if unknown:
        print(f"no split {', '.join(sorted(unknown))}: the splits are {', '.join(SPLITS)} (or all, or a comma list)")
        return 2
    chosen = [p for p in pairs if "all" in wanted or p.split in wanted]
    if not chosen:
        print(f"no {split} pair in {manifest}")
        return 2
    cells = [cell for pair in chosen for cell in score_pair(pair, captures)]
    totals = summary(cells)
    print(table(cells, totals))
    print(json.dumps(totals, indent=1))
    return 0
