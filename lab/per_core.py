"""Targets per core at 15 s: the real ``vllm-diag serve`` against the minimal poller, in alternated rounds.

    .venv/bin/python -m lab.per_core                 # about 9 minutes: the window fills, then 5 rounds
    .venv/bin/python -m lab.per_core --rounds 7 --seconds 40

Both processes poll the same local target server (``lab.target_server``: the steady sequence of real
captures) with ``--targets`` targets each at the shipped 5 s interval and window, side by side, from
start to end. Once the window has filled, each round measures the CPU of one process per scrape over
``--seconds`` (all threads, ``/proc/<pid>/task/*/schedstat``; its ``/metrics`` scraped every 15 s as
Prometheus would), then the other's, alternating which goes first (``lab.rounds``). Targets per
core at 15 s = 15 s / CPU per scrape. The figure is the median of the rounds' targets per core and
the median of their ratios to the poller's, each with its lowest and highest round and the spread
((max - min) / median). The machine's load average is printed beside them: on a shared machine the
absolute figure moves with the load, the ratio of a round much less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lab.common import SHIPPED_INTERVAL, SHIPPED_WINDOW, proc_cpu_ns
from lab.process import PROM_SCRAPE_EVERY, Bench, _get
from lab.rounds import alternated

PER_CORE_MIN = 3000  # targets per core at 15 s (issue 52)
PER_CORE_VS_BASELINE = 3.0  # ... and at least this many times the minimal poller's


def cpu_per_scrape(bench: Bench, pid: int, port: int, prefix: str, seconds: float) -> float:
    """CPU seconds one process spent per scrape it made over ``seconds``."""
    cpu, served = proc_cpu_ns(pid), bench.served().get(prefix, 0)
    end = time.monotonic() + seconds
    while True:
        _get(f"http://127.0.0.1:{port}/metrics")
        left = end - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(PROM_SCRAPE_EVERY, left))
    scrapes = bench.served().get(prefix, 0) - served
    return (proc_cpu_ns(pid) - cpu) / 1e9 / max(1, scrapes)


def spread(values: list[float]) -> str:
    middle = statistics.median(values)
    width = (max(values) - min(values)) / middle
    return f"{middle:,.0f} (rounds {min(values):,.0f}-{max(values):,.0f}, spread {width:.0%})"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.per_core", description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0, help="measured period of each process per round")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="vllm-diag-per-core-") as tmp:
        bench = Bench(Path(tmp), hosts=16)
        try:
            sidecar, sidecar_port = bench.sidecar(args.targets, SHIPPED_INTERVAL, SHIPPED_WINDOW, "rounds")
            poller, poller_port = bench.baseline(args.targets, SHIPPED_INTERVAL, "rounds")
            time.sleep(SHIPPED_WINDOW + 2 * SHIPPED_INTERVAL)  # the window has filled
            rounds = alternated(lambda _: cpu_per_scrape(bench, sidecar.pid, sidecar_port, "s", args.seconds),
                                lambda _: cpu_per_scrape(bench, poller.pid, poller_port, "b", args.seconds),
                                args.rounds)
        finally:
            bench.close()
    ours = [PROM_SCRAPE_EVERY / cost for cost in rounds.ours]
    theirs = [PROM_SCRAPE_EVERY / cost for cost in rounds.baseline]
    load_after = os.getloadavg()
    median = statistics.median(ours)
    passed = median >= PER_CORE_MIN and rounds.ratio >= PER_CORE_VS_BASELINE
    print(f"vllm-diag serve, targets per core at 15 s: {spread(ours)}; CPU per scrape "
          f"{statistics.median(rounds.ours) * 1e3:.2f} ms")
    print(f"minimal poller, targets per core at 15 s: {spread(theirs)}; CPU per scrape "
          f"{statistics.median(rounds.baseline) * 1e3:.2f} ms")
    print(f"ratio: {rounds.describe()}")
    print(f"target: >= {PER_CORE_MIN:,} and >= {PER_CORE_VS_BASELINE:g}x the poller's: {'PASS' if passed else 'MISS'}")
    print(f"({args.targets} targets each at {SHIPPED_INTERVAL:g} s, window {SHIPPED_WINDOW:g} s; "
          f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, {load_after[0]:.1f} after)")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds.as_dict(), "ours_per_core": ours, "poller_per_core": theirs,
                                         "load_before": load_before, "load_after": load_after,
                                         "targets": args.targets, "seconds": args.seconds}, indent=1) + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
