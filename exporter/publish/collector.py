"""prometheus_client collector over the last published states.

``collect()`` only turns the current immutable states into metric families: nothing is
computed on scrape, so two Prometheus replicas see the same numbers and polling is never
stalled by a scraper. The families, their order, help, labels and where each value comes
from are the catalog ``exporter.publish.exported``: this module is the loop over it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.config import Settings
from exporter.publish.exported import EXPORTED, ExportedMetric
from exporter.state import TargetState


def new_family(metric: ExportedMetric[Any]) -> CounterMetricFamily | GaugeMetricFamily:
    """An empty family with the catalog's name, help and labels."""
    kind = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
    return kind(metric.name, metric.help, labels=list(metric.labels))


class DiagnosisCollector(Collector):
    """Yields the ``vllm_diag_*`` families for every target's current state."""

    def __init__(self, states: Callable[[], Mapping[str, TargetState]], settings: Settings | None = None) -> None:
        self._states = states
        self._settings = settings

    def describe(self) -> Iterable[Metric]:
        return list(self._families([]))

    def collect(self) -> Iterable[Metric]:
        return self._families(list(self._states().values()))

    def _families(self, states: list[TargetState]) -> Iterator[Metric]:
        for metric in EXPORTED:
            family = new_family(metric)
            for labels, value in metric.source(states, self._settings):
                family.add_metric(labels, value)
            yield family
