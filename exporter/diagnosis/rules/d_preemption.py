"""D: frequent preemption, the KV cache is short."""

from __future__ import annotations

from exporter.catalog import metrics as vllm
from exporter.diagnosis.rules.conditions import frequent_preemption, kv_evidence, offload_note
from exporter.diagnosis.rules.effects import itl_breach, ttft_breach
from exporter.diagnosis.rules.finding import (
    Context,
    Finding,
    abstain,
    clear,
    excess,
    fired,
    recent_horizon,
    recovering,
    rule,
)


@rule("D")
def rule_d(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if s.kv.preemptions is None:
        return abstain(vllm.NUM_PREEMPTIONS_TOTAL)
    if s.kv.preemptions_per_request is None:
        return abstain(vllm.REQUEST_SUCCESS_TOTAL)
    if not frequent_preemption(ctx):
        return clear(f"{s.kv.preemptions:.0f} preemptions, {s.kv.preemptions_per_request:.2f} per admitted request")
    strength = t.d_strength + t.d_strength_weight * excess(s.kv.preemptions_per_request, t.preemptions_per_request,
                                     10 * t.preemptions_per_request)
    if s.kv.usage_max is not None and s.kv.usage_max >= t.kv_usage_high:
        strength += t.d_strength_corroborated  # corroborated by usage at the high mark
    evidence = [f"{s.kv.preemptions:.0f} preemptions in {s.window_seconds:.0f} s = {s.kv.preemption_rate or 0:.2f}/s, "
                f"{s.kv.preemptions_per_request:.2f} per admitted request (threshold {t.preemptions_per_request:g})",
                kv_evidence(s)]
    if s.kv.preemptions_per_request < t.preemptions_per_request:
        tail = next((b for b in (ttft_breach(ctx), itl_breach(ctx)) if b.known and b.breached), None)
        # No tail over the window: named by the recent steps alone (preempting_now), a storm starting.
        evidence.insert(1, f"below the frequent mark, but users see the tail: {tail.evidence}" if tail is not None
                        else f"{s.kv.preemptions_recent or 0:.0f} preemptions in {recent_horizon(ctx)}, "
                             f"{s.kv.preemptions_per_request_recent or 0:.2f} per first token there, while those "
                             "steps' first tokens miss their objective: a storm starting")
    if (note := offload_note(s)) is not None:
        strength -= t.d_strength_offload_discount  # a cheaper miss: the recompute is partly a copy
        evidence.append(note)
    finding = fired(strength, *evidence)
    if s.kv.preemptions_recent == 0:
        return recovering(finding, f"no preemption in {recent_horizon(ctx)}: the storm has ended, its effect is still "
                                   "in the window")
    return finding
