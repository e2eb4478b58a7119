"""The what-if advisor's pure parts: lengths from histograms, the step-cost solve, what-if parsing,
the arrival model on constructed windows, and how the answer is published (JSON, text, HTML, metric)."""

from __future__ import annotations

import math
import random

import pytest

from exporter.advisor.arrival import infer_arrivals, poisson_band
from exporter.advisor.calibrate import (
    CannotCalibrate,
    Outcome,
    fit_step_cost,
    frontend_seconds,
    lengths_from_histogram,
    tail_bound,
)
from exporter.advisor.candidates import VALIDATED, BadQuestion, Candidate, Change, parse_question, parse_value
from exporter.advisor.model import OpenArrivals
from exporter.advisor.predict import _ttft_p95, score, worse
from exporter.advisor.reproduce import relative_error, sampling_band
from exporter.advisor.result import AdviceResult, CalibrationReport, CheckReport, Prediction, Recommendation
from exporter.catalog.thresholds import Thresholds
from exporter.snapshot import Snapshot
from exporter.window import HistogramDelta, Window
from tests.helpers import capped_mean

TH = Thresholds()


def _hist(values: list[float], bounds: tuple[float, ...]) -> HistogramDelta:
    cum = [float(sum(1 for v in values if v <= b)) for b in (*bounds, math.inf)]
    return HistogramDelta((*bounds, math.inf), tuple(cum), math.fsum(values), float(len(values)))


BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)


def test_lengths_keep_the_exact_mean_and_the_buckets() -> None:
    rng = random.Random(3)
    values = [rng.randint(30, 480) for _ in range(500)]
    dist = lengths_from_histogram(_hist(values, BUCKETS))
    assert dist.mean == pytest.approx(sum(values) / len(values), rel=1e-9)
    # Every point stays inside a populated bucket.
    assert all(20.0 <= v <= 500.0 for v in dist.values)


def test_a_bucket_is_a_range_not_one_length() -> None:
    # A tail of 256- and 480-token answers shares the 200-500 bucket: the model must still draw long ones.
    values = [16.0] * 60 + [256.0] * 16 + [480.0] * 10
    dist = lengths_from_histogram(_hist(values, BUCKETS))
    rng = random.Random(5)
    draws = [dist.sample(rng) for _ in range(20000)]
    assert sum(draws) / len(draws) == pytest.approx(sum(values) / len(values), rel=0.03)
    assert max(draws) > 400
    assert capped_mean(dist, 64) == pytest.approx(sum(min(d, 64) for d in draws) / len(draws), rel=0.03)


def test_one_bucket_is_one_length() -> None:
    dist = lengths_from_histogram(_hist([600.0] * 40, BUCKETS))
    assert dist.values == (pytest.approx(600.0),)
    assert dist.spreads == (pytest.approx(100.0),)  # 500-700: as far as the 500-1000 bucket allows around 600
    assert dist.quantile(0.95) == pytest.approx(600.0)


def test_empty_length_histogram_refuses() -> None:
    with pytest.raises(CannotCalibrate):
        lengths_from_histogram(_hist([], BUCKETS))


def test_step_cost_solves_both_means() -> None:
    fixed, per_token = 0.004, 5e-5
    itl, prefill = (1.0, 40.0), (12.0, 900.0)
    cost = fit_step_cost(itl, prefill, fixed * 1 + per_token * 40, fixed * 12 + per_token * 900)
    assert cost.fixed_s == pytest.approx(fixed)
    assert cost.per_token_s == pytest.approx(per_token)


def test_step_cost_never_negative() -> None:
    # A prefill mean below what the ITL implies would need a negative per-token cost: clamp, fit the rest.
    cost = fit_step_cost((1.0, 40.0), (12.0, 900.0), 0.01, 0.05)
    assert cost.fixed_s > 0 and cost.per_token_s >= 0


def test_frontend_time_is_what_a_request_spends_outside_the_engine() -> None:
    # e2e 120 ms = 10 ms queue + 100 ms inference + 10 ms outside; TTFT 50 ms leaves room for it.
    assert frontend_seconds(0.050, 0.010, 0.030, 0.120, 0.100, rate=1.0) == pytest.approx(0.010)


def test_one_request_held_after_its_last_token_is_not_frontend_time() -> None:
    # 24 requests, one held 7 s after its last token: e2e - queue - inference reads 0.3 s a request,
    # but every first token came within 100 ms (mean 32 ms, 23 ms of it prefill): at most 9 ms is frontend.
    value = frontend_seconds(0.0324, 0.0001, 0.0234, 0.70, 0.39, rate=0.4)
    assert value == pytest.approx(0.0324 - 0.0234)


@pytest.mark.parametrize(("text", "value"), [("6", 6), ("2k", 2000), ("8GiB", 8 * 2**30), ("512Mi", 512 * 2**20),
                                             ("0.5", 0.5), ("3MB", 3e6)])
def test_values(text: str, value: float) -> None:
    assert parse_value(text) == pytest.approx(value)


def test_questions() -> None:
    assert parse_question("max_num_seqs=6") == ("max_num_seqs", 6)
    assert parse_question("max-num-batched-tokens=4k") == ("max_num_batched_tokens", 4000)
    assert parse_question("num_gpu_blocks=100") == ("num_gpu_blocks_override", 100)
    with pytest.raises(BadQuestion, match="unknown knob"):
        parse_question("max_num_sequences=6")
    with pytest.raises(BadQuestion, match="not in the engine model"):
        parse_question("long_prefill_token_threshold=512")
    with pytest.raises(BadQuestion, match="KNOB=VALUE"):
        parse_question("max_num_seqs")
    with pytest.raises(BadQuestion, match="not a number"):
        parse_question("max_num_seqs=lots")


def _window(occupancy: list[float], finished_per_scrape: list[float]) -> Window:
    window = Window(10_000, ["vllm:request_success_total"])
    total = 0.0
    for i, (occ, done) in enumerate(zip(occupancy, finished_per_scrape)):
        total += done
        text = (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="m"}} {occ}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="m"} 0\n'
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{model_name="m",finished_reason="stop"}} {total}\n'
        )
        from exporter.parse import parse

        snap: Snapshot = parse(text, float(i * 5))
        window.push(snap)
    return window


def test_constant_occupancy_is_closed() -> None:
    model = infer_arrivals(_window([8, 8, 8, 8, 8, 8, 8, 8], [10] * 8), TH, e2e_mean=2.0)
    assert model.kind == "closed"
    assert model.closed.count == 8
    # Little's law: 8 clients at 2 req/s with 2 s in the system leave 2 s of think time.
    assert model.closed.think_s == pytest.approx(2.0)


def test_fluctuating_occupancy_is_open_and_bursts_show() -> None:
    model = infer_arrivals(_window([0, 6, 1, 0, 9, 2, 0, 7], [0, 30, 2, 0, 40, 5, 0, 35]), TH, e2e_mean=0.5)
    assert model.kind == "open"
    assert model.open.cv2 > 2.0


def test_burstiness_is_read_from_arrivals_not_from_completions() -> None:
    """Four requests reach the engine every interval; the engine finishes them in bursts (0, 8, 0, 8 ...), the
    rest waiting in between. Arrived = finished + the change in running + waiting: steady, not bursty."""
    finished = [0, 0, 8, 0, 8, 0, 8, 0]
    occupancy = [4.0]
    for done in finished[1:]:
        occupancy.append(occupancy[-1] + 4 - done)
    model = infer_arrivals(_window(occupancy, finished), TH, e2e_mean=1.0)
    assert model.dispersion == pytest.approx(0.0, abs=1e-9)  # completions alone read 2.9
    assert model.open.cv2 < 1.0 and model.open.rate == pytest.approx(4 / 5)  # four per 5 s scrape


def test_a_dispersion_poisson_arrivals_show_by_chance_reads_as_poisson() -> None:
    """Three or four requests reach the engine every interval: a variance / mean of 0.05, which eight intervals
    of Poisson counts would not show by chance, stays; one to four (0.39) is inside their band and reads as 1."""
    low, high = poisson_band(30, 0.95)
    assert low == pytest.approx(0.53, abs=0.01) and high == pytest.approx(1.53, abs=0.01)
    finished = [3.0, 4.0, 3.0, 4.0, 3.0, 4.0, 3.0, 4.0]
    model = infer_arrivals(_window([1.0] * 8, finished), TH, e2e_mean=0.2)
    assert model.open.cv2 == pytest.approx(max(0.3, model.dispersion)) and model.dispersion < 0.1
    model = infer_arrivals(_window([1.0] * 8, [1.0, 3.0, 2.0, 4.0, 1.0, 3.0, 2.0, 4.0]), TH, e2e_mean=0.2)
    assert model.dispersion == pytest.approx(0.39, abs=0.01) and model.open.cv2 == 1.0  # band 0.17-2.06 here
    assert poisson_band(30, 0.0)[0] == poisson_band(30, 0.0)[1]  # no confidence, no band


def test_in_between_predicts_both() -> None:
    model = infer_arrivals(_window([4, 9, 5, 10, 4, 9, 5, 10], [10] * 8), TH, e2e_mean=1.0)
    assert model.kind == "unclear"
    assert set(model.alternatives()) == {"open", "closed"}


def test_open_arrivals_have_the_rate_and_the_spread() -> None:
    rng = random.Random(1)
    for cv2 in (1.0, 4.0):
        times = OpenArrivals(rate=5.0, cv2=cv2).times(rng)
        stamps = [next(times) for _ in range(20000)]
        gaps = [b - a for a, b in zip([0.0, *stamps], stamps)]
        mean = sum(gaps) / len(gaps)
        var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
        assert mean == pytest.approx(0.2, rel=0.05)
        assert var / mean**2 == pytest.approx(cv2, rel=0.1)


def test_errors_between_near_zero_rates_are_zero() -> None:
    assert relative_error(0.01, 0.0, floor=0.05) == 0.0
    assert relative_error(1.2, 1.0) == pytest.approx(0.2)
    assert relative_error(None, 1.0) is None


def _ttft(p95: float, mean: float, queue: float) -> Outcome:
    return Outcome(p95, 0.01, 0.0, 100.0, ttft_mean_seconds=mean, queue_mean_seconds=queue)


def test_ttft_residual_follows_the_queue() -> None:
    # The model misses half of the window's queue (and the tail it makes); its non-queue part is right.
    observed, baseline = _ttft(0.200, 0.042, 0.022), _ttft(0.100, 0.032, 0.012)
    same = _ttft(0.100, 0.032, 0.012)
    assert _ttft_p95(same, observed, baseline) == pytest.approx(0.200)  # unchanged: the window's p95
    no_queue = _ttft(0.040, 0.020, 0.0)
    assert _ttft_p95(no_queue, observed, baseline) == pytest.approx(0.040)  # the queue, and its error, are gone
    half = _ttft(0.060, 0.026, 0.006)
    assert 0.060 < _ttft_p95(half, observed, baseline) < 0.120  # type: ignore[operator]
    # Without the queue histogram: the plain p95 ratio.
    assert _ttft_p95(no_queue, Outcome(0.2, 0.01, 0.0, 1.0), Outcome(0.1, 0.01, 0.0, 1.0)) == pytest.approx(0.080)


def test_an_unexplained_tail_does_not_grow_with_a_longer_prefill() -> None:
    # No queue to speak of: the window's p95 is 60 ms above the model's (a few slow requests). A smaller
    # token budget makes every prefill 4x longer; the 60 ms stay 60 ms, they are not multiplied by 1.5.
    observed, baseline = _ttft(0.180, 0.080, 0.0003), _ttft(0.120, 0.080, 0.003)
    longer = _ttft(0.660, 0.330, 0.044)
    assert _ttft_p95(longer, observed, baseline) == pytest.approx(0.720)
    # ... and a change that halves the p95 (and keeps the queue share) halves them.
    shorter = _ttft(0.060, 0.040, 0.0015)
    assert _ttft_p95(shorter, observed, baseline) == pytest.approx(0.090)


def test_a_tail_without_a_queue_follows_the_prefill_not_a_ratio_of_near_zero_queues() -> None:
    # The model makes a tail the window has not (its p95 34 ms, the window's 19.5 ms), with 0.2 ms of queue
    # and none in a what-if that changes nothing else: the window's p95 stays, not the model's.
    observed, baseline = _ttft(0.0195, 0.0126, 0.0), _ttft(0.0338, 0.0136, 0.0002)
    same_prefill = _ttft(0.0332, 0.0134, 0.0)
    assert _ttft_p95(same_prefill, observed, baseline) == pytest.approx(0.0194, rel=0.02)
    # A larger budget shortens the prefill a quarter: a quarter of the tail's excess goes with it.
    observed, baseline = _ttft(0.086, 0.0517, 0.0011), _ttft(0.193, 0.0596, 0.0009)
    shorter = _ttft(0.0893, 0.0446, 0.0)
    rest = 0.0446 / (0.0596 - 0.0009)
    assert _ttft_p95(shorter, observed, baseline) == pytest.approx(0.0893 - 0.107 * rest * 0.0893 / 0.193, rel=0.01)


def test_a_tail_over_made_twice_over_keeps_the_identity_and_the_direction() -> None:
    # The model's p95 is six times the window's (a queue it over-makes near saturation): unchanged still gives
    # the window's p95, and a what-if that shortens the model's p95 predicts a fall, not a rise to half the
    # model's own (validation-25's padded mixed budget raise: 248 ms predicted at 360 ms, real 220 ms).
    observed, baseline = _ttft(0.248, 0.122, 0.046), _ttft(1.512, 0.218, 0.134)
    assert _ttft_p95(_ttft(1.512, 0.218, 0.134), observed, baseline) == pytest.approx(0.248)
    shorter = _ttft_p95(_ttft(1.300, 0.174, 0.118), observed, baseline)
    assert shorter is not None and 0.124 < shorter < 0.248


def test_a_decoding_sequence_weighs_more_than_a_prefill_token() -> None:
    from exporter.advisor.model import StepCost

    # The fit sees work in prefill-token units: one step of 8 decodes at weight 4 is 32 units.
    fixed, per_unit = 0.003, 1e-4
    cost = fit_step_cost((1.0, 8 * 4.0), (1.0, 200 + 8 * 4.0), fixed + per_unit * 32, fixed + per_unit * 232)
    assert (cost.fixed_s, cost.per_token_s) == (pytest.approx(fixed), pytest.approx(per_unit))
    assert StepCost(fixed, per_unit).decode_weight == 1.0  # the default keeps the plain token count
    assert TH.advice_decode_token_weight > 1


ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3)


def test_a_p95_in_the_first_bucket_is_fitted_by_the_share_above_its_bound() -> None:
    # 96 % of gaps under 10 ms: the p95 is interpolated from 0 (9.9 ms) and hardly moves while the
    # share above 10 ms doubles; that share is the exact count the step-time jitter is fitted to.
    gaps = [0.006] * 96 + [0.015] * 3 + [0.06]
    bound, share = tail_bound(_hist(gaps, ITL_BUCKETS)) or (0.0, 0.0)
    assert (bound, share) == (0.01, pytest.approx(0.04))


def test_a_resolved_p95_is_fitted_at_its_bucket_lower_bound() -> None:
    # 12 % above 10 ms puts the p95 inside 10-25 ms, interpolated from 10 ms: the share above 10 ms
    # fixes it (the share above 25 ms, 0 here, would not).
    gaps = [0.006] * 88 + [0.02] * 12
    bound, share = tail_bound(_hist(gaps, ITL_BUCKETS)) or (0.0, 0.0)
    assert (bound, share) == (0.01, pytest.approx(0.12))
    assert tail_bound(_hist([], ITL_BUCKETS)) is None


TTFT_BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def test_a_p95_of_a_hundred_requests_on_coarse_buckets_has_a_wide_band() -> None:
    # 100 requests, the 6 slowest between 1 s and 2.5 s: the p95 sits in a 1.5 s wide bucket
    window = _hist([0.05] * 92 + [0.4] * 2 + [1.1, 1.2, 1.5, 1.8, 2.1, 2.4], TTFT_BOUNDS)
    model = _hist([0.05] * 270 + [0.4] * 15 + [2.0] * 15, TTFT_BOUNDS)
    p95 = window.quantile(0.95)
    assert p95 is not None
    band = sampling_band(window, model, 0.95)
    assert band is not None
    low, high = band
    # ranks 0.95 -/+ 1.96 x sqrt(0.0475 x (1/100 + 1/300)) = 0.95 -/+ 0.049
    assert low == pytest.approx(window.quantile(0.95 - 0.0494), rel=0.02)
    assert low < 0.5 * p95 and high > 1.5 * p95   # half off either way is within what chance gives


def test_many_observations_make_a_narrow_band_and_no_confidence_none() -> None:
    rng = random.Random(5)
    values = [rng.uniform(0.0, 0.05) for _ in range(20000)]
    gaps = _hist(values, (0.01, 0.025, 0.05, 0.075, 0.1))
    band = sampling_band(gaps, gaps, 0.95)
    p95 = gaps.quantile(0.95)
    assert band is not None and p95 is not None
    assert band[0] > 0.97 * p95 and band[1] < 1.03 * p95
    assert sampling_band(gaps, gaps, 0.0) == (p95, p95)
    assert sampling_band(None, gaps, 0.95) is None


def test_worse_and_score_in_numbers() -> None:
    observed = Outcome(0.5, 0.02, 0.0, 100.0)
    predicted = Outcome(0.1, 0.05, 0.0, 110.0)
    lines = worse(observed, predicted, TH)
    assert lines == ("ITL p95 20 ms -> 50 ms (+150%)",) or lines[0].startswith("ITL p95")
    assert score(observed, predicted, 0.05) > 0  # TTFT gains more than ITL loses (log scale)


def _result() -> AdviceResult:
    pred = Prediction(Outcome(0.1, 0.05, 0.0, 110.0), {"ttft_p95_seconds": (0.09, 0.12), "itl_p95_seconds": None,
                                                       "preemption_rate": (0.0, 0.0),
                                                       "generation_tokens_per_second": (100.0, 120.0)},
                      ("ITL p95 20 ms -> 50 ms (+150%)",))
    rec = Recommendation("max_num_batched_tokens", 256, 2048, pred, "A4 active", 1.2,
                         caveat="extrapolated: prefill steps of up to 2048 tokens",
                         cost="no hardware; larger steps stall decodes longer")
    replica = Recommendation("replicas", 1, 2, pred, "a second replica takes half the traffic", 1.5,
                             validated=False, accelerators=2.0, cost="an accelerator per added replica")
    check = CheckReport({"ttft_p95_seconds": 0.1}, {"ttft_p95_seconds": 0.45}, {"ttft_p95_seconds": (0.4, 0.6)})
    calibration = CalibrationReport(
        arrivals="open: 2 req/s", arrival_model="unclear", step_cost={"fixed_seconds": 0.01}, step_cost_reused=False,
        frontend_seconds=0.002, frontend_observed_seconds=0.003, num_gpu_blocks=96, shared_prefix_tokens=0,
        prompt_tokens_mean=800.0, output_tokens_mean=24.0, window_seconds=180.0, simulated_seconds=90.0,
        primary=check, others={"closed": check}, cpu_seconds=4.2)
    return AdviceResult(Outcome(0.5, 0.02, 0.0, 100.0), (rec, replica), "", calibration)


def test_json_shape() -> None:
    doc = _result().to_dict()
    assert set(doc) >= {"advice", "observed"}
    item = doc["advice"][0]
    assert set(item) >= {"knob", "current", "proposed", "predicted", "interval", "worse", "why", "caveat"}
    assert set(item["predicted"]) == {"ttft_p95_seconds", "itl_p95_seconds", "preemption_rate",
                                      "generation_tokens_per_second"}
    assert item["interval"]["ttft_p95_seconds"] == [0.09, 0.12]
    assert item["validated"] is True and item["cost"]["accelerators"] == 1.0 and item["value"] == 1.2
    replica = doc["advice"][1]
    assert replica["validated"] is False and replica["cost"]["accelerators"] == 2.0
    assert replica["value"] == round(1.5 - math.log(2.0), 3)  # better score, but not per accelerator
    calibration = doc["calibration"]
    assert calibration["arrivals"] == "open: 2 req/s" and calibration["cpu_seconds"] == 4.2
    assert calibration["errors"] == calibration["closed_errors"] == {"ttft_p95_seconds": 0.1}
    assert calibration["sampling_band"]["ttft_p95_seconds"] == [0.4, 0.6] and "window_end" not in calibration
    empty = AdviceResult(Outcome(None, None, None, None), (), "cannot calibrate: too few requests").to_dict()
    assert empty["advice"] == [] and empty["reason"].startswith("cannot calibrate")


def test_validated_knobs_and_what_a_replica_costs() -> None:
    budget = Candidate((Change("max_num_batched_tokens", 256, 2048),), "")
    assert budget.accelerators == 1.0 and "no hardware" in budget.cost
    # Validated is per knob and direction, as the pooled record on real engines says (candidates.VALIDATED).
    for knob, way in VALIDATED:
        assert Candidate((Change(knob, 4, 8) if way == "up" else Change(knob, 8, 4),), "").validated, knob
    for knob, current, proposed in (("num_gpu_blocks_override", 100, 200), ("max_tokens", 512, 64),
                                    ("max_num_seqs", 4, 16), ("kv_cache_memory_bytes", None, 2 ** 30)):
        assert not Candidate((Change(knob, current, proposed),), "").validated, knob  # no record, or no direction
    for knob in ("api_server_count", "replicas"):
        assert not Candidate((Change(knob, 1, 2),), "").validated, knob
    both = Candidate((Change("max_num_batched_tokens", 256, 2048), Change("replicas", 1, 3)), "")
    assert not both.validated and both.accelerators == 3.0 and "accelerator" in both.cost


def test_published_everywhere() -> None:
    from dataclasses import replace

    from exporter.config import Settings, target_from_url
    from exporter.pipeline import TargetPipeline
    from exporter.publish import document, html, text
    from exporter.publish.exposition import Exposition

    settings = Settings(targets=[target_from_url("http://127.0.0.1:1/metrics", name="t")])
    state = replace(TargetPipeline(settings.targets[0], settings).state, advice=_result())
    doc = document.build([state])
    assert doc["targets"][0]["advice"][0]["knob"] == "max_num_batched_tokens"
    page = html.render(doc)
    assert 'data-knob="max_num_batched_tokens"' in page and "A4 active" in page
    assert "extrapolated: prefill steps of up to 2048 tokens" in page
    assert 'data-knob="replicas" data-validated="false"' in page and "not validated by the real-engine record" in page
    assert "cost: 2x the accelerators; an accelerator per added replica" in page
    report = text.render(doc)
    assert "max_num_batched_tokens 256 -> 2048" in report
    assert "replicas 1 -> 2 [not validated by the real-engine record]: a second replica" in report
    assert "    cost: 2x the accelerators; an accelerator per added replica" in report
    assert "    cost: no more accelerators; no hardware" in report
    assert "    extrapolated: prefill steps of up to 2048 tokens" in report
    exposition = Exposition(None).render([state]).decode()  # what /metrics serves
    assert ('vllm_diag_advice_info{current="256",knob="max_num_batched_tokens",model_name="",proposed="2048",'
            'target="t"} 1.0') in exposition


def test_the_interval_is_one_windows_calibrated_band_not_the_seeds_spread() -> None:
    from exporter.advisor.predict import interval, sigma
    from exporter.advisor.reproduce import Check

    observed = Outcome(0.5, 0.02, 0.0, 100.0)
    # Nothing but the run-to-run noise and the model's own error: the shipped constants.
    alone = sigma("ttft_p95_seconds", None, [], observed, 120.0, TH)
    assert alone == pytest.approx(math.hypot(TH.advice_noise_ttft_p95, TH.advice_model_error_ttft_p95))
    # The decode weight's spread (-/+ one standard deviation), the residual and the sampling band add in quadrature.
    check = Check(observed, {"ttft_p95_seconds": 0.2}, (), True, "", {"ttft_p95_seconds": (0.4, 0.6)})
    full = sigma("ttft_p95_seconds", check, [([0.3, 0.6], 2.0)], observed, 120.0, TH)
    parts = [math.log(2) / 2, math.log1p(0.2), (math.log(0.6) - math.log(0.4)) / (2 * 1.96),
             TH.advice_noise_ttft_p95, TH.advice_model_error_ttft_p95]
    assert full == pytest.approx(math.sqrt(sum(p * p for p in parts)), rel=1e-3)
    # A second parameter known only by its range: the predictions at its ends, a uniform's sqrt(12) deviations apart.
    both = sigma("ttft_p95_seconds", check, [([0.3, 0.6], 2.0), ([0.2, 0.5], math.sqrt(12))], observed, 120.0, TH)
    assert both == pytest.approx(math.hypot(full, math.log(2.5) / math.sqrt(12)), rel=1e-3)
    low, high = interval(0.4, "ttft_p95_seconds", full, TH)  # type: ignore[misc]
    assert low < 0.4 < high and math.log(high / 0.4) == pytest.approx(1.2816 * full, rel=1e-3)
    # A preemption rate of 0 keeps a band above it, from the floor's pad.
    zero = interval(0.0, "preemption_rate", 0.5, TH)
    assert zero is not None and zero[0] == 0.0 and zero[1] > 0.0
