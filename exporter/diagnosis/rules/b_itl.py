"""B: token gaps miss their objective. Prefill disturbs decode (B1), the token budget lets big steps through
(B2), a throughput-oriented batch (B3), a slow GPU path (B4), speculative drafts mostly rejected (B5)."""

from __future__ import annotations

from exporter.catalog import gpus
from exporter.catalog import metrics as vllm
from exporter.diagnosis.rules.conditions import (
    batch_fill,
    model_fits_one_gpu,
    parallelism_unused,
    tail_text,
    uniform_itl_bulk,
)
from exporter.diagnosis.rules.effects import itl_breach
from exporter.diagnosis.rules.finding import (
    Context,
    Finding,
    abstain,
    clear,
    excess,
    fired,
    info,
    pct,
    recent_horizon,
    recovering,
    rule,
    seconds,
    unknown_fact,
)
from exporter.diagnosis.rules.prefix import stutter_explained, stutter_gate


def _bandwidth_use(ctx: Context, per_busy_second: float | None) -> float | None:
    """GPU bytes read per second of stepping as a share of the GPU's HBM bandwidth (vLLM's MFU estimate)."""
    sheet = gpus.lookup(ctx.facts.gpu)
    return per_busy_second / sheet.hbm_bandwidth if per_busy_second is not None and sheet is not None else None


def slow_path(ctx: Context) -> tuple[bool, bool]:
    """(the kernels move memory slowly now, they did at some time the window holds), from the recent readings."""
    s, low = ctx.signals, ctx.thresholds.bandwidth_use_low
    now = _bandwidth_use(ctx, s.gpu.read_bytes_per_busy_second_recent)
    earlier = _bandwidth_use(ctx, s.gpu.read_bytes_per_busy_second_recent_low)
    return now is not None and now < low, earlier is not None and earlier < low


def slow_median_now(ctx: Context) -> float | None:
    """The median token gap of the recent steps, when the kernels are slow now and that median alone misses
    the ITL objective's threshold: the slow path is the bulk of the miss, a stutter on top is its detail."""
    median = ctx.signals.latency.itl_median_recent
    if median is None or not slow_path(ctx)[0]:
        return None
    return median if median > ctx.slo.objectives()["itl"].threshold_seconds else None


def slow_path_explains(ctx: Context) -> str | None:
    """Time-aligned: the token gaps are uniform now while the kernels are (or were, in the window) slow; the
    window's tail is then slow gaps beside fast ones from before or after, not a stutter (see B4). Or the
    kernels are slow now and the median gap alone misses the objective."""
    if (median := slow_median_now(ctx)) is not None:
        return (f"the kernels are slow now and the median token gap over {recent_horizon(ctx)} is {seconds(median)}: "
                "see B4")
    recent_tail = ctx.signals.latency.itl_tail_ratio_recent
    if recent_tail is None or recent_tail >= ctx.thresholds.itl_tail_ratio or not any(slow_path(ctx)):
        return None
    return (f"the slow token gaps came with a slow kernel path (uniform now: ITL p99/p50 {recent_tail:.1f} over "
            f"{recent_horizon(ctx)}): see B4")


def communication_explains(ctx: Context) -> str | None:
    """A stutter rule stays quiet when the median gap is most of a missed gap on an engine whose GPUs talk for
    every step: smaller prefill chunks would leave most of the miss in place (the tp-overhead shape, where
    prefill steps lift the tail ratio near its mark over gaps that are all slow)."""
    median = uniform_itl_bulk(ctx)
    if median is None or (suspect := parallelism_unused(ctx)) is None:
        return None
    fits, fit_text = model_fits_one_gpu(ctx)
    if not fits:  # G can only name the parallelism when it is optional; else the stutter keeps its own cause
        return None
    threshold = ctx.slo.objectives()["itl"].threshold_seconds
    return (f"the median token gap {seconds(median)} is most of the ITL objective's {seconds(threshold)}, {suspect} "
            f"and {fit_text}: see G")


@rule("B1")
def rule_b1(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if (early := stutter_gate(ctx)) is not None:
        return early
    if (reason := slow_path_explains(ctx)) is not None or (reason := communication_explains(ctx)) is not None:
        return clear(reason)
    tail = s.latency.itl_tail_ratio
    if tail is None or s.traffic.prefill_token_share is None:
        return abstain(vllm.INTER_TOKEN_LATENCY_SECONDS, vllm.PROMPT_TOKENS_TOTAL)
    if tail < t.itl_tail_ratio:
        return clear(f"ITL is uniform ({tail_text(s)}), not stuttering")
    if s.traffic.prefill_token_share < t.prefill_token_share:
        return clear(f"prompt tokens are only {pct(s.traffic.prefill_token_share)} of computed tokens")
    breach = itl_breach(ctx)
    # Strength follows both the stutter's shape and how far users are from their objective.
    return fired(
        t.b1_strength + t.b1_strength_shape_weight * excess(tail, t.itl_tail_ratio, 3 * t.itl_tail_ratio)
        + t.b1_strength_burn_weight * excess(breach.ratio, 1, t.burn_rate_full),
        breach.evidence,
        f"{tail_text(s)}: most steps are fast, some are held by prefill",
        f"prompt tokens are {pct(s.traffic.prefill_token_share)} of computed tokens",
    )


@rule("B2")
def rule_b2(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    budget = ctx.facts.max_num_batched_tokens
    if budget is None:
        return abstain(unknown_fact("max_num_batched_tokens"))
    if (early := stutter_gate(ctx)) is not None:
        return early
    if (reason := slow_path_explains(ctx)) is not None or (reason := communication_explains(ctx)) is not None:
        return clear(reason)
    tail = s.latency.itl_tail_ratio
    if tail is None or s.traffic.prompt_length_mean is None or s.traffic.prompt_length_mean <= 0:
        return abstain(vllm.REQUEST_PROMPT_TOKENS, vllm.INTER_TOKEN_LATENCY_SECONDS)
    if s.scheduler.tokens_per_step_p99 is None:
        return abstain(vllm.ITERATION_TOKENS_TOTAL)
    if tail < t.itl_tail_ratio:
        return clear(f"ITL is uniform ({tail_text(s)})")
    # The budget is to blame when it lets big steps through: the largest steps are long (or use
    # most of the budget), and a smaller budget would cut them into chunks that decode can pass.
    step_share = s.scheduler.tokens_per_step_p99 / budget
    big = min(budget * t.budget_step_share, t.long_step_tokens)
    if s.scheduler.tokens_per_step_p99 < big:
        return clear(f"the largest steps carry {s.scheduler.tokens_per_step_p99:.0f} tokens ({pct(step_share)} of "
                     f"max_num_batched_tokens {budget}): the budget does not make them long")
    if budget <= t.long_step_tokens:
        return clear(f"max_num_batched_tokens {budget} is already small: lowering it further is not the lever")
    over = budget / s.traffic.prompt_length_mean
    breach = itl_breach(ctx)
    return fired(
        t.b2_strength + t.b2_strength_shape_weight * excess(s.scheduler.tokens_per_step_p99, big, 4 * big)
        + t.b2_strength_burn_weight * excess(breach.ratio, 1, t.burn_rate_full),
        breach.evidence,
        f"the largest steps (p99) carry {s.scheduler.tokens_per_step_p99:.0f} tokens = {pct(step_share)} of "
        f"max_num_batched_tokens {budget}, which holds {over:.1f} mean prompts "
        f"({s.traffic.prompt_length_mean:.0f} tokens)",
        tail_text(s),
    )


@rule("B3")
def rule_b3(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if (early := stutter_gate(ctx)) is not None:
        return early
    if (reason := slow_path_explains(ctx)) is not None:
        return clear(reason)
    tail = s.latency.itl_tail_ratio
    if tail is None:
        return abstain(vllm.INTER_TOKEN_LATENCY_SECONDS)
    if tail >= t.itl_tail_ratio:
        return clear(f"ITL stutters ({tail_text(s)}): see B1/B2")
    fill = batch_fill(ctx)
    if fill is None:
        return abstain(unknown_fact("max_num_seqs"))
    if fill < t.batch_fill_high:
        return clear(f"batch is {pct(fill)} of max_num_seqs: not a throughput-oriented batch")
    evidence = [itl_breach(ctx).evidence, f"ITL uniformly slow ({tail_text(s)})",
                f"running mean {s.scheduler.running_mean:.1f} = {pct(fill)} of max_num_seqs {ctx.facts.max_num_seqs}"]
    if s.gpu.utilization is not None:
        evidence.append(f"GPU utilisation {pct(s.gpu.utilization)}")
    return fired(t.b3_strength, *evidence)


@rule("B4")
def rule_b4(ctx: Context) -> Finding:
    """Slow GPU path: the engine steps without pause on a small batch, yet the GPU moves little."""
    s, t = ctx.signals, ctx.thresholds
    if (early := stutter_gate(ctx)) is not None:
        return early
    slow_now, slow_earlier = slow_path(ctx)
    tail = s.latency.itl_tail_ratio
    recent_tail = s.latency.itl_tail_ratio_recent
    if (slow_now or slow_earlier) and recent_tail is not None:
        # The window mixes the slow path's gaps with the fast ones from before or after it, and the steps at
        # either edge mix both too: a stutter shows in both shapes.
        tail = recent_tail if tail is None else min(tail, recent_tail)
    if tail is not None and tail >= t.itl_tail_ratio and slow_median_now(ctx) is None:
        return clear(f"ITL stutters ({tail_text(s)}): a scheduling cause, see B1/B2")
    if (suspect := parallelism_unused(ctx)) is not None:
        return clear(f"{suspect}: communication is the first suspect, see G")
    fill = batch_fill(ctx)
    if fill is not None and fill >= t.batch_fill_high:
        return clear(f"batch is {pct(fill)} of max_num_seqs: a throughput-oriented batch, see B3")
    sheet = gpus.lookup(ctx.facts.gpu)
    bandwidth_use = _bandwidth_use(ctx, s.gpu.read_bytes_per_busy_second_recent)  # now, where the steps say
    if bandwidth_use is None and s.gpu.read_bytes_per_second is not None and s.scheduler.busy_fraction:
        bandwidth_use = _bandwidth_use(ctx, s.gpu.read_bytes_per_second / s.scheduler.busy_fraction)
    gpu_busy = s.gpu.utilization is not None and s.gpu.utilization >= t.gpu_util_high
    if bandwidth_use is None and s.gpu.utilization is None:
        return abstain("DCGM GPU utilisation (targets[].dcgm_url)",
                       "or vLLM --enable-mfu-metrics with engine.gpu")
    if s.scheduler.busy_fraction is None or s.scheduler.busy_fraction < t.engine_busy_fraction:
        return clear(f"the engine waits for work {pct(1 - (s.scheduler.busy_fraction or 0))} of the time")
    slow = bandwidth_use is not None and bandwidth_use < t.bandwidth_use_low
    ended = not slow and slow_earlier
    if ended:  # the kernels keep pace again; the gaps of the slow scrapes are still in the window
        bandwidth_use = _bandwidth_use(ctx, s.gpu.read_bytes_per_busy_second_recent_low)
    if not (slow or ended or (bandwidth_use is None and gpu_busy)):
        return clear(f"GPU memory bandwidth while stepping {pct(bandwidth_use or 0)} of peak: the kernels keep pace"
                     if bandwidth_use is not None else f"GPU utilisation {pct(s.gpu.utilization or 0)}")
    evidence = [itl_breach(ctx).evidence, f"ITL uniformly slow ({tail_text(s)})",
                f"the engine steps {pct(s.scheduler.busy_fraction)} of the time"]
    if fill is not None:
        evidence.append(f"batch only {pct(fill)} of max_num_seqs")
    if bandwidth_use is not None and sheet is not None:
        evidence.append(f"GPU memory bandwidth while stepping {pct(bandwidth_use)} of the {sheet.name}'s "
                        f"{sheet.hbm_bandwidth / 1e12:.2f} TB/s (vLLM's MFU estimate)")
    if s.gpu.utilization is not None:
        evidence.append(f"GPU utilisation {pct(s.gpu.utilization)} (DCGM)")
    # How slow the kernels are: half-way when only DCGM's utilisation says the GPU is busy.
    degree = (excess(t.bandwidth_use_low - bandwidth_use, 0, t.bandwidth_use_low) if bandwidth_use is not None
              else 0.5)
    strength = t.b4_strength + t.b4_strength_weight * degree
    if ended:
        return recovering(fired(strength, *evidence), f"the kernels keep pace again over {recent_horizon(ctx)}: the "
                                                      "slow gaps are still in the window")
    return fired(strength, *evidence)


@rule("B5")
def rule_b5(ctx: Context) -> Finding:
    """Speculative drafts mostly rejected: information, a cause of B only while the ITL objective is missed."""
    s, t = ctx.signals, ctx.thresholds
    spec = s.speculative
    if not spec.enabled:
        return clear("speculative decoding is off (no spec-decode counters on /metrics)")
    if spec.acceptance_rate is None or spec.draft_tokens is None or spec.draft_tokens < t.spec_min_draft_tokens:
        return abstain(f"{vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL}: too few draft tokens in the window")
    length = f", mean accepted length {spec.mean_accepted_length:.2f}" if spec.mean_accepted_length else ""
    if spec.acceptance_rate >= t.spec_acceptance_low:
        return clear(f"draft acceptance {pct(spec.acceptance_rate)}{length}")
    drafter = ", ".join(part for part in (
        f"drafter {ctx.facts.speculative_method}" if ctx.facts.speculative_method else "",
        f"{ctx.facts.num_speculative_tokens} draft tokens per step" if ctx.facts.num_speculative_tokens else "",
    ) if part)
    evidence = [f"draft acceptance {pct(spec.acceptance_rate)} of {spec.draft_tokens:.0f} draft tokens "
                f"(low mark {pct(t.spec_acceptance_low)}){length}" + (f" ({drafter})" if drafter else "")]
    if spec.acceptance_per_position:
        evidence.append("accepted per draft position: "
                        + ", ".join(pct(rate) for rate in spec.acceptance_per_position))
    if spec.tokens_per_event is not None:
        evidence.append(f"{spec.tokens_per_event:.2f} tokens per output event")
    breach = itl_breach(ctx)
    if not (breach.known and breach.breached):
        return info(ctx, *evidence, breach.evidence if breach.known else "ITL objective not judged (too few gaps)")
    if (reason := stutter_explained(ctx)) is not None:
        return info(ctx, *evidence, reason)
    return fired(t.b5_strength + t.b5_strength_weight * excess(t.spec_acceptance_low - spec.acceptance_rate, 0,
                                                               t.spec_acceptance_low),
                 breach.evidence, *evidence)
