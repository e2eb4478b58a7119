"""Run the calibrated model for a candidate change and turn it into a prediction with an interval.

Each seed's simulated outcome is scaled by observed / simulated-baseline (the calibration's residual
error, metric by metric), so what is predicted is the model's *change* applied to what was seen;
TTFT carries only its queue's part of that error and, in seconds, its tail's (``_ttft_p95``).
The prediction is the seeds pooled into one longer window. Its interval (``interval``) is what one window
can say: the prediction times exp(-/+ z sigma) at ``advice_interval_coverage``, sigma in log terms the root
sum of squares of

* the step-cost parameter's uncertainty: the same what-if on the calibrations refitted with the decode
  weight one standard deviation lower and higher (``calibrate.brackets``), half their log spread; and, where the
  model holds prefix-cache hits, the cost of a cached token: the what-if at both ends of its range
  (``cached.brackets``), their log spread over sqrt(12) (a uniform's standard deviation), added in squares; and the
  step cost's curvature the same way over its range, or -/+ its standard error where the window reads it
  (``curvature.brackets``);
* the calibration's residual: how far the calibrated model was from the window on this metric;
* the window's sampling error: a p95 from the rank band of the window's own histogram (the check's
  ``sampling_band``), a preemption rate from its Poisson count;
* the run-to-run noise of one window (``advice_noise_*``), measured once on the real validation pairs;
* the model's own error (``advice_model_error_*``), measured once on the pooled validation record's cells
  that moved: the four terms above alone covered 40 % of the real outcomes that moved, not 80 %.

The seeds' spread is not in it: the seeds are pooled, and their spread is none of these.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from exporter import numbers
from exporter.advisor.cached import SPAN as CACHED_SPAN
from exporter.advisor.calibrate import METRIC_KEYS, SEEDS, Calibration, Outcome, pooled, simulate
from exporter.advisor.candidates import Candidate, apply
from exporter.advisor.curvature import SPAN as CURVATURE_SPAN
from exporter.advisor.model import Clients, OpenArrivals
from exporter.advisor.reproduce import Check
from exporter.advisor.result import Prediction
from exporter.catalog.thresholds import Thresholds

LABELS = {"ttft_p95_seconds": "TTFT p95", "itl_p95_seconds": "ITL p95", "preemption_rate": "preemptions/s",
          "generation_tokens_per_second": "generation tokens/s"}
HIGHER_IS_BETTER = frozenset({"generation_tokens_per_second"})
QUEUE_FLOOR_S = 1e-3  # mean queue times under a millisecond: no queue to speak of, and no ratio to take
TAIL_CUT_MAX = 0.5  # a tail the model over-makes takes at most this share off the what-if's TTFT p95 (or the
# larger share it took off the model's own p95 at the base, ``_ttft_p95``)


def _scale(value: float | None, observed: float | None, baseline: float | None, key: str, floor: float) -> float | None:
    if value is None:
        return None
    if observed is None or baseline is None or baseline <= 0:
        return value
    if key == "preemption_rate" and (baseline <= floor or observed <= floor):
        return value  # a ratio of near-zero rates is noise: keep the model's own number
    return value * observed / baseline


def _ttft_p95(after: Outcome, observed: Outcome, baseline: Outcome) -> float | None:
    """The what-if's TTFT p95: its simulated p95 plus the part of the window's residual that goes with it.

    TTFT is queue time plus the rest (frontend, prefill). The rest is what the model was fitted to
    (the prefill-time mean is one of the step-cost fit's two equations; the frontend time is
    measured), so where the calibrated model misses the TTFT mean, it misses the queue: a queue behind
    preemptions, say. So

    * the queue's observed / simulated mean ratio scales the what-if in proportion to its own queue
      share (a change that empties the queue inherits none of the error the model made on it);
    * the p95's excess over what the means explain (the tail: seconds the model does or does not make, from
      queueing it misjudges or from a sample of a few slow requests) is carried in seconds, in proportion
      to the queue it came with, or where there is no queue to speak of, to the rest's seconds (``_carried``).
      It shrinks with the what-if's p95 but never grows with it: a change that lengthens every prefill does
      not lengthen the spread the model failed to explain.

    Unchanged, the what-if gets the window's p95 exactly.
    """
    p95_o, p95_b, p95_a = observed.ttft_p95_seconds, baseline.ttft_p95_seconds, after.ttft_p95_seconds
    if p95_o is None or p95_b is None or p95_a is None or p95_b <= 0:
        return None
    means = (observed.ttft_mean_seconds, observed.queue_mean_seconds, baseline.ttft_mean_seconds,
             baseline.queue_mean_seconds, after.ttft_mean_seconds, after.queue_mean_seconds)
    if any(m is None for m in means):
        return p95_a * p95_o / p95_b  # no queue histogram: the plain p95 ratio
    t_o, q_o, t_b, q_b, t_a, q_a = (float(m) for m in means)  # type: ignore[arg-type]
    if min(t_o, t_b, t_a) <= 0:
        return p95_a * p95_o / p95_b
    q_o, q_b, q_a = min(q_o, t_o), min(q_b, t_b), min(q_a, t_a)
    queue_ratio = q_o / q_b if min(q_o, q_b) > QUEUE_FLOOR_S else 1.0
    share_baseline, share_after = q_b / t_b, q_a / t_a
    mean_baseline = share_baseline * queue_ratio + (1.0 - share_baseline)
    mean_after = share_after * queue_ratio + (1.0 - share_after)
    excess = p95_o - p95_b * mean_baseline
    predicted = p95_a * mean_after + excess * _carried(q_b, t_b, q_a, t_a) * min(1.0, p95_a / p95_b)
    # The cut's floor: at most TAIL_CUT_MAX of the what-if's p95, and never more than the window kept of the
    # model's own at the base. A floor at a fixed half broke "unchanged gives the window's p95" wherever the
    # model's p95 was over twice the window's, and turned a what-if that shortens the model's tail into a
    # prediction above the window (validation-25's padded mixed budget raise: the model's p95 1.51 -> 1.30 s,
    # the window's 248 ms predicted at 360 ms).
    kept = p95_o / (p95_b * mean_baseline) if p95_b * mean_baseline > 0 else 1.0
    return max(predicted, min(1.0 - TAIL_CUT_MAX, kept) * p95_a * mean_after)


def _carried(q_b: float, t_b: float, q_a: float, t_a: float) -> float:
    """The share of the baseline's TTFT tail excess a what-if keeps, never above 1: with a queue, in proportion
    to the queue's share of the TTFT mean; without one to speak of (under ``QUEUE_FLOOR_S``), the tail came
    with the rest (prefill, frontend) and follows the rest's seconds.

    The queue's share read at any queue decided the tail by the ratio of two near-zero shares: 0.2 ms of
    queue in the model's baseline and none in the what-if dropped a tail the model made and the window did
    not (validation-16's tiny mixed load and CPU-quota budget raise: +70 % predicted where nothing moved, no
    change where the prefill shortened by a third)."""
    if q_b > QUEUE_FLOOR_S:
        return min(1.0, (q_a / t_a) / (q_b / t_b))
    return min(1.0, (t_a - q_a) / (t_b - q_b)) if t_b > q_b else 1.0


def _scaled(outcome: Outcome, observed: Outcome, baseline: Outcome, throughput_scale: float,
            floor: float) -> dict[str, float | None]:
    """One simulated what-if outcome as a prediction: the model's change applied to what was seen."""
    out: dict[str, float | None] = {}
    for key in METRIC_KEYS:
        if key == "ttft_p95_seconds":
            value = _ttft_p95(outcome, observed, baseline)
        else:
            value = _scale(outcome.get(key), observed.get(key), baseline.get(key), key, floor)
        if value is not None and key == "generation_tokens_per_second":
            value *= throughput_scale
        out[key] = value
    return out


def _noise(key: str, thresholds: Thresholds) -> float:
    return {"ttft_p95_seconds": thresholds.advice_noise_ttft_p95, "itl_p95_seconds": thresholds.advice_noise_itl_p95,
            "preemption_rate": thresholds.advice_noise_preemption}.get(key, thresholds.advice_noise_itl_p95)


def _model_error(key: str, thresholds: Thresholds) -> float:
    return {"ttft_p95_seconds": thresholds.advice_model_error_ttft_p95,
            "itl_p95_seconds": thresholds.advice_model_error_itl_p95,
            "preemption_rate": thresholds.advice_model_error_preemption}.get(key, thresholds.advice_model_error_itl_p95)


def sigma(key: str, check: Check | None, spread: Sequence[tuple[Sequence[float | None], float]], observed: Outcome,
          window_seconds: float, thresholds: Thresholds) -> float:
    """The log-terms standard deviation of one prediction (see the module's docstring); ``spread``: per uncertain
    parameter, the prediction at two of its values and how many standard deviations apart they are."""
    pad = thresholds.advice_preemption_floor if key == "preemption_rate" else 0.0
    parameter = 0.0
    for pair, span in spread:
        known = [v for v in pair if v is not None and v + pad > 0]
        if len(known) == 2:
            parameter = math.hypot(parameter, (math.log(known[-1] + pad) - math.log(known[0] + pad)) / span)
    error = check.errors.get(key) if check is not None else None
    residual = abs(math.log1p(error)) if error is not None and -1.0 < error < math.inf else 0.0
    sampling = 0.0
    band = check.bands.get(key) if check is not None else None
    if band and band[0] > 0 and band[1] > 0:
        z = statistics.NormalDist().inv_cdf(0.5 + thresholds.advice_calibration_confidence / 2)
        sampling = (math.log(band[1]) - math.log(band[0])) / (2 * z)
    elif key == "preemption_rate" and window_seconds > 0:
        sampling = 1.0 / math.sqrt((observed.get(key) or 0.0) * window_seconds + 1.0)
    return math.sqrt(parameter ** 2 + residual ** 2 + sampling ** 2 + _noise(key, thresholds) ** 2
                     + _model_error(key, thresholds) ** 2)


def interval(value: float | None, key: str, log_sigma: float, thresholds: Thresholds) -> tuple[float, float] | None:
    if value is None:
        return None
    pad = thresholds.advice_preemption_floor if key == "preemption_rate" else 0.0
    z = statistics.NormalDist().inv_cdf(0.5 + thresholds.advice_interval_coverage / 2)
    centre = math.log(max(value, 0.0) + pad) if value + pad > 0 else None
    if centre is None:
        return value, value
    return max(math.exp(centre - z * log_sigma) - pad, 0.0), math.exp(centre + z * log_sigma) - pad


def predict(cal: Calibration, candidate: Candidate, traffic: OpenArrivals | Clients, baseline: Outcome,
            observed: Outcome, thresholds: Thresholds, check: Check | None = None,
            bracketed: Sequence[tuple[Calibration, Outcome]] = (), window_seconds: float = 0.0,
            cached: Sequence[tuple[Calibration, Outcome]] = (), bent: Sequence[tuple[Calibration, Outcome]] = (),
            bent_span: float = CURVATURE_SPAN) -> Prediction:
    """The seeds pooled give the prediction (``calibrate.pooled``); ``interval`` its calibrated interval, with
    ``bracketed`` the calibrations at the decode weight -/+ one standard deviation and their baselines, and
    ``cached`` the same for the cost of a cached token (used where the window or the what-if holds prefix hits), and
    ``bent`` for the step cost's curvature, ``bent_span`` standard deviations apart (``curvature.brackets``)."""
    applied = apply(cal, candidate, traffic)
    floor = thresholds.advice_preemption_floor
    runs = [simulate(cal, applied.config, applied.workload, applied.traffic, cal.cost, seed) for seed in SEEDS]
    central = _scaled(pooled(runs), observed, baseline, applied.throughput_scale, floor)
    hits = cal.shared_prefix_tokens or applied.workload.classes[0].prefix.shared_len
    spreads = []
    for group, span in ((bracketed, 2.0), (cached if hits else (), CACHED_SPAN), (bent, bent_span)):
        spread = []
        for other, other_baseline in group:
            moved = apply(other, candidate, traffic)
            run = simulate(other, moved.config, moved.workload, moved.traffic, other.cost, SEEDS[0])
            spread.append(_scaled(run.outcome, observed, other_baseline, moved.throughput_scale, floor))
        spreads.append((spread, span))
    bands: dict[str, tuple[float, float] | None] = {}
    for key in METRIC_KEYS:
        log_sigma = sigma(key, check, [([s[key] for s in spread], span) for spread, span in spreads], observed,
                          window_seconds, thresholds)
        bands[key] = interval(central[key], key, log_sigma, thresholds)
    predicted = Outcome(ttft_p95_seconds=central["ttft_p95_seconds"], itl_p95_seconds=central["itl_p95_seconds"],
                        preemption_rate=central["preemption_rate"],
                        generation_tokens_per_second=central["generation_tokens_per_second"])
    return Prediction(predicted, bands, worse(observed, predicted, thresholds))


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
