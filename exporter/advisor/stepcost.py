"""The engine's step cost identified from the window's own evidence, with its uncertainty.

A token gap (``vllm:inter_token_latency_seconds``) is one engine step seen by one decoding sequence, so a
scrape interval's mean gap is the mean time of its steps, and that mean is linear in what its steps held:
``mean gap = fixed + per_prefill x prefill tokens per step + per_decode x decodes per step``. Every interval
gives those from the window's deltas: steps (the count of ``vllm:iteration_tokens_total``, one observation
per step), tokens scheduled (its sum) and decodes (``vllm:generation_tokens_total``; prefill tokens are the
rest). Least squares over the intervals, each weighted by its gaps, gives the three parts and their
standard errors; the advisor's step cost is ``fixed + per_token x (prefill + decode_weight x decodes)``, so
``decode_weight = per_decode / per_prefill``.

The split is identified only where the intervals differ in what their steps hold. Where every step has
about the same size (a steady batch of decodes, one prompt length), time per step is all the window
shows; the result says so (``identified`` false, with the reason) and the advisor keeps its prior weight
(``advice_decode_token_weight``) with that prior's spread as the uncertainty, or a profile's
(``vllm-diag profile``) where one is configured. Even then the window bounds the weight from above: its ITL and
prefill-time means leave the step no fixed part beyond some weight (``weight_ceiling``), and a prior above it is
taken as the prior truncated there (``bounded_prior``, ``prior_within_window``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from exporter.catalog import metrics as vllm
from exporter.window import HistogramDelta, Window

MIN_INTERVALS = 6  # intervals a three-parameter fit needs (three residual degrees of freedom at least)
# A split is identified when the decode weight's relative standard error is under this: beyond it, the
# window's 80 % interval on the weight spans more than a factor of ~4.
MAX_RELATIVE_ERROR = 0.5
# A decode costing under half or over 40 prefill tokens is no reading of a step. Wider on purpose than
# advice_decode_token_weight's range, to which calibrate clamps a reading between the two.
WEIGHT_RANGE = (0.5, 40.0)


@dataclass(frozen=True, slots=True)
class StepEvidence:
    """What the window says about the step cost. Costs in seconds; ``None`` where not identified."""

    intervals: int  # scrape intervals read
    steps: float  # token gaps in them (one per decoding sequence and step)
    seconds_per_step: float | None  # the mean gap: the one number every window identifies
    fixed_s: float | None = None
    per_prefill_token_s: float | None = None
    per_decode_s: float | None = None
    decode_weight: float | None = None
    decode_weight_sigma: float | None = None  # its standard error in log terms
    identified: bool = False
    reason: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepEvidence:
        """The evidence ``to_dict`` wrote (a profile file's ``evidence``)."""
        def f(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)
        return cls(int(data.get("intervals") or 0), float(data.get("token_gaps") or 0),
                   f("seconds_per_step"), f("fixed_seconds"), f("per_prefill_token_seconds"), f("per_decode_seconds"),
                   f("decode_token_weight"), f("decode_token_weight_log_sigma"), bool(data.get("identified")),
                   str(data.get("reason") or ""))

    def to_dict(self) -> dict[str, object]:
        def r(value: float | None, digits: int) -> float | None:
            return None if value is None else round(value, digits)
        return {"identified": self.identified, "reason": self.reason or None, "intervals": self.intervals,
                "token_gaps": round(self.steps), "seconds_per_step": r(self.seconds_per_step, 6),
                "fixed_seconds": r(self.fixed_s, 6), "per_prefill_token_seconds": r(self.per_prefill_token_s, 8),
                "per_decode_seconds": r(self.per_decode_s, 7), "decode_token_weight": r(self.decode_weight, 2),
                "decode_token_weight_log_sigma": r(self.decode_weight_sigma, 3)}


@dataclass(frozen=True, slots=True)
class Interval:
    """One scrape interval's steps as the fits read them."""

    gaps: float  # token gaps (one per decoding sequence and step)
    mean_gap: float
    prefill_per_step: float
    decodes_per_step: float
    iterations: tuple[HistogramDelta, ...]  # the iteration-token histograms' deltas (tokens per step)
    steps: float


def intervals(window: Window) -> list[Interval]:
    """Each scrape interval with steps and token gaps (none across a restart)."""
    out = []
    for step, decodes in zip(window.steps, window.increase_by_step(vllm.GENERATION_TOKENS_TOTAL), strict=True):
        if step.restarted:
            continue
        iterations = window.histograms_at(step, vllm.ITERATION_TOKENS_TOTAL)
        gaps = window.histograms_at(step, vllm.INTER_TOKEN_LATENCY_SECONDS)
        steps, tokens = sum(h.count for h in iterations), sum(h.sum for h in iterations)
        count, total = sum(h.count for h in gaps), sum(h.sum for h in gaps)
        if steps <= 0 or count <= 0:
            continue
        out.append(Interval(count, total / count, max(tokens - decodes, 0.0) / steps, decodes / steps,
                            tuple(iterations), steps))
    return out


def rows(window: Window) -> list[tuple[float, float, float, float]]:
    """(gaps, mean gap, prefill tokens per step, decodes per step) of each interval with steps and gaps."""
    return [(i.gaps, i.mean_gap, i.prefill_per_step, i.decodes_per_step) for i in intervals(window)]


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12 * max(1.0, max(abs(x) for row in m for x in row[:n])):
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def inverse(a: list[list[float]]) -> list[list[float]] | None:
    n = len(a)
    columns = []
    for j in range(n):
        col = _solve(a, [1.0 if i == j else 0.0 for i in range(n)])
        if col is None:
            return None
        columns.append(col)
    return [[columns[j][i] for j in range(n)] for i in range(n)]


def identify(window: Window) -> StepEvidence:
    """The step cost's fixed, per-prefill-token and per-decode parts from the window, or why not."""
    return fit(rows(window))


def fit(rows: list[tuple[float, float, float, float]]) -> StepEvidence:
    """The three parts from intervals of (gaps, mean gap, prefill tokens per step, decodes per step), or why not."""
    gaps = sum(r[0] for r in rows)
    per_step = sum(r[0] * r[1] for r in rows) / gaps if gaps else None
    base = StepEvidence(len(rows), gaps, per_step)
    if len(rows) < MIN_INTERVALS:
        return _not(base, f"{len(rows)} scrape intervals with steps and token gaps, needs {MIN_INTERVALS}")
    x = [(1.0, r[2], r[3]) for r in rows]
    w = [r[0] for r in rows]
    xtx = [[sum(wi * xi[p] * xi[q] for xi, wi in zip(x, w, strict=True)) for q in range(3)] for p in range(3)]
    xty = [sum(wi * xi[p] * r[1] for xi, wi, r in zip(x, w, rows, strict=True)) for p in range(3)]
    inv = inverse(xtx)
    if inv is None:
        return _not(base, "every interval's steps held the same prefill and decodes (steps of one size): time "
                          "per step is identified, its split into fixed and per-token parts is not")
    coef = [sum(inv[p][q] * xty[q] for q in range(3)) for p in range(3)]
    # Each gap's variance from the residuals (weights are gap counts: an interval's mean of n gaps varies as 1/n).
    residual = sum(wi * (r[1] - sum(c * v for c, v in zip(coef, xi, strict=True))) ** 2
                   for xi, wi, r in zip(x, w, rows, strict=True))
    variance = residual / max(len(rows) - 3, 1)
    fixed, per_prefill, per_decode = coef
    found = StepEvidence(base.intervals, gaps, per_step, fixed, per_prefill, per_decode)
    if per_prefill <= 0 or per_decode <= 0 or fixed < 0:
        return _not(found, "the window's intervals do not separate fixed, prefill and decode cost (a fitted part "
                           "came out negative: step sizes too alike)")
    weight = per_decode / per_prefill
    # The ratio's relative error by the delta method, from the covariance of the two costs.
    var_p, var_d, cov = variance * inv[1][1], variance * inv[2][2], variance * inv[1][2]
    relative = math.sqrt(max(var_d / per_decode ** 2 + var_p / per_prefill ** 2
                             - 2 * cov / (per_decode * per_prefill), 0.0))
    found = StepEvidence(base.intervals, gaps, per_step, fixed, per_prefill, per_decode, weight, math.log1p(relative))
    if relative > MAX_RELATIVE_ERROR:
        return _not(found, f"the decode weight {weight:.1f} has a relative standard error of {relative:.0%} "
                           f"(over {MAX_RELATIVE_ERROR:.0%}): step sizes vary too little in the window")
    if not WEIGHT_RANGE[0] <= weight <= WEIGHT_RANGE[1]:
        return _not(found, f"a decode weight of {weight:.1f} prefill tokens is outside {WEIGHT_RANGE[0]:g}-"
                           f"{WEIGHT_RANGE[1]:g}: the window's intervals do not read as one step-cost curve")
    return StepEvidence(found.intervals, gaps, per_step, fixed, per_prefill, per_decode, weight,
                        math.log1p(relative), identified=True)


def _not(evidence: StepEvidence, reason: str) -> StepEvidence:
    return StepEvidence(evidence.intervals, evidence.steps, evidence.seconds_per_step, evidence.fixed_s,
                        evidence.per_prefill_token_s, evidence.per_decode_s, evidence.decode_weight,
                        evidence.decode_weight_sigma, identified=False, reason=reason)


def weight_ceiling(itl: tuple[float, float, float], prefill: tuple[float, float, float], weight: float,
                   itl_mean: float, prefill_mean: float) -> float | None:
    """The largest decode weight at which the window's two means leave the step a non-negative fixed part,
    where ``weight`` is above it; None where the window does not bound it there.

    ``itl`` and ``prefill`` are the model's (steps, work, decodes) per observation, ``work`` counted at ``weight``.
    With ``fixed x steps + per_token x (prefill tokens + w x decodes)`` equal to both means, the fixed part is
    zero at ``w = (prefill_mean x P1 - itl_mean x P2) / (itl_mean x D2 - prefill_mean x D1)`` (P the prefill
    tokens, D the decodes). Above it, the decodes of one gap alone cost more than the gap: a fit that pins the
    fixed part at 0 then makes every step's time proportional to its tokens, and a batch twice as large twice
    as slow, where the window says its steps are mostly fixed cost (a compute-bound engine's decode step reads
    its weights once, whatever the batch)."""
    (s1, k1, d1), (s2, k2, d2) = itl, prefill
    p1, p2 = k1 - weight * d1, k2 - weight * d2
    denominator = itl_mean * d2 - prefill_mean * d1
    if denominator >= 0 or p1 < 0 or p2 <= 0:
        return None
    ceiling = (prefill_mean * p1 - itl_mean * p2) / denominator
    if not 0 < ceiling < weight:
        return None
    # Below the ceiling the fixed part is positive only while the determinant keeps its sign.
    below = 0.5 * ceiling
    det = s1 * (p2 + below * d2) - s2 * (p1 + below * d1)
    fixed = (itl_mean * (p2 + below * d2) - prefill_mean * (p1 + below * d1)) / det if det else -1.0
    return ceiling if fixed > 0 else None


def bounded_prior(prior: float, sigma: float, ceiling: float) -> tuple[float, float]:
    """The prior weight (lognormal, median ``prior``, log spread ``sigma``) given that the window puts the weight at
    most ``ceiling``: the median and log standard deviation of the prior truncated there."""
    normal = NormalDist()
    beta = (math.log(ceiling) - math.log(prior)) / sigma if sigma > 0 else -math.inf
    mass = normal.cdf(beta) if math.isfinite(beta) else 0.0
    if mass < 1e-9:  # the prior holds (next to) nothing under the ceiling: the ceiling, its spread unknown
        return ceiling, sigma
    median = math.log(prior) + sigma * normal.inv_cdf(mass / 2.0)
    ratio = normal.pdf(beta) / mass
    spread = sigma * math.sqrt(max(1.0 - beta * ratio - ratio * ratio, 0.0))
    return min(math.exp(median), ceiling), spread


def prior_within_window(itl: tuple[float, float, float], prefill: tuple[float, float, float], at: float,
                        prior: tuple[float, float], itl_mean: float, prefill_mean: float | None,
                        floor: float) -> tuple[float, float, str]:
    """(weight, log spread, source): the prior decode weight and spread (``prior``) where the two means allow it,
    else the prior bounded by their ceiling (``bounded_prior``, at least ``floor``). ``itl`` and ``prefill`` are the
    model's (steps, work, decodes) per observation, ``work`` counted at the weight ``at``."""
    weight, sigma = prior
    ceiling = None
    if prefill_mean:
        moved = [(s, k + (weight - at) * d, d) for s, k, d in (itl, prefill)]
        ceiling = weight_ceiling(moved[0], moved[1], weight, itl_mean, prefill_mean)
    if ceiling is None:
        return weight, sigma, "prior"
    bounded, spread = bounded_prior(weight, sigma, ceiling)
    return max(bounded, floor), spread, "bounded"
