"""`vllm-diag demo` as a user runs it: a subprocess, simulated engines plus the sidecar. The
diagnosis window is the three minutes docs/scenarios.md judges verdicts over, already filled
from the simulator's warm-up: every scenario shows its documented verdict on the first answer,
and the verdicts hold while we watch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from exporter.demo import DEMO_SCENARIOS, WINDOW_SECONDS
from exporter.simulator import SCENARIOS
from tests.helpers import free_port

VENV_BIN = Path(sys.executable).parent
WATCH_SECONDS = 12  # six scrapes at the demo's 2 s interval

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _verdicts(listen: int) -> dict[str, dict] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{listen}/api/v1/diagnosis", timeout=2) as response:
            return {t["target"]: t for t in json.load(response)["targets"]}
    except OSError:
        return None


def test_demo_verdicts_are_the_documented_ones_from_the_start_and_hold(tmp_path):
    listen, sim_port = free_port(), free_port()
    command = [str(VENV_BIN / "vllm-diag"), "demo", "--listen", f"127.0.0.1:{listen}",
               "--simulator-port", str(sim_port)]
    log = (tmp_path / "demo.log").open("w")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, process_group=0)
    started = time.monotonic()
    seen: list[dict[str, dict]] = []
    try:
        while time.monotonic() - started < 30 and not seen:
            time.sleep(0.5)
            first = _verdicts(listen)
            if first is not None:
                seen.append(first)
        first_answer = time.monotonic() - started
        watch_until = time.monotonic() + WATCH_SECONDS
        while seen and time.monotonic() < watch_until:
            time.sleep(1.0)
            seen.append(_verdicts(listen) or {})
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    output = (tmp_path / "demo.log").read_text()
    assert seen, output
    expected = {name: SCENARIOS[name].expected.verdict for name in DEMO_SCENARIOS}
    first = seen[0]
    assert set(first) == set(DEMO_SCENARIOS), output
    # The first answer already judges a (nearly) full window, with the documented verdicts.
    for name, target in first.items():
        assert target["window_seconds"] == WINDOW_SECONDS
        assert target["signals"]["window_seconds"] >= 0.8 * WINDOW_SECONDS, (name, target["signals"])
    assert {name: t["verdict"]["layer"] for name, t in first.items()} == expected, first_answer
    # ... and they hold: the same verdict at every poll while new live scrapes arrive.
    for later in seen[1:]:
        assert {name: t["verdict"]["layer"] for name, t in later.items()} == expected
    assert seen[-1]["healthy"]["last_scrape_at"] > first["healthy"]["last_scrape_at"]  # live scrapes continued
    assert f"http://127.0.0.1:{listen}/" in output and "window 180 s" in output  # what to open, and the window
    # Its simulated engines answer /v1/models and /version: no engine-fact source logs that it is unreadable.
    assert "unavailable" not in output, output
