"""What ``vllm-diag diagnose`` reads offline: capture files or a folder, in scrape order.

A folder is what ``vllm-diag simulate --out`` or a target's ``record_dir`` writes: ``*.txt``
or gzip-compressed ``*.txt.gz`` captures, and beside them possibly the configuration they were taken
under (``vllm-diag.yaml`` from ``simulate --out``, ``<target>.vllm-diag.yaml`` from a recorder: the
interval, engine facts and objectives) and ``dcgm/`` (GPU readings at the same instants). Hidden
files (a recorder's temporary files) are not captures. The same companions passed one by one
(``diagnose DIR/*``) are recognised by name. A capture that cannot be read or parsed is skipped with its reason, so one
damaged file never blocks the diagnosis of the rest. Nothing here writes.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from exporter.catalog import metrics as vllm
from exporter.parse import ParseError, parse
from exporter.record import (
    CAPTURE_HEADER,
    CONFIG_NAME,
    GZIP_SUFFIX,
    PLAIN_SUFFIX,
    capture_timestamp,
    is_capture_name,
    read_capture,
    read_first_line,
    target_config_name,
)

DCGM_DIR = "dcgm"
IGNORED_NAMES = frozenset({"scenario.json"})  # the simulator's description of a folder: not a capture


class CaptureError(ValueError):
    """A one-line reason why the inputs are not a set of captures."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A capture left out of the diagnosis, and why (one line)."""

    file: Path
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"file": str(self.file), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class CaptureSet:
    files: tuple[Path, ...]  # in scrape order
    stamps: tuple[float, ...] | None  # scrape times from the capture headers, when every capture has one
    target: str | None  # the target named in the headers (recorded captures)
    config: Path | None  # the configuration the captures were taken under (given, or found beside them)
    dcgm: Path | None  # a dcgm/ folder found beside the captures
    skipped: tuple[Skipped, ...] = ()  # damaged or unreadable captures, left out

    @property
    def spacing(self) -> float | None:
        """Seconds between scrapes, from the recorded times (the median, robust to one late scrape)."""
        if self.stamps is None or len(self.stamps) < 2:
            return None
        return statistics.median(b - a for a, b in zip(self.stamps, self.stamps[1:]))

    @property
    def span(self) -> float | None:
        return None if self.stamps is None else self.stamps[-1] - self.stamps[0]


def resolve(paths: Sequence[str]) -> CaptureSet:
    """Sort the command line's paths into captures (in scrape order) and their companions."""
    captures: list[Path] = []
    config: Path | None = None
    dcgm: Path | None = None
    folder: Path | None = None
    folders = 0
    for raw in paths:
        path = Path(raw)
        if path.is_dir() and path.name == DCGM_DIR:
            dcgm = path
        elif path.is_dir():
            folders += 1
            found = sorted((p for p in path.iterdir() if is_capture_name(p.name) and p.is_file()),
                           key=_natural_key)
            if not found:
                raise CaptureError(f"{path}: no captures (*{PLAIN_SUFFIX}, *{GZIP_SUFFIX}) in this folder")
            captures += found
            folder = path
            dcgm = dcgm or (path / DCGM_DIR if (path / DCGM_DIR).is_dir() else None)
        elif path.is_file() and (path.name == CONFIG_NAME or path.name.endswith("." + CONFIG_NAME)):
            config = path
        elif path.is_file() and path.name in IGNORED_NAMES:
            continue
        elif path.is_file():
            captures.append(path)
        else:
            raise CaptureError(f"{path}: no such file or folder")
    if folders > 1 or (folders and len(captures) != len(set(captures))):
        raise CaptureError("give one folder of captures (or its files), not several")
    if not captures:
        raise CaptureError("no capture files among the arguments")
    readable, skipped = _readable(captures)
    ordered = _in_scrape_order(readable, config, dcgm, tuple(skipped))
    if config is None and folder is not None:  # a given file wins; else the target's own, else the folder's
        own = _if_file(folder / target_config_name(ordered.target)) if ordered.target else None
        ordered = replace(ordered, config=own or _if_file(folder / CONFIG_NAME))
    return ordered


def _readable(captures: list[Path]) -> tuple[list[Path], list[Skipped]]:
    """The captures that parse as vLLM metrics, and the others with their reasons.

    Nothing readable is an error naming why: the one file's own reason (``FILE:LINE: ...``,
    like a compiler, for editors to jump to), else how many were skipped and the first reason."""
    readable: list[Path] = []
    skipped: list[Skipped] = []
    for path in captures:
        reason = capture_problem(path)
        if reason is None:
            readable.append(path)
        else:
            skipped.append(Skipped(path, reason))
    if readable:
        return readable, skipped
    if len(skipped) == 1:
        only = skipped[0]
        located = re.match(r"line (\d+): (.*)", only.reason)
        raise CaptureError(f"{only.file}:{located[1]}: {located[2]}" if located else f"{only.file}: {only.reason}")
    first = skipped[0]
    raise CaptureError(f"no readable capture: all {len(skipped)} were skipped (first, {first.file}: {first.reason})")


def capture_problem(path: Path) -> str | None:
    """Why a capture cannot be diagnosed (one line), or None when it parses as vLLM metrics."""
    try:
        body = read_capture(path).decode("utf-8")
    except OSError as exc:
        return f"cannot read ({exc.strerror or exc})"
    except ValueError as exc:  # damaged gzip data, or not UTF-8
        if isinstance(exc, UnicodeDecodeError):
            return f"not UTF-8 text (byte {exc.start})"
        return str(exc)
    try:
        snapshot = parse(body, capture_timestamp(body) or 0.0)
    except ParseError as exc:
        return str(exc)
    if not any(name.startswith(vllm.NAMESPACE) for name in snapshot.families()):
        return "no vLLM metrics in this capture (is it a vLLM /metrics page?)"
    return None


def _in_scrape_order(captures: list[Path], config: Path | None, dcgm: Path | None,
                     skipped: tuple[Skipped, ...]) -> CaptureSet:
    headers = {path: _header(path) for path in captures}
    stamped = [path for path in captures if headers[path][0] is not None]
    if stamped and len(stamped) != len(captures):
        plain = next(path for path in captures if headers[path][0] is None)
        raise CaptureError(f"{plain}: no '{CAPTURE_HEADER}' header, unlike {stamped[0]}: "
                           "give recorded captures or plain ones, not both")
    targets = sorted({t for _, t in headers.values() if t is not None})
    if len(targets) > 1:
        raise CaptureError(f"captures of several targets ({', '.join(targets)}): diagnose one target's files "
                           f"at a time, e.g. {captures[0].parent}/{targets[0]}-*")
    if not stamped:  # plain captures: the order given (a folder's: by name)
        return CaptureSet(tuple(captures), None, None, config, dcgm, skipped)
    ordered = sorted(captures, key=lambda path: headers[path][0])  # type: ignore[arg-type, return-value]
    stamps = tuple(headers[path][0] for path in ordered)
    return CaptureSet(tuple(ordered), stamps, targets[0] if targets else None, config, dcgm,  # type: ignore[arg-type]
                      skipped)


def _header(path: Path) -> tuple[float | None, str | None]:
    """Scrape time and target from a recorded capture's first line (None, None for a plain one)."""
    try:
        first = read_first_line(path)
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read ({exc.strerror})") from None
    stamp = capture_timestamp(first)
    match = re.search(r"\btarget=(\S+)", first) if stamp is not None else None
    return stamp, match.group(1) if match else None


def _natural_key(path: Path) -> list[object]:
    """capture-2 before capture-10: digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def _if_file(path: Path) -> Path | None:
    return path if path.is_file() else None
