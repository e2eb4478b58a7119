"""Conditions several symptom classes share: KV full and preempting, the CPU starved, a queue, KV offload,
what stretches token gaps upstream of a stutter, and whether the GPUs an engine spans are needed."""

from __future__ import annotations

from exporter.catalog import gpus
from exporter.diagnosis.rules.effects import latency_missed, ttft_missed_now
from exporter.diagnosis.rules.finding import Context, pct
from exporter.signals import Signals


def kv_full(ctx: Context) -> bool:
    """KV counts as full when it sits at the high mark for much of the window, or preemptions run."""
    s, t = ctx.signals, ctx.thresholds
    if s.kv.full_fraction is not None and s.kv.full_fraction >= t.kv_full_fraction:
        return True
    return frequent_preemption(ctx)


def frequent_preemption(ctx: Context) -> bool:
    """Preemption beyond the safety net: frequent per request, or less frequent while users see a tail
    (over the window, or in the recent steps alone: a storm as it starts)."""
    s, t = ctx.signals, ctx.thresholds
    if s.kv.preemptions is None or s.kv.preemptions < t.preemptions_min or s.kv.preemptions_per_request is None:
        return False
    if s.kv.preemptions_per_request >= t.preemptions_per_request or preempting_now(ctx):
        return True  # frequent over the window, or in the recent steps beside their missed first tokens
    if s.kv.preemptions_per_request < t.preemptions_per_request_with_impact:
        return False  # a few in a calm window are not a storm, whatever users saw over it
    return latency_missed(ctx)


def preempting_now(ctx: Context) -> bool:
    """Preemptions in the recent steps, frequent per request there (the frequent mark itself: a saturated pool
    preempts a few requests in a hundred as its normal way of making room, and a 15 s sample is small), beside
    first tokens that miss their objective in those same steps: the tail is the storm's while the window's
    ratio still holds the calm."""
    s, t = ctx.signals, ctx.thresholds
    recent, per_request = s.kv.preemptions_recent, s.kv.preemptions_per_request_recent
    return (recent is not None and recent >= t.preemptions_min and per_request is not None
            and per_request >= t.preemptions_per_request and ttft_missed_now(ctx))


def cpu_starving(ctx: Context) -> bool:
    """The host starves vLLM now (the score over the recent horizon)."""
    score = ctx.signals.cpu.starvation_score
    return score is not None and score >= ctx.thresholds.cpu_starvation_score


def starved_score(s: Signals) -> float | None:
    """The highest recent CPU-starvation score the window holds (the window's score where none is kept)."""
    return s.cpu.starvation_score_peak if s.cpu.starvation_score_peak is not None else s.cpu.starvation_score_window


def cpu_starved_in_window(ctx: Context) -> bool:
    """The host starved vLLM now or at some time the window still holds: the highest recent score of the
    evaluations the window covers (the score over the whole window where no such record is kept)."""
    score = starved_score(ctx.signals)
    return cpu_starving(ctx) or (score is not None and score >= ctx.thresholds.cpu_starvation_score)


def queue_sustained(ctx: Context) -> bool:
    queued = ctx.signals.scheduler.queued_fraction
    return queued is not None and queued >= ctx.thresholds.waiting_sustained_fraction


def queue_building(ctx: Context) -> bool:
    """Requests waited for capacity in every recent scrape: a queue forming now, before the window's share shows it."""
    recent = ctx.signals.scheduler.queued_recent_fraction
    return recent is not None and recent >= 1.0


def queue_forming(ctx: Context) -> bool:
    """Requests waited for capacity in most recent scrapes, and the first tokens of the recent steps spent at
    least the queue's share of their TTFT waiting: a queue forming, before it holds every recent scrape."""
    s, t = ctx.signals, ctx.thresholds
    recent, share = s.scheduler.queued_recent_fraction, s.latency.ttft_queue_share_recent
    return recent is not None and recent > 0.5 and share is not None and share >= t.ttft_queue_share


def queue_starting(ctx: Context) -> bool:
    """Requests wait for capacity in a recent scrape of a window whose queue is not sustained, while the recent
    first tokens miss: a queue starting now, whose wait vLLM has not measured yet (a request's queue time is
    recorded when it finishes)."""
    recent = ctx.signals.scheduler.queued_recent_fraction
    return recent is not None and recent > 0 and not queue_sustained(ctx) and ttft_missed_now(ctx)


def queue_ended(ctx: Context) -> bool:
    """No request waited for capacity in the recent scrapes: a queue the window holds has drained."""
    return ctx.signals.scheduler.queued_recent_fraction == 0.0


def kv_evidence(s: Signals) -> str:
    parts = []
    if s.kv.usage_mean is not None:
        parts.append(f"KV usage mean {pct(s.kv.usage_mean)}, max {pct(s.kv.usage_max or 0)}")
    if s.kv.preemptions is not None:
        parts.append(f"{s.kv.preemptions:.0f} preemptions in the window")
    return "; ".join(parts) or "KV usage unknown"


def offload_hit_ratio(s: Signals) -> float | None:
    """Prompt tokens served by the GPU prefix cache or the KV offload tier, over those looked up (None without
    offload): the connector is offered what the GPU cache missed (vllm:external_prefix_cache_queries)."""
    kt = s.kv_transfer
    if not kt.offload or s.kv.prefix_queried_tokens is None or not s.kv.prefix_queried_tokens:
        return None
    local = (s.kv.prefix_hit_ratio or 0.0) * s.kv.prefix_queried_tokens
    external = (kt.external_hit_ratio or 0.0) * (kt.external_queried_tokens or 0.0)
    return min(1.0, (local + external) / s.kv.prefix_queried_tokens)


def offload_evidence(s: Signals) -> str:
    """What the offload tier did in the window: its hit ratio, the bytes it loaded and at what speed."""
    kt = s.kv_transfer
    parts = []
    if kt.external_hit_ratio is not None:
        parts.append(f"the tier served {pct(kt.external_hit_ratio)} of the tokens offered to it")
    if kt.offload_load_bytes:
        speed = (f" at {kt.offload_load_bytes_per_second / 1e9:.1f} GB/s" if kt.offload_load_bytes_per_second
                 else "")
        parts.append(f"{kt.offload_load_bytes / 1e9:.1f} GB loaded back to the GPU{speed}")
    if kt.offload_cpu_usage is not None:
        parts.append(f"CPU tier usage {pct(kt.offload_cpu_usage)}")
    return ", ".join(parts) or "KV offload on"


def offload_note(s: Signals) -> str | None:
    """With KV offload a preempted or evicted block the tier still holds comes back by a copy, not a recompute."""
    if not s.kv_transfer.offload:
        return None
    return (f"KV offload is on ({offload_evidence(s)}): a preempted or evicted block the tier still holds comes "
            "back by a copy over PCIe, not a recompute, so each miss costs less; offloading is already done")


def stutter_upstream(ctx: Context) -> str | None:
    s = ctx.signals
    if frequent_preemption(ctx):
        return (f"preemption explains the slow stream ({s.kv.preemptions:.0f} preemptions recomputed in the window): "
                "see D")
    if cpu_starving(ctx):
        return f"CPU starvation explains the slow stream (score {s.cpu.starvation_score:.2f}): see C1/A3"
    if cpu_starved_in_window(ctx):
        return (f"the slow stream came while the CPU was starved (highest score in the window "
                f"{starved_score(s) or 0:.2f}, now "
                f"{s.cpu.starvation_score or 0:.2f}): see C1/A3")
    eng = s.engines
    slow = eng.latency_ratio is not None and eng.latency_ratio >= ctx.thresholds.dp_imbalance_ratio
    if eng.outlier is not None and slow:
        # The merged ITL mixes a slow data-parallel engine's gaps with its siblings' fast ones: its shape
        # (a tail far above the median) is the mixture's, not one engine's stutter.
        return (f"data-parallel engine {eng.outlier} is {eng.latency_ratio:.1f}x slower than its siblings: the "
                "merged gaps mix a slow engine with fast ones, see G2")
    return None


def tail_text(s: Signals) -> str:
    note = f" ({s.latency.itl_tail_note})" if s.latency.itl_tail_note else ""
    return f"ITL p99/p50 = {s.latency.itl_tail_ratio or 0:.1f}{note}"


def uniform_itl_bulk(ctx: Context) -> float | None:
    """The window's median token gap when it takes ``itl_median_share`` or more of the ITL objective's
    threshold: a gap that misses the threshold is then mostly the median, the slowness every gap has, and a
    tail over it (a prefill stutter) is the smaller part of the miss."""
    median = ctx.signals.latency.itl_quantiles.get(0.5)
    threshold = ctx.slo.objectives()["itl"].threshold_seconds
    return median if median is not None and median >= ctx.thresholds.itl_median_share * threshold else None


def parallelism_unused(ctx: Context) -> str | None:
    """The engine spans GPUs (TP x PP > 1) while its KV cache is mostly free: the first suspect for uniformly
    slow steps is the communication between them (G)."""
    degree = (ctx.facts.tensor_parallel_size or 1) * (ctx.facts.pipeline_parallel_size or 1)
    usage = ctx.signals.kv.usage_mean
    if degree > 1 and usage is not None and usage < ctx.thresholds.kv_relief_usage:
        return f"TP x PP = {degree} with KV mostly free ({pct(usage)} used)"
    return None


def model_fits_one_gpu(ctx: Context) -> tuple[bool | None, str]:
    """Could the model run on one GPU? Needs the weights and the GPU's memory."""
    sheet = gpus.lookup(ctx.facts.gpu)
    weights = ctx.facts.model_weight_bytes
    if sheet is None or weights is None:
        return None, ""
    share = weights / sheet.memory_bytes
    return (share < ctx.thresholds.model_fits_share,
            f"weights {weights / 1e9:.0f} GB = {pct(share)} of one {sheet.name}")


def batch_fill(ctx: Context) -> float | None:
    seqs, running = ctx.facts.max_num_seqs, ctx.signals.scheduler.running_mean
    return running / seqs if seqs and running is not None else None
