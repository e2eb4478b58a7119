"""F: the prefix cache is ineffective (F: prompts do not share exact prefixes; F6: hot prefixes evicted)."""

from __future__ import annotations

from dataclasses import replace

from exporter.diagnosis.rules.conditions import kv_evidence
from exporter.diagnosis.rules.finding import Context, Finding, clear, info, rule
from exporter.diagnosis.rules.prefix import eviction_shaped, hit_at_all, low_prefix_hit, with_costs


@rule("F")
def rule_f(ctx: Context) -> Finding:
    low = low_prefix_hit(ctx)
    if low.status != "fired":
        return low
    if eviction_shaped(ctx):
        return clear("KV is full and some prefixes do hit: capacity eviction (F6) explains the misses")
    if not hit_at_all(low, ctx.signals):
        # Zero hits: metrics cannot tell prompts unique by design from a prefix broken at its
        # first block, so this stays informational and never makes the verdict alone.
        return info(ctx, *low.evidence,
                    "no prompt shares even one cached block: unique by design, or broken in the first block")
    claimed = with_costs(ctx, low)
    if claimed is None:
        return info(ctx, *low.evidence, "the first-token objective is met: reuse is bounded by what the prompts "
                                        "share (unique documents cannot hit), and the misses cost no user anything")
    return replace(claimed, evidence=(*claimed.evidence, "some blocks hit, so prompts do share a prefix that "
                                                         "breaks early (template, timestamps, order)"))


@rule("F6")
def rule_f6(ctx: Context) -> Finding:
    low = low_prefix_hit(ctx)
    if low.status != "fired":
        return low
    if not eviction_shaped(ctx):
        return clear("KV has room or nothing hits at all: misses are not capacity eviction")
    claimed = with_costs(ctx, low, f"KV full ({kv_evidence(ctx.signals)})")
    if claimed is None:
        return info(ctx, *low.evidence, f"KV full ({kv_evidence(ctx.signals)})", "within the first-token objective")
    return claimed
