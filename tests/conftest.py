"""Shared fixtures: the real vLLM 0.32 captures and small builders for crafted windows."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXTURES = SHARED / "fixtures" / "vllm-0.32-cpu"
if not FIXTURES.is_dir():  # CI lays shared/ beside the clone; allow an override for other layouts
    import os

    FIXTURES = Path(os.environ.get("VLLM_DIAG_FIXTURES", FIXTURES))


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"real vLLM captures not found at {FIXTURES} (set VLLM_DIAG_FIXTURES)")
    return FIXTURES


@pytest.fixture(scope="session")
def capture_times(fixtures_dir: Path) -> dict[str, float]:
    summary = json.loads((fixtures_dir / "load-summary.json").read_text())
    return {s["snapshot"]: s["unix_time"] for s in summary["snapshots"]}


def read_capture(fixtures_dir: Path, phase: str) -> str:
    return (fixtures_dir / f"snapshot-{phase}.txt").read_text()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (every server a test starts binds there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
