"""RSS of ``vllm-diag serve`` with one target once the shipped window has filled, beside the minimal poller's.

    .venv/bin/python -m lab.rss            # about 4 minutes (the window fills at 5 s in 180 s)
    .venv/bin/python -m lab.rss --after 60

The figure of ``python -m lab --only process`` ("RSS, serve, 1 target") without its 100- and
1000-target runs: both processes poll the local target server (``lab.target_server``) at the shipped
5 s interval, their ``/metrics`` scraped every 15 s; RSS and its high-water mark from /proc/<pid>/status.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from lab.common import SHIPPED_INTERVAL, SHIPPED_WINDOW, proc_status_kb
from lab.process import PROM_SCRAPE_EVERY, Bench, _get

RSS_MAX_MB = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.rss", description=__doc__.splitlines()[0])
    parser.add_argument("--after", type=float, default=SHIPPED_WINDOW + 30.0, help="seconds after start")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vllm-diag-rss-") as tmp:
        bench = Bench(Path(tmp), hosts=1)
        try:
            sidecar, port = bench.sidecar(1, SHIPPED_INTERVAL, SHIPPED_WINDOW, "one")
            poller, poller_port = bench.baseline(1, SHIPPED_INTERVAL, "one")
            end = time.monotonic() + args.after
            while time.monotonic() < end:
                _get(f"http://127.0.0.1:{port}/metrics")
                _get(f"http://127.0.0.1:{poller_port}/metrics")
                time.sleep(min(PROM_SCRAPE_EVERY, max(0.0, end - time.monotonic())))
            figures = {name: {"rss_mb": proc_status_kb(pid, "VmRSS") / 1024,
                              "hwm_mb": proc_status_kb(pid, "VmHWM") / 1024}
                       for name, pid in (("serve", sidecar.pid), ("minimal_poller", poller.pid))}
        finally:
            bench.close()
    serve = figures["serve"]["rss_mb"]
    print(json.dumps({**figures, "after_seconds": args.after, "load_average": os.getloadavg()[0]}))
    print(f"RSS, serve, 1 target: {serve:.1f} MB (high-water {figures['serve']['hwm_mb']:.1f} MB), minimal poller "
          f"{figures['minimal_poller']['rss_mb']:.1f} MB; target <= {RSS_MAX_MB:g} MB: "
          f"{'PASS' if serve <= RSS_MAX_MB else 'MISS'}")
    return 0 if serve <= RSS_MAX_MB else 1


if __name__ == "__main__":
    sys.exit(main())
