"""What-if advisor: predict a knob's effect on this workload, in numbers, before anyone turns it.

``advise(window, facts, thresholds, ...)``: calibrate the simulator's engine model to the window
(``calibrate``), check that it reproduces the window (else say why and predict nothing), pick the
changes to evaluate (``candidates``: the user's ``--what-if`` questions, else those the active
causes and the engine facts suggest), predict each with several seeds (``predict``) and rank
them. Open or closed traffic is inferred (``arrival``); when unclear, both are predicted.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from exporter.advisor.calibrate import (
    METRIC_KEYS,
    Calibration,
    CannotCalibrate,
    Check,
    Outcome,
    calibrate,
    check,
    observe,
)
from exporter.advisor.candidates import (
    BadQuestion,
    Candidate,
    derived,
    from_questions,
    parse_question,
    step_extrapolation,
)
from exporter.advisor.predict import predict, score
from exporter.advisor.result import AdviceResult, Prediction, Recommendation
from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.config import EngineFacts
from exporter.window import Window

__all__ = ["AdviceResult", "BadQuestion", "advise", "parse_question"]


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _calibration_doc(cal_desc: dict[str, object], checks: dict[str, Check]) -> dict[str, object]:
    out = dict(cal_desc)
    for kind, result in checks.items():
        prefix = "" if kind == "primary" else f"{kind}_"
        out[f"{prefix}errors"] = {k: _round(v, 3) for k, v in result.errors.items()}
        out[f"{prefix}simulated"] = {k: _round(result.simulated.get(k), 5) for k in METRIC_KEYS}
        out[f"{prefix}sampling_band"] = {k: None if band is None else [_round(band[0], 5), _round(band[1], 5)]
                                         for k, band in result.bands.items()}
    return out


def checked(cal: Calibration, observed: Outcome, thresholds: Thresholds) -> tuple[str, dict[str, Check]]:
    """The calibrated model against the window for each arrival reading; known traffic is what it is,
    unclear traffic is read the way that reproduces the window better."""
    checks = {kind: check(cal, observed, thresholds, t) for kind, t in cal.arrivals.alternatives().items()}
    primary = cal.arrivals.kind if cal.arrivals.kind != "unclear" else min(checks, key=lambda k: _worst(checks[k]))
    return primary, checks


def _worst(result: Check) -> float:
    """The largest relative error of a check, failing checks after passing ones."""
    errors = [abs(e) for k, e in result.errors.items() if e is not None and k != "preemption_rate"]
    return (0.0 if result.ok else 1e6) + max(errors, default=0.0)


def _value(candidate: Candidate, attr: str) -> object:
    values = [getattr(c, attr) for c in candidate.changes]
    if len(values) == 1:
        return values[0]
    return {c.knob: getattr(c, attr) for c in candidate.changes}


def advise(window: Window, facts: EngineFacts, thresholds: Thresholds, what_if: Sequence[str] = (),
           active_causes: Iterable[str] = (), cpu_budget_s: float | None = None) -> AdviceResult:
    """The advice for one target's window. Raises BadQuestion for a --what-if it cannot evaluate."""
    started = time.thread_time()
    observed = observe(window)
    try:
        cal = calibrate(window, facts, thresholds)
    except CannotCalibrate as exc:
        return AdviceResult(observed, (), f"cannot calibrate: {exc}")
    traffic = cal.arrivals.alternatives()
    primary_kind, checks = checked(cal, observed, thresholds)
    desc: dict[str, object] = {
        "arrivals": cal.arrivals.describe(),
        "arrival_model": cal.arrivals.kind,
        "step_cost": {"fixed_seconds": _round(cal.cost.fixed_s, 6),
                      "per_token_seconds": _round(cal.cost.per_token_s, 8),
                      "decode_token_weight": cal.cost.decode_weight,
                      "noise_sigma": _round(cal.cost.noise_sigma, 3),
                      "compute_floor_per_token_seconds": _round(cal.cost.compute_per_token_s, 9)},
        "frontend_seconds": _round(cal.frontend_s, 5),
        "frontend_observed_seconds": _round(cal.frontend_observed_s, 5),
        "num_gpu_blocks": cal.num_gpu_blocks,
        "shared_prefix_tokens": cal.shared_prefix_tokens,
        "prompt_tokens_mean": round(cal.prompt.mean, 1),
        "output_tokens_mean": round(cal.output.mean, 1),
        "window_seconds": round(cal.duration_s, 1),
    }
    primary = checks[primary_kind]
    calibration = _calibration_doc(desc, {"primary": primary, **{k: v for k, v in checks.items() if k != primary_kind}})
    if not primary.ok:
        calibration["cpu_seconds"] = round(time.thread_time() - started, 2)
        return AdviceResult(observed, (), primary.reason, calibration)
    usable = {kind: t for kind, t in traffic.items() if checks[kind].ok}
    candidates = from_questions(cal, list(what_if)) if what_if else derived(
        cal, set(active_causes), cal.arrivals.occupancy_mean - _running_mean(window))
    floor = thresholds.advice_preemption_floor
    recommendations = []
    left_out = 0
    for candidate in candidates:
        if cpu_budget_s is not None and time.thread_time() - started > cpu_budget_s:
            left_out += 1
            continue
        try:
            predictions: dict[str, Prediction] = {
                kind: predict(cal, candidate, t, checks[kind].simulated, observed, thresholds)
                for kind, t in usable.items()}
        except BadQuestion:
            if what_if:
                raise
            continue
        main = predictions[primary_kind]
        recommendations.append(Recommendation(
            knob=candidate.knob, current=_value(candidate, "current"), proposed=_value(candidate, "proposed"),
            prediction=main, why=candidate.why, score=score(observed, main.predicted, floor),
            alternatives={k: p for k, p in predictions.items() if k != primary_kind},
            caveat=step_extrapolation(cal, candidate)))
    recommendations.sort(key=lambda r: -r.score)
    calibration["cpu_seconds"] = round(time.thread_time() - started, 2)
    if left_out:
        calibration["left_out"] = f"{left_out} candidates not evaluated: advice_cpu_seconds budget spent"
    reason = "" if recommendations else "no candidate change applies to this window"
    return AdviceResult(observed, tuple(recommendations), reason, calibration)


def _running_mean(window: Window) -> float:
    series = window.gauge_series(vllm.NUM_REQUESTS_RUNNING)
    return sum(series) / len(series) if series else 0.0

