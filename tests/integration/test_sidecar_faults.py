"""The real sidecar app polling real HTTP targets on 127.0.0.1 that misbehave.

Every failure is counted by reason in vllm_diag_scrape_errors_total, sets vllm_diag_up to 0,
and /metrics keeps serving; a healthy target next to them keeps its diagnosis.
"""

from __future__ import annotations

import asyncio
import gzip

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import load_settings
from exporter.server import create_app
from tests.conftest import read_capture
from tests.helpers import free_port


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
async def upstream(fixtures_dir):
    capture = read_capture(fixtures_dir, "steady-during")

    async def ok(request: web.Request) -> web.Response:
        body = gzip.compress(capture.encode())
        return web.Response(body=body, headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})

    async def error(request: web.Request) -> web.Response:
        return web.Response(status=503, text="engine dead")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)  # far past the 1 s timeout below
        return web.Response(text=capture)

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="<html>this is a login page</html>\n")

    async def truncated(request: web.Request) -> web.Response:
        return web.Response(text=capture[: len(capture) // 2].rsplit("{", 1)[0] + '{engine="0",mod')

    async def huge(request: web.Request) -> web.Response:
        return web.Response(text=capture * 8)  # about 400 KB, over the 100 KB cap below

    app = web.Application()
    for path, handler in (("/ok", ok), ("/error", error), ("/slow", slow), ("/garbage", garbage),
                          ("/truncated", truncated), ("/huge", huge)):
        app.router.add_get(path, handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}"
    await server.close()


async def test_faults_are_counted_and_metrics_keep_serving(upstream):
    refused = f"http://127.0.0.1:{free_port()}/metrics"
    targets = [
        # A timeout of 1 s: an answer of a few milliseconds never reads as a timeout on a loaded machine
        # (0.25 s did, with the suite's lanes side by side).
        {"name": name, "url": url, "scrape_interval": 1.1, "timeout": 1.0, "max_bytes": 100_000}
        for name, url in (("healthy", f"{upstream}/ok"), ("refused", refused), ("http", f"{upstream}/error"),
                          ("slow", f"{upstream}/slow"), ("garbage", f"{upstream}/garbage"),
                          ("truncated", f"{upstream}/truncated"), ("huge", f"{upstream}/huge"))
    ]
    settings = load_settings(overrides={"listen": "127.0.0.1:1", "window_seconds": 10, "targets": targets})
    client = TestClient(TestServer(create_app(settings), host="127.0.0.1"))
    await client.start_server()
    try:
        expected = {"refused": "connect", "http": "http", "slow": "timeout", "garbage": "parse",
                    "truncated": "parse", "huge": "too_large"}
        # Two failed scrapes of every target take about 3 s; a loaded machine may take longer, so wait for
        # them (up to 30 s) rather than for a fixed time, then judge what /metrics says.
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            response = await client.get("/metrics")
            assert response.status == 200
            samples = _samples(await response.text())
            counted = [sum(v for (name, labels), v in samples.items()
                           if name == "vllm_diag_scrape_errors_total" and ("target", target) in labels)
                       for target in expected]
            if min(counted) >= 2 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.5)
        for target, reason in expected.items():
            assert samples[("vllm_diag_up", (("target", target),))] == 0, target
            errors = samples[("vllm_diag_scrape_errors_total", (("reason", reason), ("target", target)))]
            assert errors >= 2, (target, reason)
            others = [v for (name, labels), v in samples.items()
                      if name == "vllm_diag_scrape_errors_total" and ("target", target) in labels
                      and ("reason", reason) not in labels]
            assert sum(others) == 0, (target, others)
        assert samples[("vllm_diag_up", (("target", "healthy"),))] == 1
        doc = await (await client.get("/api/v1/diagnosis")).json()
        states = {t["target"]: t for t in doc["targets"]}
        for target in expected:
            assert states[target]["state"] == "down"
            assert states[target]["verdict"]["layer"] == "unknown"
            assert states[target]["symptoms"] == []
        # The healthy target is judged on its own data (the same capture every time: nothing moves).
        assert states["healthy"]["state"] == "ok"
        assert states["healthy"]["model_name"] == "tiny"
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/readyz")).status == 200
    finally:
        await client.close()


async def test_first_scrape_is_insufficient_evidence(upstream):
    settings = load_settings(overrides={
        "window_seconds": 60,
        "targets": [{"name": "one", "url": f"{upstream}/ok", "scrape_interval": 30, "timeout": 1}],
    })
    client = TestClient(TestServer(create_app(settings), host="127.0.0.1"))
    await client.start_server()
    try:
        for _ in range(50):
            doc = await (await client.get("/api/v1/diagnosis")).json()
            if doc["targets"][0]["scrape"]["up"]:
                break
            await asyncio.sleep(0.05)
        target = doc["targets"][0]
        assert target["state"] == "insufficient_evidence"
        assert target["verdict"]["layer"] == "unknown"
        samples = _samples(await (await client.get("/metrics")).text())
        assert samples[("vllm_diag_evidence_ready", (("model_name", "tiny"), ("target", "one")))] == 0
        unknown = (("layer", "unknown"), ("model_name", "tiny"), ("target", "one"))
        assert samples[("vllm_diag_layer_verdict", unknown)] == 1
    finally:
        await client.close()
