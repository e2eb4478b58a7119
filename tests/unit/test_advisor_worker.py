"""The sidecar's advisor worker: which targets it advises, and when (no calibration runs here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.advisor.result import AdviceResult
from exporter.advisor.worker import AdvisorWorker
from exporter.config import ADVICE_MAX_AGE_SECONDS, Advisor
from exporter.pipeline import TargetPipeline, replay
from exporter.simulator.capture import write_captures
from exporter.simulator.scenarios import SCENARIOS
from tests.judged import scenario_settings


def _judged(name: str, out: Path, seconds: float = 210) -> TargetPipeline:
    files = write_captures(SCENARIOS[name], out, seconds, 15, None)
    settings = scenario_settings(name, 15)  # the shipped window, 180 s
    pipeline = TargetPipeline(settings.targets[0], settings)
    replay(files, pipeline, 15)
    return pipeline


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TargetPipeline]:
    return {name: _judged(name, tmp_path_factory.mktemp(name)) for name in ("healthy", "preemption-storm")}


def test_only_symptomatic_targets_are_due_and_healthy_ones_lose_their_advice(judged: dict[str, TargetPipeline]) -> None:
    healthy, storm = judged["healthy"], judged["preemption-storm"]
    assert not healthy.state.diagnosis.active_symptoms and storm.state.diagnosis.active_symptoms
    worker = AdvisorWorker(Advisor(interval=300))
    healthy.advice = AdviceResult(None, (), "left from an earlier symptom")
    assert worker.due([healthy, storm], now=1000.0) == [storm]
    assert healthy.advice is None  # no advice for a symptom that is gone
    assert worker._executor is None  # nothing spawned by looking


def test_a_window_still_filling_waits(tmp_path: Path) -> None:
    young = _judged("preemption-storm", tmp_path, 120)  # a sidecar up for two minutes of a 180 s window
    assert young.state.diagnosis.active_symptoms
    assert AdvisorWorker().due([young], now=1000.0) == []


def test_advice_is_renewed_after_the_interval_and_never_older_than_the_limit(judged: dict[str, TargetPipeline]) -> None:
    storm = judged["preemption-storm"]
    worker = AdvisorWorker(Advisor(interval=300))
    storm.advice = AdviceResult(None, (), "advised at 1000")
    worker._advised_at[storm.target.name] = 1000.0
    assert worker.due([storm], now=1299.0) == []
    assert worker.due([storm], now=1300.0) == [storm] and storm.advice is not None
    # a run that could not keep up (many symptomatic targets): the advice is withdrawn, not shown stale
    assert worker.due([storm], now=1000.0 + ADVICE_MAX_AGE_SECONDS) == [storm] and storm.advice is None


def test_oldest_advice_first(judged: dict[str, TargetPipeline]) -> None:
    storm = judged["preemption-storm"]
    other = _judged_copy(storm)
    worker = AdvisorWorker(Advisor(interval=60))
    worker._advised_at.update({storm.target.name: 500.0, other.target.name: 100.0})
    assert worker.due([storm, other], now=1000.0) == [other, storm]


def _judged_copy(pipeline: TargetPipeline) -> TargetPipeline:
    """A second target with the same state under another name."""
    target = pipeline.target.model_copy(update={"name": "second"})
    copy = TargetPipeline(target, pipeline.settings)
    copy.state, copy.window = pipeline.state, pipeline.window
    return copy
