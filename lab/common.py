"""Timing helpers, the result record and the table printer."""

from __future__ import annotations

import gzip
import json
import os
import socket
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from exporter.config import Settings, Target

CLK_TCK = os.sysconf("SC_CLK_TCK")
# What a sidecar runs with when nothing is configured: the benchmarks measure that, not a shorter
# window that would hide the cost of a full one (36 scrapes at 5 s, not 12).
SHIPPED_WINDOW: float = Settings.model_fields["window_seconds"].default
SHIPPED_INTERVAL: float = Target.model_fields["scrape_interval"].default


def read_json(path: Path) -> Any:
    """A results file, plain or gzip-compressed (``*.json.gz``: the committed results are)."""
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def write_json(path: Path, value: Any, indent: int = 1) -> None:
    """Write a results file; gzip-compressed when its name ends in ``.gz`` (the form to commit)."""
    text = (json.dumps(value, indent=indent) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(text, mtime=0) if path.suffix == ".gz" else text)


@dataclass
class Figure:
    """One measured figure next to its same-run baseline.

    ``ratio`` is always ``baseline / measured`` for costs (higher is better for the sidecar),
    unless ``ratio_kind`` says otherwise; ``target`` is a human-readable rule and ``passed``
    its outcome (None when the figure has no target).
    """

    name: str
    measured: float
    unit: str
    baseline: float | None
    baseline_name: str
    ratio: float | None
    ratio_label: str
    target: str
    passed: bool | None
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def median(values: list[float]) -> float:
    return statistics.median(values)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (every server the lab starts binds there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of one process, from /proc/<pid>/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_cpu_ns(pid: int) -> int:
    """On-CPU nanoseconds of all live threads of a process, from /proc/<pid>/task/*/schedstat.

    Much finer than utime+stime (clock ticks of 10 ms): a 60 s run of one target at 5 s is only
    a few ticks. Threads that exit during the period lose their time; the sidecar's are long-lived.
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def proc_status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.2f} ms"
    if unit == "MB":
        return f"{value:.1f} MB"
    if unit == "%":
        return f"{value:.3f} %"
    if unit == "targets":
        return f"{value:,.0f}"
    return f"{value:.4g} {unit}"


def table(figures: list[Figure]) -> str:
    rows = [("figure", "measured", "baseline (same run)", "ratio", "target", "pass/miss")]
    for f in figures:
        base = f"{fmt(f.baseline, f.unit)} ({f.baseline_name})" if f.baseline is not None else f.baseline_name
        ratio = f"{f.ratio:.2f}x {f.ratio_label}" if f.ratio is not None else "-"
        verdict = "-" if f.passed is None else ("PASS" if f.passed else "MISS")
        rows.append((f.name, fmt(f.measured, f.unit), base, ratio, f.target, verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def now() -> float:
    return time.perf_counter()
