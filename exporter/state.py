"""The immutable published state: what /metrics, JSON, HTML and CLI text all render.

Each evaluation builds a new :class:`TargetState` and swaps it in whole; readers never see
a half-updated diagnosis and nothing is computed when someone scrapes us.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from exporter.catalog.symptoms import LAYERS, UNKNOWN_NOT_JUDGED, UNKNOWN_UNEXPLAINED, Action
from exporter.facts.base import Fact
from exporter.objectives import ObjectiveStatus
from exporter.record import RecordStatus
from exporter.scaling import HOLD, ScaleSignal  # scaling on the diagnosis (issue 51)
from exporter.signals import Signals

# sleeping: vLLM's engine_sleep_state says every engine behind the target sleeps (/sleep); no rule judges it.
TargetStatus = Literal["ok", "insufficient_evidence", "down", "sleeping"]
SCRAPE_ERROR_REASONS: tuple[str, ...] = ("timeout", "http", "parse", "too_large", "connect")


class Recommended(Protocol):
    """The what-if advisor's top recommendation, as far as the published state reads it."""

    @property
    def knob(self) -> str: ...
    @property
    def current(self) -> Any: ...
    @property
    def proposed(self) -> Any: ...


class Advice(Protocol):
    """The what-if advisor's answer (``exporter.advisor.result.AdviceResult``) as the state carries it.

    A protocol, not the advisor's class: the advisor sits above the pipeline (it calibrates the
    simulator's engine model to a window), so the state names only what it publishes.
    """

    @property
    def top(self) -> Recommended | None: ...
    def to_dict(self) -> dict[str, Any]: ...


class AdviceTrack(Protocol):
    """The advisor's track record on this target (``exporter.advisor.track.TrackReport``): how far its
    what-if was from what a real knob change then measured."""

    def errors(self) -> Iterable[tuple[str, str, float]]:
        """(knob, metric, error ratio) of the latest comparison of each knob."""
        ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class CauseResult:
    id: str
    symptom: str
    layer: str
    title: str
    strength: float
    evidence: tuple[str, ...]
    actions: tuple[Action, ...]
    informational: bool = False
    recovering: bool = False  # the cause has ended; its effect is still in the window

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "layer": self.layer,
            "title": self.title,
            "strength": round(self.strength, 3),
            "informational": self.informational,
            "recovering": self.recovering,
            "evidence": list(self.evidence),
            "actions": [_action_dict(a) for a in self.actions],
        }


def _action_dict(action: Action) -> dict[str, Any]:
    out: dict[str, Any] = {"action": action.action, "gain": action.gain, "cost": action.cost}
    if action.knob is not None:
        out["knob"], out["direction"] = action.knob, action.direction
    return out


@dataclass(frozen=True, slots=True)
class SymptomResult:
    id: str
    title: str
    severity: str
    causes: tuple[CauseResult, ...]

    @property
    def informational(self) -> bool:
        """Only informational causes: shown, never a verdict or an alert."""
        return all(c.informational for c in self.causes)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "severity": "info" if self.informational else self.severity,
                "informational": self.informational, "causes": [c.to_dict() for c in self.causes]}


@dataclass(frozen=True, slots=True)
class Verdict:
    layer: str  # one of LAYERS, "none" or "unknown"
    score: float
    since: float
    pending: str | None = None  # a different layer (or "none") the hysteresis is holding back
    pending_evaluations: int = 0  # evaluations it has won in a row
    # With layer "unknown": True when an objective is missed that no known cause explains, False when
    # there is no diagnosis yet (the two meanings every output words apart).
    unexplained: bool = False
    # The verdict layer's causes have all ended (none has evidence over the recent horizon) while their effect
    # is still in the window: the layer is kept, marked recovering, with when its cause was last seen acting.
    recovering: bool = False
    recovering_since: float | None = None

    @property
    def meaning(self) -> str | None:
        """What an `unknown` verdict means, in the words every output uses; None for any other verdict."""
        if self.layer != "unknown":
            return None
        return UNKNOWN_UNEXPLAINED if self.unexplained else UNKNOWN_NOT_JUDGED


@dataclass(frozen=True, slots=True)
class Diagnosis:
    verdict: Verdict
    layer_scores: Mapping[str, float]
    symptoms: tuple[SymptomResult, ...]
    abstained: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # cause id -> what it lacked
    rule_errors: Mapping[str, str] = field(default_factory=dict)  # cause id -> the exception it raised

    @property
    def active_causes(self) -> tuple[CauseResult, ...]:
        return tuple(c for s in self.symptoms for c in s.causes)

    @property
    def active_symptoms(self) -> tuple[SymptomResult, ...]:
        """Symptoms with a user-visible effect (informational findings left out)."""
        return tuple(s for s in self.symptoms if not s.informational)


def unknown_diagnosis(since: float) -> Diagnosis:
    return Diagnosis(Verdict("unknown", 0.0, since), {layer: 0.0 for layer in LAYERS}, ())


@dataclass(frozen=True, slots=True)
class ScrapeHealth:
    up: bool = False
    last_duration_seconds: float | None = None
    last_success_timestamp: float | None = None
    last_error: str | None = None
    errors_total: Mapping[str, int] = field(default_factory=lambda: {r: 0 for r in SCRAPE_ERROR_REASONS})
    scrapes_total: int = 0
    dropped_samples_total: int = 0
    restarts_total: int = 0


@dataclass(frozen=True, slots=True)
class TargetState:
    target: str
    url: str
    status: TargetStatus
    window_seconds: float
    evaluated_at: float
    health: ScrapeHealth
    diagnosis: Diagnosis
    model_name: str = ""
    signals: Signals | None = None
    missing: tuple[str, ...] = ()
    last_scrape_at: float | None = None
    rule_errors_total: Mapping[str, int] = field(default_factory=dict)  # cause id -> evaluations that raised
    source_errors_total: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (source, reason) -> count
    engine: Mapping[str, Fact] = field(default_factory=dict)  # resolved engine facts, each with its source
    advice: Advice | None = None  # the what-if advisor's last answer (exporter/advisor), when it ran
    advice_track: AdviceTrack | None = None  # the advisor's errors on real knob changes, once it kept a window
    # The latency objectives judged over the window (exporter/objectives), by name (ttft, itl).
    objectives: Mapping[str, ObjectiveStatus] = field(default_factory=dict)
    # The paging rules' inputs (catalog.metrics.WATCHED_INPUTS) -> available; empty before the first scrape.
    inputs: Mapping[str, bool] = field(default_factory=dict)
    recording: RecordStatus | None = None  # the target's record_dir recorder (exporter/record.py), when on
    scaling: ScaleSignal = HOLD  # would more replicas help, and how many this target needs (exporter/scaling.py)

    def to_dict(self) -> dict[str, Any]:
        d = self.diagnosis
        signals = self.signals.to_dict() if self.signals is not None else {}
        advice = self.advice.to_dict() if self.advice is not None else {}
        recording = {"recording": self.recording.to_dict()} if self.recording is not None else {}
        track = self.advice_track.to_dict() if self.advice_track is not None else {}
        return {
            "target": self.target,
            "model_name": self.model_name,
            "state": self.status,
            "window_seconds": self.window_seconds,
            "evaluated_at": self.evaluated_at,
            "last_scrape_at": self.last_scrape_at,
            "verdict": {"layer": d.verdict.layer, "score": round(d.verdict.score, 3), "since": d.verdict.since,
                        "pending": d.verdict.pending, "pending_evaluations": d.verdict.pending_evaluations,
                        "meaning": d.verdict.meaning, "recovering": d.verdict.recovering,
                        "recovering_since": d.verdict.recovering_since},
            "layer_scores": {k: round(v, 3) for k, v in d.layer_scores.items()},
            "symptoms": [s.to_dict() for s in d.symptoms],
            "signals": signals,
            "objectives": {name: status.to_dict() for name, status in self.objectives.items()},
            "inputs": dict(self.inputs),
            "engine": {name: fact.to_dict() for name, fact in self.engine.items()},
            "scaling": self.scaling.to_dict(),
            "missing": list(self.missing),
            "abstained": {k: list(v) for k, v in d.abstained.items()},
            "rule_errors": [{"cause": k, "error": v, "total": self.rule_errors_total.get(k, 0)}
                            for k, v in d.rule_errors.items()],
            "rule_errors_total": dict(self.rule_errors_total),
            "source_errors_total": [{"source": s, "reason": r, "total": n}
                                    for (s, r), n in sorted(self.source_errors_total.items())],
            "scrape": {
                "up": self.health.up,
                "last_duration_seconds": self.health.last_duration_seconds,
                "last_success_timestamp": self.health.last_success_timestamp,
                "last_error": self.health.last_error,
                "errors_total": dict(self.health.errors_total),
            },
            **recording,  # only when the target records its scrapes
            **advice,  # advice, observed, reason, calibration
            **track,  # advice_track: the comparisons with real knob changes
        }
