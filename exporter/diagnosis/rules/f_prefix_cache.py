"""F: the prefix cache is ineffective. Its misses are the prompts' or the pool's:

* F1, prompts never reused (the workload's): some blocks hit, so prompts share a prefix, while the pool never
  ran out; the shared part breaks early (a template that changes, a timestamp, an order).
* F6, hot prefixes evicted before their reuse (the pool's): KV full while some prefixes hit.
* F, the shares cannot tell them apart: the pool ran out at times, short of full. Information when nothing is
  shared at all or the misses cost no one.

With --kv-cache-metrics the block witness names F1 or F6 whatever the shares say (exporter/diagnosis/witnesses.py).
"""

from __future__ import annotations

from exporter.diagnosis.rules.conditions import kv_evidence
from exporter.diagnosis.rules.finding import Context, Finding, clear, info, rule
from exporter.diagnosis.rules.prefix import eviction_shaped, hit_at_all, low_prefix_hit, pool_ran_out, with_costs
from exporter.frozen import replace

# The template signal the shares give, as F1's and F's evidence quote it (dropped when the block witness names F6).
SHARED_BUT_BROKEN = "some blocks hit, so prompts do share a prefix that breaks early (template, timestamps, order)"
POOL_RAN_OUT = "the pool ran out at times"  # how F's evidence starts its reading of the pool
POOL_ROOM = "KV never reached its high mark and nothing was preempted in the window"  # F1's reading of it
PREFIX_CAUSES = ("F", "F1", "F6")


def _claimed(ctx: Context) -> tuple[Finding, Finding | None] | Finding:
    """What F and F1 share: the low hit ratio, and its costs where prompts do share a prefix the pool is not
    full of. A finding to return as it is (clear, abstain, information) when there is nothing to split."""
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
    return low, with_costs(ctx, low)


@rule("F")
def rule_f(ctx: Context) -> Finding:
    found = _claimed(ctx)
    if isinstance(found, Finding):
        return found
    low, claimed = found
    if claimed is None:
        return info(ctx, *low.evidence, "the first-token objective is met: reuse is bounded by what the prompts "
                                        "share (unique documents cannot hit), and the misses cost no user anything")
    if (pool := pool_ran_out(ctx.signals)) is None:
        return clear("the pool never ran out: prompts that change before their shared part, see F1")
    return replace(claimed, evidence=(*claimed.evidence, SHARED_BUT_BROKEN,
                                      f"{POOL_RAN_OUT} ({pool}), so some misses may be its evictions: "
                                      "--kv-cache-metrics tells the prompts (F1) from the pool (F6)"))


@rule("F1")
def rule_f1(ctx: Context) -> Finding:
    found = _claimed(ctx)
    if isinstance(found, Finding):
        return clear(found.evidence[-1]) if found.informational else found
    _, claimed = found
    if claimed is None:
        return clear("the misses cost no user anything: reuse bounded by what the prompts share (see F)")
    if (pool := pool_ran_out(ctx.signals)) is not None:
        return clear(f"the pool ran out at times ({pool}): the shares cannot tell the prompts from its evictions "
                     "(see F)")
    return replace(claimed, evidence=(*claimed.evidence, SHARED_BUT_BROKEN,
                                      f"{POOL_ROOM}: no sign of a pool short of room"))


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
