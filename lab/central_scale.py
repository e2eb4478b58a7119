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
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lab.fleet import INTERVAL, WINDOW, build_store, build_victoria_metrics, start_prometheus, stop, worker


def run_worker(url: str, size: int, start: float, steady: int, shard: tuple[int, int],
               concurrency: int) -> dict[str, Any]:
    """One fresh process (its RSS and CPU its own)."""
    out = subprocess.run([sys.executable, "-m", "lab.central_scale", "--worker", url, str(size), str(start),
                          str(steady), str(shard[0]), str(shard[1]), str(concurrency)],
                         check=True, capture_output=True, text=True, timeout=7200)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def size_table(results: list[dict[str, Any]]) -> str:
    lines = ["| engines | steady cycle, wall | CPU | CPU per engine | queries / cycle | bytes read / cycle "
             "| per engine | cold first cycle (CPU) | RSS after | peak RSS | all diagnosed every cycle "
             "| load average |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        n = r["targets"]
        lines.append(
            f"| {n:,} | {r['cycle_seconds']:.1f} s | {r['cycle_cpu_seconds']:.1f} s | "
            f"{r['cycle_cpu_seconds'] / n * 1000:.2f} ms | {r['queries']:.0f} | {r['bytes'] / 1e6:.0f} MB | "
            f"{r['bytes'] / n / 1e3:.1f} KB | {r['cold']['cpu_seconds']:.0f} s | {r['rss_mb']:.0f} MB | "
            f"{r.get('peak_rss_mb', math.nan):.0f} MB | "
            f"{'yes' if r['every_target_every_cycle'] else 'NO'} | {r['load_average']:.1f} |")
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
    parser.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, size, start, steady, shard, shards, concurrency = args.worker
        result = worker(url, int(size), float(start), int(steady), (int(shard), int(shards)), int(concurrency))
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
        if args.url:
            url, start = args.url, args.start
        elif args.store == "victoria-metrics":
            process, url = build_victoria_metrics(root, largest, start, duration)
        else:
            process, url = start_prometheus(root, build_store(root, largest, start, duration))
        built = time.perf_counter() - started
        print(f"store: {args.store}, {largest} engines imported in {built:.0f} s "
              f"(load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
        try:
            results = []
            for size in args.sizes:
                results.append(run_worker(url, size, start, args.steady, (0, 1), args.concurrency))
                print(f"{size} engines: { {k: v for k, v in results[-1].items() if k != 'owned'} }", file=sys.stderr)
            shards = []
            if args.parallel:
                def one(i: int) -> dict[str, Any]:
                    return run_worker(url, largest, start, args.steady, (i, args.shards), args.concurrency)

                with ThreadPoolExecutor(max_workers=max(1, args.shards)) as pool:
                    shards = list(pool.map(one, range(args.shards)))
            else:
                for i in range(args.shards):
                    shards.append(run_worker(url, largest, start, args.steady, (i, args.shards), args.concurrency))
            for r in shards:
                print(f"shard {r['shard'][0]}/{r['shard'][1]}: {len(r['owned'])} engines", file=sys.stderr)
        finally:
            if process is not None:
                stop(process)
    print(size_table(results))
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
