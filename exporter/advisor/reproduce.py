"""Does the calibrated engine model reproduce the window? ``check`` runs it with several seeds and compares
TTFT p95, ITL p95, preemptions/s and generation throughput with what the window shows; a latency p95 within
what the window could have read by chance (``sampling_band``) counts as reproduced whatever its relative
error. The error is part of the advisor's result."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from exporter import numbers
from exporter.advisor.arrival import chi_square
from exporter.advisor.calibrate import METRIC_KEYS, SEEDS, Calibration, Outcome, pooled, simulate
from exporter.advisor.model import Clients, OpenArrivals
from exporter.catalog.thresholds import Thresholds
from exporter.window import HistogramDelta


def relative_error(simulated: float | None, observed: float | None, floor: float = 0.0) -> float | None:
    """(simulated - observed) / observed; 0 when both are at or below ``floor``; None when unknown."""
    if simulated is None or observed is None:
        return None
    if observed <= floor and simulated <= floor:
        return 0.0
    if observed <= 0:
        return math.inf
    return (simulated - observed) / observed


QUANTILE = 0.95


LATENCY_KEYS: dict[str, str] = {"ttft_p95_seconds": "ttft_histogram", "itl_p95_seconds": "itl_histogram"}


def sampling_band(observed: HistogramDelta | None, simulated: HistogramDelta | None, confidence: float,
                  q: float = QUANTILE) -> tuple[float, float] | None:
    """The values between which two q-quantiles of one distribution differ by chance alone.

    A p95 read from n observations is the value at rank 0.95 n, and that rank is binomial: its
    standard error is sqrt(q (1 - q) / n), about 0.02 for the hundred requests of a short window,
    so the window's p95 could as well have been its p93 or its p97. Comparing two samples (the
    window and the model's pooled seeds), the variances add. The band is the window's own
    histogram read at q -/+ z of those standard errors: on coarse buckets (TTFT 1 s, 2.5 s, 5 s) a
    few requests more or less above a bound move the interpolated p95 by half, and no model can be
    asked to be closer to the window than the window is to itself. Observations are treated as
    independent; requests queued together are not, so the true band is wider and this one errs
    strict.
    """
    if observed is None or simulated is None or observed.count <= 0 or simulated.count <= 0:
        return None
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    half = z * math.sqrt(q * (1 - q) * (1 / observed.count + 1 / simulated.count))
    low, high = observed.quantile(max(q - half, 0.0)), observed.quantile(min(q + half, 1.0))
    if low is None or high is None:
        return None
    return low, high


@dataclass(frozen=True, slots=True)
class Check:
    """How well the calibrated model reproduces the window, per metric (relative errors)."""

    simulated: Outcome
    errors: dict[str, float | None]
    runs: tuple[Outcome, ...]
    ok: bool
    reason: str
    # per latency p95: the values the window's p95 could have taken by chance (``sampling_band``)
    bands: dict[str, tuple[float, float] | None] = field(default_factory=dict)


# Preemption counts are small and bursty: their calibration error may go this many times the limit.
PREEMPTION_SLACK = 1.4


def count_band(count: float, seconds: float, confidence: float) -> tuple[float, float] | None:
    """The rates between which a Poisson process that left ``count`` events in ``seconds`` runs, at ``confidence``.

    A relative error against a rate read from a handful of events means little, and against none it is
    infinite: no preemption in 36 s is what a process preempting 0.1/s leaves one time in forty. The band
    is the exact one of a Poisson mean (Garwood: chi-square quantiles with 2k and 2k + 2 degrees of freedom,
    here by Wilson-Hilferty), over the window's seconds: for 0 events at 95 %, up to 3.7 / seconds."""
    if seconds <= 0 or confidence <= 0:
        return None
    k = max(round(count), 0)
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    low = chi_square(2 * k, -z) / 2 if k > 0 else 0.0
    return low / seconds, chi_square(2 * k + 2, z) / 2 / seconds


def check(cal: Calibration, observed: Outcome, thresholds: Thresholds,
          traffic: OpenArrivals | Clients | None, window_seconds: float) -> Check:
    """Run the calibrated model with every seed and compare it with the window.

    A metric fails when its relative error is over ``advice_max_calibration_error`` and, for the
    latency p95s, the model's value also lies outside the window's sampling band: a p95 the window
    itself could have read 50 % higher with a few requests more above a bucket bound is not a
    miss the model can be blamed for. Likewise a preemption rate inside the Poisson band of the count the
    window's ``window_seconds`` held (``count_band``).
    """
    traffic = traffic or cal.arrivals.primary()
    config, workload = cal.engine_config(), cal.workload()
    seeded = [simulate(cal, config, workload, traffic, cal.cost, seed) for seed in SEEDS]
    simulated = pooled(seeded)
    floor = thresholds.advice_preemption_floor
    errors = {key: relative_error(simulated.get(key), observed.get(key), floor if key == "preemption_rate" else 0.0)
              for key in METRIC_KEYS}
    bands = {key: sampling_band(getattr(observed, hist), getattr(simulated, hist),
                                thresholds.advice_calibration_confidence)
             for key, hist in LATENCY_KEYS.items()}
    limit = thresholds.advice_max_calibration_error
    bad = []
    for key, err in errors.items():
        if err is None or key == "preemption_rate" or abs(err) <= limit:
            continue
        band, value = bands.get(key), simulated.get(key)
        if band is not None and value is not None and band[0] <= value <= band[1]:
            continue
        where = (f" (outside {numbers.seconds(band[0])}-{numbers.seconds(band[1])}, what the window's p95 could read "
                 "by chance)") if band is not None else ""
        bad.append(f"{key} off by {err:+.0%}{where}")
    pre_err, pre_sim = errors["preemption_rate"], simulated.preemption_rate
    pre_band = count_band((observed.preemption_rate or 0.0) * window_seconds, window_seconds,
                          thresholds.advice_calibration_confidence) if observed.preemption_rate is not None else None
    counted = pre_band is not None and pre_sim is not None and pre_band[0] <= pre_sim <= pre_band[1]
    # Preemption counts are small and bursty: more slack, but a model without any is never a match.
    if pre_err is not None and not counted and (abs(pre_err) > PREEMPTION_SLACK * limit or pre_err <= -1.0):
        where = (f" (outside {pre_band[0]:.3g}-{pre_band[1]:.3g}/s, what the window's count of preemptions could "
                 "read by chance)") if pre_band is not None else ""
        bad.append(f"preemption_rate off by {pre_err:+.0%}{where}")
    reason = ("the calibrated model does not reproduce the window (" + ", ".join(bad) +
              f"; limit {limit:.0%}, advice_max_calibration_error)") if bad else ""
    return Check(simulated, errors, tuple(r.outcome for r in seeded), not bad, reason, bands)
