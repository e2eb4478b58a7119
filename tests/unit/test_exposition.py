"""The sidecar's cached ``/metrics`` text (exporter/publish/exposition.py, the path the golden files pin) is
byte for byte what prometheus_client's ``generate_latest`` writes for the same states through a plain
collector over the exported catalog (``ReferenceCollector`` below, the client library's own rules of the
text format), for real scenarios, several targets, every status and label values that need escaping; and
a state is rendered once, however many requests read it."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.config import Settings, load_settings
from exporter.publish.exported import EXPORTED
from exporter.publish.exposition import Exposition
from exporter.server import Sidecar
from exporter.state import TargetState
from tests.judged import judge_scenario


class ReferenceCollector(Collector):
    """The ``vllm_diag_*`` families of the states, built by prometheus_client: the reference for the text."""

    def __init__(self, states: list[TargetState], settings: Settings | None) -> None:
        self._states, self._settings = states, settings

    def collect(self) -> Iterator[Metric]:
        for metric in EXPORTED:
            kind = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
            family = kind(metric.name, metric.help, labels=list(metric.labels))
            for labels, value in metric.source(self._states, self._settings):
                family.add_metric(labels, value)
            yield family


def reference(states: list[TargetState], settings: Settings | None) -> bytes:
    registry = CollectorRegistry()
    registry.register(ReferenceCollector(states, settings))
    return generate_latest(registry)


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[TargetState], Settings]:
    """Two scenarios' final states (one diagnosed healthy, one with symptoms), under one configuration."""
    states = []
    for name in ("healthy", "preemption-storm"):
        state, _ = judge_scenario(name, tmp_path_factory.mktemp(name), 120.0, 15.0, 0)
        states.append(state)
    settings = load_settings(overrides={"targets": [{"name": s.target, "url": f"http://127.0.0.1:9/{s.target}"}
                                                    for s in states]})
    return states, settings


def test_same_bytes_as_generate_latest(judged: tuple[list[TargetState], Settings]) -> None:
    states, settings = judged
    healthy, storm = states
    odd = replace(storm, target="odd", model_name='m"1\\a\nb')  # every character the format escapes
    down = replace(healthy, target="down", status="down", signals=None)
    waiting = replace(healthy, target="waiting", status="insufficient_evidence",
                      evaluated_at=-0.0, health=replace(healthy.health, last_duration_seconds=math.nan))
    everything = [healthy, storm, odd, down, waiting]
    for chosen in (everything, everything[::-1], [storm], []):
        assert Exposition(settings).render(chosen) == reference(chosen, settings)
    assert Exposition(None).render(everything) == reference(everything, None)  # no configured objectives


def test_a_state_is_rendered_once(judged: tuple[list[TargetState], Settings]) -> None:
    states, settings = judged
    exposition = Exposition(settings)
    first = exposition.fragment(states[0])
    assert exposition.fragment(states[0]) is first
    newer = replace(states[0], evaluated_at=states[0].evaluated_at + 5)
    assert exposition.fragment(newer) is not first
    assert exposition.render([newer]) == reference([newer], settings)
    exposition.render(states)
    assert exposition.render(states[1:]) == reference(states[1:], settings)  # a target gone: not listed


def test_sidecar_metrics_are_the_families_then_the_process(tmp_path: Path) -> None:
    sidecar = Sidecar(load_settings(overrides={"targets": [{"name": "t", "url": "http://127.0.0.1:9/metrics"}]}))
    body = sidecar.metrics()
    diagnosis = reference(list(sidecar.states.values()), sidecar.settings)
    assert body.startswith(diagnosis)
    assert b"\n# TYPE vllm_diag_process_cpu_seconds_total counter\n" in body[len(diagnosis) - 1:]
