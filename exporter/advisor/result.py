"""The advisor's answer, in the JSON shape ``targets[].advice`` / ``observed`` / ``reason`` carry.

``advice`` is a list, best first (by ``value``: ``score`` per accelerator, in log terms), of ``{knob,
current, proposed, predicted, interval, worse, why, caveat, score, validated, cost, value}``
with ``predicted`` and ``observed`` holding ``ttft_p95_seconds``, ``itl_p95_seconds``,
``preemption_rate`` and ``generation_tokens_per_second``, and ``interval`` the same keys as
``[low, high]``. A combined what-if has ``knob`` "a+b" and ``current``/``proposed`` as mappings.
When the arrival model is unclear, each item also carries ``if_closed`` (or ``if_open``): the same
prediction for the other kind of traffic. ``caveat`` is null, or says why the prediction is an
extrapolation (a step size the window never held). ``validated`` is false for a knob whose
predictions were never checked against a real engine; ``cost`` is ``{accelerators, what}``: the
accelerators after the change per accelerator now (1 for a configuration change) and, in words, what
else it costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from exporter.advisor.calibrate import METRIC_KEYS, Outcome


@dataclass(frozen=True, slots=True)
class Prediction:
    predicted: Outcome
    interval: dict[str, tuple[float, float] | None]
    worse: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "predicted": self.predicted.to_dict(),
            "interval": {k: (list(v) if v is not None else None) for k, v in self.interval.items()},
            "worse": list(self.worse),
        }


@dataclass(frozen=True, slots=True)
class Recommendation:
    knob: str
    current: Any
    proposed: Any
    prediction: Prediction
    why: str
    score: float  # summed log-improvement over the observed window (higher is better)
    alternatives: dict[str, Prediction] = field(default_factory=dict)  # other arrival model -> prediction
    caveat: str = ""  # why the prediction is an extrapolation ("" when the window covered the change)
    validated: bool = True  # the knob's predictions were checked against a real engine (candidates.VALIDATED)
    accelerators: float = 1.0  # accelerators after the change per accelerator now (2: a replica more)
    cost: str = ""  # what the change costs, in words

    @property
    def value(self) -> float:
        """Objective attainment per unit of cost, the ranking: the summed log-improvement (``score``) less
        the log of the accelerators it takes (a second replica must more than double what it improves)."""
        return self.score - math.log(self.accelerators)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"knob": self.knob, "current": self.current, "proposed": self.proposed}
        out.update(self.prediction.to_dict())
        out["why"] = self.why
        out["caveat"] = self.caveat or None
        out["score"] = round(self.score, 3)
        out["validated"] = self.validated
        out["cost"] = {"accelerators": round(self.accelerators, 3), "what": self.cost}
        out["value"] = round(self.value, 3)
        for kind, prediction in self.alternatives.items():
            out[f"if_{kind}"] = prediction.to_dict()
        return out


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True, slots=True)
class CheckReport:
    """How one arrival reading of the calibrated model reproduced the window (``calibrate.Check``)."""

    errors: dict[str, float | None]  # relative error per metric
    simulated: dict[str, float | None]  # the model's value per metric, its seeds pooled
    sampling_band: dict[str, tuple[float, float] | None]  # per latency p95: what the window could read by chance

    def to_dict(self, prefix: str = "") -> dict[str, Any]:
        return {
            f"{prefix}errors": {k: _round(v, 3) for k, v in self.errors.items()},
            f"{prefix}simulated": {k: _round(self.simulated.get(k), 5) for k in METRIC_KEYS},
            f"{prefix}sampling_band": {k: None if band is None else [_round(band[0], 5), _round(band[1], 5)]
                                       for k, band in self.sampling_band.items()},
        }


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    """What the advisor calibrated, and how well the model reproduced the window: ``targets[].calibration``.

    The JSON keeps one flat object: the primary reading's check as ``errors``, ``simulated`` and
    ``sampling_band``, the other reading's (unclear traffic) under the same names prefixed with its
    kind (``closed_errors``, ...)."""

    arrivals: str
    arrival_model: str
    step_cost: dict[str, float | None]
    step_cost_reused: bool
    frontend_seconds: float | None
    frontend_observed_seconds: float | None
    num_gpu_blocks: int
    shared_prefix_tokens: int
    prompt_tokens_mean: float
    output_tokens_mean: float
    window_seconds: float
    simulated_seconds: float
    primary: CheckReport
    others: dict[str, CheckReport] = field(default_factory=dict)  # the other arrival reading, by kind
    cpu_seconds: float | None = None
    left_out: str = ""  # why candidates were not evaluated (the sidecar's CPU budget)
    window_end: float | None = None  # when the window ended (the sidecar's worker stamps it)
    step_evidence: dict[str, Any] | None = None  # stepcost.StepEvidence.to_dict(): the split identified, or why not
    output_tail: dict[str, Any] | None = None  # tail.TailPlacement.to_dict(): placed by KV usage, or why not
    step_curvature: dict[str, Any] | None = None  # curvature.Curvature.to_dict(): read by the window, or why not

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "arrivals": self.arrivals, "arrival_model": self.arrival_model, "step_cost": dict(self.step_cost),
            "step_cost_reused": self.step_cost_reused, "step_evidence": self.step_evidence,
            "output_tail": self.output_tail,
            "step_curvature": self.step_curvature,
            "frontend_seconds": self.frontend_seconds,
            "frontend_observed_seconds": self.frontend_observed_seconds, "num_gpu_blocks": self.num_gpu_blocks,
            "shared_prefix_tokens": self.shared_prefix_tokens, "prompt_tokens_mean": self.prompt_tokens_mean,
            "output_tokens_mean": self.output_tokens_mean, "window_seconds": self.window_seconds,
            "simulated_seconds": self.simulated_seconds,
        }
        out.update(self.primary.to_dict())
        for kind, report in self.others.items():
            out.update(report.to_dict(f"{kind}_"))
        if self.cpu_seconds is not None:
            out["cpu_seconds"] = self.cpu_seconds
        if self.left_out:
            out["left_out"] = self.left_out
        if self.window_end is not None:
            out["window_end"] = self.window_end
        return out


@dataclass(frozen=True, slots=True)
class AdviceResult:
    observed: Outcome | None
    recommendations: tuple[Recommendation, ...] = ()
    reason: str = ""
    calibration: CalibrationReport | None = None

    @property
    def top(self) -> Recommendation | None:
        return self.recommendations[0] if self.recommendations else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "advice": [r.to_dict() for r in self.recommendations],
            "observed": self.observed.to_dict() if self.observed else {k: None for k in METRIC_KEYS},
        }
        if not self.recommendations:
            out["reason"] = self.reason or "no change to evaluate"
        if self.calibration is not None:
            out["calibration"] = self.calibration.to_dict()
        return out
