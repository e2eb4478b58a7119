"""Scaling on the diagnosis (exporter/scaling.py): which causes more replicas relieve, and how many a target needs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from exporter.catalog.symptoms import CAUSES
from exporter.catalog.thresholds import Thresholds
from exporter.config import Objective
from exporter.deltas import HistogramDelta
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.render.scaling import DEFAULT
from exporter.scaling import (
    CAPACITY_REASONS,
    HOLD,
    HOLD_REASONS,
    REASON_BY_CAUSE,
    ScaleTracker,
    classify,
    desired,
    utilization,
    witness,
)
from exporter.signals import Signals
from exporter.simulator import get_scenario
from exporter.simulator.exposition import render_vllm
from exporter.simulator.hostcpu import simulated_host_inputs
from tests.e2e.replay import _settings
from tests.helpers import signals_with

T = Thresholds()


@dataclass(frozen=True)
class C:
    id: str
    layer: str
    strength: float = 0.8
    informational: bool = False


def test_every_cause_is_classified_and_capacity_means_queue_kv_pool_or_batch_slots() -> None:
    assert set(REASON_BY_CAUSE) == {c.id for c in CAUSES}
    capacity = {cid for cid, reason in REASON_BY_CAUSE.items() if reason in CAPACITY_REASONS}
    assert capacity == {"A2", "B3", "C3", "D", "E"}
    for cid, reason in (("A3", "cpu"), ("C1", "cpu"), ("A4", "configuration"), ("F", "prefix_breakage"),
                        ("A5", "prefix_breakage"), ("A7", "transfer"), ("A8", "transfer"), ("A0", "unknown")):
        assert REASON_BY_CAUSE[cid] == reason


@pytest.mark.parametrize(("verdict", "causes", "reason", "cause"), [
    ("scheduler", [C("A2", "scheduler")], "queue", "A2"),
    ("kv_cache", [C("D", "kv_cache", 0.9), C("C3", "kv_cache", 0.5)], "kv_pool", "D"),
    # a starved CPU anywhere vetoes: its queue is the CPU's, whatever the verdict says
    ("scheduler", [C("A2", "scheduler", 0.9), C("C1", "cpu", 0.3)], "cpu", "C1"),
    ("distributed", [C("A7", "distributed")], "transfer", "A7"),
    ("kv_cache", [C("F", "kv_cache"), C("D", "kv_cache", 0.95)], "prefix_breakage", "F"),
    # a knob on the verdict layer wins over the capacity cause beside it: fix it first
    ("scheduler", [C("A2", "scheduler", 0.9), C("A4", "scheduler", 0.5)], "configuration", "A4"),
    ("unknown", [C("A0", "unknown")], "unknown", "A0"),
    ("none", [C("C2", "request", informational=True)], "none", None),
    ("none", [], "none", None),
])
def test_classify(verdict: str, causes: list[C], reason: str, cause: str | None) -> None:
    assert classify(verdict, causes) == (reason, cause)


def test_utilization_is_demand_over_the_binding_resource() -> None:
    s = signals_with(Signals(180.0, 36), running=16.0, waiting=8.0, kv_cache_usage=0.4)
    value, layer = utilization(s, max_num_seqs=32)
    assert (value, layer) == (pytest.approx(0.75), "scheduler")  # slots 24 / 32; KV 0.4 x 24 / 16 = 0.6
    value, layer = utilization(signals_with(s, kv_cache_usage=0.9), max_num_seqs=32)
    assert (value, layer) == (pytest.approx(1.35), "kv_cache")
    assert utilization(s, max_num_seqs=None) == (pytest.approx(0.6), "kv_cache")
    assert utilization(Signals(180.0, 36), max_num_seqs=32) == (None, None)


def test_desired_holds_on_non_capacity_causes_and_scales_in_only_under_the_headroom() -> None:
    for reason in HOLD_REASONS:
        assert desired(False, reason, 3.0, 3.0, T) == 1.0  # never more, never fewer
    assert desired(True, "queue", 2.0, 2.0, T) == pytest.approx(2.0 / T.scale_target_utilization)
    assert desired(True, "kv_pool", 0.3, 0.3, T) == 1.0  # a capacity cause never scales in
    # ahead of a cause: every reading of the recent horizon past the line, not only their mean
    assert desired(False, "none", 0.9, 0.9, T, held=0.9) == pytest.approx(0.9 / T.scale_target_utilization)
    assert desired(False, "none", 0.9, 0.9, T, held=0.7) == 1.0
    assert desired(False, "none", 0.9, 0.9, T, held=None) == 1.0  # the horizon is not full yet
    assert desired(False, "none", 0.4, 0.75, T) == 1.0  # the window's peak leaves no headroom: hold
    assert desired(False, "none", 0.3, 0.4, T) == pytest.approx(0.4 / T.scale_target_utilization)


def test_scale_in_waits_for_the_peak_to_leave_the_window() -> None:
    tracker = ScaleTracker(window_seconds=60, recent_evaluations=1)
    busy = signals_with(Signals(180.0, 36), running=24.0, waiting=0.0, kv_cache_usage=0.2)
    quiet = signals_with(busy, running=4.0, kv_cache_usage=0.05)
    tracker.assess(0.0, True, "none", [], busy, 32, T)
    assert tracker.assess(30.0, True, "none", [], quiet, 32, T).desired_replicas == 1.0
    late = tracker.assess(61.0, True, "none", [], quiet, 32, T)
    assert late.desired_replicas == pytest.approx(4 / 32 / T.scale_target_utilization)
    assert tracker.assess(62.0, False, "unknown", [], quiet, 32, T) is HOLD


def _run(name: str, minutes: float = 6.0):
    scenario = get_scenario(name)
    engine = scenario.build()
    settings = _settings(name, scenario.engine_facts(), scenario.slo, cpu={"pid": 1})
    pipeline = TargetPipeline(settings.targets[0], settings, host_probe=lambda now: simulated_host_inputs(engine))
    state = pipeline.state
    for k in range(int(minutes * 12) + 1):
        engine.advance_to(k * 5.0)
        state = pipeline.ingest(ScrapeResult(1.8e9 + k * 5.0, 0.01, render_vllm(engine, start_unix=1.8e9).encode()))
    return state


@pytest.mark.parametrize(("scenario", "helps", "reason"), [
    ("queue-backlog", True, "queue"),
    ("kv-pressure", True, "kv_pool"),
    ("cpu-starved", False, "cpu"),
    ("template-instability", False, "prefix_breakage"),
    ("pd-decode-slow-transfer", False, "transfer"),
    ("small-token-budget", False, "configuration"),
    ("healthy", False, "none"),
])
def test_simulated_scenarios_through_the_pipeline(scenario: str, helps: bool, reason: str) -> None:
    state = _run(scenario)
    s = state.scaling
    assert (s.helps, s.reason) == (helps, reason)
    if helps:
        assert s.desired_replicas > 1.5  # the replica's demand is well past one replica's capacity
    elif reason == "none":
        assert s.desired_replicas < 0.5  # a well-sized deployment with room to spare
    else:
        assert s.desired_replicas == 1.0
    assert state.to_dict()["scaling"]["reason"] == reason


def test_a_cpu_cause_without_starvation_now_leaves_its_backlog_to_the_capacity() -> None:
    causes = [C("A3", "cpu", 0.9), C("A2", "scheduler", 0.5)]
    assert classify("cpu", causes, cpu_starved=True) == ("cpu", "A3")
    assert classify("cpu", causes, cpu_starved=None) == ("cpu", "A3")  # no CPU source: the cause stands
    assert classify("cpu", causes, cpu_starved=False) == ("queue", "A2")
    assert classify("cpu", [C("A3", "cpu")], cpu_starved=False) == ("none", None)


def test_the_queue_counts_by_its_growth_and_its_backlog_not_its_length() -> None:
    tracker = ScaleTracker(window_seconds=180, recent_evaluations=3)
    base = signals_with(Signals(180.0, 36), running=32.0, waiting=0.0, kv_cache_usage=0.3, inference_mean=8.0)
    assert tracker.queued(0.0, base, T) == 0.0
    # 60 more waiting within a minute: one request a second past the throughput, and a backlog of 60
    grown = tracker.queued(60.0, signals_with(base, waiting=60.0), T)
    assert grown == pytest.approx((1.0 + 60 / 180) * 8.0)
    # the same backlog, steady: only its drain counts
    assert tracker.queued(180.0, signals_with(base, waiting=60.0), T) == pytest.approx(60 / 180 * 8.0)
    # draining half a request a second: fewer arrivals than the running requests say, so less demand
    assert tracker.queued(240.0, signals_with(base, waiting=30.0), T) == pytest.approx((-0.5 + 30 / 180) * 8.0)


def test_the_backlog_a_non_capacity_cause_left_drains_without_asking_for_replicas() -> None:
    tracker = ScaleTracker(window_seconds=180, recent_evaluations=1)
    base = signals_with(Signals(180.0, 36), running=32.0, waiting=90.0, kv_cache_usage=0.5, inference_mean=8.0)
    budget = [C("B1", "scheduler")]  # the token budget held the engine back while the queue grew
    for k in range(10):  # the queue grows, then stands while the verdict holds
        waiting = 90.0 + 30 * min(k, 4)
        s = tracker.assess(k * 15.0, True, "scheduler", budget, signals_with(base, waiting=waiting), 32, T)
    assert (s.helps, s.reason, s.desired_replicas) == (False, "configuration", 1.0)
    # fixed: the queue is the same requests draining, and the verdict reads a capacity queue
    queue = [C("A2", "scheduler")]
    drained = [tracker.assess(135.0 + k * 15.0, True, "scheduler", queue, signals_with(base, waiting=210.0 - 40 * k),
                              32, T) for k in range(1, 6)]
    # within the autoscaler's tolerance of itself (10 %): no replica asked for while the backlog drains
    assert all(s.helps and s.desired_replicas < 1.0 + DEFAULT.tolerance for s in drained), drained
    # the same queue with no non-capacity cause in the window behind it is a capacity backlog: replicas clear it
    fresh = ScaleTracker(window_seconds=180, recent_evaluations=1)
    for k in range(5):
        s = fresh.assess(k * 15.0, True, "scheduler", queue, signals_with(base, waiting=210.0), 32, T)
    assert s.helps and s.desired_replicas > 1.5


def test_a_non_capacity_witness_holds_a_capacity_reading_until_the_diagnosis_names_its_cause() -> None:
    base = signals_with(Signals(180.0, 36), running=32.0, waiting=0.0, kv_cache_usage=0.5, inference_mean=8.0,
                        prefix_cache_hit_ratio_recent=0.8)
    assert witness(base, 0.8, T) is None
    # the prefix hit ratio falls under its line within the window: the queue it brings is held
    broken = signals_with(base, prefix_cache_hit_ratio_recent=0.1)
    assert witness(broken, 0.8, T) == "prefix_breakage"
    assert witness(broken, 0.1, T) is None  # low for the whole window: the prompts' nature, or the diagnosis' to name
    assert witness(signals_with(base, cpu_starvation_score=T.cpu_starvation_score), None, T) == "cpu"
    assert witness(signals_with(base, kv_deferred_ttft_share=T.kv_transfer_ttft_share), None, T) == "transfer"
    tracker = ScaleTracker(window_seconds=180, recent_evaluations=3)
    queue = [C("A2", "scheduler")]
    for k in range(4):  # a queue past the target with the cache intact: a capacity cause, more replicas
        s = tracker.assess(k * 15.0, True, "scheduler", queue, signals_with(base, waiting=30.0 * k), 32, T)
    assert (s.helps, s.reason) == (True, "queue") and s.desired_replicas > 1.0
    # the same queue as the hit ratio collapses: held at exactly itself, no cause claimed for the witness
    s = tracker.assess(60.0, True, "scheduler", queue, signals_with(broken, waiting=150.0), 32, T)
    assert (s.helps, s.reason, s.cause, s.desired_replicas) == (False, "prefix_breakage", None, 1.0)
    # a named non-capacity cause keeps its own reason
    s = tracker.assess(75.0, True, "scheduler", [C("B1", "scheduler")], signals_with(broken, waiting=150.0), 32, T)
    assert (s.reason, s.cause) == ("configuration", "B1")
    # a window after the collapse the witness has lapsed: what holds then is the diagnosis' own reading
    for k in range(6, 20):
        s = tracker.assess(k * 15.0 + 60.0, True, "scheduler", queue, signals_with(broken, waiting=150.0), 32, T)
    assert (s.helps, s.reason) == (True, "queue")


def _first_tokens(late: float, events: float = 100.0) -> HistogramDelta:
    """The newest steps' first tokens: ``late`` of ``events`` over the 250 ms objective."""
    return HistogramDelta((0.1, 0.25, 1.0, math.inf), (0.0, events - late, events, events), 0.2 * events, events)


def test_the_target_follows_where_the_first_token_objective_fails_below_it() -> None:
    ttft = Objective(threshold_seconds=0.25, target=0.95)
    calm = signals_with(Signals(180.0, 36), running=16.0, waiting=0.0, kv_cache_usage=0.2, inference_mean=8.0,
                        queued_recent_fraction=0.0, ttft_histogram_recent=_first_tokens(0.0))
    # 24 of 32 slots (0.75, under the target utilisation), nobody waiting, 20 % of first tokens late (budget 5 %)
    failing = signals_with(calm, running=24.0, kv_cache_usage=0.3, ttft_histogram_recent=_first_tokens(20.0))

    def tracker_at(start: float = 0.0) -> ScaleTracker:
        tracker = ScaleTracker(window_seconds=180, recent_evaluations=3)
        for k in range(4):  # the objective holds at half the slots
            assert tracker.assess(start + k * 15.0, True, "none", [], calm, 32, T, ttft).desired_replicas < 1.0
        return tracker

    tracker = tracker_at()
    assert tracker.capacity() == 1.0
    # the objective fails at 0.75: once a recent horizon holds it with nothing but capacity to blame, the
    # capacity is where it fails, and the target utilisation a share of that
    seen = [tracker.assess(60.0 + k * 15.0, True, "none", [], failing, 32, T, ttft) for k in range(3)]
    assert all(s.desired_replicas <= 1.0 for s in seen[:2])  # the horizon first: a cause gets it to show
    assert tracker.capacity() == pytest.approx(0.75)
    assert seen[2].desired_replicas == pytest.approx(1 / T.scale_target_utilization)
    # a cause replicas do not fix, named meanwhile, clears what was learnt: the objective failed for it
    s = tracker.assess(105.0, True, "scheduler", [C("B1", "scheduler")], failing, 32, T, ttft)
    assert (s.reason, s.desired_replicas, tracker.capacity()) == ("configuration", 1.0, 1.0)
    # ... and what fails within a window after it is still its own (a backlog, a cold cache): no line
    for k in range(8, 12):
        tracker.assess(k * 15.0, True, "none", [], failing, 32, T, ttft)
    assert tracker.capacity() == 1.0
    # a line leaves with the window
    learnt = tracker_at()
    for k in range(4, 7):
        learnt.assess(k * 15.0, True, "none", [], failing, 32, T, ttft)
    assert learnt.capacity() == pytest.approx(0.75)
    for k in range(7, 20):
        learnt.assess(k * 15.0, True, "none", [], calm, 32, T, ttft)
    assert learnt.capacity() == 1.0
    # late first tokens behind a queue are the saturation's (capacity 1), not a line below it
    queued = tracker_at()
    for k in range(4, 8):
        queued.assess(k * 15.0, True, "none", [], signals_with(failing, queued_recent_fraction=1 / 3), 32, T, ttft)
    assert queued.capacity() == 1.0
    # a failure the utilisation does not explain (it never held at less) sets no line; nor do too few first tokens
    unexplained = ScaleTracker(window_seconds=180, recent_evaluations=3)
    for k in range(4):
        unexplained.assess(k * 15.0, True, "none", [], failing, 32, T, ttft)
    assert unexplained.capacity() == 1.0
    # late now but held over the window: a blip, not where the objective fails
    blip = tracker_at()
    for k in range(4, 8):
        blip.assess(k * 15.0, True, "none", [], signals_with(failing, ttft_histogram=_first_tokens(20.0, 1000.0)),
                    32, T, ttft)
    assert blip.capacity() == 1.0
    thin = tracker_at()
    for k in range(4, 8):
        thin.assess(k * 15.0, True, "none", [], signals_with(failing, ttft_histogram_recent=_first_tokens(2.0, 4.0)),
                    32, T, ttft)
    assert thin.capacity() == 1.0
