"""Engine facts discovered from a running process's command line, end to end through the sidecar.

The target is a real process whose command line is a ``vllm serve`` invocation (with secrets on
it and in its environment) and which serves a real vLLM 0.32 capture on /metrics plus /v1/models
and /version. The sidecar finds it by its listening socket, reads the facts with their sources,
and never lets the secrets out: not on /metrics, the JSON, the page, the text report or the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from exporter.config import load_settings
from exporter.facts import process
from exporter.facts.base import NoFacts
from exporter.facts.discovery import ProcessFacts
from exporter.server import create_app
from tests.helpers import free_port

SECRETS = ("sk-cmdline-7f3a9c1e55d04b2a", "hf_tokenOnTheCommandLine9d8e7f", "hf_envToken0a1b2c3d4e5f")

# A process that answers like vLLM's API server on the port its own command line names.
SERVER = r"""
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
capture = open(os.environ["CAPTURE"], "rb").read()
pages = {"/metrics": (capture, "text/plain; version=0.0.4"),
         "/v1/models": (json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model", "root": "/models/tiny",
                        "parent": None, "max_model_len": 1024}]}).encode(), "application/json"),
         "/version": (b'{"version": "0.32.0"}', "application/json")}
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body, kind = pages.get(self.path, (b"not found", "text/plain"))
        self.send_response(200 if self.path in pages else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def _listening(proc: subprocess.Popen, port: int) -> subprocess.Popen:
    deadline = time.monotonic() + 15
    while True:
        try:
            with __import__("socket").create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError as exc:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} did not start") from exc
            time.sleep(0.05)


def _serve_like_vllm(port: int, fixtures_dir: Path, cwd: Path) -> subprocess.Popen:
    # vLLM's --config file: the command line's --max-num-seqs overrides the file's value.
    (cwd / "vllm.yaml").write_text("max-num-seqs: 99\nkv_cache_memory_bytes: 8M\n")
    argv = [sys.executable, "-c", SERVER, "vllm", "serve", "/models/tiny", "--port", str(port),
            "--max-num-batched-tokens", "256", "--config", "vllm.yaml", "--max-num-seqs=12", "--block-size", "32",
            "--api-key", SECRETS[0], "--hf-token", SECRETS[1], "--enforce-eager"]
    env = {**os.environ, "CAPTURE": str(fixtures_dir / "snapshot-steady.txt"), "HF_TOKEN": SECRETS[2]}
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return _listening(proc, port)
    except RuntimeError:
        proc.kill()
        raise


@pytest.fixture
def vllm_like(fixtures_dir: Path, tmp_path: Path) -> Iterator[int]:
    port = free_port()
    proc = _serve_like_vllm(port, fixtures_dir, tmp_path)
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_process_on_the_port_is_found_and_only_known_facts_are_read(vllm_like: int) -> None:
    facts = ProcessFacts(vllm_like).read()
    assert facts["cmdline"] == {"model": "/models/tiny", "max_num_batched_tokens": 256, "max_num_seqs": 12,
                                "block_size": 32}
    assert facts["vllm_config_file"] == {"kv_cache_memory_bytes": 8 * 2**20}  # relative to vLLM's cwd
    assert not any(secret in repr(facts) for secret in SECRETS)


async def test_sidecar_publishes_discovered_facts_with_sources_and_no_secret(
        vllm_like: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    settings = load_settings(overrides={"window_seconds": 30, "targets": [
        {"name": "t", "url": f"http://127.0.0.1:{vllm_like}/metrics", "scrape_interval": 0.3, "timeout": 0.3}]})
    server = TestServer(create_app(settings), host="127.0.0.1")
    await server.start_server()
    pages: dict[str, str] = {}
    try:
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{server.port}"
            deadline = asyncio.get_running_loop().time() + 15
            while True:
                async with session.get(f"{base}/api/v1/diagnosis") as response:
                    doc = (await response.json())["targets"][0]
                if "max_model_len" in doc["engine"] or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.2)
            for path in ("/metrics", "/api/v1/diagnosis", "/", "/api/v1/diagnosis.txt"):
                async with session.get(base + path) as response:
                    pages[path] = await response.text()
    finally:
        await server.close()

    engine = doc["engine"]
    assert engine["max_num_batched_tokens"] == {"value": 256, "source": "cmdline"}
    assert engine["max_num_seqs"] == {"value": 12, "source": "cmdline"}
    assert engine["block_size"] == {"value": 32, "source": "cmdline"}
    assert engine["max_model_len"] == {"value": 1024, "source": "models_api"}
    assert engine["vllm_version"] == {"value": "0.32.0", "source": "version_api"}
    assert engine["num_gpu_blocks"] == {"value": 96, "source": "metrics"}
    assert engine["kv_cache_memory_bytes"] == {"value": 8 * 2**20, "source": "vllm_config_file"}
    assert engine["tensor_parallel_size"] == {"value": 1, "source": "defaults"}
    assert 'vllm_diag_engine_fact{fact="max_num_batched_tokens",source="cmdline",target="t"} 256.0' in pages["/metrics"]
    assert 'vllm_diag_engine_fact_info{fact="vllm_version",source="version_api",target="t",value="0.32.0"} 1.0' \
        in pages["/metrics"]
    assert "max_num_seqs: 12 (cmdline)" in pages["/api/v1/diagnosis.txt"]
    assert 'data-fact="max_num_batched_tokens"' in pages["/"]
    for secret in SECRETS:
        for path, text in pages.items():
            assert secret not in text, path
        assert secret not in caplog.text


def test_a_port_another_server_holds_is_scanned_for_once_while_it_holds_it(
        fixtures_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy or any other server on the target's port: every process is scanned for the socket once, then its
    # holder is checked alone each refresh; once it lets the port go, the vLLM that takes it is found.
    port = free_port()
    other = _listening(subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                                        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
    scans: list[int] = []
    holders = process.socket_holders
    monkeypatch.setattr(process, "socket_holders", lambda *args: scans.append(1) or holders(*args))
    locator = process.ProcessLocator(port)
    try:
        for _ in range(3):
            with pytest.raises(NoFacts, match="not a vLLM server"):
                locator.locate()
        assert len(scans) == 1
    finally:
        other.terminate()
        other.wait(10)
    vllm = _serve_like_vllm(port, fixtures_dir, tmp_path)
    try:
        found = locator.locate()
        assert found.pid == vllm.pid and found.invocation.flags["max_num_seqs"] == 12
        assert len(scans) == 2
    finally:
        vllm.terminate()
        vllm.wait(10)


def test_from_another_network_namespace_the_command_line_port_finds_it(vllm_like: int) -> None:
    # As in compose with pid "service:vllm": the socket is not visible, the command line is.
    facts = ProcessFacts(vllm_like, same_network=False).read()
    assert facts["cmdline"]["max_num_seqs"] == 12


def test_diagnose_url_uses_only_the_http_api_and_metrics(vllm_like: int) -> None:
    proc = subprocess.run([sys.executable, "-m", "exporter.cli", "diagnose", "--url",
                           f"http://127.0.0.1:{vllm_like}/metrics", "--duration", "1", "--interval", "0.5",
                           "--format", "json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    engine = json.loads(proc.stdout)["targets"][0]["engine"]
    assert engine["max_model_len"] == {"value": 1024, "source": "models_api"}
    assert engine["block_size"] == {"value": 32, "source": "metrics"}
    assert {fact["source"] for fact in engine.values()} <= {"models_api", "version_api", "metrics"}
