"""The same simulated fleet in a real VictoriaMetrics and a real Prometheus, each filled by its own
import path, gives the same diagnosis from both (``serve --prometheus``'s batched cycles) and from
the sidecar's own pipeline fed the captures.

Prometheus is filled with ``promtool tsdb create-blocks-from openmetrics``, VictoriaMetrics through
``/api/v1/import/prometheus`` (Debian's ``victoria-metrics`` package, single node, 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.config import load_settings
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.promsource import backfill, batch
from exporter.promsource.batch import FAMILY_NAMES
from exporter.promsource.central import CentralDiagnoser
from exporter.promsource.client import PromClient
from exporter.promsource.scan import read_steady, scan
from exporter.promsource.settings import PrometheusSource
from exporter.promsource.span import target_for
from exporter.simulator import write_captures
from tests.promsource.conftest import backfill as promtool_backfill
from tests.promsource.conftest import prometheus, victoria_metrics, vm_import

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

SCENARIOS = ("healthy", "kv-pressure", "cpu-starved", "preemption-storm")
TARGETS = 8
INTERVAL = 5.0
WINDOW = 60.0


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("two-stores")
    start = math.floor(time.time() / INTERVAL) * INTERVAL - 600
    captures = {}
    for name in SCENARIOS:
        write_captures(name, root / name, 300, INTERVAL)
        captures[name] = backfill.folder(root / name, start, INTERVAL)
    rows = sorted(((at, text, {"instance": f"vllm-{i}", "job": "vllm"})
                   for i in range(TARGETS) for at, text in captures[SCENARIOS[i % len(SCENARIOS)]]),
                  key=lambda row: row[0])
    with (root / "fleet.om").open("w") as out:
        backfill.write(out, rows)
    promtool_backfill(root / "fleet.om", root / "tsdb")
    (root / "vm").mkdir()
    with prometheus(root / "tsdb") as prom, victoria_metrics(root / "vm") as vm:
        vm_import(vm, backfill.prometheus_text(rows))
        yield {"prometheus": prom, "victoria-metrics": vm, "start": start, "rows": rows}


def _settings(url: str) -> tuple[Any, PrometheusSource]:
    source = PrometheusSource(url=url, match='{job="vllm"}', interval=INTERVAL)
    return load_settings(None, {"window_seconds": WINDOW, "prometheus": source.model_dump()}), source


def judged(state: Any) -> tuple[Any, ...]:
    doc = json.loads(json.dumps(state.to_dict()))
    return doc["state"], doc["verdict"]["layer"], doc["layer_scores"], doc["symptoms"], doc["signals"]


def central_states(url: str, nows: tuple[float, ...]) -> tuple[dict[str, tuple[Any, ...]], list[Any]]:
    settings, source = _settings(url)
    central = CentralDiagnoser(settings, source)

    async def run() -> list[Any]:
        async with PromClient(source) as client:
            central.client = client
            return [await central.cycle(now=now) for now in nows]

    stats = asyncio.run(run())
    return {name: judged(state) for name, state in central.states.items()}, stats


def sidecar_states(rows: list[tuple[float, str, dict[str, str]]], now: float) -> dict[str, tuple[Any, ...]]:
    settings, source = _settings("http://127.0.0.1:9")
    out = {}
    for i in range(TARGETS):
        name = f"vllm-{i}"
        pipeline = TargetPipeline(target_for(settings, name, source, INTERVAL), settings)
        for at, text, labels in rows:
            if labels["instance"] == name and at <= now:
                pipeline.ingest(ScrapeResult(started_at=at, duration=0.0, body=text.encode()), evaluate_now=False)
        out[name] = judged(pipeline.evaluate(now))
    return out


def test_victoria_metrics_prometheus_and_the_sidecar_give_the_same_diagnosis(stores: Any) -> None:
    now = stores["start"] + 200
    from_vm, vm_stats = central_states(stores["victoria-metrics"], (now,))
    from_prometheus, _ = central_states(stores["prometheus"], (now,))
    from_sidecar = sidecar_states(stores["rows"], now)
    assert set(from_vm) == {f"vllm-{i}" for i in range(TARGETS)}
    assert vm_stats[0].queries == 1 + len(FAMILY_NAMES)
    layers = {name: judged_[1] for name, judged_ in from_sidecar.items()}
    assert {layers[f"vllm-{i}"] for i in range(TARGETS)} != {"none"}, "the fleet has something to diagnose"
    for name in from_sidecar:
        assert from_prometheus[name] == from_sidecar[name], f"{name}: Prometheus"
        # VictoriaMetrics keeps 12 significant digits of a value, Prometheus all of them: the verdict and
        # its evidence are identical; a signal that subtracts two large sums (a histogram's sum from another's)
        # loses a few of those digits, so the signals agree to 1e-6.
        assert from_vm[name][:4] == from_sidecar[name][:4], f"{name}: VictoriaMetrics"
        differ = {k: (v, from_sidecar[name][4][k]) for k, v in from_vm[name][4].items()
                  if not close(v, from_sidecar[name][4][k])}
        assert not differ, f"{name}: VictoriaMetrics' signals: {differ}"


def close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)
    return bool(a == b)


def test_victoria_metrics_cycles_read_only_what_is_new(stores: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The store's answers are read as bytes, not decoded (exporter/promsource/scan.py); steady ones (one new
    # sample per series) without an object per series.
    steady: list[bool] = []
    scanned: list[bool] = []
    monkeypatch.setattr(batch, "read_steady",
                        lambda *args: steady.append(bool(found := read_steady(*args))) or found)
    monkeypatch.setattr(batch, "scan", lambda *args: scanned.append(scan(*args)) or scanned[-1])
    now = stores["start"] + 200
    states, stats = central_states(stores["victoria-metrics"], (now, now + INTERVAL, now + 2 * INTERVAL))
    assert [s.queries for s in stats] == [1 + len(FAMILY_NAMES)] * 3
    assert stats[2].bytes_read < stats[0].bytes_read / 3
    assert all(state[0] == "ok" for state in states.values())
    assert len(steady) == 3 * len(FAMILY_NAMES) and all(scanned) and len(scanned) >= steady.count(False)
    assert steady.count(True) >= 2 * len(FAMILY_NAMES)  # the two steady cycles


def test_vm_import_body_is_the_openmetrics_rows_in_milliseconds(tmp_path: Path) -> None:
    rows = [(1700000000.25, 'vllm:num_requests_running{engine="0"} 3\n# HELP x\n', {"instance": "a"})]
    assert backfill.prometheus_text(rows) == 'vllm:num_requests_running{engine="0",instance="a"} 3 1700000000250\n'
