"""The user-visible effects the rules start from: the latency objectives judged as breaches.

Over the window, over the recent steps alone (``*_now``: an effect beside recent evidence) and since a
cause began (time-aligned: the cause's own stretch, neither diluted by the calm before it nor cut to the
recent horizon).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter import objectives
from exporter.catalog import metrics as vllm
from exporter.diagnosis.rules.finding import Context, Finding, abstain, clear, per_context, recent_horizon
from exporter.frozen import replace
from exporter.objectives import ObjectiveStatus
from exporter.window import HistogramDelta


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
    key = ("objective", name)  # judged once per evaluation, read by a dozen rules
    status: ObjectiveStatus | None = ctx.memo.get(key)
    if status is None:
        hist = ctx.signals.latency.ttft_histogram if name == "ttft" else ctx.signals.latency.itl_histogram
        per_token = ctx.signals.speculative.itl_scale if name == "itl" else None
        status = ctx.memo[key] = objectives.judge(name, ctx.slo.objectives()[name], hist,
                                                  ctx.thresholds.evidence_min_requests, per_token)
    return status


def as_breach(status: ObjectiveStatus, missing: str) -> Breach:
    """An objective as a breach: its burn rate is the ratio; a window it cannot judge abstains."""
    if status.met is None or status.burn_rate is None:
        return Breach(False, False, missing=(missing,))
    return Breach(True, not status.met, status.burn_rate, status.evidence())


@per_context
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
    return as_breach(status, "traffic: too few first tokens in the window")


@per_context
def itl_breach(ctx: Context) -> Breach:
    s = ctx.signals
    status = objective_status(ctx, "itl")
    if status.events is None or not status.events:
        return Breach(False, False, missing=(vllm.INTER_TOKEN_LATENCY_SECONDS,))
    if s.traffic.first_tokens is not None and s.traffic.first_tokens < ctx.thresholds.evidence_min_requests and (
            s.scheduler.running_mean or 0) < 1:
        return Breach(False, False, missing=("traffic: too few streams in the window",))
    return as_breach(status, "traffic: too few token gaps in the window")


def latency_missed(ctx: Context) -> bool:
    return any(b.known and b.breached for b in (ttft_breach(ctx), itl_breach(ctx)))


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
    return replace(as_breach(status, ""), evidence=f"{status.evidence()} over {recent_horizon(ctx)}")


def ttft_breach_since(ctx: Context, hist: HistogramDelta | None, since: str) -> Breach | None:
    """The first tokens since a cause began (``hist``), when they miss their objective beyond chance
    (objectives.missed_beyond_chance); None otherwise. Time-aligned: the cause's own stretch, neither diluted
    by the calm minutes before it nor cut to the recent horizon."""
    if hist is None:
        return None
    status = objectives.judge("ttft", ctx.slo.objectives()["ttft"], hist, ctx.thresholds.evidence_min_requests)
    if not objectives.missed_beyond_chance(status, ctx.thresholds.onset_confidence_z):
        return None
    return replace(as_breach(status, ""), evidence=f"{status.evidence()} since {since}")


def ttft_missed_now(ctx: Context) -> bool:
    return ttft_breach_now(ctx) is not None


def aligned_ttft_breach(ctx: Context, acting_now: bool, since: Breach | None = None) -> Breach:
    """The first-token objective over the window, or, while the window still meets it and the cause acts now,
    over the recent steps or ``since`` the cause began (time-aligned: the misses now are that cause's onset)."""
    breach = ttft_breach(ctx)
    if acting_now and breach.known and not breach.breached:
        return ttft_breach_now(ctx) or since or breach
    return breach


def slow_first_tokens(ctx: Context) -> float:
    """First tokens of the window over the first-token objective's threshold."""
    status = objective_status(ctx, "ttft")
    return (status.bad_share or 0.0) * (status.events or 0.0)
