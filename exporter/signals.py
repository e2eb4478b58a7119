"""Window -> derived diagnostic numbers (:class:`Signals`).

Every rate and ratio comes from deltas inside the window, never from lifetime counters.
A value is ``None`` when its inputs are absent or the window holds no such traffic; the
names of absent inputs are listed in ``missing`` so nothing reads as zero.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from exporter.catalog.thresholds import Thresholds
from exporter.snapshot import LabelSet, Snapshot, label_value
from exporter.window import HistogramDelta, Window

QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)


@dataclass(frozen=True, slots=True)
class HostInputs:
    """CPU and GPU readings from outside vLLM's /metrics, already reduced to the window.

    Shares are 0..1 over the window; ``sources`` says where each came from (for the evidence).
    """

    cpu_wait_share: float | None = None  # run-queue wait / (run + wait) of the vLLM threads
    cpu_busy_cores: float | None = None  # run time of those threads / window: how much CPU they used
    cpu_throttled_share: float | None = None  # throttled CFS periods / periods
    cpu_psi_share: float | None = None  # PSI cpu 'some' avg10 / 100
    gpu_utilization: float | None = None  # DCGM GPU utilisation, 0..1, mean over the window
    sources: tuple[str, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()  # (source, reason) of reads that failed this time


@dataclass(frozen=True, slots=True)
class CacheFacts:
    """KV-cache configuration read from ``vllm:cache_config_info`` labels."""

    block_size: int | None = None
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_size_tokens: int | None = None
    enable_prefix_caching: bool | None = None


@dataclass(frozen=True, slots=True)
class Signals:
    window_seconds: float
    scrapes: int
    restarts: int = 0
    # traffic
    requests_finished: float | None = None
    requests_per_second: float | None = None
    first_tokens: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    prompt_length_mean: float | None = None
    prompt_length_p95: float | None = None
    generation_length_mean: float | None = None
    prefill_token_share: float | None = None
    engine_steps_per_second: float | None = None
    tokens_per_step: float | None = None
    tokens_per_step_p99: float | None = None
    engine_busy_fraction: float | None = None  # steps/s x mean step time (ITL mean stands in for it)
    read_bytes_per_gpu_per_second: float | None = None  # vLLM's MFU estimate; None when not enabled
    flops_per_gpu_per_second: float | None = None
    admission_rejections_per_second: float | None = None
    # preemption and KV
    preemptions: float | None = None
    preemption_rate: float | None = None
    preemptions_per_request: float | None = None
    kv_cache_usage: float | None = None
    kv_cache_usage_max: float | None = None
    kv_cache_usage_mean: float | None = None
    kv_full_fraction: float | None = None
    prefix_cache_queried_tokens: float | None = None
    prefix_cache_hit_ratio: float | None = None
    # scheduler state
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
    waiting_capacity: float | None = None
    waiting_deferred: float | None = None
    # latency (seconds)
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
    ttft_queue_share: float | None = None
    ttft_prefill_share: float | None = None
    ttft_frontend_share: float | None = None
    e2e_frontend_share: float | None = None
    latency_observations: float | None = None
    unresolved_quantiles: tuple[str, ...] = ()
    # ITL p99 / p50 from quantiles the buckets resolve; a p50 inside the first bucket is replaced by
    # that bucket's upper bound, which makes the ratio a lower bound (see itl_tail_note).
    itl_tail_ratio: float | None = None
    itl_tail_note: str = ""
    # CPU / GPU
    api_server_cpu_cores: float | None = None
    cpu_inputs: Mapping[str, float] = field(default_factory=dict)
    cpu_starvation_score: float | None = None
    gpu_utilization: float | None = None
    # facts
    cache: CacheFacts = CacheFacts()
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def quantile(self, family: str, q: float) -> float | None:
        return getattr(self, f"{family}_quantiles").get(q)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for family in ("ttft", "itl", "e2e"):
            data.pop(f"{family}_quantiles")
            for q, value in getattr(self, f"{family}_quantiles").items():
                data[f"{family}_p{round(q * 100)}_seconds"] = value
        data["cpu_inputs"] = dict(self.cpu_inputs)
        data["missing"] = list(self.missing)
        data["unresolved_quantiles"] = list(self.unresolved_quantiles)
        data["notes"] = list(self.notes)
        return data


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


def cache_facts(snapshot: Snapshot | None) -> CacheFacts:
    if snapshot is None:
        return CacheFacts()
    rows = snapshot.info.get("vllm:cache_config_info", ())
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


def _reason(value: str) -> "callable[[LabelSet], bool]":
    return lambda labels: label_value(labels, "reason") == value


def _source(value: str) -> "callable[[LabelSet], bool]":
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


def _moving_rate(window: Window, name: str) -> float | None:
    """Rate of a counter that vLLM registers always but moves only when a feature is on."""
    if not window.present(name):
        return None
    rate = window.rate(name)
    return rate if rate else None


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


def compute(window: Window, thresholds: Thresholds, host: HostInputs | None = None) -> Signals:
    """Derive every signal from the window (and optional host readings)."""
    host = host or HostInputs()
    latest = window.latest
    duration = window.duration
    missing: list[str] = []
    notes: list[str] = []

    def need(name: str) -> bool:
        if window.present(name):
            return True
        if name not in missing:
            missing.append(name)
        return False

    def rate(name: str, match: Any = None) -> float | None:
        return window.rate(name, match) if need(name) else None

    def increase(name: str, match: Any = None) -> float | None:
        return window.increase(name, match) if need(name) else None

    def hist(name: str) -> HistogramDelta | None:
        return window.histogram(name) if need(name) else None

    finished = increase("vllm:request_success_total")
    ttft = hist("vllm:time_to_first_token_seconds")
    first_tokens = ttft.count if ttft is not None else None
    preemptions = increase("vllm:num_preemptions_total")
    # Requests admitted in the window: finished ones, or first tokens when long outputs finish later.
    admitted = max((v for v in (finished, first_tokens) if v is not None), default=None)

    prefix_queries = increase("vllm:prefix_cache_queries_total")
    prefix_hits = increase("vllm:prefix_cache_hits_total")

    kv_name = "vllm:kv_cache_usage_perc"
    kv_series = window.gauge_series(kv_name, "max") if need(kv_name) else []
    running_series = window.gauge_series("vllm:num_requests_running") if need("vllm:num_requests_running") else []
    waiting_series = window.gauge_series("vllm:num_requests_waiting") if need("vllm:num_requests_waiting") else []
    by_reason = "vllm:num_requests_waiting_by_reason"
    has_reason = need(by_reason)
    queued_series = (window.gauge_series(by_reason, "sum", _reason("capacity")) if has_reason
                     else waiting_series)

    itl = hist("vllm:inter_token_latency_seconds")
    e2e = hist("vllm:e2e_request_latency_seconds")
    queue = hist("vllm:request_queue_time_seconds")
    prefill = hist("vllm:request_prefill_time_seconds")
    decode = hist("vllm:request_decode_time_seconds")
    inference = hist("vllm:request_inference_time_seconds")
    tpot = hist("vllm:request_time_per_output_token_seconds")
    prompt_len = hist("vllm:request_prompt_tokens")
    gen_len = hist("vllm:request_generation_tokens")
    steps = hist("vllm:iteration_tokens_total")

    unresolved: list[str] = []
    ttft_q = _quantiles(ttft, "ttft", unresolved)
    itl_q = _quantiles(itl, "itl", unresolved)
    tail_ratio, tail_note = itl_tail(itl)
    busy = None
    if steps is not None and itl is not None and duration > 0 and itl.mean() is not None:
        busy = min(1.0, steps.count / duration * (itl.mean() or 0.0))
    read_rate = _moving_rate(window, "vllm:estimated_read_bytes_per_gpu_total")
    flops_rate = _moving_rate(window, "vllm:estimated_flops_per_gpu_total")
    e2e_q = _quantiles(e2e, "e2e", unresolved)

    def mean(h: HistogramDelta | None) -> float | None:
        return h.mean() if h is not None else None

    ttft_mean, queue_mean, prefill_mean = mean(ttft), mean(queue), mean(prefill)
    e2e_mean, inference_mean = mean(e2e), mean(inference)
    # Frontend = time outside the engine: tokenization/templates before QUEUED, IPC and output handling.
    # Bucket-free: means from _sum/_count deltas, so coarse 0.3 s latency buckets do not matter.
    ttft_frontend = None
    if ttft_mean is not None and queue_mean is not None and prefill_mean is not None:
        ttft_frontend = max(0.0, ttft_mean - queue_mean - prefill_mean)
    e2e_frontend = None
    if e2e_mean is not None and queue_mean is not None and inference_mean is not None:
        e2e_frontend = max(0.0, e2e_mean - queue_mean - inference_mean)

    prompt_rate = rate("vllm:prompt_tokens_total")
    generation_rate = rate("vllm:generation_tokens_total")
    computed_prompt_rate = None
    if window.present("vllm:prompt_tokens_by_source_total"):
        computed_prompt_rate = window.rate("vllm:prompt_tokens_by_source_total", _source("local_compute"))
    elif prompt_rate is not None and prefix_hits is not None and duration > 0:
        computed_prompt_rate = max(0.0, prompt_rate - prefix_hits / duration)
    prefill_share = None
    if computed_prompt_rate is not None and generation_rate is not None:
        prefill_share = _ratio(computed_prompt_rate, computed_prompt_rate + generation_rate)

    api_cpu = window.rate("process_cpu_seconds_total") if window.present("process_cpu_seconds_total") else None
    if api_cpu is None:
        notes.append("process_cpu_seconds_total absent (API-server scale-out or non-Python frontend)")

    kv_high = thresholds.kv_usage_high
    frontend_share = _ratio(ttft_frontend, ttft_mean)
    e2e_front_share = _ratio(e2e_frontend, e2e_mean)
    cpu_inputs: dict[str, float] = {}
    for key, value in (
        ("run_queue_wait_share", host.cpu_wait_share),
        ("busy_cores", host.cpu_busy_cores),
        ("cfs_throttled_share", host.cpu_throttled_share),
        ("psi_some_share", host.cpu_psi_share),
        # Share of e2e, not of TTFT: with a small fast model tokenization is a large share of a
        # tiny TTFT without anything being wrong; A3 reads the TTFT share once TTFT breaches.
        ("frontend_share", e2e_front_share),
        ("api_server_cpu_cores", api_cpu),
    ):
        if value is not None:
            cpu_inputs[key] = value
    score, _ = cpu_starvation(cpu_inputs, thresholds)

    return Signals(
        window_seconds=duration,
        scrapes=len(window),
        restarts=window.restarts,
        requests_finished=finished,
        requests_per_second=_ratio(finished, duration),
        first_tokens=first_tokens,
        prompt_tokens_per_second=prompt_rate,
        generation_tokens_per_second=generation_rate,
        prompt_length_mean=mean(prompt_len),
        prompt_length_p95=prompt_len.quantile(0.95) if prompt_len is not None else None,
        generation_length_mean=mean(gen_len),
        prefill_token_share=prefill_share,
        engine_steps_per_second=_ratio(steps.count, duration) if steps is not None else None,
        tokens_per_step=mean(steps),
        tokens_per_step_p99=steps.quantile(0.99) if steps is not None else None,
        engine_busy_fraction=busy,
        read_bytes_per_gpu_per_second=read_rate,
        flops_per_gpu_per_second=flops_rate,
        admission_rejections_per_second=(
            window.rate("vllm:admission_rejections_total") if window.present("vllm:admission_rejections_total") else None
        ),
        preemptions=preemptions,
        preemption_rate=_ratio(preemptions, duration),
        preemptions_per_request=_ratio(preemptions, admitted) if preemptions else (0.0 if admitted else None),
        kv_cache_usage=kv_series[-1] if kv_series else None,
        kv_cache_usage_max=max(kv_series) if kv_series else None,
        kv_cache_usage_mean=_mean(kv_series),
        kv_full_fraction=_ratio(sum(1 for v in kv_series if v >= kv_high), len(kv_series)),
        prefix_cache_queried_tokens=prefix_queries,
        prefix_cache_hit_ratio=_ratio(prefix_hits, prefix_queries),
        running=running_series[-1] if running_series else None,
        running_mean=_mean(running_series),
        running_max=max(running_series) if running_series else None,
        waiting=waiting_series[-1] if waiting_series else None,
        waiting_mean=_mean(waiting_series),
        waiting_max=max(waiting_series) if waiting_series else None,
        waiting_fraction=_ratio(sum(1 for v in waiting_series if v > 0), len(waiting_series)),
        queued_fraction=_ratio(sum(1 for v in queued_series if v > 0), len(queued_series)),
        waiting_capacity=window.gauge(by_reason, "sum", _reason("capacity")) if has_reason else None,
        waiting_deferred=window.gauge(by_reason, "sum", _reason("deferred")) if has_reason else None,
        ttft_quantiles=ttft_q,
        itl_quantiles=itl_q,
        e2e_quantiles=e2e_q,
        ttft_mean=ttft_mean,
        itl_mean=mean(itl),
        e2e_mean=e2e_mean,
        tpot_mean=mean(tpot),
        queue_mean=queue_mean,
        prefill_mean=prefill_mean,
        decode_mean=mean(decode),
        inference_mean=inference_mean,
        ttft_frontend_mean=ttft_frontend,
        e2e_frontend_mean=e2e_frontend,
        ttft_queue_share=_ratio(queue_mean, ttft_mean),
        ttft_prefill_share=_ratio(prefill_mean, ttft_mean),
        ttft_frontend_share=frontend_share,
        e2e_frontend_share=e2e_front_share,
        latency_observations=e2e.count if e2e is not None else None,
        unresolved_quantiles=tuple(unresolved),
        itl_tail_ratio=tail_ratio,
        itl_tail_note=tail_note,
        api_server_cpu_cores=api_cpu,
        cpu_inputs=cpu_inputs,
        cpu_starvation_score=score,
        gpu_utilization=host.gpu_utilization,
        cache=cache_facts(latest),
        missing=tuple(missing),
        notes=tuple(notes),
    )
