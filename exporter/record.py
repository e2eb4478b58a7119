"""Recorded captures on disk: their names and format, and the recorder that writes them.

A capture is one raw ``/metrics`` scrape headed by ``# vllm-diag capture target=NAME
scraped_at=T``, stored gzip-compressed as ``NAME-T.txt.gz`` (plain ``.txt`` captures are read
too). The recorder runs in its own thread, off the event loop: each capture is written under a
temporary name (``.NAME-T.txt.gz.tmp``, which ``diagnose DIR`` ignores) and renamed, so a
crash never leaves a partial file under a capture name; then the folder is pruned, oldest
first, to the target's retention. A failing disk is counted and logged once, never raised.
"""

from __future__ import annotations

import functools
import gzip
import logging
import os
import queue
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from exporter.config import EngineFacts, RecordRetention, Settings, Target, redact

log = logging.getLogger(__name__)

CAPTURE_HEADER = "# vllm-diag capture"
PLAIN_SUFFIX = ".txt"
GZIP_SUFFIX = ".txt.gz"
CAPTURE_SUFFIXES = (PLAIN_SUFFIX, GZIP_SUFFIX)
TEMP_SUFFIX = ".tmp"
CONFIG_NAME = "vllm-diag.yaml"  # the configuration captures were taken under (`simulate --out` writes one too)
# gzip level 1: ~7.7x smaller than the scrape; level 6 costs 2.5x the CPU for ~15 % less
GZIP_LEVEL = 1
# Captures waiting for the writer: a slow disk delays at most this many, later ones are dropped
QUEUE_CAPTURES = 8
RECORD_ERROR_REASONS: tuple[str, ...] = ("write_failed", "queue_full")


def compress(data: bytes) -> bytes:
    """gzip at level 1: ISA-L's (the isal package) when installed, ~0.08 ms CPU for a 50 KB scrape,
    else the standard library's, ~0.3 ms; the same format either way."""
    return _fast_gzip().compress(data, GZIP_LEVEL, mtime=0)


@functools.cache
def _fast_gzip() -> ModuleType:
    """ISA-L's gzip, loaded with the first capture written: a sidecar that records nothing never maps it."""
    try:
        from isal import igzip
    except ImportError:  # isal is a dependency; a platform without its wheel still records, at 4x the CPU
        return gzip
    return igzip


def capture_timestamp(text: str) -> float | None:
    """The scrape time a recorded capture carries in its header, if any."""
    if not text.startswith(CAPTURE_HEADER):
        return None
    first = text.split("\n", 1)[0]
    for part in first.split():
        if part.startswith("scraped_at="):
            try:
                return float(part.removeprefix("scraped_at="))
            except ValueError:
                return None
    return None


def is_capture_name(name: str) -> bool:
    """A name ``diagnose DIR`` reads: ``*.txt`` or ``*.txt.gz``, never a hidden (temporary) one."""
    return not name.startswith(".") and name.endswith(CAPTURE_SUFFIXES)


def target_config_name(target: str) -> str:
    """The configuration a recorder writes beside its captures: one per target (targets may share a folder)."""
    return f"{target}.{CONFIG_NAME}"


def recorded_config(target: Target, settings: Settings, facts: EngineFacts | None = None) -> str:
    """The target as ``diagnose DIR`` needs it to judge its captures as the sidecar did: its interval, engine
    facts (configured, or ``facts`` as resolved with what was discovered) and objectives, the thresholds the
    deployment overrides. Credentials never leave the configuration."""
    engine = (facts or target.engine).model_dump(exclude_none=True)
    entry: dict[str, Any] = {"name": target.name, "url": redact(target.url, mark=None),
                             "scrape_interval": target.scrape_interval, "timeout": target.timeout,
                             "slo": settings.slo_for(target).model_dump(exclude_none=True)}
    if engine:
        entry["engine"] = engine
    tree: dict[str, Any] = {"window_seconds": settings.window_seconds, "targets": [entry]}
    if settings.thresholds:
        tree["thresholds"] = dict(settings.thresholds)
    return (f"# The configuration target {target.name}'s captures were recorded under: "
            "`vllm-diag diagnose DIR` judges them with it.\n" + yaml.safe_dump(tree, sort_keys=False))


def capture_name(target: str, scraped_at: float) -> str:
    return f"{target}-{scraped_at:.3f}{GZIP_SUFFIX}"


def read_capture(path: Path) -> bytes:
    """A capture's text as bytes, decompressed when it is a ``.gz``.

    Raises OSError when unreadable and ValueError (naming the damage) when the gzip stream is
    cut or corrupt."""
    data = path.read_bytes()
    if not path.name.endswith(".gz"):
        return data
    try:
        return gzip.decompress(data)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ValueError(f"damaged gzip data ({exc})") from None


def read_first_line(path: Path, limit: int = 512) -> str:
    """The first line of a capture (its header, when recorded), without reading the whole file."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return fh.readline(limit).decode("utf-8", "replace")


def write_atomically(path: Path, data: bytes, durable: bool = False) -> None:
    """Write ``data`` under a hidden temporary name beside ``path``, then rename it into place.

    A reader, or a crash of this process (SIGKILL, OOM kill), sees either no file or the whole
    file under ``path``: the rename is atomic and the kernel keeps the written bytes. ``durable``
    also fsyncs before the rename, which only matters when the machine itself goes down; the
    recorder leaves it off (it doubled the CPU of a write: ~0.3 ms per capture), because a capture
    damaged that way is skipped by ``diagnose`` with a warning, never misread."""
    temp = path.with_name(f".{path.name}{TEMP_SUFFIX}")
    try:
        with open(temp, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            temp.unlink()
        except OSError:
            pass
        raise


def remove_stale_temporaries(directory: Path, target: str) -> int:
    """Delete the temporary files a crash left behind for this target; how many were removed."""
    removed = 0
    try:
        temporaries = [*directory.glob(f".{glob_escape(target)}-*{TEMP_SUFFIX}"),
                       *directory.glob(f".{glob_escape(target_config_name(target))}{TEMP_SUFFIX}")]
        for path in temporaries:
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
    except OSError:
        pass  # an unreadable folder fails the first write, and is reported there
    return removed


def glob_escape(name: str) -> str:
    """Target names may hold no glob characters (config.py), but a pattern must not trust that."""
    return re.sub(r"([*?\[])", r"[\1]", name)


@dataclass(frozen=True, slots=True)
class RecordStatus:
    """What the recorder reports: published per target in /metrics, the JSON and the page."""

    directory: str
    bytes: int = 0
    files: int = 0
    written_total: int = 0
    pruned_total: int = 0
    errors_total: Mapping[str, int] = field(default_factory=lambda: {r: 0 for r in RECORD_ERROR_REASONS})
    failing: bool = False
    last_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"dir": self.directory, "bytes": self.bytes, "files": self.files, "written_total": self.written_total,
                "pruned_total": self.pruned_total, "errors_total": dict(self.errors_total), "failing": self.failing,
                "last_error": self.last_error}


@dataclass(slots=True)
class _Capture:
    scraped_at: float
    path: Path
    size: int


_STOP = None


class Recorder:
    """One target's recorded captures: a bounded queue, one writer thread, retention and counters.

    ``submit`` is what the scrape path calls (a queue put, never I/O); ``write`` is what the
    thread runs for each capture and what tests drive directly."""

    def __init__(self, target: str, directory: Path, retention: RecordRetention,
                 queue_size: int = QUEUE_CAPTURES, config: str | None = None) -> None:
        """``config``: the target's configuration (``recorded_config``), written beside the captures."""
        self.target = target
        self.directory = directory
        self.retention = retention
        self._queue: queue.Queue[tuple[float, str] | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()  # guards the counters the event loop reads
        self._captures: deque[_Capture] = deque()  # oldest first; only the writer touches it
        self._bytes = 0
        self._written = 0
        self._pruned = 0
        self._errors = {reason: 0 for reason in RECORD_ERROR_REASONS}
        self._failing = False
        self._dropping = False
        self._last_error: str | None = None
        self._name = re.compile(rf"^{re.escape(target)}-(\d+(?:\.\d+)?)\.txt(?:\.gz)?$")
        self._thread: threading.Thread | None = None
        self._scanned = False
        self._config = config  # what the folder should say the captures were taken under
        self._config_written: str | None = None  # what it says (None: not written yet)

    # -- the scrape path's side ---------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"record:{self.target}", daemon=True)
        self._thread.start()

    def submit(self, scraped_at: float, text: str) -> bool:
        """Queue one capture for the writer; False (and counted) when the writer is behind."""
        try:
            self._queue.put_nowait((scraped_at, text))
        except queue.Full:
            with self._lock:
                self._errors["queue_full"] += 1
                first = not self._dropping
                self._dropping = True
            if first:
                log.warning("recording of %s falls behind (the disk is slow): dropping captures until it catches up",
                            self.target)
            return False
        if self._dropping:
            with self._lock:
                self._dropping = False
            log.info("recording of %s keeps up again", self.target)
        return True

    def describe(self, config: str) -> None:
        """A new configuration for the captures to come (facts discovered): written with the next capture."""
        with self._lock:
            self._config = config

    def close(self, timeout: float = 5.0) -> None:
        """Let the writer finish what is queued, then stop it."""
        if self._thread is None:
            return
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            pass  # the thread is a daemon: a disk that hangs must not hang the shutdown
        self._thread.join(timeout)
        self._thread = None

    def status(self) -> RecordStatus:
        with self._lock:
            return RecordStatus(directory=str(self.directory), bytes=self._bytes, files=len(self._captures),
                                written_total=self._written, pruned_total=self._pruned, errors_total=dict(self._errors),
                                failing=self._failing, last_error=self._last_error)

    # -- the writer's side --------------------------------------------------------------------
    def _run(self) -> None:
        self.scan(time.time())
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert item is not None
            try:
                self.write(*item)
            except Exception:  # a bug here must not end recording for good, nor reach the scrape path
                log.exception("recording of %s: unexpected error", self.target)

    def scan(self, now: float) -> None:
        """Take stock of the folder (after start, or after a failure): remove stale temporaries,
        list this target's captures, prune to the retention."""
        remove_stale_temporaries(self.directory, self.target)
        found: list[_Capture] = []
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            entries = []  # missing or unreadable: the next write creates it or reports why not
        for entry in entries:
            match = self._name.match(entry.name)
            if match is None:
                continue
            try:
                size = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            found.append(_Capture(float(match.group(1)), Path(entry.path), size))
        found.sort(key=lambda c: c.scraped_at)
        with self._lock:
            self._captures = deque(found)
            self._bytes = sum(c.size for c in found)
            self._scanned = True
        self._prune(now)

    def write(self, scraped_at: float, text: str) -> None:
        """Write one capture atomically, then prune (after a failed write too); an OSError is counted and logged
        on change only."""
        if not self._scanned:
            self.scan(scraped_at)
        path = self.directory / capture_name(self.target, scraped_at)
        header = f"{CAPTURE_HEADER} target={self.target} scraped_at={scraped_at!r}\n"
        data = compress((header + text).encode("utf-8"))
        try:
            try:
                write_atomically(path, data)
            except FileNotFoundError:  # the first write, or the folder was removed: create it, once
                self.directory.mkdir(parents=True, exist_ok=True)
                write_atomically(path, data)
        except OSError as exc:
            self._failed(exc)
            # Retention still runs: a folder that filled its disk frees itself as its captures age out.
            self._prune(scraped_at)
            return
        if self._failing:
            self._recovered()
            self.scan(scraped_at)  # the folder may have changed meanwhile (emptied, replaced)
        with self._lock:
            if not self._captures or self._captures[-1].path != path:  # a rescan may have listed it already
                self._captures.append(_Capture(scraped_at, path, len(data)))
                self._bytes += len(data)
            self._written += 1
            config = self._config
        if config is not None and config != self._config_written:
            self._write_config(config)
        self._prune(scraped_at)

    def _write_config(self, config: str) -> None:
        try:
            write_atomically(self.directory / target_config_name(self.target), config.encode("utf-8"))
        except OSError as exc:
            self._failed(exc)
            return
        self._config_written = config

    def _prune(self, now: float) -> None:
        """Oldest first: drop what is older than max_age_seconds, then until under max_bytes."""
        oldest_kept = now - self.retention.max_age_seconds
        while self._captures and (self._captures[0].scraped_at < oldest_kept
                                  or self._bytes > self.retention.max_bytes):
            victim = self._captures[0]
            try:
                victim.path.unlink()
            except FileNotFoundError:
                pass  # removed by someone else: it no longer takes space either
            except OSError as exc:
                self._failed(exc)
                return
            with self._lock:
                self._captures.popleft()
                self._bytes -= victim.size
                self._pruned += 1

    def _failed(self, exc: OSError) -> None:
        message = f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)
        with self._lock:
            self._errors["write_failed"] += 1
            first = not self._failing
            self._failing, self._last_error = True, message
        if first:
            log.warning("recording of %s failing (the diagnosis goes on; counted in "
                        "vllm_diag_record_errors_total): %s", self.target, message)

    def _recovered(self) -> None:
        with self._lock:
            failed = self._errors["write_failed"]
            self._failing = False
        log.info("recording of %s resumed (%d failed writes so far)", self.target, failed)
