"""Where the first calibration misses the window: the decode weights, then the cost levels, that the
advisor tries (exporter/advisor/search.py). The check is a pure function of the step cost here, so each
path (a weight passes, only a level passes, nothing passes) is forced; tests/simulator/test_advisor.py and
lab/tests/integration/test_advisor_weight_search.py run the real check."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from exporter.advisor.arrival import ArrivalModel
from exporter.advisor.calibrate import Calibration, CannotCalibrate, Empirical, Outcome
from exporter.advisor.model import Clients, OpenArrivals, StepCost
from exporter.advisor.reproduce import Check
from exporter.advisor.search import Checked, scale_factors, scaled, search_weights, searched
from exporter.catalog.thresholds import Thresholds

TH = Thresholds()


def _cal(weight: float = 4.0, source: str = "prior") -> Calibration:
    return Calibration(
        duration_s=120.0, warmup_s=10.0,
        prompt=Empirical((300.5,), (40.0,), (50.5,)), output=Empirical((60.0,), (50.0,), (10.0,)),
        shared_prefix_tokens=0,
        arrivals=ArrivalModel("open", OpenArrivals(2.5, 1.3, backlog=2), Clients(6, 0.25), 5.5, math.inf, 1.3),
        cost=StepCost(0.010, 2e-5, noise_sigma=0.2, compute_per_token_s=1e-7, decode_weight=weight),
        frontend_s=0.004, block_size=16, num_gpu_blocks=900, max_num_batched_tokens=256, max_num_seqs=16,
        max_model_len=4096, enable_prefix_caching=True, kv_bytes_per_block=None, frontend_observed_s=0.005,
        weight_sigma=0.6, weight_source=source)


def _checked(ttft_error: float) -> Checked:
    ok = abs(ttft_error) <= TH.advice_max_calibration_error
    check = Check(Outcome(1.0, 0.02, 0.0, 100.0, 0.5, 0.2), {"ttft_p95_seconds": ttft_error, "itl_p95_seconds": 0.05},
                  (), ok, "" if ok else "off")
    return "open", {"open": check}


def _queue(cal: Calibration, capacity_fixed_s: float) -> Checked:
    """A window whose queue only a fixed cost near ``capacity_fixed_s`` reproduces: TTFT off by 1/(1-rho)."""
    rho, true_rho = min(cal.cost.fixed_s / capacity_fixed_s * 0.8, 0.99), 0.8
    return _checked((1 - true_rho) / (1 - rho) - 1.0)


def test_the_cost_levels_are_log_symmetric_nearest_first_and_none_at_one() -> None:
    factors = scale_factors(TH)
    assert factors[0] == pytest.approx(1 / factors[1]) and factors[2] == pytest.approx(1 / factors[3])
    assert 1 < factors[1] < factors[3] == TH.advice_step_cost_scale_max
    assert scale_factors(replace(TH, advice_step_cost_scale_max=1.0)) == ()
    half = scaled(_cal(), 0.5)
    assert (half.cost.fixed_s, half.cost.per_token_s, half.cost_scale) == (0.005, 1e-5, 0.5)
    assert half.cost.noise_sigma == 0.2 and half.cost.decode_weight == 4.0  # the jitter and split kept


def test_a_weight_that_passes_wins_and_no_level_is_tried() -> None:
    cal = _cal()
    tried: list[Calibration] = []

    def check_all(trial: Calibration) -> Checked:
        tried.append(trial)
        return _checked(0.1 if trial.cost.decode_weight < 4.0 else 0.9)

    def refit(weight: float) -> Calibration:
        return replace(cal, cost=replace(cal.cost, decode_weight=weight), weight_source="search")

    best, (kind, checks) = searched(cal, _checked(0.9), refit, check_all, TH)
    assert checks[kind].ok and best.cost.decode_weight < 4.0 and best.cost_scale == 1.0
    assert len(tried) == len(search_weights(cal)) == 4


def test_only_a_cost_level_reproduces_a_queue_a_few_per_cent_off() -> None:
    cal = _cal()  # fixed cost 10 ms; the window's queue says 9 ms: the model is 11 % slow, its TTFT far off
    first = _queue(cal, 0.009)
    assert not first[1]["open"].ok

    def refit(weight: float) -> Calibration:
        if weight > 8:
            raise CannotCalibrate("no decode steps")  # a refit that fails is skipped
        return replace(cal, cost=replace(cal.cost, decode_weight=weight), weight_source="search")

    best, (kind, checks) = searched(cal, first, refit, lambda trial: _queue(trial, 0.009), TH)
    assert checks[kind].ok and best.cost_scale == pytest.approx(1 / math.sqrt(TH.advice_step_cost_scale_max))
    assert best.cost.fixed_s == pytest.approx(0.010 * best.cost_scale)


def test_nothing_passing_leaves_the_first_calibration_and_its_reason() -> None:
    cal, first = _cal(), _checked(2.0)
    best, checked = searched(cal, first, lambda w: replace(cal, cost=replace(cal.cost, decode_weight=w)),
                             lambda trial: _checked(1.5), TH)
    assert best is cal and checked is first


def test_an_identified_weight_is_not_searched_but_its_level_is() -> None:
    cal = _cal(source="window")
    assert search_weights(cal) == ()
    best, (kind, checks) = searched(cal, _queue(cal, 0.0085), lambda w: cal, lambda t: _queue(t, 0.0085), TH)
    assert checks[kind].ok and best.cost_scale < 1.0
