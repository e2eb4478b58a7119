"""The accuracy benchmark's user-effect truth: which windows met every objective (lab.accuracy)."""

from __future__ import annotations

from types import SimpleNamespace

from exporter.simulator.engine import Histogram
from lab.accuracy import UserEffect

BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 2.5, 5.0)


def _engine() -> SimpleNamespace:
    return SimpleNamespace(stats=SimpleNamespace(time_to_first_token=Histogram(BOUNDS),
                                                 inter_token_latency=Histogram(BOUNDS)))


def _tracking(engine: SimpleNamespace) -> UserEffect:
    """The default objectives (99 % within 2.5 s and 100 ms), recording from t=0."""
    effect = UserEffect({"ttft": (2.5, 0.01), "itl": (0.1, 0.01)}, min_events=5, min_misses=2)
    effect.record(0.0, engine, keep_s=60)
    return effect


def test_a_window_within_every_error_budget_is_unhurt_and_a_burst_over_it_is_not() -> None:
    engine = _engine()
    effect = _tracking(engine)
    engine.stats.time_to_first_token.observe(0.2, 100)
    engine.stats.inter_token_latency.observe(0.05, 1000)
    engine.stats.inter_token_latency.observe(0.1, 5)  # on the edge: within the objective
    engine.stats.inter_token_latency.observe(0.2, 5)  # 0.5 % over: within the 1 % budget
    effect.record(5.0, engine, keep_s=60)
    assert effect.unhurt(5.0, window_s=30)
    engine.stats.time_to_first_token.observe(0.2, 10)
    engine.stats.inter_token_latency.observe(0.2, 20)
    effect.record(10.0, engine, keep_s=60)
    assert not effect.unhurt(10.0, window_s=30)  # 25 of 1030 gaps over 100 ms over the window
    assert not effect.unhurt(10.0, window_s=5)  # the last 5 s alone: all 20 gaps over


def test_a_handful_of_events_is_unhurt_below_the_products_few_misses_and_hurt_from_them() -> None:
    """Fewer events than min_events: the sidecar calls the objective missed only from min_misses slow ones
    (evidence_min_misses), so the truth does too; one slow first token of three is no user-visible effect."""
    engine = _engine()
    effect = _tracking(engine)
    engine.stats.time_to_first_token.observe(0.2, 2)
    engine.stats.time_to_first_token.observe(4.0, 1)
    engine.stats.inter_token_latency.observe(0.05, 100)
    effect.record(5.0, engine, keep_s=60)
    assert effect.unhurt(5.0, window_s=30)  # 1 of 3 first tokens over 2.5 s
    engine.stats.time_to_first_token.observe(4.0, 1)
    engine.stats.inter_token_latency.observe(0.05, 100)
    effect.record(10.0, engine, keep_s=60)
    assert not effect.unhurt(10.0, window_s=30)  # 2 of 4 over: the product's few-event miss
    assert effect.unhurt(10.0, window_s=5)  # the last 5 s alone: 1 of 1


def test_no_events_or_a_threshold_off_the_edges_is_never_unhurt() -> None:
    engine = _engine()
    effect = _tracking(engine)
    engine.stats.inter_token_latency.observe(0.05, 100)
    effect.record(5.0, engine, keep_s=60)
    assert not effect.unhurt(5.0, window_s=30)  # no first token: the TTFT objective is not judged
    off_edge = UserEffect({"itl": (0.07, 0.01)}, min_events=5, min_misses=2)
    off_edge.record(0.0, engine, keep_s=60)
    engine.stats.inter_token_latency.observe(0.05, 100)
    off_edge.record(5.0, engine, keep_s=60)
    assert not off_edge.unhurt(5.0, window_s=30)
