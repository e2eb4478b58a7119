"""One small pure function per cause, over the window's signals and the target's facts.

A rule fires (with a strength 0..1 and evidence carrying the numbers), clears, or abstains
(naming what it lacked). Rules read structure -- shares of TTFT, ratios, SLO breaches,
corroborating signals -- not absolute cut-offs tuned to one deployment. Register a new cause
by adding its function to ``RULES`` and its data entry to ``exporter.catalog.symptoms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from exporter.catalog.thresholds import Thresholds
from exporter.config import EngineFacts, Slo
from exporter.signals import Signals

Status = Literal["fired", "clear", "abstain"]

# Strength of informational causes: visible as symptoms, never the verdict on their own.
INFO_STRENGTH = 0.45


@dataclass(frozen=True, slots=True)
class Finding:
    status: Status
    strength: float = 0.0
    evidence: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Context:
    signals: Signals
    facts: EngineFacts
    thresholds: Thresholds
    slo: Slo


def fired(strength: float, *evidence: str) -> Finding:
    return Finding("fired", max(0.0, min(1.0, strength)), tuple(evidence))


def clear(*evidence: str) -> Finding:
    return Finding("clear", 0.0, tuple(evidence))


def abstain(*missing: str) -> Finding:
    return Finding("abstain", 0.0, (), tuple(missing))


def _excess(value: float, threshold: float, full: float) -> float:
    """0 at threshold, 1 at full (either direction)."""
    if full == threshold:
        return 1.0
    return max(0.0, min(1.0, (value - threshold) / (full - threshold)))


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _s(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


# -- shared conditions -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Breach:
    """An outcome (TTFT or ITL) judged against its SLO; ``known`` False means abstain."""

    known: bool
    breached: bool
    ratio: float = 0.0
    evidence: str = ""
    missing: tuple[str, ...] = ()


def gate(breach: Breach) -> Finding | None:
    """The common start of outcome-driven rules: abstain without data, clear within the SLO."""
    if not breach.known:
        return abstain(*breach.missing)
    if not breach.breached:
        return clear(breach.evidence)
    return None


def ttft_breach(ctx: Context) -> Breach:
    s, slo = ctx.signals, ctx.slo.ttft_p95_seconds
    p95 = s.quantile("ttft", 0.95)
    if p95 is None or s.first_tokens is None:
        return Breach(False, False, missing=("vllm:time_to_first_token_seconds",))
    if s.first_tokens < ctx.thresholds.evidence_min_requests:
        return Breach(False, False, missing=("traffic: too few first tokens in the window",))
    return Breach(True, p95 > slo, p95 / slo, f"TTFT p95 {_s(p95)} vs SLO {_s(slo)}")


def itl_breach(ctx: Context) -> Breach:
    s, slo = ctx.signals, ctx.slo.itl_p95_seconds
    p95 = s.quantile("itl", 0.95)
    if p95 is None:
        return Breach(False, False, missing=("vllm:inter_token_latency_seconds",))
    return Breach(True, p95 > slo, p95 / slo, f"ITL p95 {_s(p95)} vs SLO {_s(slo)}")


def itl_tail_ratio(s: Signals) -> float | None:
    p50, p99 = s.quantile("itl", 0.5), s.quantile("itl", 0.99)
    if p50 is None or p99 is None or p50 <= 0:
        return None
    return p99 / p50


def kv_full(ctx: Context) -> bool:
    """KV counts as full when it sits at the high mark for much of the window, or preemptions run."""
    s, t = ctx.signals, ctx.thresholds
    if s.kv_full_fraction is not None and s.kv_full_fraction >= t.kv_full_fraction:
        return True
    return frequent_preemption(ctx)


def frequent_preemption(ctx: Context) -> bool:
    s, t = ctx.signals, ctx.thresholds
    return (
        s.preemptions is not None
        and s.preemptions >= t.preemptions_min
        and s.preemptions_per_request is not None
        and s.preemptions_per_request >= t.preemptions_per_request
    )


def kv_evidence(s: Signals) -> str:
    parts = []
    if s.kv_cache_usage_mean is not None:
        parts.append(f"KV usage mean {_pct(s.kv_cache_usage_mean)}, max {_pct(s.kv_cache_usage_max or 0)}")
    if s.preemptions is not None:
        parts.append(f"{s.preemptions:.0f} preemptions in the window")
    return "; ".join(parts) or "KV usage unknown"


def reusable_prompts(ctx: Context) -> tuple[bool | None, str]:
    """Do prompts span enough full blocks for prefix caching to matter at all?"""
    s, t = ctx.signals, ctx.thresholds
    block = s.cache.block_size
    if block is None or s.prompt_length_mean is None:
        return None, ""
    blocks = s.prompt_length_mean / block
    return blocks >= t.prefix_min_prompt_blocks, f"mean prompt {s.prompt_length_mean:.0f} tokens = {blocks:.1f} blocks of {block}"


def low_prefix_hit(ctx: Context) -> Finding:
    """Shared F/F6/A5 precondition: a hit ratio that means something, and is low."""
    s, t = ctx.signals, ctx.thresholds
    if s.cache.enable_prefix_caching is False:
        return clear("prefix caching is disabled on this engine")
    if s.prefix_cache_hit_ratio is None:
        return abstain("vllm:prefix_cache_queries_total")
    reusable, blocks_text = reusable_prompts(ctx)
    if reusable is None:
        return abstain("vllm:cache_config_info", "vllm:request_prompt_tokens")
    if not reusable:
        return clear(f"prompts too short to reuse ({blocks_text})")
    if s.prefix_cache_hit_ratio >= t.prefix_hit_ratio_low:
        return clear(f"prefix hit ratio {_pct(s.prefix_cache_hit_ratio)}")
    strength = 0.5 + 0.5 * _excess(t.prefix_hit_ratio_low - s.prefix_cache_hit_ratio, 0, t.prefix_hit_ratio_low)
    return fired(strength, f"prefix hit ratio {_pct(s.prefix_cache_hit_ratio)} < {_pct(t.prefix_hit_ratio_low)}",
                 blocks_text)


# -- A: high TTFT ------------------------------------------------------------------------
def rule_a1(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if s.ttft_prefill_share is None or s.ttft_queue_share is None or s.prompt_length_mean is None:
        return abstain("vllm:request_prefill_time_seconds", "vllm:request_prompt_tokens")
    if s.ttft_prefill_share < t.ttft_prefill_share or s.ttft_queue_share >= t.ttft_queue_share:
        return clear(f"TTFT is not prefill-bound (prefill {_pct(s.ttft_prefill_share)}, queue {_pct(s.ttft_queue_share)})")
    if s.prompt_length_mean < t.long_prompt_tokens:
        return clear(f"prompts are not long (mean {s.prompt_length_mean:.0f} tokens)")
    return fired(
        0.5 + 0.4 * _excess(breach.ratio, 1, 3),
        breach.evidence,
        f"prefill is {_pct(s.ttft_prefill_share)} of mean TTFT {_s(s.ttft_mean or 0)}, queue {_pct(s.ttft_queue_share)}",
        f"mean prompt {s.prompt_length_mean:.0f} tokens (p95 {s.prompt_length_p95 or 0:.0f})",
    )


def rule_a2(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if s.ttft_queue_share is None or s.waiting_fraction is None:
        return abstain("vllm:request_queue_time_seconds", "vllm:num_requests_waiting")
    if s.ttft_queue_share < t.ttft_queue_share or s.waiting_fraction < t.waiting_sustained_fraction:
        return clear(f"queue is {_pct(s.ttft_queue_share)} of TTFT, requests waiting in {_pct(s.waiting_fraction)} of scrapes")
    if kv_full(ctx):
        return clear(f"the queue is explained by KV pressure ({kv_evidence(s)}): see C3/D")
    evidence = [
        breach.evidence,
        f"queue is {_pct(s.ttft_queue_share)} of mean TTFT ({_s(s.queue_mean or 0)} of {_s(s.ttft_mean or 0)})",
        f"requests waiting in {_pct(s.waiting_fraction)} of scrapes (mean {s.waiting_mean or 0:.1f}) while {kv_evidence(s)}",
    ]
    if ctx.facts.max_num_seqs and s.running_mean is not None:
        evidence.append(f"running mean {s.running_mean:.1f} of max_num_seqs {ctx.facts.max_num_seqs}")
    if s.waiting_deferred:
        evidence.append(f"{s.waiting_deferred:.0f} waiting are deferred (LoRA budget, KV transfer, blocked)")
    return fired(0.5 + 0.4 * _excess(s.ttft_queue_share, t.ttft_queue_share, 0.9), *evidence)


def rule_a3(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    score = s.cpu_starvation_score
    # TTFT and queue/prefill are observed on different populations (first token vs finish);
    # the e2e-based estimate is same-population. Both must agree before blaming the frontend.
    share = None
    if s.ttft_frontend_mean is not None and s.e2e_frontend_mean is not None and s.ttft_mean:
        share = min(s.ttft_frontend_mean, s.e2e_frontend_mean) / s.ttft_mean
    if score is None and share is None:
        return abstain("CPU source (cpu.pid/cgroup/match)", "vllm:request_queue_time_seconds")
    starving = score is not None and score >= t.cpu_starvation_score
    frontend = share is not None and share >= t.frontend_share
    if not (starving or frontend):
        return clear(f"CPU starvation score {score if score is not None else float('nan'):.2f}, "
                     f"frontend share {_pct(share or 0)}")
    evidence = [breach.evidence]
    if frontend:
        evidence.append(f"{_pct(share or 0)} of mean TTFT ({_s((share or 0) * (s.ttft_mean or 0))}) is spent outside "
                        "the engine (tokenization, templates, IPC)")
    if starving:
        evidence.append(f"CPU-starvation score {score:.2f} from {', '.join(sorted(s.cpu_inputs))}")
    return fired(0.5 + 0.5 * max(_excess(score or 0, t.cpu_starvation_score, 1.0),
                                 _excess(share or 0, t.frontend_share, 0.8)), *evidence)


def rule_a4(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    budget = ctx.facts.max_num_batched_tokens
    if budget is None:
        return abstain("engine.max_num_batched_tokens (not exported by vLLM: configure it)")
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if s.prompt_length_mean is None:
        return abstain("vllm:request_prompt_tokens")
    chunks = s.prompt_length_mean / budget
    if chunks < t.budget_chunks_per_prompt:
        return clear(f"mean prompt fits in {chunks:.1f} chunks of {budget}")
    if kv_full(ctx):
        return clear(f"KV is full ({kv_evidence(s)}): the budget is not the limit")
    engine_share = (s.ttft_prefill_share or 0) + (s.ttft_queue_share or 0)
    return fired(
        0.55 + 0.4 * _excess(chunks, t.budget_chunks_per_prompt, 4 * t.budget_chunks_per_prompt),
        breach.evidence,
        f"mean prompt {s.prompt_length_mean:.0f} tokens needs {chunks:.1f} chunks of max_num_batched_tokens {budget}",
        f"prefill + queue are {_pct(min(engine_share, 1.0))} of mean TTFT",
    )


def rule_a5(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    low = low_prefix_hit(ctx)
    if low.status != "fired":
        return low
    if not s.prefix_cache_hit_ratio:
        # Nothing is shared at all: the prompts may be unique by design, and then the prefill
        # cost is intrinsic (A1), not a cache failure.
        return clear("no prompt shares a cached block: nothing to blame on the cache")
    if s.ttft_prefill_share is None or s.ttft_prefill_share < t.ttft_prefill_share:
        return clear("TTFT is not prefill-bound")
    return fired(low.strength, breach.evidence, *low.evidence,
                 f"prefill is {_pct(s.ttft_prefill_share)} of mean TTFT")


# -- B: poor ITL -------------------------------------------------------------------------
def _stutter(ctx: Context) -> tuple[Breach, float | None]:
    return itl_breach(ctx), itl_tail_ratio(ctx.signals)


def rule_b1(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach, tail = _stutter(ctx)
    if (early := gate(breach)) is not None:
        return early
    if tail is None or s.prefill_token_share is None:
        return abstain("vllm:prompt_tokens_total", "vllm:generation_tokens_total")
    if tail < t.itl_tail_ratio:
        return clear(f"ITL is uniform (p99/p50 {tail:.1f}), not stuttering")
    if s.prefill_token_share < t.prefill_token_share:
        return clear(f"prompt tokens are only {_pct(s.prefill_token_share)} of computed tokens")
    return fired(
        0.5 + 0.4 * _excess(tail, t.itl_tail_ratio, 3 * t.itl_tail_ratio),
        breach.evidence,
        f"ITL p99/p50 = {tail:.1f}: most steps are fast, some are held by prefill",
        f"prompt tokens are {_pct(s.prefill_token_share)} of computed tokens",
    )


def rule_b2(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    budget = ctx.facts.max_num_batched_tokens
    if budget is None:
        return abstain("engine.max_num_batched_tokens (not exported by vLLM: configure it)")
    breach, tail = _stutter(ctx)
    if (early := gate(breach)) is not None:
        return early
    if tail is None or s.prompt_length_mean is None or s.prompt_length_mean <= 0:
        return abstain("vllm:request_prompt_tokens")
    if tail < t.itl_tail_ratio:
        return clear(f"ITL is uniform (p99/p50 {tail:.1f})")
    over = budget / s.prompt_length_mean
    if over < t.budget_over_prompt:
        return clear(f"max_num_batched_tokens {budget} holds only {over:.1f} mean prompts")
    return fired(
        0.5 + 0.4 * _excess(over, t.budget_over_prompt, 8 * t.budget_over_prompt),
        breach.evidence,
        f"max_num_batched_tokens {budget} admits {over:.1f} whole mean prompts ({s.prompt_length_mean:.0f} tokens) per step",
        f"ITL p99/p50 = {tail:.1f}",
    )


def rule_b3(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach, tail = _stutter(ctx)
    if (early := gate(breach)) is not None:
        return early
    if tail is None:
        return abstain("vllm:inter_token_latency_seconds")
    if tail >= t.itl_tail_ratio:
        return clear(f"ITL stutters (p99/p50 {tail:.1f}): see B1/B2")
    seqs = ctx.facts.max_num_seqs
    fill = s.running_mean / seqs if seqs and s.running_mean is not None else None
    if fill is None and s.gpu_utilization is None:
        return abstain("engine.max_num_seqs (not exported by vLLM: configure it)", "DCGM GPU utilisation")
    # A full batch is the throughput-oriented set-up B3 names; GPU utilisation stands in only
    # when max_num_seqs is unknown (a busy GPU with a small batch may be communication, see G).
    if fill is not None:
        busy = fill >= t.batch_fill_high
    else:
        busy = s.gpu_utilization is not None and s.gpu_utilization >= t.gpu_util_high
    if not busy:
        return clear("batch is not full and the GPU is not busy")
    evidence = [breach.evidence, f"ITL uniformly slow (p99/p50 {tail:.1f})"]
    if fill is not None:
        evidence.append(f"running mean {s.running_mean:.1f} = {_pct(fill)} of max_num_seqs {seqs}")
    if s.gpu_utilization is not None:
        evidence.append(f"GPU utilisation {_pct(s.gpu_utilization)}")
    return fired(0.55, *evidence)


# -- C: low throughput, idle GPU ---------------------------------------------------------
def _traffic(s: Signals) -> bool:
    return bool((s.requests_finished or 0) > 0 or (s.running_mean or 0) > 0 or (s.waiting_max or 0) > 0)


def rule_c1(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    score = s.cpu_starvation_score
    if score is None:
        return abstain("CPU source (cpu.pid/cgroup/match)")
    if score < t.cpu_starvation_score:
        return clear(f"CPU-starvation score {score:.2f}")
    if not _traffic(s):
        return clear("no traffic in the window")
    if s.gpu_utilization is not None and s.gpu_utilization >= t.gpu_util_low:
        return clear(f"GPU utilisation {_pct(s.gpu_utilization)}: the GPU is fed")
    inputs = ", ".join(f"{k} {v:.2f}" for k, v in sorted(s.cpu_inputs.items()))
    evidence = [f"CPU-starvation score {score:.2f} (inputs: {inputs})"]
    if s.engine_steps_per_second is not None:
        evidence.append(f"engine output batches {s.engine_steps_per_second:.1f}/s")
    if s.gpu_utilization is not None:
        evidence.append(f"GPU utilisation {_pct(s.gpu_utilization)}")
    return fired(0.55 + 0.45 * _excess(score, t.cpu_starvation_score, 1.0), *evidence)


def rule_c2(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if s.running_mean is None or s.waiting_max is None or s.requests_finished is None:
        return abstain("vllm:num_requests_running", "vllm:num_requests_waiting")
    if s.requests_finished < t.evidence_min_requests:
        return clear("too little traffic to judge batching")
    if s.running_mean >= t.sparse_mean_running or s.waiting_max > 0:
        return clear(f"running mean {s.running_mean:.1f}, waiting max {s.waiting_max:.0f}")
    if s.cpu_starvation_score is not None and s.cpu_starvation_score >= t.cpu_starvation_score:
        return clear("CPU starvation explains the idle engine (C1)")
    if s.gpu_utilization is not None and s.gpu_utilization >= t.gpu_util_low:
        return clear(f"GPU utilisation {_pct(s.gpu_utilization)}")
    evidence = [f"running mean {s.running_mean:.2f} with nothing waiting (max {s.waiting_max:.0f})",
                f"{s.requests_per_second or 0:.2f} requests/s finished"]
    if s.gpu_utilization is not None:
        evidence.append(f"GPU utilisation {_pct(s.gpu_utilization)}")
    return fired(0.55, *evidence)


def rule_c3(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if s.waiting_fraction is None or s.kv_cache_usage_mean is None:
        return abstain("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    if s.waiting_fraction < t.waiting_sustained_fraction:
        return clear(f"requests waiting in only {_pct(s.waiting_fraction)} of scrapes")
    if not kv_full(ctx):
        return clear(f"KV has room ({kv_evidence(s)})")
    evidence = [f"requests waiting in {_pct(s.waiting_fraction)} of scrapes (max {s.waiting_max or 0:.0f})",
                kv_evidence(s)]
    if s.waiting_capacity is not None:
        evidence.append(f"{s.waiting_capacity:.0f} waiting for capacity at the last scrape")
    seqs = ctx.facts.max_num_seqs
    if seqs and s.running_mean is not None:
        if s.running_mean >= seqs * t.batch_fill_high:
            return clear(f"running {s.running_mean:.1f} is at max_num_seqs {seqs}: the cap, not KV, binds")
        evidence.append(f"running mean {s.running_mean:.1f} below max_num_seqs {seqs}")
    return fired(0.6 + 0.3 * _excess(s.waiting_fraction, t.waiting_sustained_fraction, 1.0), *evidence)


# -- D, E: KV pressure and headroom ------------------------------------------------------
def rule_d(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if s.preemptions is None:
        return abstain("vllm:num_preemptions_total")
    if s.preemptions_per_request is None:
        return abstain("vllm:request_success_total")
    if not frequent_preemption(ctx):
        return clear(f"{s.preemptions:.0f} preemptions, {s.preemptions_per_request:.2f} per admitted request")
    strength = 0.65 + 0.25 * _excess(s.preemptions_per_request, t.preemptions_per_request,
                                     10 * t.preemptions_per_request)
    if s.kv_cache_usage_max is not None and s.kv_cache_usage_max >= t.kv_usage_high:
        strength += 0.1  # corroborated by usage at the high mark
    return fired(
        strength,
        f"{s.preemptions:.0f} preemptions in {s.window_seconds:.0f} s = {s.preemption_rate or 0:.2f}/s, "
        f"{s.preemptions_per_request:.2f} per admitted request (threshold {t.preemptions_per_request:g})",
        kv_evidence(s),
    )


def rule_e(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if s.kv_cache_usage_mean is None:
        return abstain("vllm:kv_cache_usage_perc")
    if s.kv_cache_usage_mean < t.headroom_usage_mean:
        return clear(f"KV usage mean {_pct(s.kv_cache_usage_mean)}")
    if frequent_preemption(ctx):
        return clear("preemption is already frequent: see D")
    evidence = [f"KV usage mean {_pct(s.kv_cache_usage_mean)} over {s.window_seconds:.0f} s "
                f"(max {_pct(s.kv_cache_usage_max or 0)}) with {s.preemptions or 0:.0f} preemptions"]
    if s.cache.gpu_memory_utilization is not None:
        evidence.append(f"gpu_memory_utilization {s.cache.gpu_memory_utilization:g}")
    return fired(0.55 + 0.3 * _excess(s.kv_cache_usage_mean, t.headroom_usage_mean, 1.0), *evidence)


# -- F: prefix cache ----------------------------------------------------------------------
def rule_f(ctx: Context) -> Finding:
    low = low_prefix_hit(ctx)
    if low.status != "fired":
        return low
    if _eviction_shaped(ctx):
        return clear("KV is full and some prefixes do hit: capacity eviction (F6) explains the misses")
    if not ctx.signals.prefix_cache_hit_ratio:
        # Zero hits: metrics cannot tell prompts unique by design from a prefix broken at its
        # first block, so this stays informational and never makes the verdict alone.
        return fired(min(low.strength, INFO_STRENGTH), *low.evidence,
                     "no prompt shares even one cached block: unique by design, or broken in the first block")
    return fired(low.strength, *low.evidence,
                 "some blocks hit, so prompts do share a prefix that breaks early (template, timestamps, order)")


def _eviction_shaped(ctx: Context) -> bool:
    """Eviction leaves partial reuse behind; zero hits mean nothing is shared at all (F)."""
    return kv_full(ctx) and (ctx.signals.prefix_cache_hit_ratio or 0.0) > 0.0


def rule_f6(ctx: Context) -> Finding:
    low = low_prefix_hit(ctx)
    if low.status != "fired":
        return low
    if not _eviction_shaped(ctx):
        return clear("KV has room or nothing hits at all: misses are not capacity eviction")
    return fired(min(low.strength, INFO_STRENGTH), *low.evidence, f"KV full ({kv_evidence(ctx.signals)})")


# -- G: multi-GPU overhead ----------------------------------------------------------------
def rule_g(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    tp, pp = ctx.facts.tensor_parallel_size, ctx.facts.pipeline_parallel_size
    if tp is None and pp is None:
        return abstain("engine.tensor_parallel_size / pipeline_parallel_size (not exported by vLLM)")
    degree = (tp or 1) * (pp or 1)
    if degree == 1:
        return clear("single-GPU engine")
    breach, tail = _stutter(ctx)
    if (early := gate(breach)) is not None:
        return early
    if tail is not None and tail >= t.itl_tail_ratio:
        return clear(f"ITL stutters (p99/p50 {tail:.1f}): a scheduling cause, not communication")
    if s.kv_cache_usage_mean is None:
        return abstain("vllm:kv_cache_usage_perc")
    if s.kv_cache_usage_mean >= t.kv_relief_usage or frequent_preemption(ctx):
        return clear(f"KV is in use ({kv_evidence(s)}): the extra GPUs are buying memory")
    return fired(
        0.6,
        breach.evidence,
        f"TP {tp or 1} x PP {pp or 1} while KV usage mean is only {_pct(s.kv_cache_usage_mean)}",
        f"ITL uniformly slow (p99/p50 {tail:.1f})" if tail is not None else "ITL tail shape unknown",
    )


Rule = Callable[[Context], Finding]

RULES: tuple[tuple[str, Rule], ...] = (
    ("A1", rule_a1), ("A2", rule_a2), ("A3", rule_a3), ("A4", rule_a4), ("A5", rule_a5),
    ("B1", rule_b1), ("B2", rule_b2), ("B3", rule_b3),
    ("C1", rule_c1), ("C2", rule_c2), ("C3", rule_c3),
    ("D", rule_d), ("E", rule_e), ("F", rule_f), ("F6", rule_f6), ("G", rule_g),
)
