"""What each simulated scenario looks like to the sidecar: the table in docs/scenarios.md.

Every scenario is simulated for ten minutes (seed 0), captured every 15 s with DCGM, and replayed
through the sidecar at the shipped window; the table shows the sidecar's own signals over its last
window and the verdict it gives, so the documentation cannot drift from what the code computes::

    .venv/bin/python -m lab.profile              # print the table
    .venv/bin/python -m lab.profile --write      # replace the table in docs/scenarios.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from exporter.simulator import SCENARIOS
from tests.judged import judge_scenario

DURATION, INTERVAL, SEED = 600.0, 15.0, 0
DOC = Path(__file__).resolve().parents[1] / "docs" / "scenarios.md"
BEGIN, END = "<!-- profile-table:begin -->", "<!-- profile-table:end -->"


def _fixed(digits: int, scale: float = 1.0) -> Callable[[Any], str]:
    return lambda v: "—" if v is None else f"{v * scale:.{digits}f}"


def _percent(v: Any) -> str:
    return "—" if v is None else f"{v:.0%}"


# (header, signal key(s) from Signals.to_dict(), format)
COLUMNS: tuple[tuple[str, tuple[str, ...], Callable[[Any], str]], ...] = (
    ("TTFT mean / p95 (s)", ("ttft_mean", "ttft_p95_seconds"), _fixed(2)),
    ("ITL p95 / p99 (ms)", ("itl_p95_seconds", "itl_p99_seconds"), _fixed(0, 1000)),
    ("queue (s)", ("queue_mean",), _fixed(2)),
    ("frontend (ms)", ("e2e_frontend_mean",), _fixed(0, 1000)),
    ("waiting", ("waiting_mean",), _fixed(1)),
    ("KV usage mean / max", ("kv_cache_usage_mean", "kv_cache_usage_max"), _fixed(2)),
    ("preempt. / req", ("preemptions_per_request",), _fixed(2)),
    ("prefix hit", ("prefix_cache_hit_ratio",), _fixed(2)),
    ("GPU busy", ("gpu_utilization",), _percent),
    ("steps/s", ("engine_steps_per_second",), _fixed(0)),
)


def profile(name: str) -> tuple[str, dict[str, Any], str]:
    with tempfile.TemporaryDirectory() as tmp:
        state, _ = judge_scenario(name, Path(tmp), DURATION, INTERVAL, SEED, dcgm=True)
    signals = state.signals.to_dict() if state.signals is not None else {}
    return name, signals, state.diagnosis.verdict.layer


def table(rows: list[tuple[str, dict[str, Any], str]]) -> str:
    header = ["scenario", *(c[0] for c in COLUMNS), "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, signals, verdict in rows:
        cells = [" / ".join(fmt(signals.get(key)) for key in keys) for _, keys, fmt in COLUMNS]
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | `{verdict}` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", action="store_true", help="replace the table in docs/scenarios.md")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(profile, sorted(SCENARIOS)))
    text = table(rows)
    if not args.write:
        sys.stdout.write(text)
        return 0
    doc = DOC.read_text(encoding="utf-8")
    if BEGIN not in doc or END not in doc:
        print(f"{DOC}: markers {BEGIN} / {END} not found", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    DOC.write_text(head + BEGIN + "\n" + text + END + rest.split(END, 1)[1], encoding="utf-8")
    print(f"wrote the table into {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
