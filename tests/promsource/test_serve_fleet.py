"""``vllm-diag serve --prometheus``: a small fleet in a real Prometheus, every target diagnosed
every cycle; API errors from the real Prometheus; a target that vanishes is down, then dropped
after its grace period.

Five simulated targets are backfilled (``promtool``) from 200 s ago to 130 s ahead, 5 s apart,
so a live cycle always finds fresh samples. The command runs as a subprocess on 127.0.0.1;
the grace-period part replays the clock against the same Prometheus (no minutes of waiting).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.cli import main
from exporter.config import load_settings
from exporter.promsource import backfill, batch
from exporter.promsource import central as central_module
from exporter.promsource.batch import FAMILY_NAMES, shard_of
from exporter.promsource.central import CentralDiagnoser
from exporter.promsource.client import PromClient
from exporter.promsource.scan import read_steady, scan
from exporter.promsource.settings import PrometheusSource
from exporter.simulator import write_captures
from tests.helpers import free_port
from tests.promsource.conftest import backfill as promtool_backfill
from tests.promsource.conftest import prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

SCENARIOS = ("healthy", "kv-pressure", "cpu-starved")
TARGETS = 5
INTERVAL = 5.0
VANISHING = "vllm-4"  # its samples end 30 s after the test starts
LOOKBACK = "30s"  # Prometheus' lookback, shortened so the vanished target leaves discovery quickly


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("fleet")
    start = math.floor(time.time() / INTERVAL) * INTERVAL - 200
    captures = {}
    for name in SCENARIOS:
        write_captures(name, root / name, 330, INTERVAL)
        captures[name] = backfill.folder(root / name, start, INTERVAL)
    rows = []
    for i in range(TARGETS):
        name = f"vllm-{i}"
        for at, text in captures[SCENARIOS[i % len(SCENARIOS)]]:
            if name == VANISHING and at > start + 230:
                continue
            rows.append((at, text, {"instance": name, "job": "vllm"}))
    rows.sort(key=lambda row: row[0])
    with (root / "fleet.om").open("w") as out:
        backfill.write(out, rows)
    promtool_backfill(root / "fleet.om", root / "tsdb")
    with prometheus(root / "tsdb", extra_flags=(f"--query.lookback-delta={LOOKBACK}",)) as url:
        yield {"root": root, "url": url, "start": start}


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def test_serve_diagnoses_every_target_every_cycle(fleet: Any) -> None:
    port = free_port()
    config = fleet["root"] / "serve.yaml"
    config.write_text(yaml.safe_dump({"window_seconds": 60, "log_level": "INFO"}))
    log = (fleet["root"] / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter.cli", "serve", "--prometheus", fleet["url"], "--match", '{job="vllm"}',
         "--interval", "2", "--listen", f"127.0.0.1:{port}", "--config", str(config)],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    seen: dict[float, float] = {}  # cycle number -> targets diagnosed in it
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(seen) < 4:
            time.sleep(0.7)
            with contextlib.suppress(OSError):
                metrics = scrape(f"{base}/metrics")
                cycles = metrics.get("vllm_diag_prometheus_cycles_total", [({}, 0)])[0][1]
                if cycles >= 1:
                    seen[cycles] = metrics["vllm_diag_prometheus_targets_diagnosed"][0][1]
        assert process.poll() is None, (fleet["root"] / "serve.log").read_text()
        assert len(seen) >= 4, f"cycles seen: {seen}; log: {(fleet['root'] / 'serve.log').read_text()[-2000:]}"
        assert all(n == TARGETS for n in seen.values()), seen
        verdicts = metrics["vllm_diag_layer_verdict"]
        by_target: dict[str, float] = {}
        for labels, value in verdicts:
            by_target[labels["target"]] = by_target.get(labels["target"], 0) + value
        assert by_target == {f"vllm-{i}": 1.0 for i in range(TARGETS)}, "one verdict per discovered target"
        # One query to discover, then one per family for all targets: none per target.
        assert metrics["vllm_diag_prometheus_cycle_queries"][0][1] == 1 + len(FAMILY_NAMES)
        assert metrics["vllm_diag_prometheus_fleet_targets"][0][1] == TARGETS
        doc = json.loads(get(f"{base}/api/v1/diagnosis"))
        states = {t["target"]: t["state"] for t in doc["targets"]}
        assert states == {f"vllm-{i}": "ok" for i in range(TARGETS)}
        layers = {t["target"]: t["verdict"]["layer"] for t in doc["targets"]}
        assert layers["vllm-1"] == "kv_cache", layers  # kv-pressure, as the scenario expects
        page = get(f"{base}/").decode()
        assert page.count('<svg class="timeline"') == TARGETS
        timelines = json.loads(get(f"{base}/api/v1/timeline"))["targets"]
        assert {t["target"] for t in timelines} == set(states) and all(t["timeline"] for t in timelines)
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(15)
        log.close()


def test_vanished_target_is_down_then_dropped(fleet: Any) -> None:
    source = PrometheusSource(url=fleet["url"], match='{job="vllm"}', interval=INTERVAL, grace_seconds=45)
    settings = load_settings(None, {"window_seconds": 60, "prometheus": source.model_dump()})
    central = CentralDiagnoser(settings, source)
    ended = fleet["start"] + 230

    async def run() -> list[dict[str, str]]:
        async with PromClient(source) as client:
            central.client = client
            seen = []
            for now in (ended - 10, ended + 31, ended + 40):  # last seen at ended - 10; grace 45 s
                await central.cycle(now=now)
                seen.append({name: state.status for name, state in central.states.items()})
            return seen

    alive, vanished, dropped = asyncio.run(run())
    assert alive == {f"vllm-{i}": "ok" for i in range(TARGETS)}
    assert vanished[VANISHING] == "down" and central.dropped_targets_total == 1
    assert VANISHING not in dropped and len(dropped) == TARGETS - 1
    assert all(status == "ok" for status in dropped.values())


def _cycles(fleet: Any, nows: tuple[float, ...], shard: int = 0, shards: int = 1,
            target_labels: tuple[str, ...] = ("instance",)) -> tuple[CentralDiagnoser, list[Any]]:
    source = PrometheusSource(url=fleet["url"], match='{job="vllm"}', interval=INTERVAL, shard=shard, shards=shards,
                              target_labels=target_labels)
    settings = load_settings(None, {"window_seconds": 60, "prometheus": source.model_dump()})
    central = CentralDiagnoser(settings, source)

    async def run() -> list[Any]:
        async with PromClient(source) as client:
            central.client = client
            return [await central.cycle(now=now) for now in nows]

    return central, asyncio.run(run())


def test_batched_cycles_cost_one_query_per_family_and_agree_with_diagnose_at(
        fleet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The store's answers are read as bytes, not decoded (exporter/promsource/scan.py); steady ones (one new
    # sample per series) without an object per series.
    steady: list[bool] = []
    scanned: list[bool] = []
    monkeypatch.setattr(batch, "read_steady",
                        lambda *args: steady.append(bool(found := read_steady(*args))) or found)
    monkeypatch.setattr(batch, "scan", lambda *args: scanned.append(scan(*args)) or scanned[-1])
    now = fleet["start"] + 200
    central, stats = _cycles(fleet, (now, now + INTERVAL, now + 2 * INTERVAL))
    assert [s.queries for s in stats] == [1 + len(FAMILY_NAMES)] * 3  # whatever the targets
    # A target that arrives reads one window by itself; the others still read only their new scrapes.
    central.pipelines.pop("vllm-0")
    arrival = asyncio.run(_cycle_again(central, now + 3 * INTERVAL))
    assert arrival.queries == 1 + 2 * len(FAMILY_NAMES) and arrival.diagnosed == TARGETS
    assert arrival.bytes_read < stats[0].bytes_read / 2
    assert stats[1].bytes_read < stats[0].bytes_read / 3, "later cycles read only the new scrapes"
    assert all(s.diagnosed == TARGETS for s in stats)
    # Every answer read as bytes: a read whose answers are all steady is joined; the others scanned one by one.
    assert len(steady) == 5 * len(FAMILY_NAMES) and all(scanned) and len(scanned) >= steady.count(False)
    assert steady.count(True) >= 3 * len(FAMILY_NAMES)  # the two steady cycles and the arrival's known targets
    # The same instant judged by `diagnose --prometheus --at` (one window read per target).
    single, _ = _cycles(fleet, (now,))
    code, out, err = run_cli("diagnose", "--prometheus", fleet["url"], "--match", '{job="vllm"}',
                             "--at", str(now), "--format", "json", "--config", str(_config(fleet)))
    assert code == 0, err
    def judged(target: dict[str, Any]) -> tuple[Any, ...]:
        return target["verdict"]["layer"], target["layer_scores"], target["symptoms"], target["signals"]

    expected = {t["target"]: judged(t) for t in json.loads(out)["targets"]}
    got = {name: judged(json.loads(json.dumps(state.to_dict()))) for name, state in single.states.items()}
    assert got.keys() == expected.keys() and len(got) == TARGETS
    for name in got:
        assert got[name] == expected[name], name


def test_a_cold_read_of_many_targets_comes_in_parts_with_the_same_verdicts(
        fleet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``COLD_READ_TARGETS`` new targets the window is read in parts of that many targets, each fed
    before the next: one answer per family and part, each sample read once, and every target judged as
    one read judges it."""
    now = fleet["start"] + 200
    whole, (one,) = _cycles(fleet, (now,))
    monkeypatch.setattr(central_module, "COLD_READ_TARGETS", 2)
    sliced, (cold,) = _cycles(fleet, (now,))
    assert cold.queries == 1 + math.ceil(TARGETS / 2) * len(FAMILY_NAMES)
    assert cold.diagnosed == one.diagnosed == TARGETS
    assert abs(cold.bytes_read - one.bytes_read) < one.bytes_read * 0.05  # each scrape read about once

    def states(central: CentralDiagnoser) -> dict[str, str]:
        return {name: json.dumps(state.to_dict(), sort_keys=True) for name, state in central.states.items()}

    assert states(sliced) == states(whole)
    # Named by two labels, targets cannot be narrowed: the window comes in time slices instead.
    labels = ("job", "instance")
    monkeypatch.setattr(central_module, "COLD_READ_TARGETS", 1000)
    whole, _ = _cycles(fleet, (now,), target_labels=labels)
    monkeypatch.setattr(central_module, "COLD_READ_TARGETS", 2)
    sliced, (cold,) = _cycles(fleet, (now,), target_labels=labels)
    assert cold.queries == 1 + math.ceil(TARGETS / 2) * len(FAMILY_NAMES) and cold.diagnosed == TARGETS
    assert states(sliced) == states(whole)


def test_shards_split_the_fleet_with_every_target_in_exactly_one(fleet: Any) -> None:
    now = fleet["start"] + 200
    owners: dict[str, int] = {}
    for shard in range(4):
        central, (stats,) = _cycles(fleet, (now,), shard, 4)
        assert central.fleet_targets == TARGETS  # every shard sees the whole fleet, and keeps its own
        assert stats.queries == (1 + len(FAMILY_NAMES) if central.keys else 1)
        for name, key in central.keys.items():
            assert name not in owners, f"{name} diagnosed by shards {owners[name]} and {shard}"
            assert shard_of(key, 4) == shard
            owners[name] = shard
        assert all(state.status == "ok" for state in central.states.values())
    assert set(owners) == {f"vllm-{i}" for i in range(TARGETS)}


async def _cycle_again(central: CentralDiagnoser, now: float) -> Any:
    async with PromClient(central.source) as client:
        central.client = client
        return await central.cycle(now=now)


def _config(fleet: Any) -> Any:
    path = fleet["root"] / "at.yaml"
    path.write_text(yaml.safe_dump({"window_seconds": 60}))
    return path


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_api_errors_from_a_real_prometheus(fleet: Any) -> None:
    url = fleet["url"]
    at = f"{fleet['start'] + 200:.0f}"
    code, _, err = run_cli("diagnose", "--prometheus", url, "--match", '{job=~"("}', "--at", at)
    assert code == 2 and err.count("\n") == 1 and "bad_data" in err and "--match" in err, err
    code, _, err = run_cli("diagnose", "--prometheus", url, "--match", '{job="nope"}', "--at", at)
    assert code == 2 and "no vLLM series match" in err and err.count("\n") == 1, err
    code, _, err = run_cli("diagnose", "--prometheus", url + "/prometheus", "--at", at)
    assert code == 2 and "HTTP 404" in err and "path prefix" in err, err


def test_diagnose_at_an_instant_gives_the_full_report(fleet: Any) -> None:
    at = f"{fleet['start'] + 200:.0f}"
    code, out, err = run_cli("diagnose", "--prometheus", fleet["url"], "--match", '{job="vllm", instance="vllm-1"}',
                             "--at", at, "--window", "60")
    assert code == 0, err
    assert out.startswith(f"from {fleet['url']} ") and "vllm-1" in out and "verdict: kv_cache" in out
    assert "[D] Frequent preemption" in out


def test_diagnose_a_span_gives_timeline_and_incidents(fleet: Any) -> None:
    first, last = f"{fleet['start'] + 80:.0f}", f"{fleet['start'] + 200:.0f}"
    argv = ["diagnose", "--prometheus", fleet["url"], "--match", '{job="vllm", instance=~"vllm-[01]"}',
            "--from", first, "--to", last, "--step", "20s", "--window", "60"]
    code, out, err = run_cli(*argv)
    assert code == 0, err
    assert "legend: R request, S scheduler, K kv cache" in out
    healthy, storm = out.split("vllm-1")[0], "vllm-1" + out.split("vllm-1", 1)[1]
    assert "incidents: none" in healthy
    assert "KKKKK" in storm and "vllm-1: kv_cache, C: " in storm and "; D: " in storm and "preemptions/s at KV" in storm
    code, out, err = run_cli(*argv, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["source"]["step_seconds"] == 20 and doc["source"]["queries"] == 1 + 2
    runs = {t["target"]: t["timeline"] for t in doc["targets"]}
    assert set(runs) == {"vllm-0", "vllm-1"}
    for target_runs in runs.values():
        assert {"from", "to", "verdict", "symptoms"} <= set(target_runs[0])
        assert target_runs[0]["from"] == float(first) and target_runs[-1]["to"] == float(last) + 20
    assert any(r["verdict"] == "kv_cache" and "D" in r["symptoms"] for r in runs["vllm-1"])
    assert all(s["state"] == "ok" for t in doc["targets"] for s in t["steps"])


def test_chunked_reads_give_the_same_steps(fleet: Any) -> None:
    """A span read in 50 s chunks (as 3 h chunks keep long spans under 11,000 points per series)
    judges every step as one read does."""
    argv = ["diagnose", "--prometheus", fleet["url"], "--match", '{job="vllm", instance="vllm-1"}',
            "--from", f"{fleet['start'] + 80:.0f}", "--to", f"{fleet['start'] + 200:.0f}", "--step", "10s",
            "--window", "60", "--format", "json"]
    config = fleet["root"] / "chunks.yaml"
    config.write_text(yaml.safe_dump({"prometheus": {"url": fleet["url"], "chunk_seconds": 50}}))
    _, whole, _ = run_cli(*argv)
    _, chunked, err = run_cli(*argv, "--config", str(config))
    one, many = json.loads(whole), json.loads(chunked)
    assert many["source"]["queries"] > one["source"]["queries"] + 2, err
    assert [t["steps"] for t in many["targets"]] == [t["steps"] for t in one["targets"]]
    assert one["targets"][0]["scrapes"] == many["targets"][0]["scrapes"] == 200 // INTERVAL  # from the first


def test_a_steady_read_in_parts_overlaps_the_next_part_and_judges_the_same(
        fleet: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``PART_TARGETS`` targets a steady read comes in parts (one query per family and part): the next
    part's queries go out while this part's targets are evaluated, and every target is judged as one read
    judges it."""
    now = fleet["start"] + 200
    nows = (now, now + INTERVAL, now + 2 * INTERVAL)
    whole, _ = _cycles(fleet, nows)
    monkeypatch.setattr(batch, "PART_TARGETS", 1)
    monkeypatch.setattr(batch, "READ_PARTS", (2,))
    monkeypatch.setattr(central_module, "YIELD_SECONDS", 0.0)
    events: list[tuple[str, str]] = []
    judge, discover = CentralDiagnoser._judge, CentralDiagnoser.discover
    query_body = PromClient.query_body

    async def discovering(self: CentralDiagnoser, client: PromClient, at: float) -> Any:
        events.append(("cycle", ""))
        return await discover(self, client, at)

    def judging(self: CentralDiagnoser, key: Any, at: float) -> Any:
        events.append(("judged", key.name))
        return judge(self, key, at)

    async def querying(self: PromClient, expr: str, at: float) -> bytes:
        events.append(("sent", expr))
        return await query_body(self, expr, at)

    monkeypatch.setattr(CentralDiagnoser, "_judge", judging)
    monkeypatch.setattr(CentralDiagnoser, "discover", discovering)
    monkeypatch.setattr(PromClient, "query_body", querying)
    parted, stats = _cycles(fleet, nows)
    assert [s.queries for s in stats] == [1 + len(FAMILY_NAMES)] + [1 + 2 * len(FAMILY_NAMES)] * 2
    assert all(s.diagnosed == TARGETS for s in stats)

    def states(central: CentralDiagnoser) -> dict[str, str]:
        return {name: json.dumps(state.to_dict(), sort_keys=True) for name, state in central.states.items()}

    assert states(parted) == states(whole)
    # The last steady cycle: part 1's first query went out before part 0's last target was judged.
    last = events[max(i for i, (what, _) in enumerate(events) if what == "cycle"):]
    matcher = batch.ending_matchers("instance", 2)[1]
    first_sent = next(i for i, (what, expr) in enumerate(last) if what == "sent" and matcher in expr)
    part0 = {name for name in parted.states if batch.part_of(name, 2) == 0}
    last_judged = max(i for i, (what, name) in enumerate(last) if what == "judged" and name in part0)
    assert part0 and first_sent < last_judged
