"""Simulated captures shared by the test session's processes: each (scenario, duration, interval, seed)
simulated once.

The scenario suite (tests/simulator/test_scenarios.py) and the Prometheus agreement test
(tests/promsource/test_agreement.py) read the same seven minutes of every scenario; under pytest-xdist
they run in different workers. The first process to ask writes the captures into a folder under the
session's shared base temporary directory, holding a lock on it; a process asking meanwhile waits for
the lock and then reads the same files. The folders live and die with the session (pytest's basetemp),
so a code change never meets a stale capture.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from exporter.simulator import write_captures

DONE = ".complete"


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base temporary directory every process of this session shares (xdist workers get a
    ``popen-gwN`` folder each, under it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_captures(tmp_path_factory: pytest.TempPathFactory, name: str, duration_s: float, interval_s: float,
                    seed: int | None = None) -> Path:
    """The folder of ``write_captures(name, ..., duration_s, interval_s, seed)``, written once per session;
    read it, never write into it."""
    folder = session_root(tmp_path_factory) / "scenario-captures" / f"{name}-{duration_s:g}-{interval_s:g}-{seed}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (folder / DONE).exists():
            write_captures(name, folder, duration_s, interval_s, seed)
            (folder / DONE).touch()
    return folder


def capture_files(folder: Path) -> list[Path]:
    """The vLLM captures of ``folder`` in time order."""
    return sorted(folder.glob("capture-*.txt"))
