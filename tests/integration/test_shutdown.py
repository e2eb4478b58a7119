"""Long-running commands stop cleanly on SIGTERM (what `docker stop` and Kubernetes send)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import free_port, wait_for_port

VLLM_DIAG = str(Path(sys.executable).with_name("vllm-diag"))

pytestmark = pytest.mark.timeout(60)



def test_simulator_exits_zero_on_sigterm() -> None:
    port = free_port()
    proc = subprocess.Popen([VLLM_DIAG, "simulate", "--scenario", "healthy", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc)
        # The default SIGTERM action would end it with -15 (and never, as PID 1 in a container).
        _stops_quietly(proc, timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sidecar_stops_quietly_in_the_middle_of_a_scrape(tmp_path: Path) -> None:
    # A target that accepts the connection and never answers: the scrape is in flight when SIGTERM lands.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    target_port = listener.getsockname()[1]
    config = tmp_path / "vllm-diag.yaml"
    config.write_text(f"targets:\n  - name: slow\n    url: http://127.0.0.1:{target_port}/metrics\n"
                      "    scrape_interval: 10\n    timeout: 9\n", encoding="utf-8")
    port = free_port()
    proc = subprocess.Popen([VLLM_DIAG, "serve", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc)
        listener.settimeout(10)
        conn, _ = listener.accept()  # the sidecar's scrape is now waiting for an answer
        # Before: apscheduler logged the cancelled scrape as 'Job ... raised an exception' with a traceback.
        _stops_quietly(proc, timeout=15)
        conn.close()
    finally:
        listener.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _stops_quietly(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM: the process exits 0 and logs no failed job and no traceback."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout)
    text = err.decode()
    assert proc.returncode == 0, text
    assert "raised an exception" not in text and "Traceback" not in text, text


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return found


@pytest.mark.timeout(90)
def test_demo_stops_quietly_while_the_advisor_works() -> None:
    # kv-pressure is symptomatic from the start, so the advisor's first tick (15 s in) starts its worker
    # process and calibrates for seconds: SIGTERM lands while the job waits for that process.
    port, simulator = free_port(), free_port()
    proc = subprocess.Popen([VLLM_DIAG, "demo", "--scenario", "kv-pressure", "--listen", f"127.0.0.1:{port}",
                             "--simulator-port", str(simulator)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc)
        deadline = time.monotonic() + 45
        while not _children(proc.pid):
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("the advisor's worker process never started")
            time.sleep(0.1)
        # Before: apscheduler logged the cancelled advisor run as 'Job ... raised an exception' with a traceback.
        _stops_quietly(proc, timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
