"""The HTTP API client against a real local aiohttp server that checks what it receives.

Bearer token, basic auth, X-Scope-OrgID, a path prefix (Mimir's /prometheus), mutual TLS with a
private CA (made with openssl), and every error turned into one line that never shows a secret.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from exporter.promsource.client import PromClient, PromError
from exporter.promsource.settings import PrometheusSource
from tests.helpers import free_port

TOKEN = "s3cr3t-t0ken-never-shown"
PASSWORD = "hunter2-never-shown"
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}


class Recorder:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        case = request.match_info.get("case", "")
        form = dict(await request.post())
        self.requests.append({"path": request.path, "headers": dict(request.headers), "form": form,
                              "method": request.method})
        if case == "needs-token" and request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.Response(status=401, text="unauthorized")
        if case == "bad-data":
            return web.json_response({"status": "error", "errorType": "bad_data",
                                      "error": 'invalid parameter "query": 1:12: parse error'}, status=400)
        if case == "html":
            return web.Response(text="<html>login</html>", content_type="text/html")
        if case == "unavailable":
            return web.Response(status=503, text="overloaded")
        if case == "slow":
            await asyncio.sleep(1.5)
        if case == "partial":
            return web.json_response({**VECTOR, "warnings": ["partial response: store 10.0.0.7 unreachable"]})
        return web.json_response(VECTOR)


async def serve(app: web.Application, ssl_context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ssl_context).start()
    return runner, f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"


@pytest.fixture
async def server() -> AsyncIterator[tuple[Recorder, str]]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_post("/{case}/api/v1/{endpoint}", recorder.handle)
    app.router.add_post("/api/v1/{endpoint}", recorder.handle)
    runner, url = await serve(app)
    yield recorder, url
    await runner.cleanup()


async def query(source: PrometheusSource) -> dict[str, Any]:
    async with PromClient(source) as client:
        return await client.query("up", 1_796_000_000)


async def test_bearer_token_and_tenant(server: tuple[Recorder, str], tmp_path: Path) -> None:
    recorder, url = server
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    source = PrometheusSource(url=f"{url}/needs-token", bearer_token_file=token_file, tenant="team-a")
    assert (await query(source))["resultType"] == "vector"
    sent = recorder.requests[-1]
    assert sent["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert sent["headers"]["X-Scope-OrgID"] == "team-a"
    assert sent["method"] == "POST" and sent["form"] == {"query": "up", "time": "1796000000.000"}
    assert sent["path"] == "/needs-token/api/v1/query"  # the path prefix is kept (Mimir: /prometheus)


async def test_basic_auth(server: tuple[Recorder, str], tmp_path: Path) -> None:
    recorder, url = server
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    source = PrometheusSource(url=url, basic_auth={"username": "diag", "password_file": password_file})
    await query(source)
    import base64

    assert recorder.requests[-1]["headers"]["Authorization"] == "Basic " + base64.b64encode(
        f"diag:{PASSWORD}".encode()).decode()


async def test_errors_are_one_line_without_secrets(server: tuple[Recorder, str], caplog: pytest.LogCaptureFixture,
                                                   ) -> None:
    caplog.set_level(logging.DEBUG)
    _, url = server
    cases = {
        "needs-token": ("HTTP 401", "check the bearer token"),
        "bad-data": ("failed (bad_data)", "parse error"),
        "html": ("without a Prometheus API response", ""),
        "unavailable": ("HTTP 503", "not ready or overloaded"),
        "missing/deeper": ("HTTP 404", "path prefix"),
    }
    for case, (first, second) in cases.items():
        source = PrometheusSource(url=f"http://diag:{PASSWORD}@{url.removeprefix('http://')}/{case}",
                                  bearer_token=None, tenant="t")
        with pytest.raises(PromError) as caught:
            await query(source)
        message = str(caught.value)
        assert first in message and second in message, message
        assert "\n" not in message and PASSWORD not in message and "***@127.0.0.1" in message
    assert PASSWORD not in caplog.text and TOKEN not in caplog.text


async def test_token_never_in_messages(server: tuple[Recorder, str]) -> None:
    _, url = server
    source = PrometheusSource(url=f"{url}/bad-data", bearer_token=TOKEN)
    with pytest.raises(PromError) as caught:
        await query(source)
    assert TOKEN not in str(caught.value) and TOKEN not in repr(source)


async def test_timeout_and_refused() -> None:
    recorder = Recorder()
    app = web.Application()
    app.router.add_post("/{case}/api/v1/{endpoint}", recorder.handle)
    runner, url = await serve(app)
    try:
        with pytest.raises(PromError, match=r"no answer within 0.5 s"):
            await query(PrometheusSource(url=f"{url}/slow", timeout=0.5))
    finally:
        await runner.cleanup()
    with pytest.raises(PromError, match=r"cannot connect \(Connect call failed|cannot connect \("):
        await query(PrometheusSource(url=f"http://127.0.0.1:{free_port()}"))


async def test_partial_data_warnings_are_kept(server: tuple[Recorder, str]) -> None:
    _, url = server
    async with PromClient(PrometheusSource(url=f"{url}/partial")) as client:
        await client.query("up", 0)
        assert client.stats.warnings == ["query: partial response: store 10.0.0.7 unreachable"]
        assert client.stats.queries == 1 and client.stats.bytes_read > 0


EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")  # fast to make, unlike RSA


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private CA, a server certificate for 127.0.0.1 and a client certificate."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", *EC_KEY, "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    for name, extra in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        _openssl("req", *EC_KEY, "-nodes", "-subj", f"/CN={name}", "-keyout", str(d / f"{name}.key"),
                 "-out", str(d / f"{name}.csr"))
        (d / f"{name}.ext").write_text(extra + "\n")
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
                 "-CAcreateserial", "-days", "2", "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.crt"))
    return d


async def test_mutual_tls_with_private_ca(pki: Path) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
    context.verify_mode = ssl.CERT_REQUIRED  # the server insists on a client certificate
    recorder = Recorder()
    app = web.Application()
    app.router.add_post("/api/v1/{endpoint}", recorder.handle)
    runner, url = await serve(app, context)
    try:
        tls = {"ca_file": pki / "ca.crt", "cert_file": pki / "client.crt", "key_file": pki / "client.key"}
        assert (await query(PrometheusSource(url=url, tls=tls)))["resultType"] == "vector"
        with pytest.raises(PromError, match="TLS failed") as caught:  # the system CAs do not know ours
            await query(PrometheusSource(url=url))
        assert "\n" not in str(caught.value)
        with pytest.raises(PromError):  # no client certificate: the server refuses the handshake
            await query(PrometheusSource(url=url, tls={"ca_file": pki / "ca.crt"}))
    finally:
        await runner.cleanup()
    assert len(recorder.requests) == 1
