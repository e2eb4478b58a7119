"""Memory per target in the sidecar at the shipped window: RSS growth per target, in process.

    .venv/bin/python -m lab.memory --targets 100

One :class:`Sidecar` with N targets, each fed the steady sequence of real captures until the shipped
window (180 s at 5 s) has filled, diagnosis and the target's ``/metrics`` lines (rendered by a request)
included; the figure is the growth of RSS after the first target, divided by the other N - 1 (what one
more target costs), and, from tracemalloc, the bytes one target's window holds. Deterministic: no baseline is needed to
read it, but compare two versions of the code on the same machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from pathlib import Path

from exporter.config import load_settings
from exporter.pipeline import COUNTERS
from exporter.poll import ScrapeResult
from exporter.server import Sidecar
from exporter.window import Window
from lab.common import SHIPPED_INTERVAL, SHIPPED_WINDOW
from lab.payloads import steady_sequence

WARM = int(SHIPPED_WINDOW / SHIPPED_INTERVAL) + 2


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def window_bytes(texts: list[str], count: int = 10) -> float:
    """tracemalloc: the bytes one full window holds (parse + window, nothing else)."""
    from exporter.parse import parse

    def fill() -> Window:
        window = Window(SHIPPED_WINDOW, COUNTERS)
        clock = 1.7e9
        for text in texts:
            clock += SHIPPED_INTERVAL
            window.push(parse(text, clock))
        return window

    fill()  # caches warm
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [fill() for _ in range(count)]
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del kept
    return used / count


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=100)
    args = parser.parse_args()
    texts = steady_sequence(WARM)
    bodies = [text.encode() for text in texts]
    settings = load_settings(overrides={
        "window_seconds": SHIPPED_WINDOW,
        "targets": [{"name": f"t{i}", "url": f"http://127.0.0.1:9/m{i}", "scrape_interval": SHIPPED_INTERVAL}
                    for i in range(args.targets)]})
    sidecar = Sidecar(settings)

    def feed(names: list[str]) -> None:
        clock = 1.7e9
        for body in bodies:
            clock += SHIPPED_INTERVAL
            for name in names:
                state = sidecar.pipelines[name].ingest(ScrapeResult(started_at=clock, duration=0.01, body=body))
                sidecar.publish(name, state)
        sidecar.metrics()  # read as Prometheus reads it: every target's /metrics lines are rendered and kept

    feed(["t0"])
    gc.collect()
    first = rss_kb()
    feed([f"t{i}" for i in range(1, args.targets)])
    gc.collect()
    grown = rss_kb() - first
    print(json.dumps({"targets": args.targets, "rss_mb": rss_kb() / 1024,
                      "rss_kb_per_target": grown / (args.targets - 1),
                      "window_kb_per_target": window_bytes(texts) / 1024}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
