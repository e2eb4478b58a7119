"""What-if advisor: predict a knob's effect on this workload, in numbers, before anyone turns it.

``advise(window, facts, thresholds, ...)``: calibrate the simulator's engine model to the window
(``calibrate``), check that it reproduces the window (else say why and predict nothing), pick the
changes to evaluate (``candidates``: the user's ``--what-if`` questions, else those the active
causes and the engine facts suggest), predict each with several seeds (``predict``) and rank
them. Open or closed traffic is inferred (``arrival``); when unclear, both are predicted.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from exporter.catalog import metrics as vllm

if TYPE_CHECKING:
    from exporter.advisor.calibrate import Calibration, Fitted, Outcome
    from exporter.advisor.candidates import BadQuestion, Candidate, parse_question
    from exporter.advisor.model import StepCost
    from exporter.advisor.reproduce import Check
    from exporter.advisor.result import AdviceResult, CheckReport
    from exporter.advisor.stepcost import StepEvidence
    from exporter.catalog.thresholds import Thresholds
    from exporter.config import EngineFacts
    from exporter.window import Window

# The sidecar imports this package for its worker's bookkeeping (exporter/advisor/worker.py, track.py) on every
# tick; the model and the simulator load with the first calibration (in the worker process), not with it.
_LAZY = {"AdviceResult": "exporter.advisor.result", "BadQuestion": "exporter.advisor.candidates",
         "Calibration": "exporter.advisor.calibrate", "Fitted": "exporter.advisor.calibrate",
         "parse_question": "exporter.advisor.candidates"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AdviceResult", "BadQuestion", "Calibration", "Fitted", "advise", "advise_calibrated", "parse_question"]


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _report(result: Check) -> CheckReport:
    from exporter.advisor.calibrate import METRIC_KEYS
    from exporter.advisor.result import CheckReport

    return CheckReport(dict(result.errors), {k: result.simulated.get(k) for k in METRIC_KEYS}, dict(result.bands))


def checked(cal: Calibration, observed: Outcome, thresholds: Thresholds,
            window_seconds: float) -> tuple[str, dict[str, Check]]:
    """The calibrated model against the window (of ``window_seconds``) for each arrival reading; known traffic is
    what it is, unclear traffic is read the way that reproduces the window better."""
    from exporter.advisor.reproduce import check
    from exporter.advisor.search import worst

    checks = {kind: check(cal, observed, thresholds, t, window_seconds)
              for kind, t in cal.arrivals.alternatives().items()}
    primary = cal.arrivals.kind if cal.arrivals.kind != "unclear" else min(checks, key=lambda k: worst(checks[k]))
    return primary, checks


def _value(candidate: Candidate, attr: str) -> object:
    values = [getattr(c, attr) for c in candidate.changes]
    if len(values) == 1:
        return values[0]
    return {c.knob: getattr(c, attr) for c in candidate.changes}


def advise(window: Window, facts: EngineFacts, thresholds: Thresholds, what_if: Sequence[str] = (),
           active_causes: Iterable[str] = (), cpu_budget_s: float | None = None,
           profile: StepEvidence | None = None) -> AdviceResult:
    """The advice for one target's window. Raises BadQuestion for a --what-if it cannot evaluate."""
    return advise_calibrated(window, facts, thresholds, what_if, active_causes, cpu_budget_s, profile=profile)[0]


def advise_calibrated(window: Window, facts: EngineFacts, thresholds: Thresholds, what_if: Sequence[str] = (),
                      active_causes: Iterable[str] = (), cpu_budget_s: float | None = None,
                      prior: Calibration | None = None, both_readings: bool = True,
                      profile: StepEvidence | None = None) -> tuple[AdviceResult, Fitted | None]:
    """``advise``, and the calibration it used with its reading and baseline (for the next window of the
    same engine: ``prior``; for the track record of a knob change: ``exporter.advisor.track``).

    ``prior``: an earlier calibration of this engine with the same facts; its fitted step cost is
    reused when it reproduces this window (else the cost is fitted afresh). ``both_readings``: when
    the traffic is unclear, predict the other reading too (``if_closed``/``if_open``); the sidecar
    predicts its primary reading only. ``profile``: the engine's step cost from ``vllm-diag profile``, used
    where the window does not identify the split itself. ``cpu_budget_s``: candidates beyond it are left out, those
    answering an active cause evaluated first, and always one.
    """
    from exporter.advisor.cached import brackets as cached_brackets
    from exporter.advisor.calibrate import CannotCalibrate, Fitted, brackets, calibrate, observe, refit
    from exporter.advisor.candidates import BadQuestion, derived, from_questions, step_extrapolation
    from exporter.advisor.curvature import brackets as curvature_brackets
    from exporter.advisor.predict import predict, score
    from exporter.advisor.result import AdviceResult, CalibrationReport, Prediction, Recommendation
    from exporter.advisor.search import searched

    started = time.thread_time()
    active = set(active_causes)
    observed = observe(window)
    try:
        cal = calibrate(window, facts, thresholds, prior, profile)
    except CannotCalibrate as exc:
        return AdviceResult(observed, (), f"cannot calibrate: {exc}"), None
    traffic = cal.arrivals.alternatives()
    checking = time.thread_time()
    primary_kind, checks = checked(cal, observed, thresholds, window.duration)
    reused = prior is not None
    if reused and not checks[primary_kind].ok:  # the engine or the machine changed: fit afresh
        cal = calibrate(window, facts, thresholds, profile=profile)
        checking = time.thread_time()
        primary_kind, checks = checked(cal, observed, thresholds, window.duration)
        reused = False
    if not checks[primary_kind].ok:
        cal, (primary_kind, checks) = searched(
            cal, (primary_kind, checks),
            lambda weight: calibrate(window, facts, thresholds, profile=profile, weight=weight),
            lambda trial: checked(trial, observed, thresholds, window.duration), thresholds)
    # What one candidate costs, to stay within a budget: a check is the same seeds on one reading.
    per_candidate = (time.thread_time() - checking) / len(checks)
    primary = checks[primary_kind]
    calibration = CalibrationReport(
        arrivals=cal.arrivals.describe(), arrival_model=cal.arrivals.kind,
        step_cost={"fixed_seconds": _round(cal.cost.fixed_s, 6),
                   "per_token_seconds": _round(cal.cost.per_token_s, 8),
                   "decode_token_weight": round(cal.cost.decode_weight, 3),
                   "decode_token_weight_log_sigma": _round(cal.weight_sigma, 3),
                   "cached_token_weight": round(cal.cost.cached_weight, 3),
                   "curvature": round(cal.cost.curvature, 3),
                   "noise_sigma": _round(cal.cost.noise_sigma, 3),
                   "compute_floor_per_token_seconds": _round(cal.cost.compute_per_token_s, 9)},
        step_cost_reused=reused,
        step_evidence={**(cal.evidence.to_dict() if cal.evidence is not None else {}),
                       "decode_token_weight_used_from": cal.weight_source,
                       "step_cost_scaled_by": round(cal.cost_scale, 3)},
        output_tail=cal.tail.to_dict() if cal.tail is not None else None,
        step_curvature=cal.curvature.to_dict() if cal.curvature is not None else None,
        frontend_seconds=_round(cal.frontend_s, 5), frontend_observed_seconds=_round(cal.frontend_observed_s, 5),
        num_gpu_blocks=cal.num_gpu_blocks, shared_prefix_tokens=cal.shared_prefix_tokens,
        prompt_tokens_mean=round(cal.prompt.mean, 1), output_tokens_mean=round(cal.output.mean, 1),
        window_seconds=round(window.duration, 1), simulated_seconds=round(cal.duration_s, 1),
        primary=_report(primary), others={k: _report(v) for k, v in checks.items() if k != primary_kind})
    if not primary.ok:
        calibration = replace(calibration, cpu_seconds=round(time.thread_time() - started, 2))
        return AdviceResult(observed, (), primary.reason, calibration), None
    usable = {kind: t for kind, t in traffic.items() if checks[kind].ok and (both_readings or kind == primary_kind)}
    # The decode weight's uncertainty, as calibrations refitted at -/+ one standard deviation (the interval's
    # parameter part): they cost about what one candidate does, inside the sidecar's CPU budget.
    bracketed = brackets(cal)
    cached = cached_brackets(cal, primary.simulated)  # the cost of a cached token: never identified by one window

    def refit_or_none(other: Calibration, cost: StepCost) -> tuple[Calibration, Outcome] | None:
        try:
            return refit(other, cost)
        except CannotCalibrate:
            return None

    bent, bent_span = curvature_brackets(cal, refit_or_none)  # the step cost's curvature: rarely identified
    candidates = from_questions(cal, list(what_if)) if what_if else derived(
        cal, active, cal.arrivals.occupancy_mean - _running_mean(window))
    if cpu_budget_s is not None:  # under a budget, the changes that answer an active cause go first
        candidates.sort(key=lambda c: not (c.answers & active))
    floor = thresholds.advice_preemption_floor
    recommendations: list[Recommendation] = []
    left_out = 0
    for candidate in candidates:
        before = time.thread_time()
        # Under a budget, one candidate at least (a run that only calibrated would have cost for nothing)
        if (cpu_budget_s is not None and recommendations
                and before - started + per_candidate * len(usable) > cpu_budget_s):
            left_out += 1
            continue
        try:
            predictions: dict[str, Prediction] = {
                kind: predict(cal, candidate, t, checks[kind].simulated, observed, thresholds, checks[kind],
                              bracketed if kind == primary_kind else (), window.duration,
                              cached if kind == primary_kind else (), bent if kind == primary_kind else (), bent_span)
                for kind, t in usable.items()}
        except BadQuestion:
            if what_if:
                raise
            continue
        per_candidate = (time.thread_time() - before) / len(usable)
        main = predictions[primary_kind]
        recommendations.append(Recommendation(
            knob=candidate.knob, current=_value(candidate, "current"), proposed=_value(candidate, "proposed"),
            prediction=main, why=candidate.why, score=score(observed, main.predicted, floor),
            alternatives={k: p for k, p in predictions.items() if k != primary_kind},
            caveat=step_extrapolation(cal, candidate), validated=candidate.validated,
            accelerators=candidate.accelerators, cost=candidate.cost))
    recommendations.sort(key=lambda r: -r.value)
    calibration = replace(calibration, cpu_seconds=round(time.thread_time() - started, 2),
                          left_out=f"{left_out} candidates not evaluated: the advisor's CPU budget spent"
                          if left_out else "")
    reason = "" if recommendations else "no candidate change applies to this window"
    fitted = Fitted(cal, primary_kind, primary.simulated)
    return AdviceResult(observed, tuple(recommendations), reason, calibration), fitted


def _running_mean(window: Window) -> float:
    series = window.gauge_series(vllm.NUM_REQUESTS_RUNNING)
    return sum(series) / len(series) if series else 0.0

