"""``python -m lab [--quick] [--only cycle|process] [--cpu-seconds S] [--crosscheck-targets N]``

Prints figure | measured | baseline | ratio | target | pass/miss and writes
``lab/results/latest.json`` (or ``--out``). Exit status 0 even when a target is missed
(the table says so); 2 on a harness failure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from lab import cycle, process
from lab.common import table

RESULTS = Path(__file__).resolve().parent / "results"


def _notes(figures: list, raw: dict) -> list[str]:
    """Same-run context: CPU-time ratios (robust to a loaded machine), stage costs, cross-checks."""
    out = []
    seen = set()
    for f in figures:
        d = f.details
        if "cycle_cpu_ms" in d and f.name not in seen:
            seen.add(f.name)
            stages = ", ".join(f"{k} {v:.2f} ms" for k, v in d["breakdown_ms"].items())
            out.append(f"- {f.name}: CPU time (thread_time) {d['cycle_cpu_ms']:.2f} ms vs prometheus_client "
                       f"{d['baseline_cpu_ms']:.2f} ms = {d['baseline_cpu_ms'] / d['cycle_cpu_ms']:.2f}x; "
                       f"stages (wall, medians): {stages}; verdict after warm-up: {d['verdict']}")
        if "promtool_ms" in d and f.baseline_name.startswith("promtool"):
            out.append(f"- promtool check metrics (exit {d['promtool_exit_codes']}): {d['promtool_ms']:.1f} ms wall, "
                       f"{d['promtool_cpu_ms']:.1f} ms CPU, of which {d['promtool_empty_input_ms']:.1f} ms "
                       f"is its run on an empty input (process start); cycle CPU {d['cycle_cpu_ms']:.1f} ms")
    if "crosscheck_15s" in raw:
        cross = raw["crosscheck_15s"]
        s = cross["sidecar"]
        targets, predicted = cross["config"]["targets"], cross["predicted_core_share_pct"]
        out.append(f"- cross-check: {targets} targets at 15 s used {s['core_share_pct']:.1f} % of a core "
                   f"(predicted {predicted:.1f} % from the 100-target cost per scrape; "
                   f"the figure is the lower of {targets * 100 / predicted:.0f} "
                   f"predicted and {targets * 100 / s['core_share_pct']:.0f} from this run); "
                   f"{s['scrapes']} scrapes served in {s['wall_seconds']:.0f} s, {s['fresh']}/{s['targets']} targets "
                   f"fresh, errors during the period {s['scrape_errors_during_measurement'] or 'none'}; "
                   f"RSS {s['rss_mb']:.0f} MB; one /metrics request {s['metrics_request_ms']:.0f} ms "
                   f"({s['metrics_bytes'] / 1e6:.1f} MB)")
        for key in ("one_target_5s", "hundred_targets_5s"):
            s = raw[key]["sidecar"]
            out.append(f"- {key}: sidecar {s['cpu_seconds']:.3f} CPU s over {s['wall_seconds']:.0f} s "
                       f"(utime+stime {s['cpu_seconds_utime_stime']:.2f} s), {s['scrapes']} scrapes, "
                       f"errors during the period {s['scrape_errors_during_measurement'] or 'none'}, "
                       f"since start {s['scrape_errors_since_start'] or 'none'}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds, 15 s window, 20 s CPU periods (about 2 minutes instead of 6)")
    parser.add_argument("--only", choices=("cycle", "process", "advisor", "record"),
                        help="run one family of figures (advisor: its cost while healthy and symptomatic; "
                             "record: CPU per scrape with record_dir off vs on)")
    parser.add_argument("--cpu-seconds", type=float,
                        help="measured period of the 1-target CPU run (default 60, quick 20)")
    parser.add_argument("--crosscheck-targets", type=int,
                        help="targets in the 15 s cross-check run (default: predicted per core, capped at 1000)")
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    args = parser.parse_args(argv)

    started = time.time()
    load_before = os.getloadavg()
    figures: list[Any] = []
    raw: dict[str, Any] = {}
    if args.only in (None, "cycle"):
        figures += cycle.run(args.quick)
    if args.only in (None, "process"):
        more, raw = process.run(args.quick, args.cpu_seconds, args.crosscheck_targets)
        figures += more
    if args.only in (None, "advisor"):
        more, advisor = process.run_advisor(args.quick)
        figures += more
        raw = {**raw, **advisor}
    if args.only == "record":  # not in the default set: it adds four 100-target runs
        more, recording = process.run_recording(args.quick, args.cpu_seconds)
        figures += more
        raw = {**raw, **recording}
    print(table(figures))
    notes = _notes(figures, raw)
    if notes:
        print("\n" + "\n".join(notes))
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "quick": args.quick,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "figures": [f.as_dict() for f in figures],
        "notes": notes,
        "process_runs": raw,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nload average before/after: {load_before[0]:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
