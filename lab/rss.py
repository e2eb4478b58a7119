"""RSS of ``vllm-diag serve`` with one target once the shipped window has filled, beside the minimal poller's.

    .venv/bin/python -m lab.rss            # about 4 minutes (the window fills at 5 s in 180 s)
    .venv/bin/python -m lab.rss --after 60
    .venv/bin/python -m lab.rss --json lab/results/rss-COMMIT-runN.json

The figure of ``python -m lab --only process`` ("RSS, serve, 1 target") without its 100- and
1000-target runs: both processes poll the local target server (``lab.target_server``) at the shipped
5 s interval, their ``/metrics`` scraped every 15 s; RSS and its high-water mark from /proc/<pid>/status,
with its anonymous and file-backed parts (shared libraries' pages) and the thread count. The sidecar is the
``vllm-diag`` beside the running interpreter: another checkout's venv (``/other/.venv/bin/python -m lab.rss``)
measures that checkout's code with this harness.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.common import SHIPPED_INTERVAL, SHIPPED_WINDOW, proc_status_kb
from lab.process import PROM_SCRAPE_EVERY, VLLM_DIAG, Bench, _get

RSS_MAX_MB = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.rss", description=__doc__.splitlines()[0])
    parser.add_argument("--after", type=float, default=SHIPPED_WINDOW + 30.0, help="seconds after start")
    parser.add_argument("--json", type=Path, help="also write the raw result here")
    args = parser.parse_args()
    load_start = os.getloadavg()
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
                              "hwm_mb": proc_status_kb(pid, "VmHWM") / 1024,
                              "anon_mb": proc_status_kb(pid, "RssAnon") / 1024,
                              "file_mb": proc_status_kb(pid, "RssFile") / 1024,
                              "threads": proc_status_kb(pid, "Threads")}
                       for name, pid in (("serve", sidecar.pid), ("minimal_poller", poller.pid))}
        finally:
            bench.close()
    serve = figures["serve"]["rss_mb"]
    result = {**figures, "after_seconds": args.after, "load_average": os.getloadavg()[0],
              "load_average_start": load_start[0], "sidecar": VLLM_DIAG, "sidecar_commit": _commit()}
    print(json.dumps(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"RSS, serve, 1 target: {serve:.1f} MB (high-water {figures['serve']['hwm_mb']:.1f} MB), minimal poller "
          f"{figures['minimal_poller']['rss_mb']:.1f} MB; target <= {RSS_MAX_MB:g} MB: "
          f"{'PASS' if serve <= RSS_MAX_MB else 'MISS'}")
    return 0 if serve <= RSS_MAX_MB else 1


def _commit() -> str | None:
    """The commit of the checkout whose ``vllm-diag`` ran (its venv's parent), when it is a git checkout."""
    checkout = Path(VLLM_DIAG).resolve().parent.parent.parent
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short=8", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    sys.exit(main())
