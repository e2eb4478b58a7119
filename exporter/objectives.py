"""Window latency histograms + the stated objectives -> how each objective fares, as an SLO.

An objective (``config.Objective``: a threshold and a target) is met in the window when the share
of the window's events above the threshold is at most its error budget (1 - target): the same
judgement the burn-rate alert rules make over their ranges. Events are vLLM's histogram
observations (first tokens for TTFT, token gaps for ITL); the bad ones are ``count`` minus the
cumulative count of the bucket whose upper edge is the threshold. A threshold between two edges
is interpolated linearly inside its bucket, as Prometheus' ``histogram_quantile`` does, and the
status says so (``threshold_on_bucket_edge`` False, with the nearest edges) so the operator can
move the threshold, or the engine's buckets, onto an edge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from exporter import numbers
from exporter.config import Objective, Slo
from exporter.window import HistogramDelta

# What one event of each objective is, for the evidence.
EVENT_NAMES: Mapping[str, str] = {"ttft": "first tokens", "itl": "token gaps"}
TITLES: Mapping[str, str] = {"ttft": "TTFT", "itl": "ITL"}
# vLLM's option (>= 0.32) that sets a latency histogram's buckets, named where a threshold misses an edge.
BUCKETS_OPTION = "--custom-histogram-buckets"


@dataclass(frozen=True, slots=True)
class Edges:
    """Where a threshold sits among a histogram's finite bucket edges."""

    on_edge: bool
    lower: float | None  # the nearest edge below the threshold (None: none below)
    upper: float | None  # the nearest edge above it (None: none above, i.e. only +Inf)


@lru_cache(maxsize=1024)  # a handful of bound sets and thresholds, asked about in every evaluation
def bucket_edges(bounds: tuple[float, ...], threshold: float) -> Edges:
    """Is ``threshold`` one of ``bounds``' finite edges; else its nearest edges either side."""
    finite = sorted(b for b in bounds if math.isfinite(b))
    if any(math.isclose(b, threshold, rel_tol=1e-9, abs_tol=1e-12) for b in finite):
        return Edges(True, threshold, threshold)
    lower = max((b for b in finite if b < threshold), default=None)
    upper = min((b for b in finite if b > threshold), default=None)
    return Edges(False, lower, upper)


@dataclass(frozen=True, slots=True)
class BadShare:
    """Events over the threshold in a histogram delta."""

    events: float
    bad: float
    interpolated: bool  # the threshold was not a bucket edge: ``bad`` is a linear estimate

    @property
    def share(self) -> float:
        return self.bad / self.events if self.events > 0 else 0.0


def bad_share(hist: HistogramDelta, threshold: float) -> BadShare | None:
    """bad = count - cumulative count at le=threshold; None when the histogram holds no events.

    Off an edge the cumulative count at the threshold is interpolated linearly inside its bucket
    (the first bucket from 0, as ``histogram_quantile``). Above the last finite edge nothing can be
    interpolated: the +Inf bucket's events count as bad, an upper bound on the truth.
    """
    events = hist.cumulative[-1] if hist.cumulative else 0.0
    if events <= 0:
        return None
    i, on_edge = _position(hist.bounds, threshold)
    if i == len(hist.bounds):
        return BadShare(events, 0.0, False)  # above every edge, +Inf included: nothing is over it
    bound, cum = hist.bounds[i], hist.cumulative[i]
    if on_edge:
        return BadShare(events, max(0.0, events - cum), False)
    below = hist.cumulative[i - 1] if i > 0 else 0.0
    if math.isinf(bound):
        return BadShare(events, max(0.0, events - below), True)
    lower = hist.bounds[i - 1] if i > 0 else min(0.0, bound)
    good = below + (cum - below) * (threshold - lower) / (bound - lower)
    return BadShare(events, max(0.0, events - good), True)


@lru_cache(maxsize=1024)  # the same few bound sets and thresholds in every evaluation
def _position(bounds: tuple[float, ...], threshold: float) -> tuple[int, bool]:
    """(index of the edge ``threshold`` is on, True), else (index of the first bound above it, False), else
    (len(bounds), False): the first of these in ascending order."""
    for i, bound in enumerate(bounds):
        if math.isclose(bound, threshold, rel_tol=1e-9, abs_tol=1e-12):
            return i, True
        if bound > threshold:
            return i, False
    return len(bounds), False


@dataclass(frozen=True, slots=True)
class ObjectiveStatus:
    """One objective in the window; the judged fields are None where the window cannot tell."""

    name: str  # ttft, itl
    threshold_seconds: float
    target: float
    events: float | None = None
    bad_share: float | None = None
    burn_rate: float | None = None  # bad share / error budget: 1 spends the budget exactly at its pace
    met: bool | None = None
    threshold_on_bucket_edge: bool | None = None  # None until a scrape shows the buckets
    nearest_bucket_edges: tuple[float | None, float | None] | None = None  # (lower, upper) when off an edge
    interpolated: bool = False
    # Speculative decoding: the event gaps were divided by the tokens an output event carried on
    # average (this many), so the objective is judged per token; None when judged per event.
    tokens_per_event: float | None = None

    def to_dict(self) -> dict[str, Any]:
        edges = list(self.nearest_bucket_edges) if self.nearest_bucket_edges is not None else None
        return {"threshold_seconds": self.threshold_seconds, "target": self.target,
                "bad_share": self.bad_share, "events": self.events, "burn_rate": self.burn_rate, "met": self.met,
                "threshold_on_bucket_edge": self.threshold_on_bucket_edge, "nearest_bucket_edges": edges,
                "tokens_per_event": self.tokens_per_event}

    def evidence(self) -> str:
        """'TTFT: 3.1 % of 412 first tokens over 2.5 s (objective 99 %, burn 3.1x)'."""
        title = TITLES.get(self.name, self.name)
        if self.bad_share is None or self.events is None or self.burn_rate is None:
            return f"{title}: no events in the window (objective {_target(self.target)} within "\
                   f"{numbers.seconds(self.threshold_seconds)})"
        text = (f"{title}: {self.bad_share * 100:.1f} % of {self.events:.0f} {EVENT_NAMES.get(self.name, 'events')} "
                f"over {numbers.seconds(self.threshold_seconds)} (objective {_target(self.target)}, "
                f"burn {self.burn_rate:.1f}x)")
        if self.tokens_per_event is not None:
            return text + (f"; judged per token (speculative decoding): each output event's gap divided by the "
                           f"{self.tokens_per_event:.2f} tokens an event carried on average, the share "
                           "interpolated inside the buckets so divided")
        if self.interpolated:
            text += "; the threshold is not a bucket edge, the share is interpolated inside its bucket"
        return text


def _target(target: float) -> str:
    return f"{numbers.number(target * 100)} %"


def judge(name: str, objective: Objective, hist: HistogramDelta | None, min_events: float,
          tokens_per_event: float | None = None) -> ObjectiveStatus:
    """The objective over ``hist`` (the window's delta; its bounds alone when nothing was observed).

    ``met`` stays None below ``min_events``: a share of a handful of events is not a judgement.
    ``tokens_per_event``: ``hist`` is already per token (exporter.signals.per_token), say so.
    """
    status = _judge(name, objective, hist, min_events)
    if tokens_per_event is None or hist is None or not hist.bounds:
        return status
    # The operator's threshold sits on vLLM's (per-event) edges or not; per token it is interpolated anyway.
    edges = bucket_edges(tuple(b * tokens_per_event for b in hist.bounds), objective.threshold_seconds)
    return replace(status, tokens_per_event=tokens_per_event, threshold_on_bucket_edge=edges.on_edge,
                   nearest_bucket_edges=None if edges.on_edge else (edges.lower, edges.upper))


def _judge(name: str, objective: Objective, hist: HistogramDelta | None, min_events: float) -> ObjectiveStatus:
    status = ObjectiveStatus(name, objective.threshold_seconds, objective.target)
    if hist is None or not hist.bounds:
        return status
    edges = bucket_edges(hist.bounds, objective.threshold_seconds)
    counted = bad_share(hist, objective.threshold_seconds)
    nearest = None if edges.on_edge else (edges.lower, edges.upper)
    if counted is None:
        return ObjectiveStatus(name, objective.threshold_seconds, objective.target, events=0.0,
                               threshold_on_bucket_edge=edges.on_edge, nearest_bucket_edges=nearest)
    burn = counted.share / objective.error_budget
    return ObjectiveStatus(
        name, objective.threshold_seconds, objective.target, events=counted.events, bad_share=counted.share,
        burn_rate=burn, met=None if counted.events < min_events else counted.share <= objective.error_budget,
        threshold_on_bucket_edge=edges.on_edge, nearest_bucket_edges=nearest, interpolated=counted.interpolated,
    )


def missed_beyond_chance(status: ObjectiveStatus, z: float) -> bool:
    """The objective is missed and not by chance: the lower Wilson bound (at ``z``) of the slow share
    exceeds the error budget. A share of a few dozen events is a sample; the bound widens as it shrinks."""
    if status.met is not False or status.bad_share is None or not status.events:
        return False
    return wilson_lower_bound(status.bad_share, status.events, z) > 1 - status.target


def few_missed_beyond_chance(status: ObjectiveStatus, z: float, min_misses: float) -> bool:
    """Too few events to judge a share (``met`` None), yet at least ``min_misses`` of them missed the
    threshold and the lower Wilson bound (at ``z``) of their share exceeds the error budget: two slow
    first tokens of three are an effect; one stray slow request is not."""
    if status.met is not None or status.bad_share is None or not status.events:
        return False
    if status.bad_share * status.events < min_misses - 1e-9:
        return False
    return wilson_lower_bound(status.bad_share, status.events, z) > 1 - status.target


def wilson_lower_bound(share: float, events: float, z: float) -> float:
    """The lower end of the Wilson score interval of a share observed over ``events`` events."""
    centre = share + z * z / (2 * events)
    spread = z * math.sqrt(share * (1 - share) / events + z * z / (4 * events * events))
    return (centre - spread) / (1 + z * z / events)


def judge_all(histograms: Mapping[str, HistogramDelta | None], slo: Slo, min_events: float,
              tokens_per_event: Mapping[str, float | None] | None = None) -> dict[str, ObjectiveStatus]:
    """Every latency objective of ``slo`` over its histogram (``histograms`` by objective name)."""
    per_token = tokens_per_event or {}
    return {name: judge(name, objective, histograms.get(name), min_events, per_token.get(name))
            for name, objective in slo.objectives().items()}


def edge_warning(target: str, status: ObjectiveStatus) -> str | None:
    """The log line for a threshold off its histogram's edges (None when on an edge or unknown)."""
    if status.threshold_on_bucket_edge is not False:
        return None
    lower, upper = status.nearest_bucket_edges or (None, None)
    return (f"{target}: the {TITLES.get(status.name, status.name)} objective's threshold "
            f"{status.threshold_seconds:g} s is not a bucket edge of vLLM's histogram (nearest edges: "
            f"{'none' if lower is None else f'{lower:g} s'} below, {'none' if upper is None else f'{upper:g} s'} "
            f"above): the share over it is interpolated inside the bucket. Set the threshold on an edge, or "
            f"add it to the engine's buckets with vLLM's {BUCKETS_OPTION} option (vLLM >= 0.32)")
