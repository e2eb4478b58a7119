"""One small pure function per cause, over the window's signals and the target's facts.

A rule fires (with a strength 0..1 and evidence carrying the numbers), clears, or abstains
(naming what it lacked). A fired finding may be *informational*: shown, never a verdict or an
alert. Rules read structure -- shares of TTFT, ratios, SLO breaches, corroborating signals --
not absolute cut-offs tuned to one deployment, and every symptom starts from a user-visible
effect or a stated objective (an SLO breach, a queue, preemptions, restarts). A cause that
another active cause explains better clears and says so. Register a new cause by adding its
function to ``RULES`` and its data entry to ``exporter.catalog.symptoms``.

A second pass (``EXPLAINING_RULES``) reads the first pass's findings: an objective missed that no
cause of the classes explaining it (``EXPLAINED_BY``) accounts for is named as an effect without a
known cause (A0, B0: layer ``unknown``), with what was looked at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from exporter import objectives
from exporter.catalog import gpus
from exporter.catalog import metrics as vllm
from exporter.catalog.symptoms import CAUSE_BY_ID, EXPLAINED_BY
from exporter.catalog.thresholds import Thresholds
from exporter.config import EngineFacts, Slo
from exporter.objectives import ObjectiveStatus
from exporter.signals import Signals
from exporter.window import HistogramDelta

Status = Literal["fired", "clear", "abstain"]


@dataclass(frozen=True, slots=True)
class Finding:
    status: Status
    strength: float = 0.0
    evidence: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    informational: bool = False  # shown as a finding; never counts towards a layer score or an alert
    # The cause's own evidence has ended (none over the recent_evaluations horizon) while its effect is still
    # in the window: the finding holds its layer, marked recovering, until the effect leaves the window.
    recovering: bool = False
    # Objectives this finding explains beyond those of its symptom class (EXPLAINED_BY): F/F6 claim the token
    # gaps held by the prefill of the prefixes they miss, where they show that cost.
    explains: frozenset[str] = frozenset()
    # Knobs of the cause's actions a witness showed are not the lever here (issue 50): withheld, with a note.
    withheld: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Context:
    signals: Signals
    facts: EngineFacts
    thresholds: Thresholds
    slo: Slo


def fired(strength: float, *evidence: str) -> Finding:
    return Finding("fired", max(0.0, min(1.0, strength)), tuple(evidence))


def info(ctx: Context, *evidence: str) -> Finding:
    """A finding worth showing that has no user-visible effect behind it (capacity, saturation)."""
    return Finding("fired", ctx.thresholds.info_strength, tuple(evidence), informational=True)


def recovering(finding: Finding, evidence: str) -> Finding:
    """The finding of a cause that has ended, whose effect the window still holds."""
    return replace(finding, recovering=True, evidence=(*finding.evidence, evidence))


def clear(*evidence: str) -> Finding:
    return Finding("clear", 0.0, tuple(evidence))


def abstain(*missing: str) -> Finding:
    return Finding("abstain", 0.0, (), tuple(missing))


def unknown_fact(name: str) -> str:
    """What to do about an engine fact neither configured nor discovered (vLLM does not export it)."""
    return (f"engine.{name} (not on /metrics: configure it, or run the sidecar in vLLM's PID namespace "
            "so it reads vLLM's command line)")


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


def objective_status(ctx: Context, name: str) -> ObjectiveStatus:
    """The objective ``name`` (ttft, itl) judged over the window: bad share against its error budget."""
    hist = ctx.signals.latency.ttft_histogram if name == "ttft" else ctx.signals.latency.itl_histogram
    per_token = ctx.signals.speculative.itl_scale if name == "itl" else None
    return objectives.judge(name, ctx.slo.objectives()[name], hist, ctx.thresholds.evidence_min_requests, per_token)


def _judged(status: ObjectiveStatus, missing: str) -> Breach:
    """An objective as a breach: its burn rate is the ratio; a window it cannot judge abstains."""
    if status.met is None or status.burn_rate is None:
        return Breach(False, False, missing=(missing,))
    return Breach(True, not status.met, status.burn_rate, status.evidence())


def ttft_breach(ctx: Context) -> Breach:
    s = ctx.signals
    status = objective_status(ctx, "ttft")
    if status.events is None or s.traffic.first_tokens is None:
        return Breach(False, False, missing=(vllm.TIME_TO_FIRST_TOKEN_SECONDS,))
    if s.traffic.first_tokens < ctx.thresholds.evidence_min_requests:
        t = ctx.thresholds
        if objectives.few_missed_beyond_chance(status, t.onset_confidence_z, t.evidence_min_misses):
            return Breach(True, True, status.burn_rate or 0.0,
                          f"{status.evidence()}: few first tokens, but {status.events * (status.bad_share or 0):.0f} "
                          f"of them slow, a miss beyond chance")
        return Breach(False, False, missing=("traffic: too few first tokens in the window",))
    return _judged(status, "traffic: too few first tokens in the window")


def itl_breach(ctx: Context) -> Breach:
    s = ctx.signals
    status = objective_status(ctx, "itl")
    if status.events is None or not status.events:
        return Breach(False, False, missing=(vllm.INTER_TOKEN_LATENCY_SECONDS,))
    if s.traffic.first_tokens is not None and s.traffic.first_tokens < ctx.thresholds.evidence_min_requests and (
            s.scheduler.running_mean or 0) < 1:
        return Breach(False, False, missing=("traffic: too few streams in the window",))
    return _judged(status, "traffic: too few token gaps in the window")


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


def latency_missed(ctx: Context) -> bool:
    return any(b.known and b.breached for b in (ttft_breach(ctx), itl_breach(ctx)))


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


def _recent(ctx: Context) -> str:
    return f"the last {ctx.thresholds.recent_evaluations:g} scrapes"


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


def ttft_breach_now(ctx: Context) -> Breach | None:
    """The first tokens of the recent steps alone, when they miss their objective (an effect beside recent
    evidence); None when they meet it or are too few to judge."""
    return _breach_now(ctx, "ttft", ctx.signals.latency.ttft_histogram_recent)


def itl_breach_now(ctx: Context) -> Breach | None:
    """The token gaps of the recent steps alone, when they miss their objective (as ttft_breach_now)."""
    return _breach_now(ctx, "itl", ctx.signals.latency.itl_histogram_recent)


def _breach_now(ctx: Context, name: str, hist: HistogramDelta | None) -> Breach | None:
    if hist is None:
        return None
    per_token = ctx.signals.speculative.itl_scale if name == "itl" else None  # as objective_status reads it
    status = objectives.judge(name, ctx.slo.objectives()[name], hist, ctx.thresholds.evidence_min_requests,
                              per_token)
    if status.met is not False or status.burn_rate is None or status.burn_rate < ctx.thresholds.recent_burn_min:
        return None
    return replace(_judged(status, ""), evidence=f"{status.evidence()} over {_recent(ctx)}")


def ttft_breach_since(ctx: Context, hist: HistogramDelta | None, since: str) -> Breach | None:
    """The first tokens since a cause began (``hist``), when they miss their objective beyond chance
    (objectives.missed_beyond_chance); None otherwise. Time-aligned: the cause's own stretch, neither diluted
    by the calm minutes before it nor cut to the recent horizon."""
    if hist is None:
        return None
    status = objectives.judge("ttft", ctx.slo.objectives()["ttft"], hist, ctx.thresholds.evidence_min_requests)
    if not objectives.missed_beyond_chance(status, ctx.thresholds.onset_confidence_z):
        return None
    return replace(_judged(status, ""), evidence=f"{status.evidence()} since {since}")


def ttft_missed_now(ctx: Context) -> bool:
    return ttft_breach_now(ctx) is not None


def aligned_ttft_breach(ctx: Context, acting_now: bool, since: Breach | None = None) -> Breach:
    """The first-token objective over the window, or, while the window still meets it and the cause acts now,
    over the recent steps or ``since`` the cause began (time-aligned: the misses now are that cause's onset)."""
    breach = ttft_breach(ctx)
    if acting_now and breach.known and not breach.breached:
        return ttft_breach_now(ctx) or since or breach
    return breach


def ttft_breach_since_prefix_low(ctx: Context) -> Breach | None:
    return ttft_breach_since(ctx, ctx.signals.latency.ttft_histogram_prefix_low, "the prefix hit ratio went low")


def _prefix_low_now(low: Finding) -> bool:
    return low.status == "fired" and not low.recovering


def queue_ended(ctx: Context) -> bool:
    """No request waited for capacity in the recent scrapes: a queue the window holds has drained."""
    return ctx.signals.scheduler.queued_recent_fraction == 0.0


def kv_evidence(s: Signals) -> str:
    parts = []
    if s.kv.usage_mean is not None:
        parts.append(f"KV usage mean {_pct(s.kv.usage_mean)}, max {_pct(s.kv.usage_max or 0)}")
    if s.kv.preemptions is not None:
        parts.append(f"{s.kv.preemptions:.0f} preemptions in the window")
    return "; ".join(parts) or "KV usage unknown"


def stutter_explained(ctx: Context) -> str | None:
    """Preemption recomputes and CPU starvation both stretch inter-token gaps: they explain ITL first; then a
    slow data-parallel engine, then prefill made of prompts the prefix cache should have served (F)."""
    if (reason := _stutter_upstream(ctx)) is not None:
        return reason
    if (misses := prefill_of_prefix_misses(ctx, low_prefix_hit(ctx))) is not None:
        return f"{misses}: the prefill that holds the steps is the prefix cache's to save, see F"
    return None


def _stutter_upstream(ctx: Context) -> str | None:
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


def low_prefix_hit(ctx: Context) -> Finding:
    """Shared F/F6/A5 precondition: a hit ratio that means something, and is low now (over the recent horizon),
    or was low at some time the window holds (``recovering``: the misses of those scrapes are still in it)."""
    s, t = ctx.signals, ctx.thresholds
    if s.cache.enable_prefix_caching is False:
        return clear("prefix caching is disabled on this engine")
    if (s.kv_transfer.transferred_prompt_share or 0) >= 0.5 and not s.kv_transfer.offload:
        return clear(f"{_pct(s.kv_transfer.transferred_prompt_share or 0)} of prompt tokens arrive by KV transfer: "
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
    window = f", {_pct(s.kv.prefix_hit_ratio)} over the window" if s.kv.prefix_hit_ratio is not None else ""
    tiered = offload_hit_ratio(s)
    if tiered is not None and tiered >= t.prefix_hit_ratio_low:
        return clear(f"prefix hit ratio {_pct(ratio)} on the GPU over {_recent(ctx)}{window}, {_pct(tiered)} with the "
                     f"KV offload tier: what the GPU cache misses comes back by a copy, not a prefill "
                     f"({offload_evidence(s)})")
    if ratio >= t.prefix_hit_ratio_low:
        if earlier is None or earlier >= t.prefix_hit_ratio_low:
            return clear(f"prefix hit ratio {_pct(ratio)} over {_recent(ctx)}{window}")
        strength = 0.5 + 0.4 * _excess(t.prefix_hit_ratio_low - earlier, 0, t.prefix_hit_ratio_low)
        return recovering(
            fired(strength, f"prefix hit ratio {_pct(earlier)} earlier in the window "
                            f"(low mark {_pct(t.prefix_hit_ratio_low)})", blocks_text),
            f"the prefix hits again ({_pct(ratio)} over {_recent(ctx)}): its misses are still in the window")
    strength = 0.5 + 0.4 * _excess(t.prefix_hit_ratio_low - ratio, 0, t.prefix_hit_ratio_low)
    return fired(strength, f"prefix hit ratio {_pct(ratio)} over {_recent(ctx)}{window} "
                           f"(low mark {_pct(t.prefix_hit_ratio_low)})", blocks_text)


def _hit_at_all(low: Finding, s: Signals) -> bool:
    """Some prompt shared a cached block while the ratio was low (now, or at its low earlier in the window)."""
    ratio = s.kv.prefix_hit_ratio_recent_low if low.recovering else prefix_hit_now(s)
    return bool(ratio)


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
        parts.append(f"the tier served {_pct(kt.external_hit_ratio)} of the tokens offered to it")
    if kt.offload_load_bytes:
        speed = (f" at {kt.offload_load_bytes_per_second / 1e9:.1f} GB/s" if kt.offload_load_bytes_per_second
                 else "")
        parts.append(f"{kt.offload_load_bytes / 1e9:.1f} GB loaded back to the GPU{speed}")
    if kt.offload_cpu_usage is not None:
        parts.append(f"CPU tier usage {_pct(kt.offload_cpu_usage)}")
    return ", ".join(parts) or "KV offload on"


def offload_note(s: Signals) -> str | None:
    """With KV offload a preempted or evicted block the tier still holds comes back by a copy, not a recompute."""
    if not s.kv_transfer.offload:
        return None
    return (f"KV offload is on ({offload_evidence(s)}): a preempted or evicted block the tier still holds comes "
            "back by a copy over PCIe, not a recompute, so each miss costs less; offloading is already done")


# -- A: high TTFT ------------------------------------------------------------------------
def rule_a1(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    lat = s.latency
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if lat.ttft_prefill_share is None or lat.ttft_queue_share is None or s.traffic.prompt_length_mean is None:
        return abstain(vllm.REQUEST_PREFILL_TIME_SECONDS, vllm.REQUEST_PROMPT_TOKENS)
    # A queue is a cause of its own (A2) when requests wait for capacity in most scrapes, or in every recent one;
    # a wait in a few scrapes behind prefill-bound first tokens is the wait behind those long prefills.
    # ... unless the slow first tokens all came with long prompts' first tokens: then the wait is behind them.
    behind = behind_long_prompts(ctx)
    queue_of_its_own = (lat.ttft_queue_share >= t.ttft_queue_share and (queue_sustained(ctx) or queue_building(ctx))
                        and behind is None)
    if queue_of_its_own:
        return clear(f"TTFT waits in a queue of its own (queue {_pct(lat.ttft_queue_share)} of mean TTFT): A2")
    # The long prompts arriving now count before they lift the window's mean (a burst starting).
    recent_mean = s.traffic.prompt_length_mean_recent
    # What a prompt costs to prefill is the part the prefix cache does not serve: a 1500-token prompt whose
    # 1200-token system prompt hits is a 300-token prefill, not a long one.
    computed_now = _uncached(recent_mean, prefix_hit_now(s))
    long_now = computed_now is not None and computed_now >= t.long_prompt_tokens
    # TTFT is counted at the first token, prefill and queue time when the request finishes: while long prompts
    # get their first tokens now and no queue is building, the part of TTFT neither accounts for, beyond the
    # time finished requests spent outside the engine (e2e minus queue and inference: the frontend, all read
    # at the finish), is their prefill, recorded later (with a queue building it could be the wait, too).
    unrecorded = 0.0
    if long_now and not queue_building(ctx) and lat.ttft_mean:
        outside = lat.e2e_frontend_mean if lat.e2e_frontend_mean is not None else (lat.ttft_frontend_mean or 0.0)
        unrecorded = max(0.0, (lat.ttft_frontend_mean or 0.0) - outside) / lat.ttft_mean
    # Without a queue of its own, and with KV not full (a wait for KV room is the pool's, C3/D), the wait is
    # the wait behind long prefills: at most as long as the prefills themselves (a longer wait is a backlog,
    # such as a preemption storm leaves, not these prompts' cost).
    waiting = 0.0 if kv_full(ctx) else min(lat.ttft_queue_share, lat.ttft_prefill_share + unrecorded)
    prefill_bound = lat.ttft_prefill_share + unrecorded + waiting
    if prefill_bound < t.ttft_prefill_share:
        return clear(f"TTFT is not prefill-bound (prefill {_pct(lat.ttft_prefill_share)}, "
                     f"queue {_pct(lat.ttft_queue_share)})")
    # A few long prompts among many short ones: when the window's slow first tokens are no more than its long
    # prompts, every one of them can be a long prompt's own (sparse long prompts, 0.1/s, miss one at a time).
    # Or, time-aligned, when they all came with a long prompt's first token or just after it (behind_long_prompts).
    slow = slow_first_tokens(ctx)
    long_count = s.traffic.long_prompts or 0.0
    # ... and "a few" means a minority of the first tokens: when most prompts pass the long mark, the count says
    # nothing about which first tokens are slow.
    few_long = behind is not None or (long_count >= 1 and slow <= long_count
                                      and 2 * long_count <= (s.traffic.first_tokens or 0.0))
    computed = _uncached(s.traffic.prompt_length_mean, s.kv.prefix_hit_ratio) or 0.0
    if computed < t.long_prompt_tokens and not long_now and not few_long:
        served = (f", {computed:.0f} computed after prefix-cache hits" if computed < s.traffic.prompt_length_mean
                  else "")
        return clear(f"prompts are not long (mean {s.traffic.prompt_length_mean:.0f} tokens{served})")
    if rule_a5(ctx).status == "fired":
        return clear("prompts share a prefix the cache misses (A5): the prefill is not intrinsic")
    if cache_claims_first_tokens(ctx):
        return clear("prompts share a prefix the cache misses, and their first tokens pay for it (F): the prefill "
                     "and the wait behind it are not intrinsic")
    finding = fired(
        0.5 + 0.4 * _excess(breach.ratio, 1, t.burn_rate_full),
        breach.evidence,
        f"prefill is {_pct(lat.ttft_prefill_share)} of mean TTFT {_s(lat.ttft_mean or 0)}"
        + (f", the wait behind long prefills {_pct(waiting)} (no queue of its own)" if waiting >= 0.005 else
           f", queue {_pct(lat.ttft_queue_share)}")
        + (f", first tokens of long prompts whose prefill time is recorded when they finish {_pct(unrecorded)}"
           if unrecorded >= 0.005 else ""),
        f"mean prompt {s.traffic.prompt_length_mean:.0f} tokens (p95 {s.traffic.prompt_length_p95 or 0:.0f})"
        + (f", {recent_mean:.0f} over {_recent(ctx)}" if recent_mean is not None else "")
        + (f"; {behind}" if behind is not None else
           f"; {long_count:.0f} long prompts in the window, {slow:.0f} first tokens over the objective" if few_long
           else ""),
    )
    if (quiet := long_prompts_ended(ctx)) is not None:
        return recovering(finding, f"no long prompt for {quiet}: the long prompts have stopped, their first tokens "
                                   "are still in the window")
    return finding


def _uncached(prompt_mean: float | None, hit_ratio: float | None) -> float | None:
    """The mean prompt less the share the prefix cache serves (the whole prompt when the ratio is unknown)."""
    if prompt_mean is None:
        return None
    return prompt_mean * (1.0 - min(1.0, max(0.0, hit_ratio))) if hit_ratio is not None else prompt_mean


def long_prompts_ended(ctx: Context) -> str | None:
    """How long no long prompt has come, when that is several of their mean intervals in the window (and
    more than the recent horizon): the burst has ended. None while they still come, or with too few to
    know their pace (one long prompt: a burst starting looks the same as one ending)."""
    s, t = ctx.signals, ctx.thresholds
    age, interval = s.traffic.long_prompt_age_seconds, s.traffic.long_prompt_interval_seconds
    if age is None or interval is None or s.window_seconds <= 0:
        return None
    horizon = s.window_seconds / max(s.scrapes - 1, 1) * t.recent_evaluations
    if age <= max(t.sparse_cause_quiet_intervals * interval, horizon):
        return None
    return f"{age:.0f} s ({age / max(interval, 1e-9):.1f} of their mean interval in the window, {interval:.0f} s)"


def slow_first_tokens(ctx: Context) -> float:
    """First tokens of the window over the first-token objective's threshold."""
    status = objective_status(ctx, "ttft")
    return (status.bad_share or 0.0) * (status.events or 0.0)


def behind_long_prompts(ctx: Context) -> str | None:
    """Time-aligned: every slow first token of the window came in the step of a long prompt's first token or the
    step after (the long prompt's own, and the requests that waited behind its prefill), and long prompts are a
    minority of the first tokens. Requests that wait then wait for those prefills, not for capacity (A1, not
    A2). None otherwise."""
    s = ctx.signals
    beside, slow = s.traffic.long_prompt_slow_first_tokens or 0.0, slow_first_tokens(ctx)
    if beside < 1 or slow > beside + 0.5 or 2 * (s.traffic.long_prompts or 0.0) > (s.traffic.first_tokens or 0.0):
        return None
    return f"all {slow:.0f} first tokens over the objective came with a long prompt's first token or just after it"


def rule_a2(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if s.latency.ttft_queue_share is None or s.scheduler.queued_fraction is None:
        return abstain(vllm.REQUEST_QUEUE_TIME_SECONDS, vllm.NUM_REQUESTS_WAITING)
    # A queue that has drained still owns the first tokens it delayed while the window holds them, if it was
    # sustained at some time the window holds (not a few scrapes beside waits vLLM counts as deferred) and the
    # window holds no preemptions (then the queue may have been KV's: C3/D judge it).
    was_sustained = s.scheduler.queued_recent_peak is not None and s.scheduler.queued_recent_peak >= 1.0
    drained = was_sustained and queue_ended(ctx) and not s.kv.preemptions
    share = s.latency.ttft_queue_share
    # Time-aligned: while a queue builds now, the first tokens of the recent steps are the ones it delays; the
    # window's share catches up only as they fill it.
    if queue_building(ctx) and s.latency.ttft_queue_share_recent is not None:
        share = max(share, s.latency.ttft_queue_share_recent)
    # vLLM records a request's queue time when it finishes, its first token when it comes: at a queue's onset
    # the slow first tokens are in before their queue times. A queue in every recent scrape beside first tokens
    # that miss now, with prefill not the bulk of TTFT and the CPU not starved, is the onset of this cause.
    # A queue in most recent scrapes counts too when the first tokens of those steps spent its share waiting
    # (their own queue times, time-aligned): a surge's first scrapes, before every one of them holds a queue.
    forming = queue_building(ctx) or queue_forming(ctx)
    onset = (forming and ttft_missed_now(ctx) and not cpu_starving(ctx)
             and (s.latency.ttft_prefill_share or 0.0) < t.ttft_prefill_share)
    if onset and share < t.ttft_queue_share:
        share = t.ttft_queue_share
    if share < t.ttft_queue_share or not (queue_sustained(ctx) or queue_building(ctx) or onset or drained):
        return clear(f"queue is {_pct(share)} of TTFT, requests wait for capacity in "
                     f"{_pct(s.scheduler.queued_fraction)} of scrapes")
    if kv_full(ctx):
        return clear(f"the queue is explained by KV pressure ({kv_evidence(s)}): see C3/D")
    if (behind := behind_long_prompts(ctx)) is not None:
        return clear(f"{behind}: requests wait behind long prefills (A1)")
    evidence = [
        breach.evidence,
        f"queue is {_pct(s.latency.ttft_queue_share)} of mean TTFT "
        f"({_s(s.latency.queue_mean or 0)} of {_s(s.latency.ttft_mean or 0)})"
        + (f"; requests wait in every one of {_recent(ctx)} while their first tokens miss the objective "
           "(their queue times are recorded when they finish)" if onset else ""),
        f"requests wait for capacity in {_pct(s.scheduler.queued_fraction)} of scrapes "
        f"(mean {s.scheduler.waiting_mean or 0:.1f}) "
        f"while {kv_evidence(s)}",
    ]
    if ctx.facts.max_num_seqs and s.scheduler.running_mean is not None:
        evidence.append(f"running mean {s.scheduler.running_mean:.1f} of max_num_seqs {ctx.facts.max_num_seqs}")
    if s.scheduler.waiting_deferred:
        evidence.append(f"{s.scheduler.waiting_deferred:.0f} more wait deferred (LoRA slot, KV transfer), "
                        "not counted here")
    finding = fired(0.5 + 0.4 * _excess(share, t.ttft_queue_share, 0.9), *evidence)
    if queue_ended(ctx):
        return recovering(finding, f"no request waited for capacity in {_recent(ctx)}: the queue has drained, "
                                   "its first tokens are still in the window")
    return finding


def rule_a3(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach = aligned_ttft_breach(ctx, cpu_starving(ctx))
    if (early := gate(breach)) is not None:
        return early
    score = s.cpu.starvation_score
    # TTFT and queue/prefill are observed on different populations (first token vs finish);
    # the e2e-based estimate is same-population. Both must agree before blaming the frontend.
    # Both also hold the wait for the step under way (vLLM stamps QUEUED between steps): long
    # prefill steps are the budget's doing, not the tokenizer's, so that estimated wait comes off.
    share = None
    wait = s.latency.step_wait_mean or 0.0
    if s.latency.ttft_frontend_mean is not None and s.latency.e2e_frontend_mean is not None and s.latency.ttft_mean:
        outside = min(s.latency.ttft_frontend_mean, s.latency.e2e_frontend_mean)
        share = max(0.0, outside - wait) / s.latency.ttft_mean
    frontend = share is not None and share >= t.frontend_share
    if score is None and not frontend:
        return abstain("CPU source (targets[].cpu: pid, cgroup or match)")
    starving = cpu_starving(ctx)
    ended = not starving and cpu_starved_in_window(ctx)
    net = f", net of {_s(wait)} waiting for the step under way" if wait else ""
    if not (starving or frontend or ended):
        return clear(f"CPU-starvation score {score:.2f}" if score is not None else "",
                     f"time outside the engine {_pct(share or 0)} of TTFT{net}")
    evidence = [breach.evidence]
    if frontend:
        evidence.append(f"{_pct(share or 0)} of mean TTFT ({_s((share or 0) * (s.latency.ttft_mean or 0))}) "
                        f"is spent outside the engine (tokenization, templates, IPC){net}")
    if starving:
        evidence.append(f"CPU-starvation score {score:.2f} from {', '.join(sorted(s.cpu.inputs))}")
    peak = starved_score(s) or 0.0
    finding = fired(0.5 + 0.5 * max(_excess(peak if ended else score or 0, t.cpu_starvation_score, 1.0),
                                    _excess(share or 0, t.frontend_share, 0.8)), *evidence)
    if ended:
        return recovering(finding, f"the CPU starvation has ended (score {score or 0:.2f} over {_recent(ctx)}, "
                                   f"up to {peak:.2f} earlier in the window): its effect is still in the window")
    return finding


def rule_a4(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    budget = ctx.facts.max_num_batched_tokens
    if budget is None:
        return abstain(unknown_fact("max_num_batched_tokens"))
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if s.traffic.prompt_length_mean is None:
        return abstain(vllm.REQUEST_PROMPT_TOKENS)
    chunks = s.traffic.prompt_length_mean / budget
    if chunks < t.budget_chunks_per_prompt:
        return clear(f"mean prompt fits in {chunks:.1f} chunks of {budget}")
    if kv_full(ctx):
        return clear(f"KV is full ({kv_evidence(s)}): the budget is not the limit")
    if cpu_starved_in_window(ctx):
        return clear(f"CPU starvation slows every step (score {s.cpu.starvation_score:.2f}, up to "
                     f"{starved_score(s) or 0:.2f} in the window): see A3")
    engine_share = (s.latency.ttft_prefill_share or 0) + (s.latency.ttft_queue_share or 0)
    return fired(
        0.55 + 0.4 * _excess(chunks, t.budget_chunks_per_prompt, 4 * t.budget_chunks_per_prompt),
        breach.evidence,
        f"mean prompt {s.traffic.prompt_length_mean:.0f} tokens needs {chunks:.1f} chunks of "
        f"max_num_batched_tokens {budget}",
        f"prefill + queue are {_pct(min(engine_share, 1.0))} of mean TTFT",
    )


def rule_a5(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    low = low_prefix_hit(ctx)
    breach = aligned_ttft_breach(ctx, _prefix_low_now(low), ttft_breach_since_prefix_low(ctx))
    if (early := gate(breach)) is not None:
        return early
    if low.status != "fired":
        return low
    if not _hit_at_all(low, s):
        # Nothing is shared at all: the prompts may be unique by design, and then the prefill
        # cost is intrinsic (A1), not a cache failure.
        return clear("no prompt shares a cached block: nothing to blame on the cache")
    if s.latency.ttft_prefill_share is None or s.latency.ttft_prefill_share < t.ttft_prefill_share:
        return clear("TTFT is not prefill-bound")
    return replace(low, evidence=(breach.evidence, *low.evidence,
                                  f"prefill is {_pct(s.latency.ttft_prefill_share)} of mean TTFT"))


# -- A7, A8: KV transfer (disaggregated prefill/decode, KV connectors) --------------------------
def loads_kv(ctx: Context) -> str | None:
    """How the diagnosis knows this instance loads prompt KV through a connector; None when it does not."""
    kt, facts = ctx.signals.kv_transfer, ctx.facts
    connector = f" ({facts.kv_connector})" if facts.kv_connector else ""
    if facts.kv_role in ("kv_consumer", "kv_both"):
        return f"kv_role {facts.kv_role}{connector}"
    if kt.consumer:
        return f"a KV consumer ({vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE} is registered){connector}"
    if kt.transferred_prompt_share:
        return f"{_pct(kt.transferred_prompt_share)} of prompt tokens arrive by KV transfer{connector}"
    return None


def transfer_evidence(s: Signals) -> list[str]:
    """The connector's own numbers: load time, size and throughput, the share of prompts that arrived by transfer."""
    kt = s.kv_transfer
    out = []
    if kt.transfers and kt.transfer_time_mean is not None:
        p95 = f", p95 {_s(kt.transfer_time_p95)}" if kt.transfer_time_p95 is not None else ""
        size = f" of {kt.transfer_bytes_mean / 1e6:.0f} MB" if kt.transfer_bytes_mean else ""
        rate = (f", {kt.transfer_bytes_per_second / 1e9:.2f} GB/s moved" if kt.transfer_bytes_per_second
                else "")
        out.append(f"{kt.transfers:.0f} KV transfers{size}: mean {_s(kt.transfer_time_mean)}{p95}{rate} "
                   f"({vllm.NIXL_XFER_TIME_SECONDS})")
    if kt.fetch_in_progress_mean is not None:
        out.append(f"{kt.fetch_in_progress_mean:.1f} loads in progress on average")
    if kt.transferred_prompt_share is not None:
        out.append(f"{_pct(kt.transferred_prompt_share)} of prompt tokens arrived by transfer")
    if kt.offload:
        out.append(offload_evidence(s))
    return out


def rule_a7(ctx: Context) -> Finding:
    """KV transfer slow: the first-token objective is missed and the wait for KV explains it."""
    s, t = ctx.signals, ctx.thresholds
    kt = s.kv_transfer
    role = loads_kv(ctx)
    if role is None:
        return clear("no KV connector loads prompt KV on this instance")
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if kt.deferred_ttft_share is None or kt.deferred_wait_mean is None:
        return abstain(vllm.NUM_REQUESTS_WAITING_BY_REASON, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    wait = (f"requests wait deferred for their KV {_s(kt.deferred_wait_mean)} on average = "
            f"{_pct(kt.deferred_ttft_share)} of mean TTFT {_s(s.latency.ttft_mean or 0)}")
    if kt.deferred_ttft_share < t.kv_transfer_ttft_share:
        return clear(f"{wait}: the transfer does not explain the first tokens ({role})")
    evidence = [breach.evidence, f"{wait} ({role}; the queue time, split by the scrapes' deferred and capacity "
                                 "counts: vLLM schedules a request once its KV is in)",
                *transfer_evidence(s)]
    if s.scheduler.queued_fraction is not None:
        evidence.append(f"requests wait for capacity in only {_pct(s.scheduler.queued_fraction)} of scrapes: "
                        "the wait is for KV, not for the scheduler")
    return fired(0.55 + 0.35 * _excess(kt.deferred_ttft_share, t.kv_transfer_ttft_share, 0.9), *evidence)


def rule_a8(ctx: Context) -> Finding:
    """KV transfer failing: a share of the connector's loads fail; their requests error or recompute."""
    s, t = ctx.signals, ctx.thresholds
    kt = s.kv_transfer
    if kt.failures is None:
        if loads_kv(ctx) is not None and kt.transfers is None:
            return clear("the connector exports no failure counter (only NIXL's is read)")
        return clear("no KV connector failure counter on /metrics")
    total = kt.failures + (kt.transfers or 0)
    loads = f"{kt.failures:.0f} of {total:.0f} KV loads failed in the window"
    if kt.failures < t.kv_transfer_failures_min or (kt.failure_share or 0) < t.kv_transfer_failure_share:
        return clear(loads)
    policy = ctx.facts.kv_load_failure_policy
    evidence = [f"{loads} ({_pct(kt.failure_share or 0)}, mark {_pct(t.kv_transfer_failure_share)}; "
                f"{vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL})"]
    if policy:
        evidence.append(f"kv_load_failure_policy {policy}: "
                        + ("each failure ends its request with an error" if policy == "fail"
                           else "each failure prefills its prompt here"))
    if kt.kv_expired:
        evidence.append(f"{kt.kv_expired:.0f} requests' KV expired before a decode instance read it")
    breach = ttft_breach(ctx)
    effects = []
    if kt.errored_requests:
        effects.append(f"{kt.errored_requests:.0f} requests finished with an error in the window")
    if breach.known and breach.breached:
        effects.append(breach.evidence)
    if not effects:
        return info(ctx, *evidence, "no request errored and first tokens meet their objective")
    return fired(0.6 + 0.3 * _excess(kt.failure_share or 0, t.kv_transfer_failure_share,
                                     10 * t.kv_transfer_failure_share), *effects, *evidence)


# -- B: poor ITL -------------------------------------------------------------------------
def _stutter_gate(ctx: Context) -> Finding | None:
    """The common start of the B rules: an ITL breach that nothing upstream explains."""
    if (early := gate(itl_breach(ctx))) is not None:
        return early
    if (reason := stutter_explained(ctx)) is not None:
        return clear(reason)
    return None


def _tail_text(s: Signals) -> str:
    note = f" ({s.latency.itl_tail_note})" if s.latency.itl_tail_note else ""
    return f"ITL p99/p50 = {s.latency.itl_tail_ratio or 0:.1f}{note}"


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
        return f"the kernels are slow now and the median token gap over {_recent(ctx)} is {_s(median)}: see B4"
    recent_tail = ctx.signals.latency.itl_tail_ratio_recent
    if recent_tail is None or recent_tail >= ctx.thresholds.itl_tail_ratio or not any(slow_path(ctx)):
        return None
    return (f"the slow token gaps came with a slow kernel path (uniform now: ITL p99/p50 {recent_tail:.1f} over "
            f"{_recent(ctx)}): see B4")


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
        return f"TP x PP = {degree} with KV mostly free ({_pct(usage)} used)"
    return None


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
    return (f"the median token gap {_s(median)} is most of the ITL objective's {_s(threshold)}, {suspect} and "
            f"{fit_text}: see G")


def rule_b1(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if (early := _stutter_gate(ctx)) is not None:
        return early
    if (reason := slow_path_explains(ctx)) is not None or (reason := communication_explains(ctx)) is not None:
        return clear(reason)
    tail = s.latency.itl_tail_ratio
    if tail is None or s.traffic.prefill_token_share is None:
        return abstain(vllm.INTER_TOKEN_LATENCY_SECONDS, vllm.PROMPT_TOKENS_TOTAL)
    if tail < t.itl_tail_ratio:
        return clear(f"ITL is uniform ({_tail_text(s)}), not stuttering")
    if s.traffic.prefill_token_share < t.prefill_token_share:
        return clear(f"prompt tokens are only {_pct(s.traffic.prefill_token_share)} of computed tokens")
    breach = itl_breach(ctx)
    # Strength follows both the stutter's shape and how far users are from their objective.
    return fired(
        0.5 + 0.2 * _excess(tail, t.itl_tail_ratio, 3 * t.itl_tail_ratio)
        + 0.2 * _excess(breach.ratio, 1, t.burn_rate_full),
        breach.evidence,
        f"{_tail_text(s)}: most steps are fast, some are held by prefill",
        f"prompt tokens are {_pct(s.traffic.prefill_token_share)} of computed tokens",
    )


def rule_b2(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    budget = ctx.facts.max_num_batched_tokens
    if budget is None:
        return abstain(unknown_fact("max_num_batched_tokens"))
    if (early := _stutter_gate(ctx)) is not None:
        return early
    if (reason := slow_path_explains(ctx)) is not None or (reason := communication_explains(ctx)) is not None:
        return clear(reason)
    tail = s.latency.itl_tail_ratio
    if tail is None or s.traffic.prompt_length_mean is None or s.traffic.prompt_length_mean <= 0:
        return abstain(vllm.REQUEST_PROMPT_TOKENS, vllm.INTER_TOKEN_LATENCY_SECONDS)
    if s.scheduler.tokens_per_step_p99 is None:
        return abstain(vllm.ITERATION_TOKENS_TOTAL)
    if tail < t.itl_tail_ratio:
        return clear(f"ITL is uniform ({_tail_text(s)})")
    # The budget is to blame when it lets big steps through: the largest steps are long (or use
    # most of the budget), and a smaller budget would cut them into chunks that decode can pass.
    step_share = s.scheduler.tokens_per_step_p99 / budget
    big = min(budget * t.budget_step_share, t.long_step_tokens)
    if s.scheduler.tokens_per_step_p99 < big:
        return clear(f"the largest steps carry {s.scheduler.tokens_per_step_p99:.0f} tokens ({_pct(step_share)} of "
                     f"max_num_batched_tokens {budget}): the budget does not make them long")
    if budget <= t.long_step_tokens:
        return clear(f"max_num_batched_tokens {budget} is already small: lowering it further is not the lever")
    over = budget / s.traffic.prompt_length_mean
    breach = itl_breach(ctx)
    return fired(
        0.5 + 0.2 * _excess(s.scheduler.tokens_per_step_p99, big, 4 * big)
        + 0.2 * _excess(breach.ratio, 1, t.burn_rate_full),
        breach.evidence,
        f"the largest steps (p99) carry {s.scheduler.tokens_per_step_p99:.0f} tokens = {_pct(step_share)} of "
        f"max_num_batched_tokens {budget}, which holds {over:.1f} mean prompts "
        f"({s.traffic.prompt_length_mean:.0f} tokens)",
        _tail_text(s),
    )


def _batch_fill(ctx: Context) -> float | None:
    seqs, running = ctx.facts.max_num_seqs, ctx.signals.scheduler.running_mean
    return running / seqs if seqs and running is not None else None


def rule_b3(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if (early := _stutter_gate(ctx)) is not None:
        return early
    if (reason := slow_path_explains(ctx)) is not None:
        return clear(reason)
    tail = s.latency.itl_tail_ratio
    if tail is None:
        return abstain(vllm.INTER_TOKEN_LATENCY_SECONDS)
    if tail >= t.itl_tail_ratio:
        return clear(f"ITL stutters ({_tail_text(s)}): see B1/B2")
    fill = _batch_fill(ctx)
    if fill is None:
        return abstain(unknown_fact("max_num_seqs"))
    if fill < t.batch_fill_high:
        return clear(f"batch is {_pct(fill)} of max_num_seqs: not a throughput-oriented batch")
    evidence = [itl_breach(ctx).evidence, f"ITL uniformly slow ({_tail_text(s)})",
                f"running mean {s.scheduler.running_mean:.1f} = {_pct(fill)} of max_num_seqs {ctx.facts.max_num_seqs}"]
    if s.gpu.utilization is not None:
        evidence.append(f"GPU utilisation {_pct(s.gpu.utilization)}")
    return fired(0.55, *evidence)


def rule_b4(ctx: Context) -> Finding:
    """Slow GPU path: the engine steps without pause on a small batch, yet the GPU moves little."""
    s, t = ctx.signals, ctx.thresholds
    if (early := _stutter_gate(ctx)) is not None:
        return early
    slow_now, slow_earlier = slow_path(ctx)
    tail = s.latency.itl_tail_ratio
    recent_tail = s.latency.itl_tail_ratio_recent
    if (slow_now or slow_earlier) and recent_tail is not None:
        # The window mixes the slow path's gaps with the fast ones from before or after it, and the steps at
        # either edge mix both too: a stutter shows in both shapes.
        tail = recent_tail if tail is None else min(tail, recent_tail)
    if tail is not None and tail >= t.itl_tail_ratio and slow_median_now(ctx) is None:
        return clear(f"ITL stutters ({_tail_text(s)}): a scheduling cause, see B1/B2")
    if (suspect := parallelism_unused(ctx)) is not None:
        return clear(f"{suspect}: communication is the first suspect, see G")
    fill = _batch_fill(ctx)
    if fill is not None and fill >= t.batch_fill_high:
        return clear(f"batch is {_pct(fill)} of max_num_seqs: a throughput-oriented batch, see B3")
    sheet = gpus.lookup(ctx.facts.gpu)
    bandwidth_use = _bandwidth_use(ctx, s.gpu.read_bytes_per_busy_second_recent)  # now, where the steps say
    if bandwidth_use is None and s.gpu.read_bytes_per_second is not None and s.scheduler.busy_fraction:
        bandwidth_use = _bandwidth_use(ctx, s.gpu.read_bytes_per_second / s.scheduler.busy_fraction)
    gpu_busy = s.gpu.utilization is not None and s.gpu.utilization >= t.gpu_util_high
    if bandwidth_use is None and s.gpu.utilization is None:
        return abstain("DCGM GPU utilisation (targets[].dcgm_url)",
                       "or vLLM --enable-mfu-metrics with engine.gpu")
    if s.scheduler.busy_fraction is None or s.scheduler.busy_fraction < t.engine_busy_fraction:
        return clear(f"the engine waits for work {_pct(1 - (s.scheduler.busy_fraction or 0))} of the time")
    slow = bandwidth_use is not None and bandwidth_use < t.bandwidth_use_low
    ended = not slow and slow_earlier
    if ended:  # the kernels keep pace again; the gaps of the slow scrapes are still in the window
        bandwidth_use = _bandwidth_use(ctx, s.gpu.read_bytes_per_busy_second_recent_low)
    if not (slow or ended or (bandwidth_use is None and gpu_busy)):
        return clear(f"GPU memory bandwidth while stepping {_pct(bandwidth_use or 0)} of peak: the kernels keep pace"
                     if bandwidth_use is not None else f"GPU utilisation {_pct(s.gpu.utilization or 0)}")
    evidence = [itl_breach(ctx).evidence, f"ITL uniformly slow ({_tail_text(s)})",
                f"the engine steps {_pct(s.scheduler.busy_fraction)} of the time"]
    if fill is not None:
        evidence.append(f"batch only {_pct(fill)} of max_num_seqs")
    if bandwidth_use is not None and sheet is not None:
        evidence.append(f"GPU memory bandwidth while stepping {_pct(bandwidth_use)} of the {sheet.name}'s "
                        f"{sheet.hbm_bandwidth / 1e12:.2f} TB/s (vLLM's MFU estimate)")
    if s.gpu.utilization is not None:
        evidence.append(f"GPU utilisation {_pct(s.gpu.utilization)} (DCGM)")
    strength = 0.6 + 0.3 * (_excess(t.bandwidth_use_low - bandwidth_use, 0, t.bandwidth_use_low)
                            if bandwidth_use is not None else 0.5)
    if ended:
        return recovering(fired(strength, *evidence), f"the kernels keep pace again over {_recent(ctx)}: the slow "
                                                      "gaps are still in the window")
    return fired(strength, *evidence)


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
        return clear(f"draft acceptance {_pct(spec.acceptance_rate)}{length}")
    drafter = ", ".join(part for part in (
        f"drafter {ctx.facts.speculative_method}" if ctx.facts.speculative_method else "",
        f"{ctx.facts.num_speculative_tokens} draft tokens per step" if ctx.facts.num_speculative_tokens else "",
    ) if part)
    evidence = [f"draft acceptance {_pct(spec.acceptance_rate)} of {spec.draft_tokens:.0f} draft tokens "
                f"(low mark {_pct(t.spec_acceptance_low)}){length}" + (f" ({drafter})" if drafter else "")]
    if spec.acceptance_per_position:
        evidence.append("accepted per draft position: "
                        + ", ".join(_pct(rate) for rate in spec.acceptance_per_position))
    if spec.tokens_per_event is not None:
        evidence.append(f"{spec.tokens_per_event:.2f} tokens per output event")
    breach = itl_breach(ctx)
    if not (breach.known and breach.breached):
        return info(ctx, *evidence, breach.evidence if breach.known else "ITL objective not judged (too few gaps)")
    if (reason := stutter_explained(ctx)) is not None:
        return info(ctx, *evidence, reason)
    return fired(0.55 + 0.35 * _excess(t.spec_acceptance_low - spec.acceptance_rate, 0, t.spec_acceptance_low),
                 breach.evidence, *evidence)


# -- C: throughput short of demand while the engine idles ---------------------------------
def _traffic(s: Signals) -> bool:
    return bool((s.traffic.requests_finished or 0) > 0 or (s.scheduler.running_mean or 0) > 0
                or (s.scheduler.waiting_max or 0) > 0)


def demand_unmet(ctx: Context) -> str | None:
    """A user-visible shortfall: a sustained queue, rejected requests or a latency objective missed."""
    s = ctx.signals
    if queue_sustained(ctx):
        return f"requests wait for capacity in {_pct(s.scheduler.queued_fraction or 0)} of scrapes"
    if s.traffic.admission_rejections_per_second:
        return f"{s.traffic.admission_rejections_per_second:.2f} requests/s rejected at admission"
    for breach in (ttft_breach(ctx), itl_breach(ctx)):
        if breach.known and breach.breached:
            return breach.evidence
    return None


def rule_c1(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    score = s.cpu.starvation_score
    if score is None:
        return abstain("CPU source (targets[].cpu: pid, cgroup or match)")
    peak = starved_score(s)
    ended = score < t.cpu_starvation_score and cpu_starved_in_window(ctx)
    if score < t.cpu_starvation_score and not ended:
        return clear(f"CPU-starvation score {score:.2f}")
    if not _traffic(s):
        return clear("no traffic in the window")
    if s.gpu.utilization is not None and s.gpu.utilization >= t.gpu_util_low:
        return clear(f"GPU utilisation {_pct(s.gpu.utilization)}: the GPU is fed")
    effect = demand_unmet(ctx)
    if effect is None and not ended and (now := ttft_breach_now(ctx) or itl_breach_now(ctx)) is not None:
        effect = now.evidence  # time-aligned: the first tokens or token gaps that miss now are the starved host's
    if effect is None:
        return clear(f"CPU-starvation score {score:.2f}, but every objective is met and nothing waits")
    inputs = ", ".join(f"{k} {v:.2f}" for k, v in sorted(s.cpu.inputs.items()))
    evidence = [effect, f"CPU-starvation score {score:.2f} (inputs: {inputs})"]
    if s.scheduler.steps_per_second is not None:
        evidence.append(f"engine output batches {s.scheduler.steps_per_second:.1f}/s")
    if s.gpu.utilization is not None:
        evidence.append(f"GPU utilisation {_pct(s.gpu.utilization)}")
    finding = fired(0.55 + 0.45 * _excess(peak if ended and peak is not None else score,
                                          t.cpu_starvation_score, 1.0), *evidence)
    if ended:
        return recovering(finding, f"the CPU starvation has ended (score {score:.2f} over {_recent(ctx)}, "
                                   f"up to {peak or 0:.2f} earlier in the window): its effect is still in the window")
    return finding


def rule_c2(ctx: Context) -> Finding:
    """Spare capacity: never a symptom on its own (demand is met), shown for capacity planning."""
    s, t = ctx.signals, ctx.thresholds
    if s.scheduler.running_mean is None or s.scheduler.waiting_max is None or s.traffic.requests_finished is None:
        return abstain(vllm.NUM_REQUESTS_RUNNING, vllm.NUM_REQUESTS_WAITING)
    if s.traffic.requests_finished < t.evidence_min_requests:
        return clear("too little traffic to judge batching")
    if s.scheduler.running_mean >= t.sparse_mean_running or s.scheduler.waiting_max > 0:
        return clear(f"running mean {s.scheduler.running_mean:.1f}, waiting max {s.scheduler.waiting_max:.0f}")
    if cpu_starved_in_window(ctx):
        return clear("CPU starvation explains the idle engine (C1)")
    evidence = [f"running mean {s.scheduler.running_mean:.2f} with nothing waiting (max {s.scheduler.waiting_max:.0f})",
                f"{s.traffic.requests_per_second or 0:.2f} requests/s finished: the engine has spare capacity"]
    if s.gpu.utilization is not None:
        evidence.append(f"GPU utilisation {_pct(s.gpu.utilization)}")
    return info(ctx, *evidence)


def rule_c3(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if s.scheduler.queued_fraction is None or s.kv.usage_mean is None:
        return abstain(vllm.NUM_REQUESTS_WAITING, vllm.KV_CACHE_USAGE_PERC)
    if not queue_sustained(ctx):
        return clear(f"requests wait for capacity in only {_pct(s.scheduler.queued_fraction)} of scrapes")
    if not kv_full(ctx):
        return clear(f"KV has room ({kv_evidence(s)})")
    evidence = [f"requests wait for capacity in {_pct(s.scheduler.queued_fraction)} of scrapes "
                f"(max {s.scheduler.waiting_max or 0:.0f})",
                kv_evidence(s)]
    if s.scheduler.waiting_capacity is not None:
        evidence.append(f"{s.scheduler.waiting_capacity:.0f} waiting for capacity at the last scrape")
    seqs = ctx.facts.max_num_seqs
    if seqs and s.scheduler.running_mean is not None:
        if s.scheduler.running_mean >= seqs * t.batch_fill_high:
            return clear(f"running {s.scheduler.running_mean:.1f} is at max_num_seqs {seqs}: the cap, not KV, binds")
        evidence.append(f"running mean {s.scheduler.running_mean:.1f} below max_num_seqs {seqs}")
    finding = fired(0.6 + 0.3 * _excess(s.scheduler.queued_fraction, t.waiting_sustained_fraction, 1.0), *evidence)
    if queue_ended(ctx):
        return recovering(finding, f"no request waited for capacity in {_recent(ctx)}: the queue has drained")
    return finding


# -- D, E: KV pressure and headroom ------------------------------------------------------
def rule_d(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if s.kv.preemptions is None:
        return abstain(vllm.NUM_PREEMPTIONS_TOTAL)
    if s.kv.preemptions_per_request is None:
        return abstain(vllm.REQUEST_SUCCESS_TOTAL)
    if not frequent_preemption(ctx):
        return clear(f"{s.kv.preemptions:.0f} preemptions, {s.kv.preemptions_per_request:.2f} per admitted request")
    strength = 0.65 + 0.25 * _excess(s.kv.preemptions_per_request, t.preemptions_per_request,
                                     10 * t.preemptions_per_request)
    if s.kv.usage_max is not None and s.kv.usage_max >= t.kv_usage_high:
        strength += 0.1  # corroborated by usage at the high mark
    evidence = [f"{s.kv.preemptions:.0f} preemptions in {s.window_seconds:.0f} s = {s.kv.preemption_rate or 0:.2f}/s, "
                f"{s.kv.preemptions_per_request:.2f} per admitted request (threshold {t.preemptions_per_request:g})",
                kv_evidence(s)]
    if s.kv.preemptions_per_request < t.preemptions_per_request:
        tail = next((b for b in (ttft_breach(ctx), itl_breach(ctx)) if b.known and b.breached), None)
        # No tail over the window: named by the recent steps alone (preempting_now), a storm starting.
        evidence.insert(1, f"below the frequent mark, but users see the tail: {tail.evidence}" if tail is not None
                        else f"{s.kv.preemptions_recent or 0:.0f} preemptions in {_recent(ctx)}, "
                             f"{s.kv.preemptions_per_request_recent or 0:.2f} per first token there, while those "
                             "steps' first tokens miss their objective: a storm starting")
    if (note := offload_note(s)) is not None:
        strength -= 0.15  # a cheaper miss: the recompute is partly a copy
        evidence.append(note)
    finding = fired(strength, *evidence)
    if s.kv.preemptions_recent == 0:
        return recovering(finding, f"no preemption in {_recent(ctx)}: the storm has ended, its effect is still "
                                   "in the window")
    return finding


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
    usage = (f"KV usage mean {_pct(s.kv.usage_mean)} over {s.window_seconds:.0f} s "
             f"(max {_pct(s.kv.usage_max or 0)}, at the high mark in {_pct(s.kv.full_fraction)} of scrapes)")
    if s.restarts and at_cap:
        return fired(0.8, f"{s.restarts} engine restart(s) in the window with KV at its cap (OOM?)", usage)
    if not at_cap:
        return clear(usage)
    tail = next((b for b in (ttft_breach(ctx), itl_breach(ctx)) if b.known and b.breached), None)
    if queue_sustained(ctx) and (s.kv.preemptions or tail is not None):
        evidence = [usage, f"requests wait for capacity in {_pct(s.scheduler.queued_fraction or 0)} of scrapes"]
        if s.kv.preemptions:
            evidence.append(f"{s.kv.preemptions:.0f} preemptions already (rare, but the cache has no slack)")
        if tail is not None:
            evidence.append(tail.evidence)
        if s.cache.gpu_memory_utilization is not None:
            evidence.append(f"gpu_memory_utilization {s.cache.gpu_memory_utilization:g}")
        strength = 0.6 + 0.2 * _excess(s.kv.full_fraction, t.kv_full_fraction, 1.0)
        if (note := offload_note(s)) is not None:
            strength -= 0.1  # the cap costs copies, not recomputes
            evidence.append(note)
        finding = fired(strength, *evidence)
        # The fragility is a pool at its cap with requests waiting for capacity and preempted: with the pool
        # below the high mark now and neither in the recent scrapes, the pressure has passed (a storm's
        # aftermath, whose window ratio no longer makes D frequent).
        usage_now = s.kv.usage
        if (usage_now is not None and usage_now < t.kv_usage_high and queue_ended(ctx)
                and s.kv.preemptions_recent == 0):
            return recovering(finding, f"KV usage {_pct(usage_now)} now, no request waited for capacity and no "
                                       f"preemption in {_recent(ctx)}: the pressure has passed, its effect is "
                                       "still in the window")
        return finding
    return info(ctx, usage, "saturated but within objectives and without preemption: efficient, with no spare "
                            "room for a burst")


# -- F: prefix cache ----------------------------------------------------------------------
def _ttft_miss_cost(ctx: Context, low: Finding) -> str | None:
    """A first-token objective missed while prefill (and the wait behind it) dominates TTFT."""
    s, t = ctx.signals, ctx.thresholds
    breach = aligned_ttft_breach(ctx, _prefix_low_now(low), ttft_breach_since_prefix_low(ctx))
    engine_share = (s.latency.ttft_prefill_share or 0) + (s.latency.ttft_queue_share or 0)
    if breach.known and breach.breached and engine_share >= t.ttft_prefill_share:
        return f"{breach.evidence}, prefill + queue {_pct(min(1.0, engine_share))} of it"
    return None


def _itl_miss_cost(ctx: Context, low: Finding) -> str | None:
    """Token gaps held by the prefill of the misses (prefill_of_prefix_misses) beyond the ITL objective, with
    nothing upstream (preemption, the CPU) explaining them first."""
    stutter = itl_breach(ctx)
    if stutter.known and stutter.breached and _stutter_upstream(ctx) is None and (
            misses := prefill_of_prefix_misses(ctx, low)) is not None:
        return f"{stutter.evidence}: {misses}"
    return None


def cache_claims_first_tokens(ctx: Context) -> bool:
    """The prefix cache (F or F6) claims the first tokens: prompts share a prefix it misses (some blocks hit),
    and the first-token objective pays for it (_ttft_miss_cost)."""
    low = low_prefix_hit(ctx)
    return low.status == "fired" and _hit_at_all(low, ctx.signals) and _ttft_miss_cost(ctx, low) is not None


def _claimed(ctx: Context, low: Finding, *evidence: str) -> Finding | None:
    """F/F6 fired with what the misses cost users (first tokens, token gaps, or both); None when they cost
    nothing. A token-gap cost makes the finding explain the ITL objective too (B0 reads ``explains``)."""
    first_tokens, token_gaps = _ttft_miss_cost(ctx, low), _itl_miss_cost(ctx, low)
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
    if low.status != "fired" or not _hit_at_all(low, s) or tail is None or share is None:
        return None
    if tail < t.itl_tail_ratio or share < t.prefill_token_share:
        return None
    # vLLM evicts a cached prefix when a new block needs its room: only a pool that ran out (KV at its high mark,
    # or preempting) at some time the window holds shows the misses were evictions. Without that, the misses
    # are prompts that do not share (unique documents), and their prefill is intrinsic (B1).
    full, preempted = s.kv.full_fraction or 0.0, s.kv.preemptions or 0.0
    if not (full > 0 or preempted > 0):
        return None
    pool = (f"KV at its high mark in {_pct(full)} of scrapes" if full > 0 else
            f"{preempted:.0f} preemptions in the window")
    return (f"{_tail_text(s)} with prompt tokens {_pct(share)} of computed tokens, while the prefix cache misses "
            f"({low.evidence[0] if low.evidence else 'low hit ratio'}) and the pool ran out ({pool})")


def rule_f(ctx: Context) -> Finding:
    low = low_prefix_hit(ctx)
    if low.status != "fired":
        return low
    if _eviction_shaped(ctx):
        return clear("KV is full and some prefixes do hit: capacity eviction (F6) explains the misses")
    if not _hit_at_all(low, ctx.signals):
        # Zero hits: metrics cannot tell prompts unique by design from a prefix broken at its
        # first block, so this stays informational and never makes the verdict alone.
        return info(ctx, *low.evidence,
                    "no prompt shares even one cached block: unique by design, or broken in the first block")
    claimed = _claimed(ctx, low)
    if claimed is None:
        return info(ctx, *low.evidence, "the first-token objective is met: reuse is bounded by what the prompts "
                                        "share (unique documents cannot hit), and the misses cost no user anything")
    return replace(claimed, evidence=(*claimed.evidence, "some blocks hit, so prompts do share a prefix that "
                                                         "breaks early (template, timestamps, order)"))


def _eviction_shaped(ctx: Context) -> bool:
    """Eviction leaves partial reuse behind; zero hits mean nothing is shared at all (F)."""
    return kv_full(ctx) and (ctx.signals.kv.prefix_hit_ratio or 0.0) > 0.0


def rule_f6(ctx: Context) -> Finding:
    low = low_prefix_hit(ctx)
    if low.status != "fired":
        return low
    if not _eviction_shaped(ctx):
        return clear("KV has room or nothing hits at all: misses are not capacity eviction")
    claimed = _claimed(ctx, low, f"KV full ({kv_evidence(ctx.signals)})")
    if claimed is None:
        return info(ctx, *low.evidence, f"KV full ({kv_evidence(ctx.signals)})", "within the first-token objective")
    return claimed


# -- G: multi-GPU overhead ----------------------------------------------------------------
def model_fits_one_gpu(ctx: Context) -> tuple[bool | None, str]:
    """Could the model run on one GPU? Needs the weights and the GPU's memory."""
    sheet = gpus.lookup(ctx.facts.gpu)
    weights = ctx.facts.model_weight_bytes
    if sheet is None or weights is None:
        return None, ""
    share = weights / sheet.memory_bytes
    return (share < ctx.thresholds.model_fits_share,
            f"weights {weights / 1e9:.0f} GB = {_pct(share)} of one {sheet.name}")


def rule_g(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    tp, pp = ctx.facts.tensor_parallel_size, ctx.facts.pipeline_parallel_size
    if tp is None and pp is None:
        return abstain(unknown_fact("tensor_parallel_size / pipeline_parallel_size"))
    degree = (tp or 1) * (pp or 1)
    if degree == 1:
        return clear("single-GPU engine")
    if (early := _stutter_gate(ctx)) is not None:
        return early
    tail = s.latency.itl_tail_ratio
    median = uniform_itl_bulk(ctx)
    if tail is not None and tail >= t.itl_tail_ratio and median is None:
        return clear(f"ITL stutters ({_tail_text(s)}): a scheduling cause, not communication")
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
        0.6,
        itl_breach(ctx).evidence,
        f"TP {tp or 1} x PP {pp or 1} while KV usage mean is only {_pct(s.kv.usage_mean)}",
        f"the model fits on one GPU ({fit_text}): the parallelism buys room that is not used",
        (f"the median token gap {_s(median)} is most of the ITL objective's threshold ({_tail_text(s)}): slow "
         "throughout"
         if median is not None else
         f"ITL uniformly slow ({_tail_text(s)})" if tail is not None else "ITL tail shape unknown"),
    )


# -- LoRA adapter slots and data-parallel engines (issue 29) ---------------------------------------
def rule_a6(ctx: Context) -> Finding:
    """Requests wait for a LoRA adapter slot: more adapters in demand than --max-loras while KV has room.

    vLLM's V1 scheduler skips a waiting request whose adapter would make the batch hold more than
    max_loras adapters (it stays waiting, counted by reason ``deferred``) and schedules the requests behind
    it: the wait is queue time, not a capacity wait, so A2 does not count it.
    """
    s, t = ctx.signals, ctx.thresholds
    lora = s.lora
    if not lora.enabled:
        return clear(f"LoRA is off (no {vllm.LORA_REQUESTS_INFO} on /metrics)")
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if lora.max_adapters is None or lora.adapters_seen is None:
        return abstain(f"{vllm.LORA_REQUESTS_INFO} (its max_lora label)")
    if s.scheduler.deferred_fraction is None or s.latency.ttft_queue_share is None:
        return abstain(vllm.NUM_REQUESTS_WAITING_BY_REASON, vllm.REQUEST_QUEUE_TIME_SECONDS)
    slots = (f"{lora.adapters_seen:.0f} adapters had requests in flight in the window for "
             f"{lora.max_adapters:.0f} adapter slot(s) (max_lora, --max-loras)")
    if lora.adapters_seen <= lora.max_adapters and not lora.waiting_adapters:
        return clear(slots + ": every adapter fits")
    deferred = s.scheduler.deferred_fraction
    # Under its share a deferred wait still counts when it is the only wait seen: the scrapes (a handful at slow
    # intervals) sample a gauge that empties between them, and with no scrape ever seeing a wait for capacity the
    # queue time checked below is the adapters' (A2 has no wait to claim it; A0 would say unknown).
    only_wait_seen = deferred > 0 and s.scheduler.queued_fraction == 0.0
    if deferred < t.lora_deferred_fraction and not only_wait_seen:
        return clear(f"{slots}, but requests wait deferred in only {_pct(deferred)} of scrapes")
    if kv_full(ctx):
        return clear(f"the wait is KV's ({kv_evidence(s)}): see C3/D")
    if s.latency.ttft_queue_share < t.ttft_queue_share:
        return clear(f"{slots}, but the queue is only {_pct(s.latency.ttft_queue_share)} of mean TTFT")
    evidence = [
        breach.evidence,
        slots,
        f"requests wait deferred (not for capacity) in {_pct(deferred)} of scrapes "
        f"({vllm.NUM_REQUESTS_WAITING_BY_REASON}, reason deferred) while {kv_evidence(s)}"
        + ("" if deferred >= t.lora_deferred_fraction else ", and for capacity in none"),
        f"queue is {_pct(s.latency.ttft_queue_share)} of mean TTFT "
        f"({_s(s.latency.queue_mean or 0)} of {_s(s.latency.ttft_mean or 0)})",
    ]
    if lora.slots_full_fraction is not None:
        evidence.append(f"every adapter slot in use in {_pct(lora.slots_full_fraction)} of scrapes")
    if ctx.facts.max_lora_rank:
        evidence.append(f"max_lora_rank {ctx.facts.max_lora_rank}: the memory each slot reserves")
    return fired(0.55 + 0.35 * _excess(deferred, t.lora_deferred_fraction, 1.0), *evidence)


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
               f"{text('ttft_mean', _s)}, mean ITL {text('itl_mean', _s)}")
    ratio_text = (f"{(eng.load_ratio or 0):.1f}x its siblings' median load, {(eng.latency_ratio or 0):.1f}x "
                  f"their latency (mark {t.dp_imbalance_ratio:g}x)")
    if worst < t.dp_imbalance_ratio:
        return clear(f"{eng.count:.0f} engines in step: the furthest, {numbers}, at {ratio_text}")
    evidence = [f"{numbers}: {ratio_text}",
                "siblings: " + "; ".join(
                    f"engine {e} load {(r.get('load_mean') or 0):.1f}, TTFT {_s(r.get('ttft_mean') or 0)}, "
                    f"ITL {_s(r.get('itl_mean') or 0)}" for e, r in eng.per_engine.items() if e != eng.outlier)]
    breaches = [b for b in (ttft_breach(ctx), itl_breach(ctx)) if b.known and b.breached]
    if not breaches:
        return info(ctx, *evidence, "every objective is met over the merged engines")
    return fired(0.55 + 0.35 * _excess(worst, t.dp_imbalance_ratio, 2 * t.dp_imbalance_ratio),
                 *(b.evidence for b in breaches), *evidence)


# -- effects without a known cause (second pass, over the first pass's findings) ---------------
def _unexplained(ctx: Context, findings: Mapping[str, Finding], objective: str, breach: Breach) -> Finding:
    """Fires while ``objective`` is missed and no counting cause of a class that explains it (or that says it
    does: ``Finding.explains``) fired."""
    if (early := gate(breach)) is not None:
        return early
    explaining = {cid: f for cid, f in findings.items()
                  if cid in CAUSE_BY_ID and (CAUSE_BY_ID[cid].symptom in EXPLAINED_BY[objective]
                                             or objective in f.explains)}
    active = sorted(cid for cid, f in explaining.items() if f.status == "fired" and not f.informational)
    if active:
        return clear("explained by " + ", ".join(f"{cid} ({CAUSE_BY_ID[cid].title})" for cid in active))
    looked = [breach.evidence]
    cleared = sorted(cid for cid, f in explaining.items() if f.status == "clear")
    if cleared:
        looked.append(f"clear: {', '.join(cleared)}")
    abstained = sorted((cid, f) for cid, f in explaining.items() if f.status == "abstain")
    if abstained:
        # The first input each lacked, shortened: enough to say what to configure.
        looked.append("not judged: " + "; ".join(f"{cid} (needs {_brief(f.missing)})" for cid, f in abstained))
    informational = sorted(cid for cid, f in explaining.items() if f.status == "fired" and f.informational)
    if informational:
        looked.append(f"information only: {', '.join(informational)}")
    s = ctx.signals
    if objective == "ttft" and s.latency.ttft_queue_share is not None and s.latency.ttft_mean:
        looked.append(f"queue is {_pct(s.latency.ttft_queue_share)} of mean TTFT {_s(s.latency.ttft_mean)} while "
                      f"requests wait for capacity in {_pct(s.scheduler.queued_fraction or 0)} of scrapes")
    if objective == "itl" and s.latency.itl_tail_ratio is not None:
        looked.append(_tail_text(s))
    if s.scheduler.deferred_fraction:
        looked.append(f"requests wait deferred in {_pct(s.scheduler.deferred_fraction)} of scrapes "
                      f"({vllm.NUM_REQUESTS_WAITING_BY_REASON}, reason deferred: a LoRA adapter slot or a KV "
                      "transfer), a wait no rule attributes")
    return fired(0.5 + 0.4 * _excess(breach.ratio, 1, ctx.thresholds.burn_rate_full), *looked)


def _brief(missing: tuple[str, ...]) -> str:
    first = missing[0] if missing else "an input"
    return first.split(" (", 1)[0] + (" ..." if len(missing) > 1 else "")


def rule_a0(ctx: Context, findings: Mapping[str, Finding]) -> Finding:
    finding = _unexplained(ctx, findings, "ttft", ttft_breach(ctx))
    if finding.status == "fired" and queue_starting(ctx):
        # A2 judges this queue once its wait is recorded: no "unknown cause" before that.
        return abstain(f"the queue time of the requests waiting now ({vllm.REQUEST_QUEUE_TIME_SECONDS} is "
                       "recorded when they finish)")
    return finding


def rule_b0(ctx: Context, findings: Mapping[str, Finding]) -> Finding:
    return _unexplained(ctx, findings, "itl", itl_breach(ctx))


Rule = Callable[[Context], Finding]
ExplainingRule = Callable[[Context, Mapping[str, Finding]], Finding]

RULES: tuple[tuple[str, Rule], ...] = (
    ("A1", rule_a1), ("A2", rule_a2), ("A3", rule_a3), ("A4", rule_a4), ("A5", rule_a5), ("A6", rule_a6),
    ("A7", rule_a7), ("A8", rule_a8),
    ("B1", rule_b1), ("B2", rule_b2), ("B3", rule_b3), ("B4", rule_b4), ("B5", rule_b5),
    ("C1", rule_c1), ("C2", rule_c2), ("C3", rule_c3),
    ("D", rule_d), ("E", rule_e), ("F", rule_f), ("F6", rule_f6), ("G", rule_g), ("G2", rule_g2),
)
# Evaluated after RULES, with their findings.
EXPLAINING_RULES: tuple[tuple[str, ExplainingRule], ...] = (("A0", rule_a0), ("B0", rule_b0))
