"""The engine's own witnesses in the diagnosis: corroboration of effects the rules already show.

Runs between the first pass of rules and the second (``exporter.diagnosis.engine.evaluate_rules``), over the
first pass's findings. A witness never raises a symptom by itself: it redirects a finding to the cause it
witnesses (a prefix cache that misses: evicted before reuse, F6, or never reused, F1), changes a finding's
confidence with its evidence (steps at the token budget, or far below it), or names the cause of a missed
objective that no rule explained (compute-bound prefill, A1; decode steps that mostly carry prefill chunks, B1),
which would otherwise read as an effect without a known cause (A0, B0). Every witness reads
``exporter.signals.witnesses.Witnesses`` (signals) and the engine facts; without them the findings pass unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from exporter.catalog.symptoms import CAUSE_BY_ID, EXPLAINED_BY
from exporter.diagnosis.rules.conditions import queue_sustained
from exporter.diagnosis.rules.effects import itl_breach, ttft_breach
from exporter.diagnosis.rules.f_prefix_cache import POOL_RAN_OUT, POOL_ROOM, PREFIX_CAUSES, SHARED_BUT_BROKEN
from exporter.diagnosis.rules.finding import Context, Finding, clear, fired
from exporter.diagnosis.rules.prefix import blocks_reused
from exporter.frozen import replace
from exporter.signals.model import Witnesses
from exporter.signals.witnesses import render_share, steps_over


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _s(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _counts(f: Finding | None) -> bool:
    return f is not None and f.status == "fired" and not f.informational


# -- KV blocks: evicted before reuse (F6) or never reused (F1) ---------------------------------------------
def block_evidence(w: Witnesses) -> str:
    """The block witness in numbers, as the evidence quotes it."""
    text = (f"{w.block_evictions or 0:.0f} sampled KV blocks evicted in the window: lifetime mean "
            f"{_s(w.block_lifetime_mean or 0)}, idle before eviction mean {_s(w.block_idle_mean or 0)}, "
            f"{_pct(w.block_hit_life_share or 0)} of their lives before their last prefix-cache hit")
    if w.block_reuse_gaps:
        text += (f", {w.block_reuse_gaps_per_eviction or 0:.2f} reuse gaps per evicted block (mean "
                 f"{_s(w.block_reuse_gap_mean or 0)}, p90 {_s(w.block_reuse_gap_p90 or 0)})")
    else:
        text += ", no reuse gap"
    return text


def prefix_cache(ctx: Context, findings: Mapping[str, Finding]) -> dict[str, Finding]:
    """F6 or F1, as the block witness says: a miss the pool evicted (blocks reused before their eviction: the
    working set outgrows the pool, KV layer) is F6's, a miss of prompts that never came back while their blocks
    lived (a template that changes, unique prompts: the workload) is F1's, whatever KV usage suggested. A fired
    finding of the other two (F: the shares could not tell) moves to the cause the witness names, with its
    strength and the witness's corroboration, and the numbers join its evidence."""
    reused = blocks_reused(ctx)
    if reused is None or any(cid not in findings for cid in PREFIX_CAUSES):
        return {}
    w = ctx.signals.witnesses
    numbers = block_evidence(w)
    hits = (f"{_pct(w.block_hit_life_share or 0)} of the evicted blocks' lives before a hit, against a prefix hit "
            f"ratio of {_pct(ctx.signals.kv.prefix_hit_ratio or 0)}")
    if reused:
        reading = (f"evicted blocks had been reused while they lived ({hits}): the hits land on blocks the pool "
                   "later evicts, prompts come back for prefixes it has already evicted (the working set is "
                   "larger than the pool: more KV, or fewer or shorter sequences)")
        kept, why = "F6", f"{numbers}: the misses are evictions, see F6"
    else:
        reading = (f"no evicted block was reused while it lived ({hits}): the hits land on blocks that stay, "
                   f"and prompts did not come back within the "
                   f"{_s(w.block_lifetime_mean or 0)} their blocks stayed cached, so a larger pool keeps nothing "
                   "they reuse (prompts that change before the shared part: fix the template)")
        kept, why = "F1", f"{numbers}: nothing evicted had been reused, see F1"
    own, bonus = findings[kept], ctx.thresholds.witness_corroboration
    others = [cid for cid in PREFIX_CAUSES if cid != kept and findings[cid].status == "fired"
              and not findings[cid].informational]
    if own.status == "fired" and not own.informational:
        base = own
    elif others:
        base = max((findings[cid] for cid in others), key=lambda f: f.strength)
    else:
        return {}
    # The shares' reading of the pool and of the template gives way to the witness's.
    shares = (POOL_RAN_OUT, SHARED_BUT_BROKEN, POOL_ROOM) if reused else (POOL_RAN_OUT,)
    evidence = tuple(e for e in base.evidence if not e.startswith(shares))
    out = {kept: replace(base, strength=_corroborated(base, bonus), evidence=(*evidence, numbers, reading))}
    out.update({cid: clear(why) for cid in others})
    return out


def _corroborated(f: Finding, bonus: float) -> float:
    """A witness that names the cause directly adds to what the shares and ratios gave (never to information)."""
    return f.strength if f.informational else min(1.0, f.strength + bonus)


# -- steps against the token budget ------------------------------------------------------------------------
def budget_binds(ctx: Context) -> str | None:
    """Prefills that the budget spread over several steps, read from the step witness: completions observed
    above max_num_batched_tokens (a step computes at most the budget, so a larger observation is a prefill
    whose chunks came in earlier steps), with prompts longer than the budget. None otherwise."""
    s, budget = ctx.signals, ctx.facts.max_num_batched_tokens
    over = steps_over(s.witnesses, budget) if budget else None
    if budget is None or over is None or over < 1 or (computed_prompt(ctx) or 0) < budget:
        return None
    carried = s.witnesses.prefill_tokens_per_step
    return (f"{over:.0f} prefills completed above max_num_batched_tokens {budget} (chunked over several steps)"
            + (f"; the average step carried {carried:.0f} prompt tokens ({_pct(carried / budget)} of the budget)"
               if carried is not None else ""))


def prompts_fill_steps(ctx: Context) -> str | None:
    """The step witness for long prompts on this engine: the budget chunks them (``budget_binds``), or each
    prompt's prefill fills ``budget_step_share`` or more of a step and the largest steps (p99) carry that much.
    None otherwise, or without the facts."""
    if (binds := budget_binds(ctx)) is not None:
        return binds
    s, t, budget = ctx.signals, ctx.thresholds, ctx.facts.max_num_batched_tokens
    prompt, p99 = computed_prompt(ctx), s.scheduler.tokens_per_step_p99
    if budget is None or prompt is None or p99 is None or s.witnesses.step_histogram is None:
        return None
    big = t.budget_step_share * budget
    if prompt < big or p99 < big:
        return None
    return (f"a prompt's prefill ({prompt:.0f} tokens computed) fills {_pct(min(prompt, budget) / budget)} of a "
            f"step's budget (max_num_batched_tokens {budget}); the largest steps (p99) carried {p99:.0f} tokens")


def computed_prompt(ctx: Context) -> float | None:
    """The mean prompt less what the prefix cache served over the window: what its prefill computes."""
    s = ctx.signals
    prompt, hit = s.traffic.prompt_length_mean, s.kv.prefix_hit_ratio
    if prompt is None:
        return None
    return prompt * (1.0 - min(1.0, max(0.0, hit))) if hit is not None else prompt


def budget_idle(ctx: Context) -> str | None:
    """Every step far below the budget: the largest (p99) under ``budget_step_share`` of it, and no prefill
    completed above it. None otherwise, or without the facts."""
    s, t, budget = ctx.signals, ctx.thresholds, ctx.facts.max_num_batched_tokens
    p99 = s.scheduler.tokens_per_step_p99
    if budget is None or p99 is None or s.witnesses.step_histogram is None:
        return None
    if p99 >= t.budget_step_share * budget or (steps_over(s.witnesses, budget) or 0) >= 1:
        return None
    return (f"the largest steps (p99) carried {p99:.0f} tokens, {_pct(p99 / budget)} of max_num_batched_tokens "
            f"{budget}: the budget never bound")


def budget(ctx: Context, findings: Mapping[str, Finding]) -> dict[str, Finding]:
    """Steps at the budget corroborate the causes that blame it (A4, B2) and those that live with it (A1,
    B1): more confidence, with the numbers; they tell a queue (A2) that the budget holds it while the
    concurrency cap has room. Steps far below it take confidence from the causes that blame it and tell a
    queue that the budget did not hold it."""
    out: dict[str, Finding] = {}
    binds, idle = budget_binds(ctx), budget_idle(ctx)
    for cid in ("A1", "A4", "B1", "B2"):
        f = findings.get(cid)
        if not _counts(f) or f is None:
            continue
        if binds is not None:
            out[cid] = replace(f, strength=min(1.0, f.strength + ctx.thresholds.witness_corroboration),
                               evidence=(*f.evidence, binds))
        elif idle is not None and cid in ("A4", "B2"):
            out[cid] = replace(f, strength=max(0.0, f.strength - ctx.thresholds.witness_contradiction),
                               evidence=(*f.evidence, idle))
    a2 = findings.get("A2")
    seqs, running = ctx.facts.max_num_seqs, ctx.signals.scheduler.running_mean
    carried = ctx.signals.witnesses.prefill_tokens_per_step
    at_budget = (binds is not None and carried is not None and ctx.facts.max_num_batched_tokens is not None
                 and carried >= ctx.thresholds.step_prefill_budget_share * ctx.facts.max_num_batched_tokens)
    cap_free = seqs is not None and running is not None and running < ctx.thresholds.batch_fill_high * seqs
    if at_budget and cap_free and a2 is not None and a2.status == "fired" and binds is not None:
        out["A2"] = replace(a2, evidence=(*a2.evidence, f"{binds}: requests wait for the token budget, not for the "
                                                        f"concurrency cap (running mean {running:.1f} of "
                                                        f"max_num_seqs {seqs})"),
                            withheld=a2.withheld | {"max_num_seqs"})
    if idle is not None and a2 is not None and a2.status == "fired":
        seqs = ctx.facts.max_num_seqs
        cap = f" (max_num_seqs {seqs})" if seqs else ""
        out["A2"] = replace(a2, evidence=(*a2.evidence, f"{idle}: requests wait for the concurrency cap{cap}, "
                                                        "not for the token budget"),
                            withheld=a2.withheld | {"max_num_batched_tokens"})
    return out


# -- the frontend: render time ---------------------------------------------------------------------------
def frontend(ctx: Context, findings: Mapping[str, Finding]) -> dict[str, Finding]:
    """vLLM 0.34's render duration (template and tokenisation) joins the time outside the engine: quoted in
    A3's evidence, and A3 fires on it alone when the first-token objective is missed and rendering takes the
    frontend's share of TTFT."""
    s, t = ctx.signals, ctx.thresholds
    share = render_share(s.witnesses, s.latency.ttft_mean)
    a3 = findings.get("A3")
    if share is None or a3 is None:
        return {}
    text = (f"rendering (chat template, tokenisation) takes {_s(s.witnesses.render_mean or 0)} per request, "
            f"{_pct(share)} of mean TTFT {_s(s.latency.ttft_mean or 0)}")
    if a3.status == "fired":
        return {"A3": replace(a3, evidence=(*a3.evidence, text))}
    breach = ttft_breach(ctx)
    if share >= t.frontend_share and breach.known and breach.breached:
        degree = min(1.0, (share - t.frontend_share) / max(1e-9, 0.8 - t.frontend_share))
        return {"A3": fired(t.a3_strength + t.a3_strength_weight * degree,
                            breach.evidence, text, "the API server's CPU is the lever: simpler templates, "
                            "more API servers (--api-server-count), or more cores for the frontend")}
    return {}


# -- compute-bound signatures ------------------------------------------------------------------------------
def _explained(findings: Mapping[str, Finding], objective: str) -> bool:
    return any(_counts(f) and cid in CAUSE_BY_ID and (CAUSE_BY_ID[cid].symptom in EXPLAINED_BY[objective]
                                                      or objective in f.explains)
               for cid, f in findings.items())


def compute_bound(ctx: Context, findings: Mapping[str, Finding]) -> dict[str, Finding]:
    """Causes the overhead-bound signatures miss on an engine whose steps are matrix work (a GPU): first tokens
    slow with prefill most of TTFT and prompts the budget chunks (long-prompt prefill, A1), and token gaps
    slow because most decode steps carry a prefill chunk (the budget, B1), with or without a stutter. Only
    where no rule explained the objective's miss (these replace an effect without a known cause), or where
    the slow-kernel reading (B4) is the chunks' own compute."""
    s, t, budget = ctx.signals, ctx.thresholds, ctx.facts.max_num_batched_tokens
    out: dict[str, Finding] = {}
    if budget is None:
        return out
    ttft = ttft_breach(ctx)
    prefill = s.latency.ttft_prefill_share
    prompt = s.traffic.prompt_length_mean
    steps = prompts_fill_steps(ctx)
    if (ttft.known and ttft.breached and not _explained(findings, "ttft") and prefill is not None
            and prefill >= t.ttft_prefill_share and steps is not None and prompt is not None
            and not queue_sustained(ctx)):
        burn = min(1.0, (ttft.ratio - 1) / max(1e-9, t.burn_rate_full - 1))
        out["A1"] = fired(t.a1_strength + t.a1_strength_weight * burn, ttft.evidence,
                          f"prefill is {_pct(prefill)} of mean TTFT {_s(s.latency.ttft_mean or 0)} for prompts of "
                          f"{prompt:.0f} tokens on average, {prompt / budget:.1f} of the budget each",
                          steps, "the steps are compute: the prompts' own prefill is the first tokens' cost")
    itl = itl_breach(ctx)
    if not (itl.known and itl.breached) or (chunks := prefill_in_most_steps(ctx)) is None:
        return out
    # A GPU busy (or moving few bytes per second) while most steps compute a prefill chunk is doing that
    # prefill, not crawling on a slow kernel path: B4's signature is the chunks', and the budget is the lever.
    b4 = findings.get("B4")
    if b4 is not None and _counts(b4):
        out["B4"] = clear(f"{chunks}: the GPU is busy with the prefill chunks, see B1")
    if not _counts(findings.get("B1")) and not _explained({k: f for k, f in findings.items() if k != "B4"}, "itl"):
        tail = s.latency.itl_tail_ratio
        burn = min(1.0, (itl.ratio - 1) / max(1e-9, t.burn_rate_full - 1))
        out["B1"] = fired(t.b1_strength + t.b1_strength_burn_weight * burn, itl.evidence, chunks,
                          f"prompt tokens are {_pct(s.traffic.prefill_token_share or 0)} of computed tokens"
                          + (f", ITL p99/p50 = {tail:.1f} (uniformly slow rather than stuttering)"
                             if tail is not None and tail < t.itl_tail_ratio else ""))
    return out


def prefill_in_most_steps(ctx: Context) -> str | None:
    """The step witness for decode steps that carry prefill: each step computes at most the budget, so prompt
    tokens per step over the budget are the least share of steps that carried a chunk; at
    ``step_prefill_budget_share`` (half) or more, the median token gap is such a step. With prompt tokens
    ``prefill_token_share`` or more of the computed ones. None otherwise, or without the facts."""
    s, t, budget = ctx.signals, ctx.thresholds, ctx.facts.max_num_batched_tokens
    carried, share = s.witnesses.prefill_tokens_per_step, s.traffic.prefill_token_share
    if budget is None or carried is None or share is None:
        return None
    if carried < t.step_prefill_budget_share * budget or share < t.prefill_token_share:
        return None
    return (f"the average step carried {carried:.0f} prompt tokens, {_pct(carried / budget)} of "
            f"max_num_batched_tokens {budget}: at least {_pct(min(1.0, carried / budget))} of the steps carry a "
            "prefill chunk (a step computes at most the budget), the median token gap among them")


WITNESSES: tuple[Callable[[Context, Mapping[str, Finding]], dict[str, Finding]], ...] = (
    prefix_cache, budget, frontend, compute_bound)


def corroborate(ctx: Context, findings: Mapping[str, Finding]) -> dict[str, Finding]:
    """The first pass's findings with every witness applied in turn (each reads the previous ones' result)."""
    out = dict(findings)
    for witness in WITNESSES:
        out.update(witness(ctx, out))
    return out
