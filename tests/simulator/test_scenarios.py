"""The scenario suite: every simulated scenario, replayed through the diagnosis, gives the
verdict layer, symptoms and causes documented in docs/scenarios.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import load_settings
from exporter.pipeline import TargetPipeline, replay
from exporter.simulator import SCENARIOS, write_captures

DURATION, INTERVAL, WINDOW = 600.0, 15.0, 180.0


def diagnose_scenario(name: str, out: Path, seed: int | None = None):
    scenario = SCENARIOS[name]
    files = write_captures(scenario, out, DURATION, INTERVAL, seed)
    settings = load_settings(overrides={"window_seconds": WINDOW, "targets": [{
        "name": name, "url": "http://127.0.0.1:8000/metrics", "scrape_interval": INTERVAL, "timeout": 3,
        "engine": scenario.engine_facts()}]})
    pipeline = TargetPipeline(settings.targets[0], settings)
    return replay(files, pipeline, INTERVAL, dcgm_dir=out / "dcgm")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_gives_its_documented_diagnosis(name, tmp_path):
    expected = SCENARIOS[name].expected
    state = diagnose_scenario(name, tmp_path)
    assert state.status == "ok"
    symptoms = {s.id for s in state.diagnosis.symptoms}
    causes = {c.id for c in state.diagnosis.active_causes}
    detail = (state.diagnosis.verdict, state.diagnosis.layer_scores, sorted(causes))
    assert state.diagnosis.verdict.layer == expected.verdict, detail
    assert set(expected.symptoms) <= symptoms, detail
    assert set(expected.causes) <= causes, detail
    unexpected = causes - set(expected.causes) - set(expected.also_possible)
    assert not unexpected, detail


def test_healthy_is_none_with_no_symptom(tmp_path):
    state = diagnose_scenario("healthy", tmp_path)
    assert state.diagnosis.verdict.layer == "none"
    assert state.diagnosis.symptoms == ()
