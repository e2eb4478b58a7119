"""The output tail placed inside its bucket by the KV the window's batch held (exporter/advisor/tail.py)."""

from __future__ import annotations

import math

import pytest

from exporter.advisor.arrival import ArrivalModel
from exporter.advisor.calibrate import Calibration, Empirical, lengths_from_histogram
from exporter.advisor.model import Clients, OpenArrivals, StepCost
from exporter.advisor.tail import Buckets, matched, place, simulated_usage, usage_reading
from exporter.parse import parse
from exporter.window import HistogramDelta, Window

BOUNDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
# The long-output load: 16 ... 480 tokens; vLLM's histogram puts 256 and 480 in one bucket (200, 500].
LOAD = [16.0] * 30 + [32.0] * 25 + [64.0] * 20 + [128.0] * 12 + [256.0] * 8 + [480.0] * 5


def _hist(values: list[float]) -> HistogramDelta:
    cum = [float(sum(1 for v in values if v <= b)) for b in (*BOUNDS, math.inf)]
    return HistogramDelta((*BOUNDS, math.inf), tuple(cum), math.fsum(values), float(len(values)))


def _held(values: list[float]) -> float:
    return sum(v * v for v in values) / (2.0 * sum(values))


def _mean(buckets: Buckets, placed: tuple[tuple[float, ...], tuple[float, ...]]) -> float:
    weights = [n for _, _, n in buckets.ranges]
    return sum(v * n for v, n in zip(placed[0], weights)) / sum(weights)


def test_the_histograms_placement_is_the_calibrations() -> None:
    buckets = Buckets.of(_hist(LOAD))
    assert buckets is not None
    placed = buckets.placed()
    assert placed is not None
    assert placed[0] == lengths_from_histogram(_hist(LOAD)).values


def test_a_placed_tail_keeps_the_mean_and_holds_more_the_higher_it_sits() -> None:
    buckets = Buckets.of(_hist(LOAD))
    assert buckets is not None
    helds = []
    for top in (0.2, 0.5, 0.7):
        placed = buckets.placed(top)
        assert placed is not None
        assert _mean(buckets, placed) == pytest.approx(sum(LOAD) / len(LOAD), rel=1e-12)
        helds.append(buckets.held(*placed))
    assert helds[0] < helds[1] < helds[2]
    # The one-position placement holds less than the load's true lengths: the tail sits too low.
    assert buckets.held(*(buckets.placed() or ((), ()))) < _held(LOAD)


def test_a_top_position_the_other_buckets_cannot_balance_is_refused() -> None:
    # Half the mass in the tail: only near the middle of its bucket can the rest balance the mean inside (10, 20].
    buckets = Buckets.of(_hist([16.0] * 50 + [350.0] * 50))
    assert buckets is not None
    assert buckets.placed(1.0) is None and buckets.placed(0.0) is None
    assert buckets.placed(0.5) is not None


def test_the_position_that_closes_the_usage_gap_is_taken() -> None:
    hist = _hist(LOAD)
    buckets = Buckets.of(hist)
    assert buckets is not None
    base = buckets.held(*(buckets.placed() or ((), ())))
    # The model's batch of 4 holds 25 tokens a sequence less than the window's, on a pool of 3,040 tokens.
    usable, running = 3040.0, 4.0
    placement = place(hist, (0.30, 0.005), (0.30 - 25.0 * running / usable, running), usable)
    assert placement.position is not None and not placement.reason
    placed = buckets.placed(placement.position)
    assert placed is not None
    assert buckets.held(*placed) == pytest.approx(base + 25.0, abs=1.0)
    # Too little held by the model for the tail alone to close it: the nearest position, and the reason.
    far = place(hist, (0.60, 0.005), (0.30, running), usable)
    assert far.position is not None and "another part" in far.reason


@pytest.mark.parametrize(("observed", "simulated", "values", "reason"), [
    ("no vllm:kv_cache_usage_perc reading in the window", (0.3, 4.0), LOAD, "no vllm:kv_cache_usage_perc"),
    ((0.30, 0.01), (0.29, 4.0), LOAD, "within the gauge's sampling error"),
    ((0.40, 0.01), (0.30, 4.0), [16.0] * 50, "one populated output bucket"),
])
def test_an_unidentified_placement_keeps_the_histograms_and_says_why(
        observed: tuple[float, float] | str, simulated: tuple[float, float], values: list[float], reason: str) -> None:
    placement = place(_hist(values), observed, simulated, 3040.0)
    assert placement.position is None
    assert reason in placement.reason
    assert placement.to_dict()["placed_by"] == "histogram"


def _window(usage: list[float], preempted: list[float]) -> Window:
    window = Window(10_000, ["vllm:num_preemptions_total"])
    for i, (u, p) in enumerate(zip(usage, preempted)):
        window.push(parse("# TYPE vllm:kv_cache_usage_perc gauge\n"
                          f'vllm:kv_cache_usage_perc{{model_name="m"}} {u}\n'
                          "# TYPE vllm:num_preemptions_total counter\n"
                          f'vllm:num_preemptions_total{{model_name="m"}} {p}\n', float(i * 5)))
    return window


def test_the_usage_reading_is_the_gauges_mean_and_its_error_unless_the_window_preempted() -> None:
    reading = usage_reading(_window([0.2, 0.3, 0.4, 0.3], [0, 0, 0, 0]))
    assert not isinstance(reading, str)
    assert reading[0] == pytest.approx(0.3)
    assert reading[1] == pytest.approx(0.0816497 / 2.0, rel=1e-4)
    assert "preempted" in str(usage_reading(_window([0.9, 0.95, 0.99, 0.97], [0, 1, 3, 3])))
    assert "no vllm:kv_cache_usage_perc" in str(usage_reading(_window([0.0, 0.0, 0.0], [0, 0, 0])))


def _calibration(hist: HistogramDelta) -> Calibration:
    return Calibration(
        duration_s=30.0, warmup_s=10.0,
        prompt=Empirical((90.0,), (1.0,), (10.0,)), output=lengths_from_histogram(hist), shared_prefix_tokens=0,
        arrivals=ArrivalModel("closed", OpenArrivals(2.0, 1.0), Clients(4, 0.0), 4.0, math.inf, 1.0),
        cost=StepCost(0.002, 3e-5, decode_weight=4.0), frontend_s=0.0, block_size=32, num_gpu_blocks=96,
        max_num_batched_tokens=256, max_num_seqs=4, max_model_len=2048, enable_prefix_caching=True,
        kv_bytes_per_block=None, frontend_observed_s=0.0)


def test_a_batch_that_held_more_than_the_model_places_the_tail_higher_and_the_model_then_holds_more() -> None:
    hist = _hist(LOAD * 6)
    cal = _calibration(hist)
    usage, _ = simulated_usage(cal, 1)
    refits: list[Calibration] = []

    def refit(moved: Calibration) -> Calibration:
        refits.append(moved)
        return moved

    placed = matched(cal, _window([usage + 0.04] * 6, [0] * 6), hist, 1, refit)
    assert placed.tail is not None and placed.tail.position is not None and refits == [placed]
    assert placed.output.mean == pytest.approx(cal.output.mean, rel=1e-9)
    assert max(placed.output.values) > max(cal.output.values)
    assert simulated_usage(placed, 1)[0] > usage + 0.02
    # The same window within the gauge's error of the model: the calibration as it was, with the reason.
    kept = matched(cal, _window([usage + 0.03, usage - 0.03] * 3, [0] * 6), hist, 1, refit)
    assert kept.output == cal.output and kept.tail is not None and "sampling error" in kept.tail.reason
    assert len(refits) == 1
