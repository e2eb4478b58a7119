"""Faults, bad input, load and security: the sidecar keeps serving, counts what went wrong,
and never diagnoses from bad data. Every target here is a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import count
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.config import load_settings
from exporter.server import create_app
from exporter.webconfig import WebConfigError, load_web_config
from tests.conftest import read_capture

PREEMPT = re.compile(r'^(vllm:num_preemptions_total\{[^}]*\}) (\S+)$', re.M)
START = re.compile(r"^process_start_time_seconds (\S+)$", re.M)


def _bump(text: str, factor: float) -> str:
    """The capture with its preemption counter scaled, so consecutive scrapes move."""
    return PREEMPT.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * factor}", text)


async def _serve(pages: Callable[[int], str | web.Response]) -> tuple[TestServer, list[int]]:
    hits: list[int] = []
    served = count()

    async def handler(request: web.Request) -> web.StreamResponse:
        n = next(served)
        hits.append(n)
        page = pages(n)
        return page if isinstance(page, web.StreamResponse) else web.Response(text=page)

    app = web.Application()
    app.router.add_get("/metrics", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server, hits


async def _sidecar(url: str, *, interval: float = 0.2, web_config: Path | None = None, **target) -> TestServer:
    overrides = {"window_seconds": 30, "targets": [{"name": "t", "url": url, "scrape_interval": interval,
                                                     "timeout": interval, **target}]}
    if web_config is not None:
        overrides["web_config_file"] = str(web_config)
    server = TestServer(create_app(load_settings(overrides=overrides)), host="127.0.0.1")
    await server.start_server()
    return server


async def _doc(sidecar: TestServer, session: aiohttp.ClientSession) -> dict:
    async with session.get(f"http://127.0.0.1:{sidecar.port}/api/v1/diagnosis") as r:
        return (await r.json())["targets"][0]


async def _until(sidecar: TestServer, predicate, timeout: float = 10.0) -> dict:
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + timeout
        while True:
            doc = await _doc(sidecar, session)
            if predicate(doc) or time.monotonic() > deadline:
                return doc
            await asyncio.sleep(0.1)


async def test_cardinality_explosion_is_capped_and_counted(fixtures_dir):
    base = read_capture(fixtures_dir, "steady")
    flood = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="tiny"}} 1\n' for i in range(1, 5000))
    upstream, _ = await _serve(lambda n: base + flood)
    sidecar = await _sidecar(f"http://127.0.0.1:{upstream.port}/metrics", max_series_per_family=100)
    try:
        doc = await _until(sidecar, lambda d: d["scrape"]["up"])
        assert doc["state"] in ("ok", "insufficient_evidence")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{sidecar.port}/metrics") as r:
                text = await r.text()
        dropped = float(re.search(r'vllm_diag_dropped_samples_total\{target="t"\} (\S+)', text).group(1))
        assert dropped >= 4900
    finally:
        await sidecar.close()
        await upstream.close()


async def test_metric_that_disappears_and_returns_is_missing_then_not_a_spike(fixtures_dir):
    base = read_capture(fixtures_dir, "pressure")  # 59 preemptions so far

    def page(n: int) -> str:
        if 3 <= n < 8:
            return PREEMPT.sub("", base)  # a version without the family
        return _bump(base, 1.0 if n < 3 else 100.0)  # comes back far higher: must not read as a rate

    upstream, _ = await _serve(page)
    sidecar = await _sidecar(f"http://127.0.0.1:{upstream.port}/metrics")
    try:
        absent = await _until(sidecar, lambda d: "vllm:num_preemptions_total" in d["missing"])
        assert "vllm:num_preemptions_total" in absent["missing"]
        assert absent["signals"]["preemption_rate"] is None
        back = await _until(sidecar, lambda d: d["signals"] and d["signals"]["scrapes"] >= 12
                            and "vllm:num_preemptions_total" not in d["missing"])
        assert back["signals"]["preemption_rate"] == 0.0
        assert "D" not in {s["id"] for s in back["symptoms"]}
    finally:
        await sidecar.close()
        await upstream.close()


async def test_vllm_restart_is_detected_and_not_a_rate_spike(fixtures_dir):
    before, after = read_capture(fixtures_dir, "pressure"), read_capture(fixtures_dir, "steady")
    after = START.sub("process_start_time_seconds 1.9e+09", after)  # a new process, counters from zero

    upstream, _ = await _serve(lambda n: before if n < 4 else after)
    sidecar = await _sidecar(f"http://127.0.0.1:{upstream.port}/metrics")
    try:
        doc = await _until(sidecar, lambda d: d["signals"] and d["signals"]["scrapes"] >= 8)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{sidecar.port}/metrics") as r:
                text = await r.text()
        assert re.search(r'vllm_diag_target_restarts_total\{target="t"\} 1\.0', text), text[:2000]
        # The steady capture holds 0 preemptions: after the restart the window sees none, not -59.
        assert doc["signals"]["preemptions"] == 0
        assert doc["signals"]["requests_finished"] >= 0
    finally:
        await sidecar.close()
        await upstream.close()


async def test_nan_and_inf_values_are_dropped_not_diagnosed(fixtures_dir):
    base = read_capture(fixtures_dir, "pressure-during")
    poisoned = re.sub(r"^(vllm:kv_cache_usage_perc\{[^}]*\}) \S+$", r"\1 NaN", base, flags=re.M)
    poisoned = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", r"\1 +Inf", poisoned, flags=re.M)
    upstream, _ = await _serve(lambda n: poisoned)
    sidecar = await _sidecar(f"http://127.0.0.1:{upstream.port}/metrics")
    try:
        doc = await _until(sidecar, lambda d: d["state"] == "ok")
        assert "vllm:kv_cache_usage_perc" in doc["missing"] and "vllm:num_requests_waiting" in doc["missing"]
        assert doc["signals"]["kv_cache_usage"] is None
    finally:
        await sidecar.close()
        await upstream.close()


async def test_duplicate_series_is_a_parse_failure(fixtures_dir):
    base = read_capture(fixtures_dir, "steady")
    line = next(row for row in base.splitlines() if row.startswith("vllm:num_requests_running{"))
    upstream, _ = await _serve(lambda n: base + line + "\n")
    sidecar = await _sidecar(f"http://127.0.0.1:{upstream.port}/metrics")
    try:
        doc = await _until(sidecar, lambda d: d["scrape"]["errors_total"]["parse"] >= 2)
        assert doc["state"] == "down" and doc["verdict"]["layer"] == "unknown"
        assert "duplicate" in doc["scrape"]["last_error"]
    finally:
        await sidecar.close()
        await upstream.close()


@pytest.mark.slow
async def test_many_concurrent_scrapers_are_served_from_the_last_state(fixtures_dir):
    base = read_capture(fixtures_dir, "pressure-during")
    upstream, hits = await _serve(lambda n: _bump(base, 1 + n / 10))
    sidecar = await _sidecar(f"http://127.0.0.1:{upstream.port}/metrics", interval=1.0)
    latencies: list[float] = []
    try:
        await _until(sidecar, lambda d: d["state"] == "ok", timeout=15)
        upstream_before = len(hits)
        started = time.monotonic()
        connector = aiohttp.TCPConnector(limit=50)
        async with aiohttp.ClientSession(connector=connector) as session:
            async def scraper(worker: int) -> None:
                # 50 scrapers, 40 requests each, back to back: latency is the server's, not a client queue.
                for i in range(40):
                    path = "/metrics" if (worker + i) % 2 else "/api/v1/diagnosis"
                    t0 = time.perf_counter()
                    async with session.get(f"http://127.0.0.1:{sidecar.port}{path}") as r:
                        assert r.status == 200
                        await r.read()
                    latencies.append(time.perf_counter() - t0)

            await asyncio.gather(*(scraper(w) for w in range(50)))
        elapsed = time.monotonic() - started
        upstream_during = len(hits) - upstream_before
    finally:
        await sidecar.close()
        await upstream.close()
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    print(f"\n2000 requests, 50 concurrent, in {elapsed:.2f} s: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    # No request triggered a scrape of its own: only the 1 s schedule reached the target.
    assert upstream_during <= elapsed / 1.0 + 2


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


async def test_basic_auth_and_tls_follow_the_exporter_toolkit_format(fixtures_dir, tls_files, tmp_path):
    cert, key = tls_files
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                      f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    web_config = load_web_config(config)
    upstream, _ = await _serve(lambda n: read_capture(fixtures_dir, "steady"))
    settings = load_settings(overrides={"web_config_file": str(config), "targets": [
        {"name": "t", "url": f"http://127.0.0.1:{upstream.port}/metrics", "scrape_interval": 1, "timeout": 1}]})
    runner = web.AppRunner(create_app(settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=web_config.ssl_context())
    await site.start()
    port = runner.addresses[0][1]
    client_tls = ssl.create_default_context(cafile=str(cert))
    try:
        async with aiohttp.ClientSession() as session:
            base = f"https://127.0.0.1:{port}"
            async with session.get(f"{base}/metrics", ssl=client_tls) as r:
                assert r.status == 401
            async with session.get(f"{base}/metrics", ssl=client_tls, headers=_basic("prometheus", "wrong")) as r:
                assert r.status == 401
            async with session.get(f"{base}/metrics", ssl=client_tls, headers=_basic("prometheus", "s3cret")) as r:
                assert r.status == 200 and "vllm_diag_up" in await r.text()
            async with session.get(f"{base}/healthz", ssl=client_tls) as r:
                assert r.status == 200
            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{port}/metrics") as r:  # plain HTTP is refused
                    await r.read()
    finally:
        await runner.cleanup()
        await upstream.close()


def test_plain_passwords_and_broken_tls_files_are_rejected(tmp_path):
    bad = tmp_path / "web.yml"
    bad.write_text("basic_auth_users:\n  prometheus: hunter2\n")
    with pytest.raises(WebConfigError, match="not a bcrypt hash"):
        load_web_config(bad)
    bad.write_text("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n")
    with pytest.raises(WebConfigError, match="cannot load"):
        load_web_config(bad)


async def test_credentials_in_a_target_url_are_never_logged_or_shown(caplog):
    caplog.set_level(logging.DEBUG)
    sidecar = await _sidecar("http://scraper:t0psecret@127.0.0.1:1/metrics")
    try:
        doc = await _until(sidecar, lambda d: d["scrape"]["errors_total"]["connect"] >= 2)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{sidecar.port}/") as r:
                page = await r.text()
    finally:
        await sidecar.close()
    assert "t0psecret" not in caplog.text
    assert "t0psecret" not in str(doc) and "t0psecret" not in page
    assert "***@127.0.0.1:1" in doc["scrape"]["last_error"]


def test_clock_jump_restarts_the_window_and_withholds_the_diagnosis(fixtures_dir):
    from exporter.pipeline import TargetPipeline
    from exporter.poll import ScrapeResult

    settings = load_settings(overrides={"targets": [{"name": "t", "url": "http://127.0.0.1:1/metrics"}]})
    pipeline = TargetPipeline(settings.targets[0], settings)
    body = read_capture(fixtures_dir, "pressure").encode()
    for t in (1000.0, 1005.0, 1010.0):
        state = pipeline.ingest(ScrapeResult(started_at=t, duration=0.0, body=body))
    assert state.status == "ok"
    jumped = pipeline.ingest(ScrapeResult(started_at=400.0, duration=0.0, body=body))  # NTP stepped back
    assert jumped.status == "insufficient_evidence" and jumped.diagnosis.verdict.layer == "unknown"
    assert jumped.signals is not None and jumped.signals.scrapes == 1
    resumed = pipeline.ingest(ScrapeResult(started_at=405.0, duration=0.0, body=body))
    assert resumed.status == "ok"


async def test_oversized_requests_to_the_sidecar_are_refused(fixtures_dir):
    upstream, _ = await _serve(lambda n: read_capture(fixtures_dir, "steady"))
    sidecar = await _sidecar(f"http://127.0.0.1:{upstream.port}/metrics")
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{sidecar.port}/metrics", data=b"x" * 200_000) as r:
                assert r.status == 413
            async with session.post(f"http://127.0.0.1:{sidecar.port}/metrics", data=b"{}") as r:
                assert r.status == 405
            async with session.get(f"http://127.0.0.1:{sidecar.port}/metrics") as r:
                assert r.status == 200  # and it keeps serving
    finally:
        await sidecar.close()
        await upstream.close()


async def test_a_sidecar_restart_loses_only_its_window(fixtures_dir):
    pages = [_bump(read_capture(fixtures_dir, "pressure"), 1 + n / 10) for n in range(200)]
    upstream, _ = await _serve(lambda n: pages[min(n, len(pages) - 1)])
    url = f"http://127.0.0.1:{upstream.port}/metrics"
    try:
        first = await _sidecar(url)
        before = await _until(first, lambda d: d["state"] == "ok")
        await first.close()
        second = await _sidecar(url)  # a new process: same config, empty window
        try:
            fresh = await _until(second, lambda d: True)
            assert fresh["state"] in ("insufficient_evidence", "ok")
            again = await _until(second, lambda d: d["state"] == "ok")
            assert again["state"] == "ok" and again["model_name"] == before["model_name"]
        finally:
            await second.close()
    finally:
        await upstream.close()


_CONNECTS: list[tuple[str, int]] = []
_AUDITING = False


def _audit(event: str, args: tuple) -> None:
    if _AUDITING and event == "socket.connect":
        address = args[1]
        if isinstance(address, tuple) and len(address) >= 2:
            _CONNECTS.append((str(address[0]), int(address[1])))


async def test_no_outbound_connection_except_to_configured_targets(fixtures_dir):
    """Every socket the sidecar connects (audited by the interpreter) goes to a configured URL."""
    global _AUDITING
    if _audit not in getattr(test_no_outbound_connection_except_to_configured_targets, "hooked", ()):
        sys.addaudithook(_audit)  # audit hooks cannot be removed: the flag scopes this one
        test_no_outbound_connection_except_to_configured_targets.hooked = (_audit,)
    upstream, _ = await _serve(lambda n: read_capture(fixtures_dir, "steady"))
    url = f"http://127.0.0.1:{upstream.port}/metrics"
    _CONNECTS.clear()
    _AUDITING = True
    try:
        sidecar = await _sidecar(url, dcgm_url=url)
        sidecar_port = sidecar.port
        try:
            await _until(sidecar, lambda d: d["state"] == "ok")
        finally:
            await sidecar.close()
    finally:
        _AUDITING = False
    outbound = [c for c in _CONNECTS if c[1] != sidecar_port]  # our own test client talks to the sidecar
    assert outbound, "the audit saw no connection at all"
    assert set(outbound) == {("127.0.0.1", upstream.port)}, outbound
    await upstream.close()
