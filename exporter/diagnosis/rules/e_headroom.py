"""E: no memory headroom, the engine is fragile at its KV cap."""

from __future__ import annotations

from exporter.catalog import metrics as vllm
from exporter.diagnosis.rules.conditions import frequent_preemption, offload_note, queue_ended, queue_sustained
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
    recent_horizon,
    recovering,
    rule,
)


@rule("E")
def rule_e(ctx: Context) -> Finding:
    """Headroom risk needs evidence of fragility, not saturation: V1 admission fills the cache by design.

    Preemptions while scrapes show KV "free" are not read as fragility: usage sampled every few
    seconds misses the peaks at which blocks ran out.
    """
    s, t = ctx.signals, ctx.thresholds
    if s.kv.usage_mean is None or s.kv.full_fraction is None:
        return abstain(vllm.KV_CACHE_USAGE_PERC)
    if (s.kv.preemptions_per_request or 0) >= t.preemptions_per_request and frequent_preemption(ctx):
        return clear("preemption is already frequent: see D")
    at_cap = s.kv.full_fraction >= t.kv_full_fraction
    usage = (f"KV usage mean {pct(s.kv.usage_mean)} over {s.window_seconds:.0f} s "
             f"(max {pct(s.kv.usage_max or 0)}, at the high mark in {pct(s.kv.full_fraction)} of scrapes)")
    if s.restarts and at_cap:
        return fired(t.e_strength_restart, f"{s.restarts} engine restart(s) in the window with KV at its cap (OOM?)",
                     usage)
    if not at_cap:
        return clear(usage)
    tail = next((b for b in (ttft_breach(ctx), itl_breach(ctx)) if b.known and b.breached), None)
    if queue_sustained(ctx) and (s.kv.preemptions or tail is not None):
        evidence = [usage, f"requests wait for capacity in {pct(s.scheduler.queued_fraction or 0)} of scrapes"]
        if s.kv.preemptions:
            evidence.append(f"{s.kv.preemptions:.0f} preemptions already (rare, but the cache has no slack)")
        if tail is not None:
            evidence.append(tail.evidence)
        if s.cache.gpu_memory_utilization is not None:
            evidence.append(f"gpu_memory_utilization {s.cache.gpu_memory_utilization:g}")
        strength = t.e_strength + t.e_strength_weight * excess(s.kv.full_fraction, t.kv_full_fraction, 1.0)
        if (note := offload_note(s)) is not None:
            strength -= t.e_strength_offload_discount  # the cap costs copies, not recomputes
            evidence.append(note)
        finding = fired(strength, *evidence)
        # The fragility is a pool at its cap with requests waiting for capacity and preempted: with the pool
        # below the high mark now and neither in the recent scrapes, the pressure has passed (a storm's
        # aftermath, whose window ratio no longer makes D frequent).
        usage_now = s.kv.usage
        if (usage_now is not None and usage_now < t.kv_usage_high and queue_ended(ctx)
                and s.kv.preemptions_recent == 0):
            return recovering(finding, f"KV usage {pct(usage_now)} now, no request waited for capacity and no "
                                       f"preemption in {recent_horizon(ctx)}: the pressure has passed, its effect is "
                                       "still in the window")
        return finding
    return info(ctx, usage, "saturated but within objectives and without preemption: efficient, with no spare "
                            "room for a burst")
