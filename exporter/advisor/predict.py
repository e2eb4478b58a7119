"""Run the calibrated model for a candidate change and turn it into a prediction with an interval.

Each seed's simulated outcome is scaled by observed / simulated-baseline (the calibration's residual
error, metric by metric), so what is predicted is the model's *change* applied to what was seen.
The interval is the spread of those scaled values across seeds.
"""

from __future__ import annotations

import math
import statistics

from exporter.advisor.calibrate import METRIC_KEYS, SEEDS, Calibration, Outcome, simulate
from exporter.advisor.candidates import Candidate, apply
from exporter.advisor.model import Clients, OpenArrivals
from exporter.advisor.result import Prediction
from exporter.catalog.thresholds import Thresholds
from exporter.publish import numbers

LABELS = {"ttft_p95_seconds": "TTFT p95", "itl_p95_seconds": "ITL p95", "preemption_rate": "preemptions/s",
          "generation_tokens_per_second": "generation tokens/s"}
HIGHER_IS_BETTER = frozenset({"generation_tokens_per_second"})


def _scale(value: float | None, observed: float | None, baseline: float | None, key: str, floor: float) -> float | None:
    if value is None:
        return None
    if observed is None or baseline is None or baseline <= 0:
        return value
    if key == "preemption_rate" and (baseline <= floor or observed <= floor):
        return value  # a ratio of near-zero rates is noise: keep the model's own number
    return value * observed / baseline


def predict(cal: Calibration, candidate: Candidate, traffic: OpenArrivals | Clients, baseline: Outcome,
            observed: Outcome, thresholds: Thresholds) -> Prediction:
    applied = apply(cal, candidate, traffic)
    floor = thresholds.advice_preemption_floor
    per_key: dict[str, list[float]] = {k: [] for k in METRIC_KEYS}
    for seed in SEEDS:
        outcome = simulate(cal, applied.config, applied.workload, applied.traffic, cal.cost, seed).outcome
        for key in METRIC_KEYS:
            value = _scale(outcome.get(key), observed.get(key), baseline.get(key), key, floor)
            if value is not None:
                if key == "generation_tokens_per_second":
                    value *= applied.throughput_scale
                per_key[key].append(value)
    predicted = Outcome(*(statistics.median(per_key[k]) if per_key[k] else None for k in METRIC_KEYS))
    interval = {k: (min(v), max(v)) if v else None for k, v in per_key.items()}
    return Prediction(predicted, interval, worse(observed, predicted, thresholds))


def _text(key: str, value: float) -> str:
    return numbers.seconds(value) if key.endswith("_seconds") else numbers.number(value)


def worse(observed: Outcome, predicted: Outcome, thresholds: Thresholds) -> tuple[str, ...]:
    """Each metric the change makes worse by more than advice_worse_share, in numbers."""
    out = []
    for key in METRIC_KEYS:
        before, after = observed.get(key), predicted.get(key)
        if before is None or after is None:
            continue
        if key == "preemption_rate":
            if after > max(before, thresholds.advice_preemption_floor) * (1 + thresholds.advice_worse_share):
                out.append(f"{LABELS[key]} {numbers.number(before)} -> {numbers.number(after)}")
            continue
        change = (after - before) / before if before > 0 else 0.0
        bad = -change if key in HIGHER_IS_BETTER else change
        if bad > thresholds.advice_worse_share:
            out.append(f"{LABELS[key]} {_text(key, before)} -> {_text(key, after)} ({change:+.0%})")
    return tuple(out)


def score(observed: Outcome, predicted: Outcome, floor: float) -> float:
    """Summed log-improvement of the four metrics (latencies and preemptions down, throughput up)."""
    total = 0.0
    for key in METRIC_KEYS:
        before, after = observed.get(key), predicted.get(key)
        if before is None or after is None:
            continue
        pad = floor if key == "preemption_rate" else 1e-6
        gain = math.log((before + pad) / (after + pad))
        total += -gain if key in HIGHER_IS_BETTER else gain
    return total
