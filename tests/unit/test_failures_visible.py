"""Rule and source failures are counted, exported, put in the JSON and logged once per change."""

from __future__ import annotations

import logging

import exporter.diagnosis.engine as engine
from exporter.config import load_settings
from exporter.diagnosis.rules import RULES
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.publish.exposition import Exposition
from exporter.signals import HostInputs
from tests.conftest import read_capture

PHASES = ("steady-during", "steady", "prefix-during", "prefix")


def _pipeline(host_errors):
    settings = load_settings(overrides={"window_seconds": 600, "targets": [
        {"name": "t", "url": "http://127.0.0.1:9/metrics", "scrape_interval": 5, "timeout": 3}]})
    return TargetPipeline(settings.targets[0], settings,
                          host_probe=lambda now: HostInputs(errors=host_errors))


def _feed(pipeline, fixtures_dir):
    state = None
    for i, phase in enumerate(PHASES):
        body = read_capture(fixtures_dir, phase).encode()
        state = pipeline.ingest(ScrapeResult(started_at=1000.0 + 10 * i, duration=0.0, body=body))
    return state


def test_a_broken_rule_and_a_failing_source_are_counted_exported_and_logged_once(
        fixtures_dir, monkeypatch, caplog):
    def broken(ctx):
        raise KeyError("no such signal")

    monkeypatch.setattr(engine, "RULES", (*RULES[:-1], ("G", broken)))
    pipeline = _pipeline((("hostcpu:schedstat", "unavailable"),))
    with caplog.at_level(logging.WARNING, logger="exporter.pipeline"):
        state = _feed(pipeline, fixtures_dir)
    evaluations = len(PHASES) - 1  # the first scrape is no evidence: rules do not run
    assert state.rule_errors_total == {"G": evaluations}
    assert state.source_errors_total == {("hostcpu:schedstat", "unavailable"): len(PHASES)}
    doc = state.to_dict()
    assert doc["rule_errors"] == [{"cause": "G", "error": "KeyError: 'no such signal'", "total": evaluations}]
    assert doc["abstained"]["G"] == ["rule error"]

    text = Exposition(None).render([state]).decode()  # what /metrics serves
    assert f'vllm_diag_rule_errors_total{{cause="G",target="t"}} {evaluations}.0' in text
    assert 'vllm_diag_source_errors_total{reason="unavailable",source="hostcpu:schedstat",target="t"} 4.0' in text

    # Logged when the failure starts, not at every evaluation.
    rule_logs = [r for r in caplog.records if "rule G failed" in r.getMessage()]
    source_logs = [r for r in caplog.records if "source hostcpu:schedstat failed" in r.getMessage()]
    assert len(rule_logs) == 1 and len(source_logs) == 1
