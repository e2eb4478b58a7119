"""G: multi-GPU overhead. Parallelism without memory pressure (G), one data-parallel engine slower or more
loaded than its siblings (G2)."""

from __future__ import annotations

from collections.abc import Callable

from exporter.catalog import metrics as vllm
from exporter.diagnosis.rules.conditions import (
    frequent_preemption,
    kv_evidence,
    model_fits_one_gpu,
    tail_text,
    uniform_itl_bulk,
)
from exporter.diagnosis.rules.effects import itl_breach, ttft_breach
from exporter.diagnosis.rules.finding import (
    Context,
    Finding,
    abstain,
    clear,
    excess,
    fired,
    info,
    pct,
    rule,
    seconds,
    unknown_fact,
)
from exporter.diagnosis.rules.prefix import stutter_gate


@rule("G")
def rule_g(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    tp, pp = ctx.facts.tensor_parallel_size, ctx.facts.pipeline_parallel_size
    if tp is None and pp is None:
        return abstain(unknown_fact("tensor_parallel_size / pipeline_parallel_size"))
    degree = (tp or 1) * (pp or 1)
    if degree == 1:
        return clear("single-GPU engine")
    if (early := stutter_gate(ctx)) is not None:
        return early
    tail = s.latency.itl_tail_ratio
    median = uniform_itl_bulk(ctx)
    if tail is not None and tail >= t.itl_tail_ratio and median is None:
        return clear(f"ITL stutters ({tail_text(s)}): a scheduling cause, not communication")
    if s.kv.usage_mean is None:
        return abstain(vllm.KV_CACHE_USAGE_PERC)
    if s.kv.usage_mean >= t.kv_relief_usage or frequent_preemption(ctx):
        return clear(f"KV is in use ({kv_evidence(s)}): the extra GPUs are buying memory")
    fits, fit_text = model_fits_one_gpu(ctx)
    if fits is None:
        return abstain("engine.model_weight_bytes and engine.gpu (does the model need TP to fit?)")
    if not fits:
        return clear(f"the model needs the GPUs to fit ({fit_text}): TP is not optional here")
    return fired(
        t.g_strength,
        itl_breach(ctx).evidence,
        f"TP {tp or 1} x PP {pp or 1} while KV usage mean is only {pct(s.kv.usage_mean)}",
        f"the model fits on one GPU ({fit_text}): the parallelism buys room that is not used",
        (f"the median token gap {seconds(median)} is most of the ITL objective's threshold ({tail_text(s)}): slow "
         "throughout"
         if median is not None else
         f"ITL uniformly slow ({tail_text(s)})" if tail is not None else "ITL tail shape unknown"),
    )


@rule("G2")
def rule_g2(ctx: Context) -> Finding:
    """One data-parallel engine slower or more loaded than its siblings: it hides in the merged numbers."""
    s, t = ctx.signals, ctx.thresholds
    eng = s.engines
    if not eng.count or eng.count < 2:
        return clear("one engine behind this /metrics (no data parallelism)")
    if eng.outlier is None:
        return abstain("per-engine traffic: too few first tokens per engine in the window")
    ratios = [r for r in (eng.load_ratio, eng.latency_ratio) if r is not None]
    worst = max(ratios) if ratios else 0.0
    row = eng.per_engine.get(eng.outlier, {})

    def text(key: str, fmt: Callable[[float], str]) -> str:
        value = row.get(key)
        return fmt(value) if value is not None else "?"

    numbers = (f"engine {eng.outlier}: load {text('load_mean', lambda v: f'{v:.1f}')} requests, mean TTFT "
               f"{text('ttft_mean', seconds)}, mean ITL {text('itl_mean', seconds)}")
    ratio_text = (f"{(eng.load_ratio or 0):.1f}x its siblings' median load, {(eng.latency_ratio or 0):.1f}x "
                  f"their latency (mark {t.dp_imbalance_ratio:g}x)")
    if worst < t.dp_imbalance_ratio:
        return clear(f"{eng.count:.0f} engines in step: the furthest, {numbers}, at {ratio_text}")
    evidence = [f"{numbers}: {ratio_text}",
                "siblings: " + "; ".join(
                    f"engine {e} load {(r.get('load_mean') or 0):.1f}, TTFT {seconds(r.get('ttft_mean') or 0)}, "
                    f"ITL {seconds(r.get('itl_mean') or 0)}" for e, r in eng.per_engine.items() if e != eng.outlier)]
    breaches = [b for b in (ttft_breach(ctx), itl_breach(ctx)) if b.known and b.breached]
    if not breaches:
        return info(ctx, *evidence, "every objective is met over the merged engines")
    return fired(t.g2_strength + t.g2_strength_weight * excess(worst, t.dp_imbalance_ratio, 2 * t.dp_imbalance_ratio),
                 *(b.evidence for b in breaches), *evidence)
