"""Central mode at fleet scale: 1,000, 5,000 and 10,000 engines, and 4 shards splitting 10,000.

    .venv/bin/python -m lab.central_scale                      # VictoriaMetrics; about an hour on 2 loaded cores
    .venv/bin/python -m lab.central_scale --sizes 1000 --shards 0 --store prometheus

The fleet of :mod:`lab.fleet` (eight simulated scenarios, each under one instance in eight) is
imported into a fresh store once, at the largest size; every figure then comes from a fresh process
running :class:`CentralDiagnoser` cycles on a replayed clock 15 s apart: the first cycle reads a
whole window per engine (cold), the next ``--steady`` ones one new scrape per engine (steady state;
medians printed). Per size: wall and CPU time of a steady cycle, per engine, queries per cycle,
bytes read, RSS.

Shards: ``--shards 4`` runs four processes with ``--shard i/4`` over the largest fleet, one after the
other. Printed: the engines each diagnosed, and that every engine was diagnosed by exactly one shard;
then, with one shard taken as killed (its process gone: nothing it exported is left), the value the
documented alert ``VllmDiagShardTargetsUndiagnosed`` computes from the survivors' exported numbers
(``max(fleet_targets) - sum(targets_diagnosed)``), which must equal the killed shard's engines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from exporter.promsource.client import PromClient
from lab.common import free_port, proc_cpu_seconds
from lab.fleet import (
    INTERVAL,
    WINDOW,
    build_store,
    build_victoria_metrics,
    fleet_diagnoser,
    rss_mb,
    start_prometheus,
    stop,
    worker_summary,
)

# A store kept for several runs (--build, --serve): VictoriaMetrics with the limits a 10,000-engine answer needs
# (a 560 MB cycle takes longer than its default 30 s a query on a shared machine, and queues past 10 s).
KEPT_FLAGS = ("-retentionPeriod=10y", "-search.latencyOffset=0s", "-maxLabelsPerTimeseries=64",
              "-search.maxUniqueTimeseries=10000000", "-search.maxQueryDuration=600s", "-search.maxQueueDuration=600s")


class TimedClient(PromClient):
    """A ``PromClient`` that notes each answer: which query (its first sample name), seconds from sending it to
    the last byte read, bytes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: list[dict[str, Any]] = []

    async def _fetch(self, endpoint: str, form: dict[str, str]) -> tuple[int, str, bytes]:
        began = time.perf_counter()
        status, reason, body = await super()._fetch(endpoint, form)
        self.answers.append({"query": query_name(form.get("query", "")), "seconds": time.perf_counter() - began,
                             "bytes": len(body), "form": form})
        return status, reason, body


_FIRST_NAME = re.compile(r'__name__=~"([^"|]*)')


def query_name(expr: str) -> str:
    """A query's short name: its first sample name (unescaped), or the discovery's ``group by``."""
    found = _FIRST_NAME.search(expr)
    if expr.startswith("group by") or found is None:
        return "discovery: " + expr.split("(", 1)[0].strip()
    return found.group(1).replace("\\", "")


def store_cpu(pid: int | None) -> float:
    return proc_cpu_seconds(pid) if pid else math.nan


def worker(url: str, size: int, start: float, steady_cycles: int, shard: tuple[int, int], concurrency: int,
           store_pid: int | None, parts: int = 0, probe: bool = False) -> dict[str, Any]:
    """One fleet size (or one shard of it) in this (fresh) process: cycles on a replayed clock; the figures, with
    the store's own CPU per cycle where its process is known, and each steady answer's time and bytes.
    ``parts``: the parts of a steady read (0: as the diagnoser chooses; 1: one read, the diagnoser before them).
    ``probe``: then each query of the last steady cycle sent again alone, the store's CPU for it noted."""
    from exporter.promsource import batch

    if parts:
        batch.READ_PARTS = (parts,) if parts > 1 else ()
    source, central = fleet_diagnoser(url, size, shard, concurrency)
    baseline = rss_mb()

    async def run() -> list[dict[str, Any]]:
        cycles = []
        client = TimedClient(source)
        async with client:
            central.client = client
            first = start + INTERVAL + WINDOW  # the first instant with a full window stored
            for k in range(1 + steady_cycles):
                client.answers.clear()
                cpu, store = time.process_time(), store_cpu(store_pid)
                stats = await central.cycle(now=first + k * INTERVAL)
                cycles.append({"seconds": stats.duration_seconds, "cpu_seconds": time.process_time() - cpu,
                               "store_cpu_seconds": store_cpu(store_pid) - store, "queries": stats.queries,
                               "bytes": stats.bytes_read, "targets": stats.targets, "diagnosed": stats.diagnosed,
                               "fleet": central.fleet_targets,
                               "answers": [{k: v for k, v in a.items() if k != "form"} for a in client.answers],
                               "verdicts": sorted({s.diagnosis.verdict.layer for s in central.states.values()})})
            if probe and store_pid:  # the last steady cycle's queries again, each alone: the store's CPU for each
                for form in [a["form"] for a in client.answers]:
                    began, store = time.perf_counter(), store_cpu(store_pid)
                    _, _, body = await client._fetch("query", form)
                    probed.append({"query": query_name(form["query"]),
                                   "store_cpu_seconds": store_cpu(store_pid) - store,
                                   "seconds": time.perf_counter() - began, "bytes": len(body),
                                   "series": body.count(b'{"metric":')})
        return cycles

    probed: list[dict[str, Any]] = []
    cycles = asyncio.run(run())
    steady = cycles[1:]
    out = worker_summary(central, size, shard, cycles, baseline)
    out["cold"] = {k: v for k, v in cycles[0].items() if k != "answers"}
    out["waiting_seconds"] = statistics.median(c["seconds"] - c["cpu_seconds"] for c in steady)
    out["store_cpu_seconds"] = statistics.median(c["store_cpu_seconds"] for c in steady)
    out["probe"] = probed
    return out


def run_worker(url: str, size: int, start: float, steady: int, shard: tuple[int, int],
               concurrency: int, store_pid: int | None, parts: int = 0, probe: bool = False) -> dict[str, Any]:
    """One fresh process (its RSS and CPU its own)."""
    out = subprocess.run([sys.executable, "-m", "lab.central_scale", "--worker", url, str(size), str(start),
                          str(steady), str(shard[0]), str(shard[1]), str(concurrency), str(store_pid or 0),
                          str(parts), str(int(probe))],
                         check=True, capture_output=True, text=True, timeout=7200)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def size_table(results: list[dict[str, Any]]) -> str:
    lines = ["| engines | steady cycle, wall | diagnoser CPU | per engine | diagnoser waiting | store CPU | per engine "
             "| queries / cycle | bytes read / cycle | per engine | cold first cycle (CPU) | RSS after | peak RSS "
             "| all diagnosed every cycle | load average |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        n = r["targets"]
        store = r.get("store_cpu_seconds", math.nan)
        waiting = r.get("waiting_seconds", math.nan)  # the cycle's wall time less its CPU: answers awaited
        lines.append(
            f"| {n:,} | {r['cycle_seconds']:.1f} s | {r['cycle_cpu_seconds']:.1f} s | "
            f"{r['cycle_cpu_seconds'] / n * 1000:.2f} ms | {waiting:.1f} s | {store:.1f} s | "
            f"{store / n * 1000:.2f} ms | "
            f"{r['queries']:.0f} | {r['bytes'] / 1e6:.0f} MB | "
            f"{r['bytes'] / n / 1e3:.1f} KB | {r['cold']['cpu_seconds']:.0f} s | {r['rss_mb']:.0f} MB | "
            f"{r.get('peak_rss_mb', math.nan):.0f} MB | "
            f"{'yes' if r['every_target_every_cycle'] else 'NO'} | {r['load_average']:.1f} |")
    return "\n".join(lines)


def probe_table(result: dict[str, Any], top: int = 12) -> str:
    """The store's CPU per query of a steady cycle, each sent alone (summed over the parts), the costliest first."""
    per: dict[str, list[float]] = {}
    for row in result["probe"]:
        total = per.setdefault(row["query"], [0.0, 0.0, 0.0, 0.0])
        for i, field in enumerate(("store_cpu_seconds", "seconds", "bytes", "series")):
            total[i] += row[field]
    n = result["targets"]
    rows = sorted(((cpu, seconds, size, series, name) for name, (cpu, seconds, size, series) in per.items()),
                  reverse=True)
    cpu_all = sum(r[0] for r in rows)
    series_all = sum(r[3] for r in rows)
    lines = [f"The store's CPU per query at {n:,} engines, each of a steady cycle's {len(result['probe'])} queries "
             f"sent alone (summed over the parts): {cpu_all:.1f} s for {series_all:,.0f} series "
             f"({cpu_all / max(1.0, series_all) * 1e6:.1f} us a series)",
             "", "| query (first name) | store CPU | answer time | series | bytes | store CPU per series |",
             "|---|---|---|---|---|---|"]
    for cpu, seconds, size, series, name in rows[:top]:
        lines.append(f"| {name} | {cpu:.2f} s | {seconds:.2f} s | {series:,.0f} | {size / 1e6:.1f} MB | "
                     f"{cpu / max(1.0, series) * 1e6:.1f} us |")
    rest = rows[top:]
    if rest:
        lines.append(f"| the other {len(rest)} | {sum(r[0] for r in rest):.2f} s | {sum(r[1] for r in rest):.2f} s | "
                     f"{sum(r[3] for r in rest):,.0f} | {sum(r[2] for r in rest) / 1e6:.1f} MB | |")
    return "\n".join(lines)


def query_table(result: dict[str, Any], top: int = 8) -> str:
    """The steady cycles' answers of one run by query (medians over the cycles): the costliest first."""
    per: dict[str, list[tuple[float, float]]] = {}
    cycles = result.get("steady_cycles", [])
    for cycle in cycles:
        totals: dict[str, list[float]] = {}
        for answer in cycle["answers"]:
            total = totals.setdefault(answer["query"], [0.0, 0.0])
            total[0] += answer["seconds"]
            total[1] += answer["bytes"]
        for name, (seconds, size) in totals.items():
            per.setdefault(name, []).append((seconds, size))
    if not per:
        return ""
    rows = sorted(((statistics.median(s for s, _ in v), statistics.median(b for _, b in v), name)
                   for name, v in per.items()), reverse=True)
    n = result["targets"]
    every = sum(seconds for seconds, _, _ in rows)
    lines = [f"Answers at {n:,} engines (median of {len(cycles)} steady cycles; seconds from sending to the last byte, "
             f"{result['queries']:.0f} queries, at most the client's concurrency in flight): all {every:.1f} s",
             "", "| query (first name) | answer time | bytes | per engine |", "|---|---|---|---|"]
    for seconds, size, name in rows[:top]:
        lines.append(f"| {name} | {seconds:.2f} s | {size / 1e6:.1f} MB | {size / n:.0f} B |")
    return "\n".join(lines)


def shard_table(shards: list[dict[str, Any]], size: int) -> tuple[str, bool]:
    lines = ["| shard | engines diagnosed | steady cycle CPU | queries / cycle | all its engines every cycle |",
             "|---|---|---|---|---|"]
    seen: dict[str, int] = {}
    for r in shards:
        for name in r["owned"]:
            seen[name] = seen.get(name, 0) + 1
        lines.append(f"| {r['shard'][0]}/{r['shard'][1]} | {len(r['owned']):,} | {r['cycle_cpu_seconds']:.1f} s | "
                     f"{r['queries']:.0f} | {'yes' if r['every_target_every_cycle'] else 'NO'} |")
    once = len(seen) == size and all(count == 1 for count in seen.values())
    lines.append(f"\nEvery engine diagnosed by exactly one shard: {'yes' if once else 'NO'} "
                 f"({len(seen):,} engines seen, {sum(1 for c in seen.values() if c > 1)} by more than one, "
                 f"{size - len(seen)} by none).")
    ok = once
    for killed in range(len(shards)):
        survivors = [r for i, r in enumerate(shards) if i != killed]
        undiagnosed = max(r["fleet_targets"] for r in survivors) - sum(len(r["owned"]) for r in survivors)
        matches = undiagnosed == len(shards[killed]["owned"])
        ok = ok and matches
        lines.append(f"Shard {killed}/{len(shards)} killed: VllmDiagShardTargetsUndiagnosed reads {undiagnosed:,} "
                     f"engines diagnosed by no shard; the killed shard had {len(shards[killed]['owned']):,} "
                     f"({'equal' if matches else 'NOT EQUAL'}).")
    return "\n".join(lines), ok


def build_kept(root: Path, store: str, engines: int, steady: int) -> None:
    """A store of ``engines`` engines in ``root`` (kept), for ``--serve`` and ``--url``."""
    root.mkdir(parents=True, exist_ok=True)
    start = math.floor(time.time() / 3600) * 3600 - 2 * 3600
    duration = WINDOW + INTERVAL * (steady + 3)
    if store == "victoria-metrics":
        process, _ = build_victoria_metrics(root, engines, start, duration)
        stop(process)
    else:
        build_store(root, engines, start, duration)  # root / "tsdb"
    (root / "fleet.json").write_text(json.dumps({"store": store, "engines": engines, "start": start,
                                                 "steady": steady}) + "\n")


def serve_kept(root: Path) -> int:
    """The kept store until this process is stopped (SIGTERM or ^C); prints the arguments a run against it takes."""
    fleet = json.loads((root / "fleet.json").read_text())
    if fleet.get("store", "victoria-metrics") == "victoria-metrics":
        port = free_port()
        process = subprocess.Popen(["/usr/bin/victoria-metrics", f"-httpListenAddr=127.0.0.1:{port}",
                                    f"-storageDataPath={root / 'vm'}", *KEPT_FLAGS],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
    else:
        process, url = start_prometheus(root, root / "tsdb")
    print(f"--url {url} --start {fleet['start']:.0f} --store-pid {process.pid}  ({fleet['engines']} engines)",
          flush=True)
    signal.signal(signal.SIGTERM, lambda *_: process.terminate())
    try:
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if process.poll() is None:
            stop(process)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.central_scale", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 5000, 10000])
    parser.add_argument("--shards", type=int, default=4, help="shards over the largest size (0: none)")
    parser.add_argument("--shard-fleet", type=int, help="the fleet the shards split (default: the largest size)")
    parser.add_argument("--parallel", action="store_true",
                        help="run the shards at once, as they would run on their machines (default: one by one)")
    parser.add_argument("--steady", type=int, default=2, help="steady cycles per run after the cold one")
    parser.add_argument("--store", choices=("prometheus", "victoria-metrics"), default="victoria-metrics")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--url", help="a store already holding the fleet (this command's, left running), ...")
    parser.add_argument("--start", type=float, help="... and the start time its fleet was imported at")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="queries in flight per process (VictoriaMetrics runs 4 at once by default and fails "
                             "what waits over 10 s: keep the sum of the processes' at 4)")
    parser.add_argument("--store-pid", type=int, help="the --url store's process, for its CPU per cycle")
    parser.add_argument("--build", type=Path, metavar="DIR",
                        help="only build a store (--store) of the largest size in DIR, kept for --serve")
    parser.add_argument("--serve", type=Path, metavar="DIR",
                        help="only serve the store --build made in DIR until stopped; prints --url, --start and "
                             "--store-pid for the runs against it")
    parser.add_argument("--parts", type=int, default=0,
                        help="parts of a steady read (default: the diagnoser's choice; 1: one read of every engine, "
                             "as before the parts)")
    parser.add_argument("--probe", action="store_true",
                        help="then send each query of a steady cycle alone: the store's CPU per query (--store-pid)")
    parser.add_argument("--worker", nargs=10, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build_kept(args.build, args.store, args.shard_fleet or max(args.sizes), args.steady)
        return 0
    if args.serve:
        return serve_kept(args.serve)
    if args.worker:
        url, size, start, steady, shard, shards, concurrency, pid, parts, probe = args.worker
        result = worker(url, int(size), float(start), int(steady), (int(shard), int(shards)), int(concurrency),
                        int(pid) or None, int(parts), probe == "1")
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the cold cycle's peak
        print(json.dumps(result))
        return 0
    started = time.perf_counter()
    largest = args.shard_fleet or max(args.sizes)
    start = math.floor(time.time() / 3600) * 3600 - 2 * 3600  # inside retention, whole hours
    duration = WINDOW + INTERVAL * (args.steady + 3)  # a window, the cycles, a scrape of slack
    with tempfile.TemporaryDirectory(prefix="vllm-diag-central-") as tmp:
        root = Path(tmp)
        process: subprocess.Popen[bytes] | None = None
        store_pid = args.store_pid
        if args.url:
            url, start = args.url, args.start
        elif args.store == "victoria-metrics":
            process, url = build_victoria_metrics(root, largest, start, duration)
        else:
            process, url = start_prometheus(root, build_store(root, largest, start, duration))
        if process is not None:
            store_pid = process.pid
        built = time.perf_counter() - started
        print(f"store: {args.store}, {largest} engines imported in {built:.0f} s "
              f"(load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
        try:
            results = []
            for size in args.sizes:
                results.append(run_worker(url, size, start, args.steady, (0, 1), args.concurrency, store_pid,
                                          args.parts, args.probe))
                shown = {k: v for k, v in results[-1].items() if k not in ("owned", "steady_cycles", "probe")}
                print(f"{size} engines: {shown}", file=sys.stderr)
            shards = []
            if args.parallel:
                def one(i: int) -> dict[str, Any]:
                    return run_worker(url, largest, start, args.steady, (i, args.shards), args.concurrency, store_pid,
                                      args.parts)

                with ThreadPoolExecutor(max_workers=max(1, args.shards)) as pool:
                    shards = list(pool.map(one, range(args.shards)))
            else:
                for i in range(args.shards):
                    shards.append(run_worker(url, largest, start, args.steady, (i, args.shards), args.concurrency,
                                             store_pid, args.parts))
            for r in shards:
                print(f"shard {r['shard'][0]}/{r['shard'][1]}: {len(r['owned'])} engines", file=sys.stderr)
        finally:
            if process is not None:
                stop(process)
    print(size_table(results))
    for r in results:
        print("\n" + query_table(r))
        if r.get("probe"):
            print("\n" + probe_table(r))
    ok = all(r["every_target_every_cycle"] for r in results)
    if shards:
        text, shards_ok = shard_table(shards, largest)
        print("\n" + text)
        ok = ok and shards_ok and all(r["every_target_every_cycle"] for r in shards)
    print(f"\n({args.store}; store built in {built:.0f} s; whole run {time.perf_counter() - started:.0f} s; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f})")
    if args.json:
        args.json.write_text(json.dumps({"sizes": results, "shards": [{k: v for k, v in r.items() if k != "owned"}
                                                                      | {"engines": len(r["owned"])} for r in shards]},
                                        indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
