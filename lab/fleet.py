"""Fleet benchmark: ``serve --prometheus`` (the central diagnoser) over 10, 50 and 200 targets.

    .venv/bin/python -m lab.fleet            # about 3-4 minutes on 2 cores
    .venv/bin/python -m lab.fleet --sizes 10 50
    .venv/bin/python -m lab.fleet --store victoria-metrics --sizes 250 500 1000

With ``--store victoria-metrics`` the fleet goes into Debian's VictoriaMetrics through its own import
path (``/api/v1/import/prometheus``, only the families the diagnosis reads) instead of promtool blocks.

200 simulated targets in one real Prometheus 2.42: eight scenarios' captures (``write_captures``,
15 s apart) are backfilled with ``promtool tsdb create-blocks-from openmetrics``, each scenario
25 times under its own ``instance`` (same data, same cost). For each fleet size a fresh process
runs :class:`CentralDiagnoser` cycles on a replayed clock, 15 s apart: the first cycle reads a
whole window per target (cold start), the next ones one new scrape per target (steady state),
exactly what a cycle of the live loop reads. Printed per size: cycle time, queries and bytes
per cycle, RSS, and that every target was diagnosed in every cycle; next to them the sidecar's
per-target cost measured in the same run (one scrape through the same pipeline: bytes, time).
Prometheus runs on 127.0.0.1 and is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from lab.common import SHIPPED_WINDOW, free_port

SCENARIOS = ("healthy", "kv-pressure", "cpu-starved", "queue-backlog", "itl-stutter", "long-prompts",
             "preemption-storm", "sparse-traffic")
INTERVAL = 15.0
DURATION = 420.0  # 28 scrapes per target: the shipped 180 s window plus 16 cycles of steady state
WINDOW = SHIPPED_WINDOW
STEADY_CYCLES = 8


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def instance(i: int) -> str:
    return f"vllm-{i:05d}"


def instances(size: int) -> str:
    """A regular expression for the first ``size`` instances (whole thousands as one range each)."""
    thousands = [f"vllm-{block:02d}[0-9][0-9][0-9]" for block in range(size // 1000)]
    return "|".join(thousands + [instance(i) for i in range(size // 1000 * 1000, size)])


def build_store(root: Path, targets: int, start: float, duration: float = DURATION) -> Path:
    """Captures for each scenario, backfilled under ``targets`` instances; returns the TSDB folder."""
    from exporter.promsource import backfill
    from exporter.simulator import write_captures

    captures: dict[str, list[tuple[float, str]]] = {}
    for name in SCENARIOS:
        write_captures(name, root / name, duration, INTERVAL)
        captures[name] = backfill.folder(root / name, start, INTERVAL)
    source = root / "fleet.om"
    with source.open("w") as out:
        stream = ((at, text, {"instance": instance(i), "job": "vllm", "scenario": name})
                  for index in range(len(captures[SCENARIOS[0]]))
                  for i in range(targets)
                  for name in [SCENARIOS[i % len(SCENARIOS)]]
                  for at, text in [captures[name][index]])
        backfill.write(out, stream)
    storage = root / "tsdb"
    subprocess.run(["/usr/bin/promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(storage)],
                   check=True, capture_output=True, timeout=900)
    source.unlink()
    return storage


def build_victoria_metrics(root: Path, targets: int, start: float,
                           duration: float = DURATION) -> tuple[subprocess.Popen[bytes], str]:
    """Captures for each scenario under ``targets`` instances, imported into a fresh VictoriaMetrics."""
    from exporter.promsource import backfill
    from exporter.promsource.rebuild import WIRE_NAMES
    from exporter.simulator import write_captures

    wanted = frozenset(WIRE_NAMES)
    # Per scenario and scrape, the lines once, with a placeholder for the instance.
    lines: dict[str, list[str]] = {}
    for name in SCENARIOS:
        write_captures(name, root / name, duration, INTERVAL)
        lines[name] = ["".join(line + "\n" for line in backfill.samples(text, at, {"instance": "@I@", "job": "vllm"},
                                                                        millis=True)
                               if line.split("{", 1)[0].split(" ", 1)[0] in wanted)
                       for at, text in backfill.folder(root / name, start, INTERVAL)]
    port = free_port()
    (root / "vm").mkdir()
    process = subprocess.Popen(
        ["/usr/bin/victoria-metrics", f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={root / 'vm'}",
         "-retentionPeriod=10y", "-search.latencyOffset=0s", "-maxLabelsPerTimeseries=64",
         "-search.maxUniqueTimeseries=10000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                break
        except OSError:
            if time.monotonic() > deadline:
                stop(process)
                raise SystemExit("victoria-metrics did not become ready") from None
            time.sleep(0.3)
    for index in range(len(lines[SCENARIOS[0]])):
        body = "".join(lines[SCENARIOS[i % len(SCENARIOS)]][index].replace("@I@", instance(i)) for i in range(targets))
        request = urllib.request.Request(f"{url}/api/v1/import/prometheus", data=body.encode(), method="POST")
        with urllib.request.urlopen(request, timeout=600):
            pass
    with urllib.request.urlopen(f"{url}/internal/force_flush", timeout=60):
        pass
    return process, url


def start_prometheus(root: Path, storage: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    (root / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    process = subprocess.Popen(
        ["/usr/bin/prometheus", f"--config.file={root / 'prometheus.yml'}", f"--web.listen-address=127.0.0.1:{port}",
         f"--storage.tsdb.path={storage}", "--storage.tsdb.retention.time=30d"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.3)
    stop(process)
    raise SystemExit("prometheus did not become ready")


def stop(process: subprocess.Popen[bytes]) -> None:
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(5)


def fleet_diagnoser(url: str, size: int, shard: tuple[int, int], concurrency: int) -> tuple[Any, Any]:
    """The central diagnoser of the first ``size`` engines of the fleet (or one shard of them) in the store at
    ``url``, and its source settings."""
    from exporter.config import load_settings
    from exporter.promsource.central import CentralDiagnoser
    from exporter.promsource.settings import PrometheusSource

    # A query for every engine of a large fleet reads 50-100 MB: on a loaded machine it takes longer than
    # the shipped 30 s timeout, which would measure the machine, not the diagnoser.
    source = PrometheusSource(url=url, match=f'{{job="vllm", instance=~"{instances(size)}"}}', interval=INTERVAL,
                              max_targets=max(1000, size), shard=shard[0], shards=shard[1], timeout=600,
                              max_concurrency=concurrency)
    settings = load_settings(None, {"window_seconds": WINDOW, "prometheus": source.model_dump()})
    return source, CentralDiagnoser(settings, source)


def worker(url: str, size: int, start: float, steady_cycles: int = STEADY_CYCLES,
           shard: tuple[int, int] = (0, 1), concurrency: int = 4) -> dict[str, Any]:
    """One fleet size (or one shard of it) in this (fresh) process: cycles on a replayed clock; the figures."""
    from exporter.promsource.client import PromClient

    source, central = fleet_diagnoser(url, size, shard, concurrency)
    baseline = rss_mb()

    async def run() -> list[dict[str, Any]]:
        cycles = []
        async with PromClient(source) as client:
            central.client = client
            first = start + INTERVAL + WINDOW  # the first instant with a full window stored
            for k in range(1 + steady_cycles):
                cpu = time.process_time()
                stats = await central.cycle(now=first + k * INTERVAL)
                cycles.append({"seconds": stats.duration_seconds, "cpu_seconds": time.process_time() - cpu,
                               "queries": stats.queries,
                               "bytes": stats.bytes_read, "targets": stats.targets, "diagnosed": stats.diagnosed,
                               "fleet": central.fleet_targets,
                               "verdicts": sorted({s.diagnosis.verdict.layer for s in central.states.values()})})
        return cycles

    return worker_summary(central, size, shard, asyncio.run(run()), baseline)


def worker_summary(central: Any, size: int, shard: tuple[int, int], cycles: list[dict[str, Any]],
                   baseline: float) -> dict[str, Any]:
    """One worker's figures: the first (cold) cycle as it was, the steady ones as medians."""
    steady = cycles[1:]
    owned = len(central.states)
    return {
        "targets": size,
        "shard": list(shard),
        # The engines this process diagnosed in its last cycle (a state that is not "down").
        "owned": sorted(name for name, state in central.states.items() if state.status != "down"),
        "fleet_targets": central.fleet_targets,
        "cold": cycles[0],
        "cycle_seconds": statistics.median(c["seconds"] for c in steady),
        "cycle_cpu_seconds": statistics.median(c["cpu_seconds"] for c in steady),
        "load_average": os.getloadavg()[0],
        "queries": statistics.median(c["queries"] for c in steady),
        "bytes": statistics.median(c["bytes"] for c in steady),
        "every_target_every_cycle": all(c["diagnosed"] == owned and c["targets"] == owned and c["fleet"] == size
                                        for c in cycles),
        "rss_mb": rss_mb(),
        "rss_before_mb": baseline,
        "verdicts": sorted({v for c in cycles for v in c["verdicts"]}),
    }


def sidecar_per_target(root: Path) -> dict[str, float]:
    """One scrape through the sidecar's pipeline (parse, window, signals, diagnosis): bytes and time."""
    from exporter.config import load_settings
    from exporter.pipeline import TargetPipeline
    from exporter.poll import ScrapeResult

    times, sizes = [], []
    for name in SCENARIOS:
        settings = load_settings(None, {"window_seconds": WINDOW,
                                        "targets": [{"name": name, "url": "http://127.0.0.1:1/metrics",
                                                     "scrape_interval": INTERVAL}]})
        pipeline = TargetPipeline(settings.targets[0], settings)
        for index, path in enumerate(sorted((root / name).glob("capture-*.txt"))):
            body = path.read_bytes()
            began = time.perf_counter()
            pipeline.ingest(ScrapeResult(started_at=index * INTERVAL, duration=0.0, body=body))
            if index * INTERVAL >= WINDOW:
                times.append(time.perf_counter() - began)
                sizes.append(len(body))
    return {"seconds": statistics.median(times), "bytes": statistics.median(sizes)}


def table(results: list[dict[str, Any]], sidecar: dict[str, float]) -> str:
    lines = [
        "| targets | cycle time | per target | queries / cycle | bytes read / cycle | per target | RSS | "
        "all diagnosed every cycle | cold first cycle (reads a window) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        n = r["targets"]
        lines.append(
            f"| {n} | {r['cycle_seconds'] * 1000:.0f} ms | {r['cycle_seconds'] / n * 1000:.2f} ms | "
            f"{r['queries']:.0f} | {r['bytes'] / 1e6:.2f} MB | {r['bytes'] / n / 1e3:.1f} KB | {r['rss_mb']:.0f} MB | "
            f"{'yes' if r['every_target_every_cycle'] else 'NO'} | {r['cold']['seconds']:.2f} s, "
            f"{r['cold']['bytes'] / 1e6:.1f} MB |")
    lines.append(
        f"| sidecar, per target | {sidecar['seconds'] * 1000:.2f} ms per scrape | | 1 scrape | "
        f"{sidecar['bytes'] / 1e3:.1f} KB | {sidecar['bytes'] / 1e3:.1f} KB | see README: 56.5 MB for 1 target, "
        "105.7 MB for 100 | | |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 200])
    parser.add_argument("--store", choices=("prometheus", "victoria-metrics"), default="prometheus")
    parser.add_argument("--worker", nargs=3, metavar=("URL", "SIZE", "START"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, size, start = args.worker
        print(json.dumps(worker(url, int(size), float(start))))
        return 0
    started = time.perf_counter()
    start = math.floor(time.time() / 3600) * 3600 - 2 * 3600  # inside retention, whole hours
    with tempfile.TemporaryDirectory(prefix="vllm-diag-fleet-") as tmp:
        root = Path(tmp)
        if args.store == "victoria-metrics":
            process, url = build_victoria_metrics(root, max(args.sizes), start)
            built = time.perf_counter() - started
            sidecar = sidecar_per_target(root)
        else:
            storage = build_store(root, max(args.sizes), start)
            built = time.perf_counter() - started
            sidecar = sidecar_per_target(root)
            process, url = start_prometheus(root, storage)
        try:
            results = []
            for size in args.sizes:
                out = subprocess.run([sys.executable, "-m", "lab.fleet", "--worker", url, str(size), str(start)],
                                     check=True, capture_output=True, text=True, timeout=3600)
                results.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"{size} targets: {json.dumps(results[-1])}", file=sys.stderr)
        finally:
            stop(process)
    print(table(results, sidecar))
    print(f"\n(store built in {built:.0f} s; whole run {time.perf_counter() - started:.0f} s; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f})")
    return 0 if all(r["every_target_every_cycle"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
