"""Captures -> OpenMetrics with timestamps, for ``promtool tsdb create-blocks-from openmetrics``,
or the Prometheus text format with millisecond timestamps, for VictoriaMetrics'
``/api/v1/import/prometheus``.

Loads saved ``/metrics`` captures (``simulate --out``, a ``record_dir``) into a store as if
it had scraped them: each sample gets the capture's time and the target's labels (``instance``,
``job``). Comments and ``*_created`` twins are left out (an untyped ``_created`` sample would read
as a counter of its own); everything else is kept as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TextIO

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\\n]|\\.)*")*\})?[ \t]+(\S+)')


def _labels(extra: Mapping[str, str]) -> str:
    return ",".join(f'{key}="{value}"' for key, value in extra.items())


def samples(text: str, at: float, extra: Mapping[str, str], *, millis: bool = False) -> Iterable[str]:
    """The sample lines of one capture, each with ``extra`` labels and the timestamp ``at`` (seconds, as
    OpenMetrics writes it; in integer milliseconds with ``millis``, as the Prometheus text format does)."""
    added = _labels(extra)
    stamp = str(round(at * 1000)) if millis else f"{at:.3f}"
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, block, value = match.groups()
        if name.endswith("_created"):
            continue
        inner = block[1:-1].rstrip(", ") if block else ""
        labels = f"{inner},{added}" if inner and added else inner or added
        yield f"{name}{{{labels}}} {value} {stamp}" if labels else f"{name} {value} {stamp}"


def write(out: TextIO, captures: Iterable[tuple[float, str, Mapping[str, str]]]) -> int:
    """Write (time, capture text, labels) in time order, then ``# EOF``; returns the sample count."""
    count = 0
    for at, text, extra in captures:
        for line in samples(text, at, extra):
            out.write(line + "\n")
            count += 1
    out.write("# EOF\n")
    return count


def prometheus_text(captures: Iterable[tuple[float, str, Mapping[str, str]]]) -> str:
    """(time, capture text, labels) -> one Prometheus text-format body, timestamps in milliseconds."""
    return "".join(line + "\n" for at, text, extra in captures for line in samples(text, at, extra, millis=True))


def folder(path: Path, start: float, interval: float) -> list[tuple[float, str]]:
    """The captures of a ``simulate --out`` folder at ``start + (i + 1) * interval`` (the simulator's times)."""
    files = sorted(path.glob("capture-*.txt"))
    return [(start + (i + 1) * interval, f.read_text(encoding="utf-8")) for i, f in enumerate(files)]
