"""The step cost from the window's own evidence (exporter/advisor/stepcost.py): the split into fixed,
per-prefill-token and per-decode parts where the window's steps differ in size, and "not identified"
where they do not."""

from __future__ import annotations

import math
import random

import pytest

from exporter.advisor.stepcost import bounded_prior, identify, weight_ceiling
from exporter.catalog import metrics as vllm
from exporter.parse import parse
from exporter.window import Window

FIXED, PER_PREFILL, PER_DECODE = 0.004, 2e-5, 3e-4  # a decode costs 15 prefill tokens


def _window(intervals: list[tuple[int, float, float]], noise: float = 0.0, seed: int = 0) -> Window:
    """Scrapes whose intervals each hold ``steps`` steps of ``prefill`` prompt tokens and ``decodes`` decoding
    sequences; every decode's token gap is one step's time (plus a relative ``noise``)."""
    rng = random.Random(seed)
    window = Window(10_000, [vllm.GENERATION_TOKENS_TOTAL])
    steps_n = tokens = generated = gaps_n = gaps_sum = 0.0
    for i, (steps, prefill, decodes) in enumerate([(0, 0.0, 0.0), *intervals]):
        step_s = FIXED + PER_PREFILL * prefill + PER_DECODE * decodes
        steps_n += steps
        tokens += steps * (prefill + decodes)
        generated += steps * decodes
        gaps_n += steps * decodes
        gaps_sum += steps * decodes * step_s * (1 + rng.gauss(0, noise))
        text = (
            f"# TYPE {vllm.ITERATION_TOKENS_TOTAL} histogram\n"
            f'{vllm.ITERATION_TOKENS_TOTAL}_bucket{{model_name="m",le="+Inf"}} {steps_n}\n'
            f'{vllm.ITERATION_TOKENS_TOTAL}_sum{{model_name="m"}} {tokens}\n'
            f'{vllm.ITERATION_TOKENS_TOTAL}_count{{model_name="m"}} {steps_n}\n'
            f"# TYPE {vllm.INTER_TOKEN_LATENCY_SECONDS} histogram\n"
            f'{vllm.INTER_TOKEN_LATENCY_SECONDS}_bucket{{model_name="m",le="+Inf"}} {gaps_n}\n'
            f'{vllm.INTER_TOKEN_LATENCY_SECONDS}_sum{{model_name="m"}} {gaps_sum}\n'
            f'{vllm.INTER_TOKEN_LATENCY_SECONDS}_count{{model_name="m"}} {gaps_n}\n'
            f"# TYPE {vllm.GENERATION_TOKENS_TOTAL} counter\n"
            f'{vllm.GENERATION_TOKENS_TOTAL}{{model_name="m"}} {generated}\n'
        )
        window.push(parse(text, 1000.0 + 5 * i))
    return window


def test_steps_of_different_sizes_identify_the_split_and_its_uncertainty() -> None:
    rng = random.Random(3)
    intervals = [(100, rng.uniform(0, 120), rng.uniform(1, 12)) for _ in range(24)]
    exact = identify(_window(intervals))
    assert exact.identified and exact.reason == ""
    assert exact.fixed_s == pytest.approx(FIXED, rel=1e-6)
    assert exact.per_prefill_token_s == pytest.approx(PER_PREFILL, rel=1e-6)
    assert exact.decode_weight == pytest.approx(PER_DECODE / PER_PREFILL, rel=1e-6)
    noisy = identify(_window(intervals, noise=0.03))
    assert noisy.identified and noisy.decode_weight == pytest.approx(15, rel=0.5)
    assert noisy.decode_weight_sigma is not None and noisy.decode_weight_sigma > exact.decode_weight_sigma  # type: ignore[operator]


def test_steps_of_one_size_say_the_split_is_not_identified() -> None:
    evidence = identify(_window([(100, 40.0, 8.0)] * 20, noise=0.02))
    assert not evidence.identified and "not" in evidence.reason
    assert evidence.seconds_per_step == pytest.approx(FIXED + PER_PREFILL * 40 + PER_DECODE * 8, rel=0.05)
    assert evidence.to_dict()["identified"] is False


def test_a_small_spread_is_reported_with_its_error_not_as_a_reading() -> None:
    rng = random.Random(5)
    intervals = [(100, 40 + rng.uniform(-2, 2), 8 + rng.uniform(-0.2, 0.2)) for _ in range(20)]
    evidence = identify(_window(intervals, noise=0.05))
    assert not evidence.identified
    assert evidence.reason  # a negative part or a relative error over the limit, said in words


def test_too_few_intervals_refuse() -> None:
    evidence = identify(_window([(100, 10.0, 4.0), (100, 90.0, 2.0)]))
    assert not evidence.identified and "needs" in evidence.reason


def test_the_two_means_bound_the_decode_weight_where_the_prior_leaves_no_fixed_part() -> None:
    """validation-12's wide engine at 4 sequences (in sample): gaps of 6.6 ms over 2.9 prefill tokens and 4 decodes,
    a 91-token prefill of 65 ms in one step. A prefill token costs about 0.66 ms, so 4 decodes at the prior weight 4
    would cost 10.6 ms, more than the whole gap; the weight at which the fixed part reaches 0 is the ceiling."""
    weight = 4.0
    itl = (1.0, 2.9 + weight * 4.0, 4.0)
    prefill = (1.0, 91.0 + weight * 4.0, 4.0)
    ceiling = weight_ceiling(itl, prefill, weight, 0.0066, 0.065)
    assert ceiling is not None and 1.5 < ceiling < 2.0
    per_token = (0.065 - 0.0066) / (91.0 - 2.9)  # the same at every weight: the fixed parts cancel
    assert 0.0066 - per_token * (2.9 + ceiling * 4.0) == pytest.approx(0.0, abs=1e-6)
    # A prior the two means allow is not bounded.
    assert weight_ceiling(itl, prefill, weight, 0.02, 0.065) is None
    median, spread = bounded_prior(weight, 0.6, ceiling)
    assert 1.0 < median < ceiling and 0.0 < spread < 0.6


def test_a_prior_far_above_the_ceiling_gives_the_ceiling() -> None:
    assert bounded_prior(4.0, 0.6, 0.01)[0] == pytest.approx(0.01)
    median, spread = bounded_prior(4.0, 0.6, 3.9)  # barely bounded: about the prior's lower half's median
    assert median == pytest.approx(4.0 * math.exp(0.6 * -0.6745), rel=0.05) and spread < 0.6
