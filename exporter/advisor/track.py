"""The advisor's track record on the user's own hardware: when a knob really changes, how far off was it?

The sidecar keeps, per target, a summary of the last window the advisor calibrated (``Summary``: the
calibration, the arrival reading it used, the observed and the model's own outcome of that window, the
engine knobs and the process start time). When the engine facts it tracks (``KNOB_FACTS``) differ from
the summary's, the knobs were turned, usually with a restart of the pod (the start time changes) and of
the sidecar with it. Once the first full window entirely after the change is in, the advisor's what-if
for that exact move is run on the kept summary and compared with what that window measured;
``vllm_diag_advice_error_ratio{target,knob,metric}`` publishes the error of the latest comparison per
knob, the JSON (``targets[].advice_track``) the history.

The error is ``predicted / measured - 1`` (0: exact; +0.5: predicted 50 % too high; -0.5: half the
measured value). Preemption rates near zero are padded with ``advice_preemption_floor`` on both sides
(``(predicted + floor) / (measured + floor) - 1``), so a measured 0 gives a finite number, and two
rates both at or below the floor count as equal (0), as the calibration's own errors do.

The summary (and the history) is kept on disk as ``NAME.advisor.json`` in the target's ``record_dir``
when it has one, written atomically after every advisor run and comparison, so a sidecar restarted
with the engine's new flags still has the window from before them. Without a ``record_dir`` it lives
in memory and a restart of the sidecar loses it.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.facts.base import FactValue
from exporter.record import write_atomically

if TYPE_CHECKING:  # the model and the simulator load with the first calibration, not with the sidecar
    from exporter.advisor.calibrate import Empirical, Fitted, Outcome
    from exporter.advisor.candidates import Candidate, Change
    from exporter.catalog.thresholds import Thresholds
    from exporter.window import Window

log = logging.getLogger(__name__)

# Engine fact -> the advisor's knob for it. The KV cache's size is read as blocks (cache_config_info),
# which every way of sizing it (gpu_memory_utilization, kv_cache_memory_bytes, an override) moves.
KNOB_FACTS: dict[str, str] = {
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "num_gpu_blocks": "num_gpu_blocks_override",
    "enable_prefix_caching": "enable_prefix_caching",
}
# The advisor's outcome keys the error is published for -> the ``metric`` label.
TRACKED_METRICS: dict[str, str] = {
    "ttft_p95_seconds": "ttft_p95", "itl_p95_seconds": "itl_p95", "preemption_rate": "preemptions_per_s",
}
HISTORY = 20  # comparisons kept per target (the JSON and the file)
FORMAT = 1  # the file's format version: a file of another version is ignored (and replaced)


def file_path(record_dir: Path | None, target: str) -> Path | None:
    return None if record_dir is None else record_dir / f"{target}.advisor.json"


def knobs(facts: Mapping[str, FactValue | None]) -> dict[str, FactValue]:
    """The tracked knobs among the engine facts (unknown ones left out)."""
    return {name: facts[name] for name in KNOB_FACTS if facts.get(name) is not None}  # type: ignore[misc]


def error_ratio(predicted: float | None, measured: float | None, pad: float = 0.0) -> float | None:
    """``(predicted + pad) / (measured + pad) - 1``; 0 when both are at or below ``pad`` (> 0); None when unknown."""
    if predicted is None or measured is None:
        return None
    if pad > 0 and predicted <= pad and measured <= pad:
        return 0.0
    if measured + pad <= 0:
        return None
    return (predicted + pad) / (measured + pad) - 1.0


# --------------------------------------------------------------------------------------------
# What is kept: the summary of the last calibrated window, and the comparisons
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    """The last window the advisor calibrated: everything a later what-if of it needs."""

    fitted: Fitted
    observed: Outcome
    knobs: Mapping[str, FactValue]
    started: float | None  # the engine's process_start_time_seconds, when exported
    window_end: float  # unix time of the window's last scrape

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "knobs": dict(self.knobs), "started": self.started, "window_end": self.window_end,
                "kind": self.fitted.kind, "calibration": asdict(self.fitted.calibration),
                "observed": _outcome_dict(self.observed), "simulated": _outcome_dict(self.fitted.simulated)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Summary:
        from exporter.advisor.arrival import ArrivalModel
        from exporter.advisor.calibrate import Calibration, Fitted, Outcome
        from exporter.advisor.model import Clients, OpenArrivals, StepCost
        from exporter.advisor.stepcost import StepEvidence
        from exporter.advisor.tail import TailPlacement

        c = dict(data["calibration"])
        arrivals = dict(c["arrivals"])
        cal = Calibration(**{
            **c,
            "prompt": _empirical(c["prompt"]), "output": _empirical(c["output"]),
            "arrivals": ArrivalModel(**{**arrivals, "open": OpenArrivals(**arrivals["open"]),
                                        "closed": Clients(**arrivals["closed"])}),
            "cost": StepCost(**c["cost"]),
            "evidence": StepEvidence(**c["evidence"]) if c.get("evidence") else None,
            "fit_means": tuple(c.get("fit_means") or (0.0, None)),
            "tail": TailPlacement(**c["tail"]) if c.get("tail") else None,
        })
        fitted = Fitted(cal, str(data["kind"]), Outcome(**data["simulated"]))
        return cls(fitted, Outcome(**data["observed"]), dict(data["knobs"]), data.get("started"),
                   float(data["window_end"]))


def _outcome_dict(outcome: Outcome) -> dict[str, float | None]:
    """An outcome's numbers; the histograms (sampling bands of the check) are not needed again."""
    return {name: getattr(outcome, name) for name in ("ttft_p95_seconds", "itl_p95_seconds", "preemption_rate",
                                                      "generation_tokens_per_second", "ttft_mean_seconds",
                                                      "queue_mean_seconds")}


def _empirical(data: Mapping[str, Any]) -> Empirical:
    from exporter.advisor.calibrate import Empirical

    return Empirical(values=tuple(data["values"]), weights=tuple(data["weights"]), spreads=tuple(data["spreads"]),
                     jitter=data["jitter"], cap=data["cap"])


@dataclass(frozen=True, slots=True)
class Comparison:
    """One knob change: what the advisor would have predicted from the window before it, what the first
    full window after it measured, and the error per metric (``error_ratio``)."""

    knob: str  # the advisor's knob, "a+b" when several changed together
    current: Any
    proposed: Any
    before_window_end: float
    after_window_end: float
    predicted: Mapping[str, float | None]
    measured: Mapping[str, float | None]
    errors: Mapping[str, float | None]  # by metric label (TRACKED_METRICS values)
    reason: str = ""  # why there is no prediction (a what-if the model refuses)

    def to_dict(self) -> dict[str, Any]:
        return {"knob": self.knob, "current": self.current, "proposed": self.proposed,
                "before_window_end": self.before_window_end, "after_window_end": self.after_window_end,
                "predicted": dict(self.predicted), "measured": dict(self.measured),
                "error_ratio": {k: None if v is None else round(v, 4) for k, v in self.errors.items()},
                "reason": self.reason or None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        return cls(data["knob"], data["current"], data["proposed"], float(data["before_window_end"]),
                   float(data["after_window_end"]), dict(data["predicted"]), dict(data["measured"]),
                   dict(data["error_ratio"]), data.get("reason") or "")


@dataclass(frozen=True, slots=True)
class TrackReport:
    """What the published state carries (immutable: /metrics may render it on another thread)."""

    history: tuple[Comparison, ...] = ()
    waiting: str = ""  # a change seen whose first full window after it is not in yet
    kept_window_end: float | None = None  # the window a next change would be compared from

    def errors(self) -> Iterator[tuple[str, str, float]]:
        """(knob, metric, error ratio) of the latest comparison of each knob, finite values only."""
        latest: dict[str, Comparison] = {}
        for comparison in self.history:
            latest[comparison.knob] = comparison
        for knob, comparison in latest.items():
            for metric, value in comparison.errors.items():
                if value is not None and math.isfinite(value):
                    yield knob, metric, value

    def to_dict(self) -> dict[str, Any]:
        return {"advice_track": {"history": [c.to_dict() for c in self.history], "waiting": self.waiting or None,
                                 "kept_window_end": self.kept_window_end}}


@dataclass(frozen=True, slots=True)
class Move:
    """Knobs that changed since the kept summary, and from when the engine runs with them."""

    changes: tuple[Change, ...]
    since: float

    @property
    def candidate(self) -> Candidate:
        from exporter.advisor.candidates import Candidate

        return Candidate(self.changes, "a knob change the sidecar saw")


def _number(value: FactValue) -> float:
    return float(value) if isinstance(value, (bool, int, float)) else math.nan


@dataclass(slots=True)
class TrackRecord:
    """One target's kept summary, the change under way and the comparisons so far (sidecar process only)."""

    path: Path | None = None
    summary: Summary | None = None
    move: Move | None = None
    history: deque[Comparison] = field(default_factory=lambda: deque(maxlen=HISTORY))

    @classmethod
    def load(cls, path: Path | None) -> TrackRecord:
        """What an earlier run of the sidecar kept; a missing, unreadable or foreign file starts afresh."""
        record = cls(path)
        if path is None:
            return record
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            record.history.extend(Comparison.from_dict(c) for c in data.get("history", ()))
            if data.get("summary") is not None:
                record.summary = Summary.from_dict(data["summary"])
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("advisor track record %s unreadable, starting afresh: %s", path, exc)
            record.history.clear()
            record.summary = None
        return record

    def save(self) -> None:
        """Write the summary and the history atomically (and durably: a pod restart follows a change)."""
        if self.path is None:
            return
        data = {"format": FORMAT, "summary": self.summary.to_dict() if self.summary is not None else None,
                "history": [c.to_dict() for c in self.history]}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, json.dumps(data, indent=1).encode("utf-8"), durable=True)
        except OSError as exc:
            log.warning("advisor track record %s not written: %s", self.path, exc)

    def keep(self, summary: Summary) -> bool:
        """Keep a newly calibrated window, unless a change waits for its comparison (the window from before
        it must stay). True when kept."""
        if self.move is not None:
            return False
        self.summary = summary
        return True

    def see(self, now_knobs: Mapping[str, FactValue], started: float | None, at: float) -> Move | None:
        """The engine's knobs at ``at``: the change from the kept summary's under way, if any.

        Only knobs both sides know are compared (a fact that went missing is no change). The change
        holds from the new process start when the start time moved, else from when it was first seen.
        Knobs back at the kept values cancel a waiting change.
        """
        summary = self.summary
        if summary is None:
            return None
        from exporter.advisor.candidates import Change

        changes = tuple(
            Change(KNOB_FACTS[name], _number(summary.knobs[name]), _number(value))
            for name, value in now_knobs.items()
            if name in summary.knobs and _number(summary.knobs[name]) != _number(value))
        if not changes:
            self.move = None
            return None
        if self.move is None or self.move.changes != changes:
            restarted = started is not None and summary.started is not None and started != summary.started
            self.move = Move(changes, started if restarted and started is not None and started <= at else at)
        return self.move

    def ready(self, window: Window, filled: bool) -> bool:
        """The window is a whole one and lies entirely after the change (its oldest scrape included)."""
        if self.move is None or not filled or window.restarts:
            return False
        snapshots = window.snapshots
        return bool(snapshots) and snapshots[0].timestamp >= self.move.since

    def compare(self, predicted: Mapping[str, float | None], measured: Outcome, window_end: float,
                thresholds: Thresholds, reason: str = "") -> Comparison:
        """Record the comparison of the waiting change; the kept summary is used up (the next one comes
        from the advisor's next calibration, with the new knobs)."""
        assert self.move is not None and self.summary is not None
        changes = self.move.changes
        floor = thresholds.advice_preemption_floor
        measured_values = {key: measured.get(key) for key in TRACKED_METRICS}
        errors = {label: error_ratio(predicted.get(key), measured_values[key],
                                     floor if key == "preemption_rate" else 0.0)
                  for key, label in TRACKED_METRICS.items()}
        single = len(changes) == 1
        comparison = Comparison(
            knob=self.move.candidate.knob,
            current=changes[0].current if single else {c.knob: c.current for c in changes},
            proposed=changes[0].proposed if single else {c.knob: c.proposed for c in changes},
            before_window_end=self.summary.window_end, after_window_end=window_end,
            predicted={key: predicted.get(key) for key in TRACKED_METRICS}, measured=measured_values,
            errors=errors, reason=reason)
        self.history.append(comparison)
        self.summary, self.move = None, None
        return comparison

    def report(self) -> TrackReport:
        waiting = ""
        if self.move is not None:
            waiting = (f"{self.move.candidate.knob} changed; compared once a whole window after "
                       f"{self.move.since:.0f} is in")
        return TrackReport(tuple(self.history), waiting,
                           self.summary.window_end if self.summary is not None else None)


def predict_move(summary: Summary, move: Move, thresholds: Thresholds) -> tuple[dict[str, float | None], str]:
    """What the advisor predicts for ``move`` from the kept window (the worker process runs this: it
    simulates), and "" or why it cannot."""
    from exporter.advisor.predict import predict

    fitted = summary.fitted
    traffic = fitted.calibration.arrivals.alternatives().get(fitted.kind, fitted.calibration.arrivals.primary())
    try:
        prediction = predict(fitted.calibration, move.candidate, traffic, fitted.simulated, summary.observed,
                             thresholds)
    except ValueError as exc:  # BadQuestion, or an engine configuration the simulator refuses
        return {}, f"the model refuses the change: {exc}"
    return {key: prediction.predicted.get(key) for key in TRACKED_METRICS}, ""
