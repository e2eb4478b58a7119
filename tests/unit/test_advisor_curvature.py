"""The step cost's curvature in the tokens of a step (exporter/advisor/curvature.py, exporter/advisor/model.py): read
from the window where its steps' sizes identify it, else said so and carried into the interval over its range."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace
from typing import Any

import pytest

from exporter.advisor import curvature
from exporter.advisor.arrival import ArrivalModel
from exporter.advisor.calibrate import Calibration, CannotCalibrate, Empirical, Outcome, refit
from exporter.advisor.model import CURVATURE_TOKENS, Clients, FittedCost, OpenArrivals, StepCost, Trace
from exporter.advisor.stepcost import identify as linear
from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.parse import parse
from exporter.window import Window

TH = Thresholds()
FIXED, PER_PREFILL, PER_DECODE, BEND = 0.002, 2e-5, 1e-4, 0.6
BOUNDS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0)
MIDDLES = [0.5 * (lo + hi) for lo, hi in zip((0.0, *BOUNDS), BOUNDS)]


def _step_s(prefill: float, decodes: float, bend: float) -> float:
    return FIXED + PER_PREFILL * prefill * (1 + bend * prefill / CURVATURE_TOKENS) + PER_DECODE * decodes


def _window(intervals: list[tuple[int, int, int, int, int]], noise: float = 0.0, bend: float = BEND) -> Window:
    """Each interval: ``decodes`` in every step, ``n_a`` steps in iteration bucket ``a`` and ``n_b`` in ``b`` (each at
    the bucket's middle: its prefill is the middle less the decodes); a decode's token gap is its step's time."""
    rng = random.Random(7)
    window = Window(10_000, [vllm.GENERATION_TOKENS_TOTAL])
    counts = [0.0] * len(BOUNDS)
    tokens = generated = gaps_n = gaps_sum = 0.0
    for i, (decodes, a, n_a, b, n_b) in enumerate([(1, 0, 0, 0, 0), *intervals]):
        for bucket, n in ((a, n_a), (b, n_b)):
            prefill = MIDDLES[bucket] - decodes
            counts[bucket] += n
            tokens += n * MIDDLES[bucket]
            generated += n * decodes
            gaps_n += n * decodes
            gaps_sum += n * decodes * _step_s(prefill, decodes, bend) * (1 + rng.gauss(0, noise))
        cumulative, lines = 0.0, []
        for bound, count in zip(BOUNDS, counts):
            cumulative += count
            lines.append(f'{vllm.ITERATION_TOKENS_TOTAL}_bucket{{model_name="m",le="{bound}"}} {cumulative}')
        text = "\n".join([
            f"# TYPE {vllm.ITERATION_TOKENS_TOTAL} histogram", *lines,
            f'{vllm.ITERATION_TOKENS_TOTAL}_bucket{{model_name="m",le="+Inf"}} {cumulative}',
            f'{vllm.ITERATION_TOKENS_TOTAL}_sum{{model_name="m"}} {tokens}',
            f'{vllm.ITERATION_TOKENS_TOTAL}_count{{model_name="m"}} {cumulative}',
            f"# TYPE {vllm.INTER_TOKEN_LATENCY_SECONDS} histogram",
            f'{vllm.INTER_TOKEN_LATENCY_SECONDS}_bucket{{model_name="m",le="+Inf"}} {gaps_n}',
            f'{vllm.INTER_TOKEN_LATENCY_SECONDS}_sum{{model_name="m"}} {gaps_sum}',
            f'{vllm.INTER_TOKEN_LATENCY_SECONDS}_count{{model_name="m"}} {gaps_n}',
            f"# TYPE {vllm.GENERATION_TOKENS_TOTAL} counter",
            f'{vllm.GENERATION_TOKENS_TOTAL}{{model_name="m"}} {generated}', ""])
        window.push(parse(text, 1000.0 + 5 * i))
    return window


def _spread() -> list[tuple[int, int, int, int, int]]:
    """Intervals whose steps differ in decodes, in prefill and in the spread of their prefill sizes."""
    rng = random.Random(11)
    return [(rng.randint(1, 6), rng.randint(3, 5), rng.randint(5, 60), rng.randint(6, 8), rng.randint(5, 60))
            for _ in range(24)]


def test_a_larger_step_costs_more_by_the_token_at_a_curvature() -> None:
    def step(cost: StepCost, prefill: int, decodes: int = 0) -> float:
        chunks = [(SimpleNamespace(rid=1, preemptions=0), 0, prefill)] if prefill else []
        return FittedCost(cost, Trace(0.0), random.Random(1)).step_time(0.0, decodes, 0, chunks).wall_s

    linear_cost = StepCost(0.001, 1e-5, decode_weight=4.0)
    bent = StepCost(0.001, 1e-5, decode_weight=4.0, curvature=0.5)
    assert step(linear_cost, 1024, 2) == pytest.approx(0.001 + 1e-5 * (1024 + 8))
    assert step(bent, 1024, 2) == pytest.approx(0.001 + 1e-5 * (1024 * 1.5 + 8))
    assert step(bent, 0, 2) == step(linear_cost, 0, 2)  # a decode-only step is as it was
    # Four 256-token chunks cost less than one 1,024-token step at a curvature, the same without one.
    assert 4 * step(bent, 256) - 3 * 0.001 < step(bent, 1024)
    assert 4 * step(linear_cost, 256) - 3 * 0.001 == pytest.approx(step(linear_cost, 1024))


def test_steps_of_several_sizes_identify_the_curvature() -> None:
    window = _window(_spread())
    reading = curvature.identify(window, 2048, linear(window), TH.advice_step_curvature)
    assert reading.identified and reading.reason == "", reading.reason
    assert reading.reading == pytest.approx(BEND, rel=1e-6) and reading.used == pytest.approx(BEND, rel=1e-6)
    noisy = _window(_spread(), noise=0.01)
    found = curvature.identify(noisy, 2048, linear(noisy), TH.advice_step_curvature)
    assert found.identified and found.sigma is not None and found.reading == pytest.approx(BEND, abs=3 * found.sigma)
    assert found.to_dict()["interval_from"] == "reading -/+ one standard error"


def test_a_chunked_histogram_is_not_step_sizes() -> None:
    window = _window(_spread())
    reading = curvature.identify(window, 256, linear(window), TH.advice_step_curvature)
    assert not reading.identified and "chunked prefill" in reading.reason
    assert reading.used == TH.advice_step_curvature and reading.to_dict()["interval_from"] == "the whole range"


def test_steps_of_one_size_or_an_unseparated_line_say_so() -> None:
    one = _window([(d, 6, 40, 6, 0) for d in (1, 2, 3, 4, 5, 6) * 4])
    reading = curvature.identify(one, 2048, linear(one), TH.advice_step_curvature)
    assert not reading.identified and "needs 3" in reading.reason
    window = _window(_spread())
    unseparated = curvature.identify(window, 2048, None, TH.advice_step_curvature)
    assert not unseparated.identified and "step_evidence" in unseparated.reason


def test_a_reading_within_its_error_is_reported_not_used() -> None:
    # A line (no curvature) read through 3 % noise: the line is identified, the curvature's error is larger than it.
    window = _window(_spread(), noise=0.03, bend=0.0)
    assert linear(window).identified
    reading = curvature.identify(window, 2048, linear(window), TH.advice_step_curvature)
    assert not reading.identified and "as large as its effect" in reading.reason
    assert reading.reading is not None and reading.sigma is not None and reading.used == TH.advice_step_curvature


def _cal(reading: curvature.Curvature | None) -> Calibration:
    return Calibration(
        duration_s=20.0, warmup_s=5.0,
        prompt=Empirical((600.0,), (40.0,), (50.0,)), output=Empirical((40.0,), (50.0,), (10.0,)),
        shared_prefix_tokens=0,
        arrivals=ArrivalModel("open", OpenArrivals(4.0, 1.0), Clients(6, 0.25), 5.5, math.inf, 1.0),
        cost=StepCost(0.004, 2e-5, decode_weight=4.0, curvature=reading.used if reading else 0.0),
        frontend_s=0.001, block_size=16, num_gpu_blocks=900, max_num_batched_tokens=1024, max_num_seqs=16,
        max_model_len=4096, enable_prefix_caching=True, kv_bytes_per_block=None, frontend_observed_s=0.001,
        fit_means=(0.006, 0.03), curvature=reading)


def _refit(cal: Calibration, cost: StepCost) -> tuple[Calibration, Outcome] | None:
    try:
        return refit(cal, cost)
    except CannotCalibrate:
        return None


def test_unidentified_the_interval_takes_the_range_identified_the_readings_error() -> None:
    assert TH.advice_step_curvature == curvature.RANGE[0] == 0.0 and curvature.RANGE[1] == 1.0
    (low, high), span = curvature.brackets(_cal(curvature.Curvature(False, "why", 0.0)), _refit)
    assert (low[0].cost.curvature, high[0].cost.curvature) == curvature.RANGE and span == pytest.approx(math.sqrt(12))
    # Dearer large steps explain the same prefill time with a cheaper token: the refit's per-token part falls.
    assert high[0].cost.per_token_s < low[0].cost.per_token_s
    read: Any = curvature.Curvature(True, "", 0.5, 0.5, 0.1)
    (low, high), span = curvature.brackets(_cal(read), _refit)
    assert (low[0].cost.curvature, high[0].cost.curvature) == pytest.approx((0.4, 0.6)) and span == pytest.approx(2)
    # Clamped at the range's end: the brackets span fewer standard errors.
    (low, high), span = curvature.brackets(_cal(curvature.Curvature(True, "", 0.95, 0.95, 0.1)), _refit)
    assert high[0].cost.curvature == 1.0 and span == pytest.approx(1.5)
    # A refit that cannot reproduce the window leaves no brackets, and the interval without the term.
    assert curvature.brackets(_cal(read), lambda cal, cost: None) == ((), pytest.approx(2))
