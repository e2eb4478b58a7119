"""The prefix cache as A5, F and F6 read it: a hit ratio that means something and is low, and what its misses
cost users (first tokens, token gaps); and what a stutter owes to the prefill of those misses."""

from __future__ import annotations

from exporter.catalog import metrics as vllm
from exporter.diagnosis.rules.conditions import (
    kv_full,
    offload_evidence,
    offload_hit_ratio,
    stutter_upstream,
    tail_text,
)
from exporter.diagnosis.rules.effects import Breach, aligned_ttft_breach, gate, itl_breach, ttft_breach_since
from exporter.diagnosis.rules.finding import (
    Context,
    Finding,
    abstain,
    clear,
    excess,
    fired,
    pct,
    per_context,
    recent_horizon,
    recovering,
)
from exporter.frozen import replace
from exporter.signals import Signals


def reusable_prompts(ctx: Context) -> tuple[bool | None, str]:
    """Do prompts span enough full blocks for prefix caching to matter at all?"""
    s, t = ctx.signals, ctx.thresholds
    block = s.cache.block_size
    if block is None or s.traffic.prompt_length_mean is None:
        return None, ""
    blocks = s.traffic.prompt_length_mean / block
    return blocks >= t.prefix_min_prompt_blocks, (f"mean prompt {s.traffic.prompt_length_mean:.0f} tokens = "
                                                  f"{blocks:.1f} blocks of {block}")


def prefix_hit_now(s: Signals) -> float | None:
    """The prefix hit ratio now: over the recent horizon, the window's where no recent prompt was looked up."""
    return s.kv.prefix_hit_ratio_recent if s.kv.prefix_hit_ratio_recent is not None else s.kv.prefix_hit_ratio


@per_context
def low_prefix_hit(ctx: Context) -> Finding:
    """Shared F/F6/A5 precondition: a hit ratio that means something, and is low now (over the recent horizon),
    or was low at some time the window holds (``recovering``: the misses of those scrapes are still in it)."""
    s, t = ctx.signals, ctx.thresholds
    if s.cache.enable_prefix_caching is False:
        return clear("prefix caching is disabled on this engine")
    if (s.kv_transfer.transferred_prompt_share or 0) >= 0.5 and not s.kv_transfer.offload:
        return clear(f"{pct(s.kv_transfer.transferred_prompt_share or 0)} of prompt tokens arrive by KV transfer: "
                     "their prefill is another instance's (judge its prefix cache there)")
    ratio = prefix_hit_now(s)
    if ratio is None:
        return abstain(vllm.PREFIX_CACHE_QUERIES_TOTAL)
    reusable, blocks_text = reusable_prompts(ctx)
    if reusable is None:
        return abstain(vllm.CACHE_CONFIG_INFO, vllm.REQUEST_PROMPT_TOKENS)
    if not reusable:
        return clear(f"prompts too short to reuse ({blocks_text})")
    earlier = s.kv.prefix_hit_ratio_recent_low
    window = f", {pct(s.kv.prefix_hit_ratio)} over the window" if s.kv.prefix_hit_ratio is not None else ""
    tiered = offload_hit_ratio(s)
    if tiered is not None and tiered >= t.prefix_hit_ratio_low:
        return clear(f"prefix hit ratio {pct(ratio)} on the GPU over {recent_horizon(ctx)}{window}, {pct(tiered)} "
                     f"with the KV offload tier: what the GPU cache misses comes back by a copy, not a prefill "
                     f"({offload_evidence(s)})")
    if ratio >= t.prefix_hit_ratio_low:
        if earlier is None or earlier >= t.prefix_hit_ratio_low:
            return clear(f"prefix hit ratio {pct(ratio)} over {recent_horizon(ctx)}{window}")
        below = excess(t.prefix_hit_ratio_low - earlier, 0, t.prefix_hit_ratio_low)
        strength = t.prefix_strength + t.prefix_strength_weight * below
        return recovering(
            fired(strength, f"prefix hit ratio {pct(earlier)} earlier in the window "
                            f"(low mark {pct(t.prefix_hit_ratio_low)})", blocks_text),
            f"the prefix hits again ({pct(ratio)} over {recent_horizon(ctx)}): its misses are still in the window")
    below = excess(t.prefix_hit_ratio_low - ratio, 0, t.prefix_hit_ratio_low)
    strength = t.prefix_strength + t.prefix_strength_weight * below
    return fired(strength, f"prefix hit ratio {pct(ratio)} over {recent_horizon(ctx)}{window} "
                           f"(low mark {pct(t.prefix_hit_ratio_low)})", blocks_text)


def hit_at_all(low: Finding, s: Signals) -> bool:
    """Some prompt shared a cached block while the ratio was low (now, or at its low earlier in the window)."""
    ratio = s.kv.prefix_hit_ratio_recent_low if low.recovering else prefix_hit_now(s)
    return bool(ratio)


def ttft_breach_since_prefix_low(ctx: Context) -> Breach | None:
    return ttft_breach_since(ctx, ctx.signals.latency.ttft_histogram_prefix_low, "the prefix hit ratio went low")


def prefix_low_now(low: Finding) -> bool:
    return low.status == "fired" and not low.recovering


def ttft_miss_cost(ctx: Context, low: Finding) -> str | None:
    """A first-token objective missed while prefill (and the wait behind it) dominates TTFT."""
    s, t = ctx.signals, ctx.thresholds
    breach = aligned_ttft_breach(ctx, prefix_low_now(low), ttft_breach_since_prefix_low(ctx))
    engine_share = (s.latency.ttft_prefill_share or 0) + (s.latency.ttft_queue_share or 0)
    if breach.known and breach.breached and engine_share >= t.ttft_prefill_share:
        return f"{breach.evidence}, prefill + queue {pct(min(1.0, engine_share))} of it"
    return None


def itl_miss_cost(ctx: Context, low: Finding) -> str | None:
    """Token gaps held by the prefill of the misses (prefill_of_prefix_misses) beyond the ITL objective, with
    nothing upstream (preemption, the CPU) explaining them first."""
    stutter = itl_breach(ctx)
    if stutter.known and stutter.breached and stutter_upstream(ctx) is None and (
            misses := prefill_of_prefix_misses(ctx, low)) is not None:
        return f"{stutter.evidence}: {misses}"
    return None


def cache_claims_first_tokens(ctx: Context) -> bool:
    """The prefix cache (F or F6) claims the first tokens: prompts share a prefix it misses (some blocks hit),
    and the first-token objective pays for it (ttft_miss_cost)."""
    low = low_prefix_hit(ctx)
    return low.status == "fired" and hit_at_all(low, ctx.signals) and ttft_miss_cost(ctx, low) is not None


def with_costs(ctx: Context, low: Finding, *evidence: str) -> Finding | None:
    """F/F6 fired with what the misses cost users (first tokens, token gaps, or both); None when they cost
    nothing. A token-gap cost makes the finding explain the ITL objective too (B0 reads ``explains``)."""
    first_tokens, token_gaps = ttft_miss_cost(ctx, low), itl_miss_cost(ctx, low)
    if first_tokens is None and token_gaps is None:
        return None
    costs = tuple(c for c in (first_tokens, token_gaps) if c is not None)
    return replace(low, evidence=(*low.evidence, *evidence, *costs),
                   explains=frozenset({"itl"}) if token_gaps is not None else frozenset())


def prefill_of_prefix_misses(ctx: Context, low: Finding) -> str | None:
    """Steps held by prefill (B1's shape: a stuttering tail, prompt tokens most of the computed ones) while
    prompts that share a prefix miss the cache (F's precondition, with some hits): that prefill is largely
    the recompute of shared blocks, and a cache that kept them would not hold the steps. None otherwise."""
    s, t = ctx.signals, ctx.thresholds
    tail, share = s.latency.itl_tail_ratio, s.traffic.prefill_token_share
    if low.status != "fired" or not hit_at_all(low, s) or tail is None or share is None:
        return None
    if tail < t.itl_tail_ratio or share < t.prefill_token_share:
        return None
    # vLLM evicts a cached prefix when a new block needs its room: a pool that ran out (KV at its high mark, or
    # preempting) at some time the window holds, or the block witness's evicted blocks that had been reused,
    # show the misses were evictions. Without that, the misses are prompts that do not share (unique
    # documents), and their prefill is intrinsic (B1).
    ran_out = pool_ran_out(s)
    if ran_out is not None:
        pool = f"the pool ran out ({ran_out})"
    elif blocks_reused(ctx):
        pool = "the pool evicted blocks that prompts had reused (the block witness)"
    else:
        return None
    return (f"{tail_text(s)} with prompt tokens {pct(share)} of computed tokens, while the prefix cache misses "
            f"({low.evidence[0] if low.evidence else 'low hit ratio'}) and {pool}")


def blocks_reused(ctx: Context) -> bool | None:
    """The block witness (--kv-cache-metrics): had the evicted blocks been reused while they lived? The prefix
    hits land on blocks the pool later evicts when the share of those blocks' lives before their last hit is
    ``block_reused_share`` or more of the hit ratio; on blocks that stay (a stable head before a changing field),
    the evicted ones carry none of it. None: too few sampled evictions, or no hit ratio, to say."""
    s, t = ctx.signals, ctx.thresholds
    w, hit = s.witnesses, s.kv.prefix_hit_ratio
    if (w.block_evictions is None or w.block_evictions < t.block_witness_min_evictions
            or w.block_hit_life_share is None or hit is None):
        return None
    return w.block_hit_life_share > 0 and w.block_hit_life_share >= t.block_reused_share * hit


def pool_ran_out(s: Signals) -> str | None:
    """KV at its high mark, or a preemption, at some time the window holds (short of ``kv_full``): the pool may
    have evicted cached prefixes for room. None when it never ran out."""
    full, preempted = s.kv.full_fraction or 0.0, s.kv.preemptions or 0.0
    if full > 0:
        return f"KV at its high mark in {pct(full)} of scrapes"
    if preempted > 0:
        return f"{preempted:.0f} preemptions in the window"
    return None


def eviction_shaped(ctx: Context) -> bool:
    """Eviction leaves partial reuse behind; zero hits mean nothing is shared at all (F)."""
    return kv_full(ctx) and (ctx.signals.kv.prefix_hit_ratio or 0.0) > 0.0


def stutter_explained(ctx: Context) -> str | None:
    """Preemption recomputes and CPU starvation both stretch inter-token gaps: they explain ITL first; then a
    slow data-parallel engine, then prefill made of prompts the prefix cache should have served (F)."""
    if (reason := stutter_upstream(ctx)) is not None:
        return reason
    if (misses := prefill_of_prefix_misses(ctx, low_prefix_hit(ctx))) is not None:
        return f"{misses}: the prefill that holds the steps is the prefix cache's to save, see F"
    return None


@per_context
def stutter_gate(ctx: Context) -> Finding | None:
    """The common start of the B rules: an ITL breach that nothing upstream explains."""
    if (early := gate(itl_breach(ctx))) is not None:
        return early
    if (reason := stutter_explained(ctx)) is not None:
        return clear(reason)
    return None
