"""`vllm-diag diagnose` as a user runs it: offline captures, a live URL, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from pathlib import Path

import pytest

from tests.conftest import read_capture

CLI = [sys.executable, "-m", "exporter.cli"]


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_offline_text_report_puts_the_verdict_first(fixtures_dir):
    files = [str(fixtures_dir / f"snapshot-{p}.txt") for p in ("chunked", "pressure-during", "pressure")]
    proc = run("diagnose", *files, "--interval", "10")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2].startswith("verdict: kv_cache")
    evidence = next(i for i, line in enumerate(lines) if "evidence:" in line)
    action = next(i for i, line in enumerate(lines) if "action:" in line)
    assert evidence < action and "cost:" in lines[action + 1]


@pytest.mark.parametrize("content, fragment", [
    (None, "no such file"),
    ("<html>login</html>\n", "not a sample line"),
    ("# just a comment\n", "no vLLM metrics"),
])
def test_bad_input_exits_non_zero_with_one_line(tmp_path, content, fragment):
    path = tmp_path / "capture.txt"
    if content is not None:
        path.write_text(content)
    proc = run("diagnose", str(path), str(path))
    assert proc.returncode == 2
    assert fragment in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stdout == ""


def test_live_url_one_shot(fixtures_dir):
    pages = [read_capture(fixtures_dir, p) for p in ("chunked", "pressure-during", "pressure-peak-waiting", "pressure")]
    served = count()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = pages[min(next(served), len(pages) - 1)].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        proc = run("diagnose", "--url", url, "--duration", "2", "--interval", "0.5", "--format", "json")
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    target = json.loads(proc.stdout)["targets"][0]
    assert target["state"] == "ok" and target["signals"]["scrapes"] >= 4
    assert target["signals"]["preemptions"] > 0


def test_live_url_that_refuses_is_reported_not_crashed():
    proc = run("diagnose", "--url", "http://127.0.0.1:1/metrics", "--duration", "1", "--interval", "0.5",
               "--format", "json")
    assert proc.returncode == 0, proc.stderr
    target = json.loads(proc.stdout)["targets"][0]
    assert target["state"] == "down" and target["verdict"]["layer"] == "unknown"
    assert target["scrape"]["errors_total"]["connect"] >= 1
