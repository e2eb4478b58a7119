"""Long-running commands stop cleanly on SIGTERM (what `docker stop` and Kubernetes send)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

VLLM_DIAG = str(Path(sys.executable).with_name("vllm-diag"))

pytestmark = pytest.mark.timeout(60)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"nothing listens on {port} after {seconds} s")


def test_simulator_exits_zero_on_sigterm() -> None:
    port = free_port()
    proc = subprocess.Popen([VLLM_DIAG, "simulate", "--scenario", "healthy", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for_port(port, proc)
        proc.send_signal(signal.SIGTERM)
        # The default SIGTERM action would end it with -15 (and never, as PID 1 in a container).
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err, err.decode()
