"""The core groups, each filled by its own function over the window: traffic, KV, scheduler, latency, CPU, GPU."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.objectives import bad_share
from exporter.signals.common import (
    _hist_mean,
    _histogram,
    _increase,
    _mean,
    _moving_rate,
    _quantiles,
    _rate,
    _ratio,
    _reason,
    _series,
    _share_positive,
    _source,
    _with_edges,
    cpu_starvation,
    itl_tail,
)
from exporter.signals.model import Cpu, Gpu, HostInputs, Kv, Latency, Scheduler, Traffic
from exporter.window import HistogramDelta, Step, Window


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


def long_prompt_arrivals(window: Window, long_tokens: float,
                         slow_seconds: float | None = None) -> dict[str, float | None]:
    """How many long prompts finished in the window, at what pace they came and how long ago the newest did:
    at their first tokens (the newest with a first token over ``slow_seconds``, when given and any had one),
    at their finishes without those series; and the slow first tokens beside them (Traffic fields)."""
    if not window.present(vllm.REQUEST_PROMPT_TOKENS):
        return {"long_prompts": None, "long_prompt_age_seconds": None, "long_prompt_interval_seconds": None,
                "long_prompt_first_token_steps": None, "long_prompt_slow_first_tokens": None}
    count, oldest, newest = 0.0, None, None
    for step, above in zip(window.steps_view, window.per_step(("long_prompts_finished", long_tokens),
                                                              lambda step: _long_finished(window, step, long_tokens))):
        if above > 0:
            count, newest = count + above, step.end
            oldest = step.end if oldest is None else oldest
    # When they came, seen at their first tokens (a long answer finishes minutes after its burst); the age
    # from the newest that hurt when any did (a chat prompt just over the mark after a burst is not the burst).
    steps = long_prompt_steps(window, long_tokens, slow_seconds)
    starts = [step.end for step in steps if step.long]
    hurt = [step.end for step in steps if step.long and step.slow >= 0.5]  # half an interpolated token is one
    if starts:
        newest, oldest, arrivals = starts[-1], starts[0], float(len(starts))
    else:
        arrivals = count
    last = hurt[-1] if hurt else newest
    age = window.steps_view[-1].end - last if last is not None else None
    interval = (newest - oldest) / (arrivals - 1) if (newest is not None and oldest is not None
                                                      and arrivals >= 2) else None
    # Alignment says something only when long prompts come in a minority of the steps (a RAG mix whose mean
    # prompt passes the mark in most steps would align every slow first token with "a long prompt").
    beside = None
    if slow_seconds is not None and steps and 2 * len(starts) <= sum(1 for step in steps if step.first_tokens >= 1):
        beside = sum(step.slow for i, step in enumerate(steps) if step.long or (i > 0 and steps[i - 1].long))
    return {"long_prompts": count, "long_prompt_age_seconds": age, "long_prompt_interval_seconds": interval,
            "long_prompt_first_token_steps": float(len(starts)) if steps else None,
            "long_prompt_slow_first_tokens": beside}


def _long_finished(window: Window, step: Step, long_tokens: float) -> float:
    """Requests with a prompt over ``long_tokens`` that finished in ``step`` (by the prompt-length buckets)."""
    delta = HistogramDelta.merge(window.histograms_at(step, vllm.REQUEST_PROMPT_TOKENS))
    if delta is None or delta.count <= 0:
        return 0.0
    edge = max((i for i, bound in enumerate(delta.bounds) if bound <= long_tokens), default=None)
    return delta.count - (delta.cumulative[edge] if edge is not None else 0.0)


@dataclass(frozen=True, slots=True)
class LongPromptStep:
    """One step of the window as the long-prompt signals read it."""

    end: float
    first_tokens: float
    long: bool  # a long prompt got its first token in this step
    slow: float  # first tokens over the threshold in it (0 without one)


def long_prompt_steps(window: Window, long_tokens: float, slow_seconds: float | None = None) -> list[LongPromptStep]:
    """Per step, oldest first: whether a long prompt got its first token in it (prompt tokens per first token at
    or above ``long_tokens``: vLLM counts both when a prefill completes), and how many of its first tokens took
    longer than ``slow_seconds``. Empty without the two series."""
    if not window.present(vllm.PROMPT_TOKENS_TOTAL):
        return []
    # Each step is read once, when it first is (its deltas never change): not again every evaluation it stays.
    return window.per_step(("long_prompt_step", long_tokens, slow_seconds),
                           lambda step: _long_prompt_step(window, step, long_tokens, slow_seconds))


def _long_prompt_step(window: Window, step: Step, long_tokens: float, slow_seconds: float | None) -> LongPromptStep:
    prompt_tokens = window.increase_at(step, vllm.PROMPT_TOKENS_TOTAL)
    ttft = window.histograms_at(step, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    first_tokens = sum(delta.count for delta in ttft)
    slow = sum(_over(delta, slow_seconds) for delta in ttft) if slow_seconds is not None else 0.0
    long = first_tokens >= 1 and prompt_tokens / first_tokens >= long_tokens
    return LongPromptStep(step.end, first_tokens, long, slow)


def _over(delta: HistogramDelta, threshold: float) -> float:
    counted = bad_share(delta, threshold)
    return counted.bad if counted is not None else 0.0


def first_token_prompt_mean(window: Window, first_tokens: HistogramDelta | None, recent: int) -> float | None:
    """Prompt tokens per first token over the newest ``recent`` steps: both are counted when a prefill
    completes, so a long prompt counts in the step its slow first token does."""
    tokens = window.increase_recent(vllm.PROMPT_TOKENS_TOTAL, recent) if recent > 0 else None
    if tokens is None or first_tokens is None or first_tokens.count < 1:
        return None
    return tokens / first_tokens.count


def kv(window: Window, thresholds: Thresholds, flow: Traffic, first_tokens_recent: float | None = None) -> Kv:
    """``first_tokens_recent``: first tokens of the recent steps (the latency group's recent TTFT count)."""
    duration = window.duration
    recent = int(thresholds.recent_evaluations)
    preemptions = _increase(window, vllm.NUM_PREEMPTIONS_TOTAL)
    # Requests admitted in the window: finished ones, or first tokens when long outputs finish later.
    admitted = max((v for v in (flow.requests_finished, flow.first_tokens) if v is not None), default=None)
    name = vllm.KV_CACHE_USAGE_PERC
    usage = window.gauge_series(name, "max") if window.present(name) else []
    queries = _increase(window, vllm.PREFIX_CACHE_QUERIES_TOTAL)
    hits = _increase(window, vllm.PREFIX_CACHE_HITS_TOTAL)
    preemptions_recent = window.increase_recent(vllm.NUM_PREEMPTIONS_TOTAL, recent)
    return Kv(
        preemptions=preemptions,
        preemptions_recent=preemptions_recent,
        # At least one request: a storm so heavy that no first token came in the recent steps still counts.
        preemptions_per_request_recent=(
            preemptions_recent / max(first_tokens_recent, 1.0)
            if preemptions_recent is not None and first_tokens_recent is not None else None),
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
    itl_recent = window.histogram_recent(vllm.INTER_TOKEN_LATENCY_SECONDS, recent) if recent > 0 else None
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
        itl_tail_ratio_recent=itl_tail(itl_recent)[0] if itl_recent is not None else None,
        itl_median_recent=itl_recent.quantile(0.5) if itl_recent is not None else None,
        ttft_histogram=_with_edges(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS, ttft),
        itl_histogram=_with_edges(window, vllm.INTER_TOKEN_LATENCY_SECONDS, itl),
        ttft_histogram_recent=(window.histogram_recent(vllm.TIME_TO_FIRST_TOKEN_SECONDS, recent)
                               if recent > 0 else None),
        itl_histogram_recent=itl_recent,
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
