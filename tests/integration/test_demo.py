"""`vllm-diag demo` as a user runs it: a subprocess, simulated engines plus the sidecar,
and a verdict for every scenario on /api/v1/diagnosis within 30 seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from exporter.demo import DEMO_SCENARIOS
from exporter.simulator import SCENARIOS
from tests.conftest import free_port

VENV_BIN = Path(sys.executable).parent



def test_demo_shows_verdicts_within_30_seconds(tmp_path):
    listen, sim_port = free_port(), free_port()
    command = [str(VENV_BIN / "vllm-diag"), "demo", "--listen", f"127.0.0.1:{listen}",
               "--simulator-port", str(sim_port)]
    log = (tmp_path / "demo.log").open("w")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, process_group=0)
    started = time.monotonic()
    doc = None
    try:
        while time.monotonic() - started < 30:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{listen}/api/v1/diagnosis", timeout=2) as r:
                    doc = json.load(r)
            except OSError:
                continue
            verdicts = {t["target"]: t["verdict"]["layer"] for t in doc["targets"]}
            expected_kv = SCENARIOS["kv-pressure"].expected.verdict
            if verdicts and all(v != "unknown" for v in verdicts.values()) and verdicts["kv-pressure"] == expected_kv:
                break
        elapsed = time.monotonic() - started
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    output = (tmp_path / "demo.log").read_text()
    assert doc is not None, output
    verdicts = {t["target"]: t["verdict"]["layer"] for t in doc["targets"]}
    assert set(verdicts) == set(DEMO_SCENARIOS), output
    assert all(v != "unknown" for v in verdicts.values()), (verdicts, elapsed)
    assert verdicts["healthy"] == "none"
    assert verdicts["kv-pressure"] == SCENARIOS["kv-pressure"].expected.verdict
    assert f"http://127.0.0.1:{listen}/" in output  # the URLs to open are printed
