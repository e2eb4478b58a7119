"""What every group's function reads the window with: deltas, rates, histograms and the shares and scales built
on them; the engine's cache facts; the input families whose absence is listed in ``missing``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.signals.model import QUANTILES, CacheFacts
from exporter.snapshot import LabelIs, Snapshot
from exporter.window import HistogramDelta, Window


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


def _reason(value: str) -> LabelIs:
    return LabelIs("reason", value)


def _position(value: str) -> LabelIs:
    return LabelIs("position", value)


def _source(value: str) -> LabelIs:
    return LabelIs("source", value)


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
