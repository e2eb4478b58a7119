"""The cost of a prefix-cache hit: charged once per admission in the model's step, carried into the interval as a
parameter one window does not identify (exporter/advisor/cached.py, exporter/advisor/model.py)."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace
from typing import Any

import pytest

from exporter.advisor import cached
from exporter.advisor.arrival import ArrivalModel
from exporter.advisor.calibrate import Calibration, Empirical, Outcome
from exporter.advisor.model import Clients, FittedCost, OpenArrivals, StepCost, Trace
from exporter.catalog.thresholds import Thresholds

TH = Thresholds()


def _step(cost: FittedCost, chunks: list[tuple[Any, int, int]]) -> float:
    return cost.step_time(0.0, 0, 0, chunks).wall_s


def test_a_cached_token_costs_its_weight_once_per_admission() -> None:
    model = FittedCost(StepCost(0.001, 1e-5, cached_weight=0.5), Trace(0.0), random.Random(1))
    request = SimpleNamespace(rid=7, preemptions=0)
    # Admitted with 256 tokens cached, 100 prefilled: the hits cost half a prefill token each.
    assert _step(model, [(request, 256, 100)]) == pytest.approx(0.001 + 1e-5 * (100 + 128))
    # Its next chunk starts past its own first chunk: no hits to cost.
    assert _step(model, [(request, 356, 100)]) == pytest.approx(0.001 + 1e-5 * 100)
    # Preempted and admitted again on 192 of its tokens still cached: costed again.
    request.preemptions = 1
    assert _step(model, [(request, 192, 50)]) == pytest.approx(0.001 + 1e-5 * (50 + 96))
    free = FittedCost(StepCost(0.001, 1e-5), Trace(0.0), random.Random(1))
    assert _step(free, [(SimpleNamespace(rid=8, preemptions=0), 256, 100)]) == pytest.approx(0.001 + 1e-5 * 100)


def test_the_prediction_takes_a_free_hit_and_the_interval_the_whole_range() -> None:
    assert TH.advice_cached_token_weight == cached.RANGE[0] == 0.0
    assert cached.RANGE[1] == 1.0 and cached.SPAN == pytest.approx(math.sqrt(12))


def _cal(shared: int, caching: bool = True) -> Calibration:
    return Calibration(
        duration_s=20.0, warmup_s=5.0,
        prompt=Empirical((600.0,), (40.0,), (50.0,)), output=Empirical((40.0,), (50.0,), (10.0,)),
        shared_prefix_tokens=shared,
        arrivals=ArrivalModel("open", OpenArrivals(4.0, 1.0), Clients(6, 0.25), 5.5, math.inf, 1.0),
        cost=StepCost(0.004, 2e-5, decode_weight=4.0, cached_weight=TH.advice_cached_token_weight),
        frontend_s=0.001, block_size=16, num_gpu_blocks=900, max_num_batched_tokens=256, max_num_seqs=16,
        max_model_len=4096, enable_prefix_caching=caching, kv_bytes_per_block=None, frontend_observed_s=0.001,
        fit_means=(0.006, 0.02))


def test_the_brackets_are_the_ends_of_the_range() -> None:
    baseline = Outcome(0.1, 0.01, 0.0, 100.0)
    assert cached.brackets(_cal(0, caching=False), baseline) == ()
    # No hits in the window: the same fit, the window's own baseline; only a what-if that adds sharing moves.
    low, high = cached.brackets(_cal(0), baseline)
    assert (low[0].cost.cached_weight, high[0].cost.cached_weight) == cached.RANGE
    assert low[1] is baseline and high[0].cost.fixed_s == 0.004


def test_with_hits_in_the_window_each_bracket_is_refitted_to_it() -> None:
    low, high = cached.brackets(_cal(512), Outcome(0.1, 0.01, 0.0, 100.0))
    # Dearer hits explain the same prefill time with cheaper tokens: the refit's per-token part falls.
    assert high[0].cost.per_token_s < low[0].cost.per_token_s
    assert (low[0].cost.cached_weight, high[0].cost.cached_weight) == cached.RANGE
