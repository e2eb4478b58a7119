"""The step-cost fit's means are the seeds' pooled means (exporter/advisor/calibrate.py ``_fit_means``).

The check and every prediction pool the three seeds' runs; a fit solved on one seed's run made that seed's ITL
and prefill means the window's, and the pooled ones drifted by how the seeds' draws differ (round 23: 12-27 %
over on busy windows). Here each seed's sums are fixed and linear in the cost, so the fit is exact and the
pooled means at the fitted cost must be the targets."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest

from exporter.advisor import calibrate
from exporter.advisor.calibrate import FIT_ROUNDS, SEEDS, Outcome, Run, _fit_means
from exporter.advisor.model import Linear, StepCost, pool
from tests.unit.test_advisor_search import _cal

# Per seed: (ITL observations, steps, work) and (prefill observations, steps, work). Seed 1 draws the lightest batches.
SUMS = {1: ((400.0, 400.0, 400.0 * 20.0), (40.0, 40.0 * 4.0, 40.0 * 300.0)),
        2: ((380.0, 380.0 * 1.2, 380.0 * 34.0), (38.0, 38.0 * 5.0, 38.0 * 340.0)),
        3: ((300.0, 300.0 * 1.4, 300.0 * 52.0), (30.0, 30.0 * 6.5, 30.0 * 380.0))}
ITL_MEAN, PREFILL_MEAN = 0.012, 0.090


def _linear(n: float, steps: float, work: float) -> Linear:
    return Linear(n=n, steps=steps, work=work, decodes=0.0)


def _fake(calls: list[int]) -> Any:
    def simulate(cal: Any, config: Any, workload: Any, traffic: Any, cost: StepCost, seed: int) -> Run:
        calls.append(seed)
        itl, pre = _linear(*SUMS[seed][0]), _linear(*SUMS[seed][1])
        return Run(Outcome(None, None, None, None), itl.coefficients(), pre.coefficients(), cast(Any, None),
                   cast(Any, None), cast(Any, None), 0.001, (0.0, 0.0), (itl, pre, cost.decode_weight, (0.001, 1)))
    return simulate


def _pooled_mean(cost: StepCost, part: int) -> float:
    n = math.fsum(SUMS[s][part][0] for s in SEEDS)
    return math.fsum(cost.fixed_s * SUMS[s][part][1] + cost.per_token_s * SUMS[s][part][2] for s in SEEDS) / n


def test_the_fit_makes_the_seeds_pooled_means_the_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(calibrate, "simulate", _fake(calls))
    fitted, _ = _fit_means(_cal(), StepCost(ITL_MEAN, 0.0), ITL_MEAN, PREFILL_MEAN, FIT_ROUNDS)
    assert _pooled_mean(fitted.cost, 0) == pytest.approx(ITL_MEAN, rel=1e-9)
    assert _pooled_mean(fitted.cost, 1) == pytest.approx(PREFILL_MEAN, rel=1e-9)
    # as many simulations as the fit's rounds allow, ending on the seed the brackets' own runs use
    assert len(calls) <= FIT_ROUNDS + 1 and calls[-1] == SEEDS[0]


def test_pooled_sums_recount_each_runs_work_at_the_current_decode_weight() -> None:
    itl = Linear(n=10.0, steps=10.0, work=10.0 * (100.0 + 4.0 * 8.0), decodes=10.0 * 8.0)  # counted at weight 4
    pre = Linear(n=2.0, steps=4.0, work=2.0 * 500.0, decodes=0.0)
    other = Linear(n=30.0, steps=30.0, work=30.0 * (50.0 + 2.0 * 4.0), decodes=30.0 * 4.0)  # counted at weight 2
    pooled_itl, pooled_pre, wait = pool([(itl, pre, 4.0, (0.02, 2)), (other, Linear(), 2.0, (0.01, 3))], 2.0)
    assert pooled_itl.coefficients() == pytest.approx((1.0, (10 * (100 + 16) + 30 * (50 + 8)) / 40))
    assert pooled_pre.coefficients() == pytest.approx((2.0, 500.0))
    assert wait == pytest.approx(0.03 / 5)
