"""Scaling on the diagnosis: would more replicas relieve what holds this target back, and how many it needs.

An autoscaler fed queue depth or KV usage adds replicas for causes replicas do not fix (a starved CPU, a
token budget set too small, a prompt template that empties the prefix cache, a slow KV transfer) and
removes them on a dip that is no spare capacity. Here the diagnosis decides:

* ``helps``: the verdict's cause is a capacity cause (the queue, the KV pool, the batch slots). Any
  other active cause, an ``unknown`` verdict or a target without a diagnosis says no, with the reason;
  so does the witness of a CPU, transfer or prefix cause before the diagnosis names it (``witness``).
* ``desired_replicas``: the replicas this target's traffic needs at the objectives, summed per model by
  the autoscaler (KEDA or an HPA through prometheus-adapter, ``exporter/render/scaling.py``; an
  ``AverageValue`` target of 1 makes the sum the replica count). It is the demand on the binding resource
  (requests running and waiting for engine capacity, against ``max_num_seqs`` or the KV pool) over the
  capacity at ``scale_target_utilization``; the capacity is the resource's saturation, or the utilisation
  where the window saw the first-token objective fail below it (``ScaleTracker.capacity``). While a
  non-capacity cause acts, or nothing can be judged, a target asks exactly for itself: no replica added,
  none removed. Scale-in needs the demand under
  ``scale_in_headroom`` of the target utilisation on every evaluation the stabilisation window holds. The
  backlog a non-capacity cause left is not demand: once the cause is fixed, that queue drains on its own.

The classification is a pure function of the cause ids (``REASON_BY_CAUSE``, one row per cause of
``exporter.catalog.symptoms``); :class:`ScaleTracker` keeps the per-evaluation utilisations the
stabilisation window needs, as ``VerdictTracker`` keeps the verdict's hysteresis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from exporter import objectives
from exporter.catalog.symptoms import CAUSES
from exporter.catalog.thresholds import Thresholds
from exporter.config import Objective
from exporter.signals import Signals
from exporter.timebuffer import Readings

# More replicas relieve these: the demand exceeds what one engine's slots or KV pool hold.
CAPACITY_REASONS: tuple[str, ...] = ("queue", "kv_pool", "batch_slots")
# ... and not these: the fix is a host, a knob, the calling application or a link, or the cause is unknown.
HOLD_REASONS: tuple[str, ...] = ("cpu", "configuration", "prefix_breakage", "transfer", "workload", "unknown")
REASONS: tuple[str, ...] = (*CAPACITY_REASONS, *HOLD_REASONS, "none")  # none: no cause acts

# Every cause of the catalog, by what more replicas would do for it.
REASON_BY_CAUSE: Mapping[str, str] = MappingProxyType({
    "A0": "unknown", "B0": "unknown",  # an effect no known cause explains: never scale on a guess
    "A1": "workload",  # long prompts: a replica prefills them no faster
    "A2": "queue",  # requests wait for the concurrency cap or budget while KV has room
    "A3": "cpu", "C1": "cpu",
    "A4": "configuration", "B1": "configuration", "B2": "configuration",  # the token budget
    "A5": "prefix_breakage", "F": "prefix_breakage", "F1": "prefix_breakage",
    "A6": "configuration",  # LoRA slots: --max-loras or adapter-affinity routing
    "A7": "transfer", "A8": "transfer",
    "B3": "batch_slots",  # a full batch slows every stream: fewer streams per replica
    "B4": "configuration", "B5": "configuration",  # the kernels or the drafter
    "C2": "none",  # spare capacity: information, handled by the utilisation
    "C3": "kv_pool", "D": "kv_pool", "E": "kv_pool",
    "F6": "configuration",  # hot prefixes evicted: prefix-aware routing or a larger cache, not more random replicas
    "G": "configuration", "G2": "configuration",  # parallelism layout, the load balancer
})
assert set(REASON_BY_CAUSE) == {c.id for c in CAUSES} and set(REASON_BY_CAUSE.values()) <= set(REASONS)
# A cause of these acting anywhere vetoes scaling, whatever the verdict: its queue is not a capacity queue.
VETO_REASONS: tuple[str, ...] = ("cpu", "transfer", "prefix_breakage")
# The named causes replicas do not fix: the queue they leave is theirs to drain once fixed.
NON_CAPACITY_REASONS: tuple[str, ...] = tuple(r for r in HOLD_REASONS if r != "unknown")


class ActiveCause(Protocol):
    """What the classification reads of an active cause (``exporter.state.CauseResult`` is one)."""

    @property
    def id(self) -> str: ...
    @property
    def layer(self) -> str: ...
    @property
    def strength(self) -> float: ...
    @property
    def informational(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ScaleSignal:
    helps: bool
    reason: str  # one of REASONS
    cause: str | None  # the cause id the reason comes from
    layer: str | None  # the binding resource's layer: scheduler (batch slots) or kv_cache (KV pool)
    utilization: float | None  # demand / capacity of the binding resource, this evaluation
    utilization_peak: float | None  # the highest over the stabilisation window
    desired_replicas: float  # replicas this target's traffic needs at the objectives (1: itself)

    def to_dict(self) -> dict[str, Any]:
        return {"helps": self.helps, "reason": self.reason, "cause": self.cause, "layer": self.layer,
                "utilization": _round(self.utilization), "utilization_peak": _round(self.utilization_peak),
                "desired_replicas": round(self.desired_replicas, 3)}


HOLD = ScaleSignal(False, "unknown", None, None, None, None, 1.0)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def classify(verdict_layer: str, causes: Iterable[ActiveCause],
             cpu_starved: bool | None = None) -> tuple[str, str | None]:
    """(reason, cause id) for a diagnosed target: the verdict layer's strongest cause, unless a vetoing
    cause acts anywhere; ``unknown`` for an unexplained verdict, ``none`` when nothing acts.

    ``cpu_starved`` False (the CPU source reads no starvation over the recent horizon) sets the CPU causes
    aside: what they still see is the backlog a starved spell left, which is the capacity's to drain."""
    acting = [c for c in causes if not c.informational
              and not (cpu_starved is False and REASON_BY_CAUSE.get(c.id) == "cpu")]
    if verdict_layer == "unknown":
        return "unknown", next((c.id for c in acting if REASON_BY_CAUSE.get(c.id) == "unknown"), None)
    vetoes = sorted((c for c in acting if REASON_BY_CAUSE.get(c.id) in VETO_REASONS), key=lambda c: -c.strength)
    if vetoes:
        return REASON_BY_CAUSE[vetoes[0].id], vetoes[0].id
    if verdict_layer == "none" or not acting:
        return "none", None
    # The verdict layer's causes first; with none left (a CPU verdict set aside), the strongest of the rest.
    on_verdict = sorted((c for c in acting if c.layer == verdict_layer), key=lambda c: -c.strength) or sorted(
        acting, key=lambda c: -c.strength)
    # A non-capacity cause wins over a capacity one beside it: fix it first.
    holding = [c for c in on_verdict if REASON_BY_CAUSE.get(c.id, "unknown") not in CAPACITY_REASONS]
    top = holding[0] if holding else on_verdict[0]
    return REASON_BY_CAUSE.get(top.id, "unknown"), top.id


def witness(signals: Signals, hit_ratio_high: float | None, t: Thresholds) -> str | None:
    """The hold reason a non-capacity cause's own witness gives before the diagnosis names the cause, or None.

    The verdict needs an effect held over its hysteresis, while the queue a cause brings grows from its first
    scrape: a capacity reading in between would add a replica for a cause replicas do not fix. So the
    witnesses of the vetoing causes hold on their own: the CPU-starvation score over its line (``cpu``), the
    wait for transferred KV over its share of the first-token time (``transfer``, A7's line), and a prefix hit
    ratio that fell under its line within the window (``prefix_breakage``: ``hit_ratio_high``, the highest
    recent ratio of the window's evaluations, was above it). A ratio low for a whole window is the prompts'
    nature or a cause the diagnosis has had its window to name, so that hold lasts at most a window."""
    score = signals.cpu.starvation_score
    if score is not None and score >= t.cpu_starvation_score:
        return "cpu"
    deferred = signals.kv_transfer.deferred_ttft_share
    if deferred is not None and deferred >= t.kv_transfer_ttft_share:
        return "transfer"
    recent = signals.kv.prefix_hit_ratio_recent
    if recent is not None and hit_ratio_high is not None and recent < t.prefix_hit_ratio_low <= hit_ratio_high:
        return "prefix_breakage"
    return None


def utilization(signals: Signals, max_num_seqs: int | None,
                queued: float | None = None) -> tuple[float | None, str | None]:
    """(demand / capacity, layer) of the binding resource now: the requests running plus the slots the
    queue needs (``queued``), against the batch slots (max_num_seqs) and against the KV pool (its usage
    grown in proportion, at the running requests' mean footprint). None when neither can be read.

    Without ``queued``, the waiting requests count up to one more batch: the backlog is a stock that grows
    while arrivals exceed the throughput, so counted whole it asks for replicas in proportion to how long
    an overload has lasted, not to how far it exceeds the capacity."""
    s = signals.scheduler
    running = s.running
    waiting = s.waiting_capacity if s.waiting_capacity is not None else s.waiting
    if running is None:
        return None, None
    demand = max(0.0, running + (queued if queued is not None else min(waiting or 0.0, max(running, 1.0))))
    candidates: list[tuple[float, str]] = []
    if max_num_seqs:
        candidates.append((demand / max_num_seqs, "scheduler"))
    usage = signals.kv.usage
    if usage is not None:
        candidates.append((usage * demand / running if running > 0 else usage, "kv_cache"))
    if not candidates:
        return None, None
    value, layer = max(candidates)
    return value, layer


def desired(helps: bool, reason: str, recent: float | None, peak: float | None, t: Thresholds,
            held: float | None = None, capacity: float = 1.0) -> float:
    """Replicas this target needs: its demand at the target utilisation when that asks for more (on a
    capacity cause, or with no cause at all), fewer only when the window's peak leaves the headroom.

    ``held`` is the lowest reading of the recent horizon (None before the horizon is full). Ahead of a cause,
    the ask needs it past the line, not only the horizon's mean: the rules and the witnesses judge "now" over
    that horizon, so a cause that brings the queue (a prefix broken, a CPU taken) gets the horizon to show
    before its first scrapes read as capacity.

    ``capacity`` is the utilisation the objectives hold to (1: the resource's saturation; lower where the
    window saw the first-token objective fail below it, ``ScaleTracker.capacity``): the target utilisation is
    a share of that."""
    if reason in HOLD_REASONS or recent is None or peak is None:
        return 1.0
    target = t.scale_target_utilization * capacity
    if helps:
        return max(1.0, recent / target)
    if held is not None and held > target:
        # no cause yet, but every reading of the recent horizon is past the target: ask ahead, in proportion.
        # The autoscaler's tolerance (10 %) and the scale-in line below are the band that keeps a replica
        # just added or removed from being asked back at the next wobble.
        return recent / target
    if peak / target < t.scale_in_headroom:
        return peak / target
    return 1.0


class ScaleTracker:
    """One target's utilisations over the stabilisation window (the sidecar's window)."""

    def __init__(self, window_seconds: float, recent_evaluations: int) -> None:
        self._readings = Readings(window_seconds)
        # the mean of each evaluation's recent readings: the peak the stabilisation window holds is of these,
        # so one scrape's Poisson spike does not hold a replica for a whole window
        self._recent_means = Readings(window_seconds)
        self._recent = max(1, recent_evaluations)
        self._window = window_seconds
        self._waiting = Readings(window_seconds)
        # each evaluation's recent prefix hit ratio: did it fall under its line within the window (witness)
        self._hit_ratios = Readings(window_seconds)
        self._held_at: float | None = None  # the last evaluation a non-capacity cause held (its backlog's drain)
        # the utilisations (recent means) at which the first-token objective failed on every evaluation of a
        # recent horizon while nothing but capacity could be the cause: where the objective, not the resource,
        # sets the capacity (``capacity``)
        self._failing_at = Readings(window_seconds)
        self._missed_run = 0  # evaluations in a row with the objective missed now and no non-capacity reason
        self._meeting_at = Readings(window_seconds)  # the utilisations at which the objective held now

    def capacity(self) -> float:
        """The utilisation this target's objectives hold to, as the window saw it: the lowest at which the
        first-token objective failed (a full batch slows every prefill step before the slots run out), else 1
        (the resource's own saturation)."""
        if not self._failing_at or not self._meeting_at:
            return 1.0
        line = min(self._failing_at)
        # only a failure the utilisation explains: the window saw the objective hold at less
        return min(1.0, line) if min(self._meeting_at) < line else 1.0

    def queued(self, now: float, signals: Signals, t: Thresholds) -> float | None:
        """The batch slots the queue adds to the demand: its growth over the newest ``scale_queue_growth_share``
        of the window (arrivals past the throughput; negative while it drains, when the arrivals are fewer than
        the running requests say) and its backlog drained over one window, each times a request's time in the
        engine. A backlog left by a non-capacity cause (one acted within the window) is the fix's to drain, not
        capacity demand: only its growth counts."""
        s = signals.scheduler
        waiting = s.waiting_capacity if s.waiting_capacity is not None else s.waiting
        service = signals.latency.inference_mean
        if waiting is None:
            self._waiting.trim(now)
            return None
        self._waiting.push(now, waiting)
        if service is None:
            return None
        horizon = self._window * t.scale_queue_growth_share
        then, before = next(((t0, w) for t0, w in self._waiting.newest(len(self._waiting)) if now - t0 <= horizon),
                            (now, waiting))
        growth = (waiting - before) / (now - then) if now > then else 0.0
        held = self._held_at is not None and now - self._held_at <= self._window
        return (growth + (0.0 if held else waiting / self._window)) * service

    def _learn_capacity(self, now: float, met: bool | None, queued: float | None, reason: str,
                        recent: float | None) -> None:
        """Where the first-token objective fails below saturation: a recent horizon of evaluations that all
        missed it, now and over the window (``met`` False; None for a miss the window holds), with no request
        waiting for capacity (the batch, not a queue, made the first tokens late), and no non-capacity reason
        (a cause or its witness) within the window, sets a line at the horizon's utilisation. A non-capacity
        reason clears the lines: what failed the objective while that cause acted, or in what it left (a
        backlog, a cold cache), was the cause, not the capacity."""
        self._failing_at.trim(now)
        self._meeting_at.trim(now)
        if self._held_at is not None and now - self._held_at <= self._window:
            self._failing_at = Readings(self._window)
            self._missed_run = 0
            return
        if recent is None or recent <= 0:
            self._missed_run = 0
            return
        if met is True:
            self._meeting_at.push(now, recent)
        self._missed_run = self._missed_run + 1 if met is False and queued == 0 else 0
        if self._missed_run >= self._recent:
            self._failing_at.push(now, recent)

    def assess(self, now: float, diagnosed: bool, verdict_layer: str, causes: Iterable[ActiveCause],
               signals: Signals | None, max_num_seqs: int | None, t: Thresholds,
               ttft: Objective | None = None) -> ScaleSignal:
        """The scaling signal of one evaluation. ``ttft``: the first-token objective, judged on the newest
        steps' first tokens (where it fails below the target utilisation, the target follows it)."""
        if not diagnosed or signals is None:
            self._readings.trim(now)
            self._recent_means.trim(now)
            self._hit_ratios.trim(now)
            self._failing_at.trim(now)
            self._missed_run = 0
            return HOLD
        hit_ratio = signals.kv.prefix_hit_ratio_recent
        if hit_ratio is None:
            self._hit_ratios.trim(now)
        else:
            self._hit_ratios.push(now, hit_ratio)
        value, layer = utilization(signals, max_num_seqs, self.queued(now, signals, t))
        if value is None:
            self._readings.trim(now)
            self._recent_means.trim(now)
            recent = peak = held = None
        else:
            self._readings.push(now, value)
            newest = [v for _, v in self._readings.newest(self._recent)]
            recent = sum(newest) / len(newest)
            held = min(newest) if len(newest) >= self._recent else None
            self._recent_means.push(now, recent)
            peak = max(self._recent_means)
        score = signals.cpu.starvation_score
        reason, cause = classify(verdict_layer, causes, None if score is None else score >= t.cpu_starvation_score)
        seen = witness(signals, max(self._hit_ratios) if self._hit_ratios else None, t)
        if seen is not None and reason not in HOLD_REASONS:  # a named non-capacity cause keeps its own reason
            reason, cause = seen, None
        helps = reason in CAPACITY_REASONS
        if reason in NON_CAPACITY_REASONS:
            self._held_at = now
        met = None
        if ttft is not None:
            lat = signals.latency
            met = objectives.judge("ttft", ttft, lat.ttft_histogram_recent, t.evidence_min_requests).met
            if met is False and objectives.judge("ttft", ttft, lat.ttft_histogram, t.evidence_min_requests).met:
                met = None  # failing now, held over the window: a blip, not where the objective fails
        self._learn_capacity(now, met, signals.scheduler.queued_recent_fraction, reason, recent)
        return ScaleSignal(helps, reason, cause, layer, value, peak,
                           desired(helps, reason, recent, peak, t, held, self.capacity()))
