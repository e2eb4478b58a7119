"""Calibration error of the what-if advisor on every simulated scenario (the table in docs/advisor.md).

    .venv/bin/python -m lab.calibration [--duration 180] [--interval 15] [--write docs/data/advisor-calibration.json]

For each scenario: capture ``--duration`` simulated seconds as ``vllm-diag simulate --out`` does,
judge them as one window (``vllm-diag advise DIR``'s path), calibrate the engine model and run it
with the advisor's seeds; the table gives the relative error on TTFT p95, ITL p95, preemptions/s
and generation throughput, whether the model counts as reproducing the window, and why not.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from exporter.advisor import checked
from exporter.advisor.calibrate import METRIC_KEYS, CannotCalibrate, calibrate, observe
from exporter.cli import _diagnosed, build_parser
from exporter.facts.resolve import engine_facts
from exporter.simulator import SCENARIOS, write_captures

SHORT = {"ttft_p95_seconds": "TTFT p95", "itl_p95_seconds": "ITL p95", "preemption_rate": "preempt/s",
         "generation_tokens_per_second": "gen tok/s"}


def _pct(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if value == float("inf") else f"{value:+.0%}"


def row(name: str, duration: float, interval: float) -> tuple[str, bool]:
    with tempfile.TemporaryDirectory(prefix="calibration-") as tmp:
        write_captures(SCENARIOS[name], tmp, duration, interval)
        started = time.process_time()
        pipeline = _diagnosed(build_parser().parse_args(["advise", tmp]))
        facts = engine_facts(pipeline.state.engine)
        try:
            cal = calibrate(pipeline.window, facts, pipeline.thresholds)
        except CannotCalibrate as exc:
            return f"| {name} | - | {' | '.join('-' for _ in METRIC_KEYS)} | no: {exc} | " \
                   f"{time.process_time() - started:.1f} |", False
        kind, checks = checked(cal, observe(pipeline.window), pipeline.thresholds, pipeline.window.duration)
        result = checks[kind]
        cpu = time.process_time() - started
    errors = " | ".join(_pct(result.errors[k]) for k in METRIC_KEYS)
    verdict = "yes" if result.ok else "no: " + re.sub(r"^the calibrated model does not reproduce the window \(", "",
                                                       result.reason).rstrip(")")
    traffic = kind if cal.arrivals.kind != "unclear" else f"unclear, read as {kind}"
    return f"| {name} | {traffic} | {errors} | {verdict} | {cpu:.1f} |", result.ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.calibration", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180.0)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--only", action="append", help="scenario name (repeatable)")
    parser.add_argument("--write", metavar="FILE",
                        help="write the table as docs/advisor.md renders it: docs/data/advisor-calibration.json")
    args = parser.parse_args(argv)
    names = args.only or list(SCENARIOS)
    head = ["| scenario | traffic | " + " | ".join(SHORT[k] for k in METRIC_KEYS) + " | reproduces | CPU s |",
            "|---|---|" + "---|" * len(METRIC_KEYS) + "---|---|"]
    lines, ok = list(head), 0
    for name in names:
        line, good = row(name, args.duration, args.interval)
        ok += good
        lines.append(line)
        print(line, flush=True)
    summary = (f"{ok} of {len(names)} scenarios reproduced within the calibration limit "
               f"(`python -m lab.calibration --duration {args.duration:g} --interval {args.interval:g}`).")
    print(summary)
    if args.write:  # the block docs/advisor.md's calibration table is rendered from (`vllm-diag render docs`)
        by = f"python -m lab.calibration --write {args.write}"
        Path(args.write).write_text(json.dumps({"generated_by": by, "lines": [*lines, "", summary]}, indent=1,
                                               sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
