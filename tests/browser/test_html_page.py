"""The HTML page, loaded by a real headless Chromium from a running sidecar."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from itertools import count
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.config import load_settings
from exporter.server import create_app
from tests.conftest import read_capture

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
HOSTILE = '<script>document.title="pwned"</script><b>m</b>'


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed (scripts/install-test-infra.sh installs it)")
    return path


async def _chromium_run(*args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        proc = await asyncio.create_subprocess_exec(
            _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
            "--disable-quic", f"--user-data-dir={profile}", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=90)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    return out.decode("utf-8", "replace")


@pytest.fixture
async def hostile_upstream(fixtures_dir):
    """A vLLM whose model name is hostile markup, moving through a KV-pressure episode."""
    phases = ["chunked", "pressure-during", "pressure-peak-waiting", "pressure"]
    texts = [read_capture(fixtures_dir, p).replace('model_name="tiny"', 'model_name="' + HOSTILE.replace('"', '\\"') + '"')
             for p in phases]
    served = count()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=texts[min(next(served), len(texts) - 1)])

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}/metrics"
    await server.close()


async def test_page_shows_verdict_and_evidence_and_escapes_labels(hostile_upstream):
    settings = load_settings(overrides={
        "window_seconds": 30,
        "targets": [{"name": "vllm-0", "url": hostile_upstream, "scrape_interval": 0.25, "timeout": 0.2}],
    })
    server = TestServer(create_app(settings), host="127.0.0.1")
    await server.start_server()
    try:
        await asyncio.sleep(1.5)  # four scrapes: the pressure episode is in the window
        url = f"http://127.0.0.1:{server.port}/"
        dom = await _chromium_run("--virtual-time-budget=2000", "--dump-dom", url)
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "diagnosis-page.png"
        await _chromium_run("--window-size=1200,1800", f"--screenshot={shot}", url)
    finally:
        await server.close()

    assert 'data-verdict="kv_cache"' in dom
    assert "Frequent preemption" in dom and "per admitted request" in dom  # D and its evidence numbers
    assert "raise gpu_memory_utilization" in dom and "less headroom" in dom  # action and its cost
    # The hostile model name is text: escaped in the DOM, never parsed as an element.
    assert "&lt;script&gt;" in dom and "pwned" not in dom.split("<title>")[1].split("</title>")[0]
    assert "<b>m</b>" not in dom
    assert shot.is_file() and shot.stat().st_size > 10_000
