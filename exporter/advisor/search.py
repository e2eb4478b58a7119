"""Where the first calibration does not reproduce the window: the step costs to try instead.

The step cost is fitted to the window's ITL and prefill-time means at a decode weight the window rarely
identifies (``calibrate``). When that calibration fails the check, two things may be off, tried in order:

* the decode weight (how a step's time splits between decoding sequences and prefill tokens): the prior's
  band and twice as far (``search_weights``), each refitted to the means;
* the level of the cost itself: a queue near saturation grows as 1 / (1 - utilisation), so a cost a few per
  cent off fits both means and misses a queued TTFT threefold. The fitted cost scaled by up to
  ``advice_step_cost_scale_max`` either way (``scale_factors``) is tried, the means then off by as much,
  which the check still weighs against everything else.

The calibration kept is the one that passes the check with the smallest worst error; none passing, the
first stays, and the advisor says why it predicts nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from exporter.advisor.calibrate import WEIGHT_BOUNDS, Calibration, CannotCalibrate
from exporter.advisor.reproduce import Check
from exporter.catalog.thresholds import Thresholds

Checked = tuple[str, dict[str, Check]]  # the primary arrival reading and each reading's check


def search_weights(cal: Calibration) -> tuple[float, ...]:
    """The decode weights to try when the prior's calibration does not reproduce the window and neither the
    window's steps nor a profile identified one: the prior's band (x / exp(+/- sigma)) and twice as far, in the
    declared range. The weight sets how a step's time splits between what is fixed per sequence and what
    grows with a prefill: an engine whose decode is cheap against its prefill (compute-bound, as the wide MLP
    here or a GPU) reproduces its window only near 1, one whose decode reads a large head near 10."""
    if cal.weight_source != "prior":
        return ()
    step = math.exp(cal.weight_sigma) if cal.weight_sigma > 0 else 2.0
    out = []
    for k in (-2, -1, 1, 2):
        value = min(max(cal.cost.decode_weight * step ** k, WEIGHT_BOUNDS[0]), WEIGHT_BOUNDS[1])
        if value != cal.cost.decode_weight and value not in out:
            out.append(value)
    return tuple(out)


def scale_factors(thresholds: Thresholds) -> tuple[float, ...]:
    """The cost levels to try, nearest first: half and all of the allowed factor, each way (log-symmetric)."""
    top = thresholds.advice_step_cost_scale_max
    if top <= 1.0:
        return ()
    half = math.sqrt(top)
    return (1 / half, half, 1 / top, top)


def scaled(cal: Calibration, factor: float) -> Calibration:
    """The calibration with its fixed and per-token step cost times ``factor`` (the jitter and floor kept)."""
    cost = replace(cal.cost, fixed_s=cal.cost.fixed_s * factor, per_token_s=cal.cost.per_token_s * factor)
    return replace(cal, cost=cost, cost_scale=cal.cost_scale * factor)


def largest_error(result: Check) -> float:
    """The largest relative error of a check on TTFT, ITL and throughput (preemptions are judged apart)."""
    return max((abs(e) for k, e in result.errors.items() if e is not None and k != "preemption_rate"), default=0.0)


def worst(result: Check) -> float:
    """``largest_error``, failing checks after passing ones."""
    return (0.0 if result.ok else 1e6) + largest_error(result)


def searched(cal: Calibration, checked: Checked, refit: Callable[[float], Calibration],
             check_all: Callable[[Calibration], Checked], thresholds: Thresholds) -> tuple[Calibration, Checked]:
    """The calibration that reproduces the window best: of the refits at ``search_weights`` (``refit(weight)``),
    then, none passing, of the nearest miss scaled by ``scale_factors``, the one that passes ``check_all``
    with the smallest worst error; none passing, ``cal`` (which did not) as it was."""
    best: tuple[Calibration, Checked] | None = None
    nearest = (cal, checked)  # the miss with the smallest error: what the cost levels start from
    for weight in search_weights(cal):
        try:
            trial = refit(weight)
        except CannotCalibrate:
            continue
        best, nearest = _kept(best, nearest, (trial, check_all(trial)))
    if best is None:
        for factor in scale_factors(thresholds):
            trial = scaled(nearest[0], factor)
            best, _ = _kept(best, nearest, (trial, check_all(trial)))
    return best if best is not None else (cal, checked)


def _kept(best: tuple[Calibration, Checked] | None, nearest: tuple[Calibration, Checked],
          trial: tuple[Calibration, Checked]) -> tuple[tuple[Calibration, Checked] | None, tuple[Calibration, Checked]]:
    """The best passing calibration and the nearest miss, after one more trial."""
    result = trial[1][1][trial[1][0]]
    if result.ok:
        if best is None or worst(result) < worst(best[1][1][best[1][0]]):
            best = trial
    elif largest_error(result) < largest_error(nearest[1][1][nearest[1][0]]):
        nearest = trial
    return best, nearest
