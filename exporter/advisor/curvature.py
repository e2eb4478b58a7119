"""How much dearer a prefill token is in a larger step: the step cost's curvature, read from the window where it can
be, else carried as an unidentified parameter into the prediction's interval.

The step cost is linear in its tokens (``model.StepCost``); a real step need not be. A 1,024-token step can cost
more per token than a 256-token one (attention over the chunk, caches: the CPU build's tiny model read 15 % more at
1,024 than at 256 on one load), and a linear cost identified at one budget then says a larger budget saves each
prompt the fixed cost of the chunks it no longer needs. Other engines read none, or a larger step a little cheaper
(a GPU's small step leaves it idle), which the range below does not hold.
``StepCost.curvature`` is that: a prefill token in a step of ``P`` prefill tokens costs ``1 + curvature x P / 1024``
tokens of a small step.

From the window: each scrape interval's mean token gap is its steps' mean cost, so with the iteration-token
histogram's buckets (tokens per step) giving each interval's mean squared prefill per step, least squares over the
intervals gives ``fixed + a x prefill + d x decodes + q x prefill^2 / 1024`` and ``curvature = q / a`` with its standard
error (``identify``). Not identified, and said so in ``calibration.step_curvature``:

* a chunked prefill is counted whole in the step it finishes, so where the histogram holds steps above the token
  budget its buckets are not step sizes;
* fewer than three bucket sizes of steps that prefilled (every prefill step the same size: the square is the mean's);
* the linear split itself not identified by the window (``stepcost.identify``): a fourth part on three the window
  cannot separate;
* the curvature's standard error over half its value (the decode weight's rule, ``stepcost.MAX_RELATIVE_ERROR``) or
  over its range: the fit's error as large as its effect.

Where it is not identified the prediction takes ``advice_step_curvature`` (0: the linear cost) and the interval the
whole declared range, as for the cost of a cached token (``cached``): the what-if re-run at both ends, each refitted
to the window, their log spread over sqrt(12) one more parameter term of ``predict.sigma``. Where it is identified,
the reading (clamped to the range) and the what-if at -/+ its standard error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from exporter.advisor.model import CURVATURE_TOKENS, StepCost
from exporter.advisor.stepcost import MAX_RELATIVE_ERROR, MIN_INTERVALS, StepEvidence, intervals, inverse
from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import BY_KEY
from exporter.window import Window

_ENTRY = BY_KEY["advice_step_curvature"]
RANGE = (_ENTRY.minimum, _ENTRY.maximum if _ENTRY.maximum is not None else 1.0)
SPAN = math.sqrt(12.0)  # the ends of a uniform are sqrt(12) of its standard deviations apart
MIN_SIZES = 3  # bucket sizes of prefill steps a square's spread needs


@dataclass(frozen=True, slots=True)
class Curvature:
    """What the window says about the curvature, and what the model used: ``calibration.step_curvature``."""

    identified: bool
    reason: str
    used: float  # the curvature the prediction ran at
    reading: float | None = None  # the window's fit, where it got one
    sigma: float | None = None  # its standard error (absolute)
    step_sizes: int = 0  # bucket sizes of steps that prefilled

    def to_dict(self) -> dict[str, Any]:
        def r(value: float | None) -> float | None:
            return None if value is None else round(value, 3)
        return {"identified": self.identified, "reason": self.reason or None, "curvature_used": r(self.used),
                "curvature_read": r(self.reading), "curvature_sigma": r(self.sigma),
                "prefill_step_sizes": self.step_sizes, "range": list(RANGE),
                "interval_from": "reading -/+ one standard error" if self.identified else "the whole range"}


def rows(window: Window) -> tuple[list[tuple[float, float, float, float, float]], int]:
    """(gaps, mean gap, prefill per step, decodes per step, squared prefill per step / 1024) per interval, a bucket's
    steps read at its middle less the interval's decodes per step; and the bucket sizes of steps that prefilled."""
    out: list[tuple[float, float, float, float, float]] = []
    sizes: set[float] = set()
    for interval in intervals(window):
        per_decode, square = interval.decodes_per_step, 0.0
        for h in interval.iterations:
            below, lower = 0.0, 0.0
            for bound, cumulative in zip(h.bounds, h.cumulative, strict=True):
                n, below = cumulative - below, cumulative
                upper = bound if math.isfinite(bound) else 2.0 * lower
                prefill = max(0.5 * (lower + upper) - per_decode, 0.0)  # a bucket's steps at its middle
                if n > 0 and prefill >= 1.0:
                    sizes.add(upper)
                    square += n * prefill * prefill
                lower = bound
        out.append((interval.gaps, interval.mean_gap, interval.prefill_per_step, per_decode,
                    square / interval.steps / CURVATURE_TOKENS))
    return out, len(sizes)


def identify(window: Window, budget: int, linear: StepEvidence | None, default: float) -> Curvature:
    """The window's curvature, or why not (then ``default``, the prediction's point)."""
    data, sizes = rows(window)
    over = _largest_step(window)

    def no(reason: str, reading: float | None = None, sigma: float | None = None) -> Curvature:
        return Curvature(False, reason, default, reading, sigma, sizes)

    if over is not None and over > budget:
        return no(f"the iteration-token histogram holds steps of over {over:g} tokens against a budget of {budget}: "
                  f"a chunked prefill is counted whole in the step it finishes, so its buckets are not step sizes")
    if sizes < MIN_SIZES:
        return no(f"{sizes} bucket size(s) of steps that prefilled, needs {MIN_SIZES}: a square's spread is not "
                  f"seen")
    if len(data) < MIN_INTERVALS + 1:
        return no(f"{len(data)} scrape intervals with steps and token gaps, needs {MIN_INTERVALS + 1}")
    if linear is None or not linear.identified:
        return no("the window does not separate the step's fixed, prefill and decode cost (step_evidence), so "
                  "not a fourth part beside them either")
    x = [(1.0, r[2], r[3], r[4]) for r in data]
    w = [r[0] for r in data]
    xtx = [[sum(wi * xi[p] * xi[q] for xi, wi in zip(x, w, strict=True)) for q in range(4)] for p in range(4)]
    xty = [sum(wi * xi[p] * r[1] for xi, wi, r in zip(x, w, data, strict=True)) for p in range(4)]
    inv = inverse(xtx)
    if inv is None:
        return no("the intervals' squared prefill moves with their prefill (steps of one size): not separable")
    coef = [sum(inv[p][q] * xty[q] for q in range(4)) for p in range(4)]
    residual = sum(wi * (r[1] - sum(c * v for c, v in zip(coef, xi, strict=True))) ** 2
                   for xi, wi, r in zip(x, w, data, strict=True))
    variance = residual / max(len(data) - 4, 1)
    per_prefill, square = coef[1], coef[3]
    if per_prefill <= 0:
        return no("the fit's per-prefill-token cost came out non-positive: no curvature relative to it")
    reading = square / per_prefill
    # The ratio's standard error by the delta method.
    var_a, var_q, cov = variance * inv[1][1], variance * inv[3][3], variance * inv[1][3]
    relative = math.sqrt(max(var_q / square ** 2 + var_a / per_prefill ** 2 - 2 * cov / (square * per_prefill), 0.0)
                         ) if square else math.inf
    sigma = abs(reading) * relative if math.isfinite(relative) else math.inf
    if not sigma < min(MAX_RELATIVE_ERROR * abs(reading), RANGE[1] - RANGE[0]):
        return no(f"a curvature of {reading:.2f} with a standard error of {sigma:.2f} (over "
                  f"{MAX_RELATIVE_ERROR:.0%} of it): the fit's error is as large as its effect", reading,
                  sigma if math.isfinite(sigma) else None)
    return Curvature(True, "", min(max(reading, RANGE[0]), RANGE[1]), reading, sigma, sizes)


def _largest_step(window: Window) -> float | None:
    """The lower bound of the iteration-token histogram's highest populated bucket over the window."""
    hist = window.histogram(vllm.ITERATION_TOKENS_TOTAL)
    if hist is None:
        return None
    below, lower, top = 0.0, 0.0, None
    for bound, cumulative in zip(hist.bounds, hist.cumulative, strict=True):
        if cumulative - below > 0:
            top = lower
        below, lower = cumulative, bound
    return top


class Curved(Protocol):
    """What ``brackets`` reads of a calibration (``calibrate.Calibration``, which imports this module)."""

    @property
    def cost(self) -> StepCost: ...

    @property
    def curvature(self) -> Curvature | None: ...


C = TypeVar("C", bound=Curved)
R = TypeVar("R")


def brackets(cal: C, refit: Callable[[C, StepCost], R | None]) -> tuple[tuple[R, ...], float]:
    """The calibration at two curvatures, each refitted to the window by ``refit`` (``calibrate.refit``: the
    calibration and its own simulated window, None where it cannot), and how many standard deviations apart they
    are: the range's ends (sqrt(12)) where the window did not identify it, else the reading -/+ its standard error
    (2). Empty where a refit fails."""
    reading = cal.curvature
    if reading is not None and reading.identified and reading.sigma is not None:
        ends = (max(reading.used - reading.sigma, RANGE[0]), min(reading.used + reading.sigma, RANGE[1]))
        span = (ends[1] - ends[0]) / reading.sigma if reading.sigma > 0 else 2.0
    else:
        ends, span = RANGE, SPAN
    if ends[1] <= ends[0]:
        return (), span
    out = []
    for value in ends:
        moved = refit(cal, replace(cal.cost, curvature=value))
        if moved is None:
            return (), span
        out.append(moved)
    return tuple(out), span
