"""A small async client for the Prometheus HTTP API: instant queries, range queries, series.

Authentication (bearer token, basic auth, client certificates, a custom CA) and the
``X-Scope-OrgID`` tenant header come from :class:`PrometheusSource`. Every failure is one
:class:`PromError` line that names the store by its redacted URL and says what to check; a
token, a password or a header value never reaches a message or a log. Queries go as POST
forms: the selector of every vLLM name is longer than some proxies accept in a URL.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp

from exporter import __version__
from exporter.config import redact
from exporter.promsource.settings import PrometheusSource

# An answer larger than this is refused rather than held in memory (one query of one target).
MAX_RESPONSE_BYTES = 256 * 1024 * 1024

HINTS = {
    401: "check the bearer token or basic auth",
    403: "check the credentials' permissions (and the tenant, X-Scope-OrgID)",
    404: "check the URL's path prefix (Mimir: /prometheus; Thanos and VictoriaMetrics: none)",
    422: "the query could not be executed",
    503: "the store is not ready or overloaded",
}


class PromError(Exception):
    """One line: what went wrong at which store, and what to check."""


@dataclass
class QueryStats:
    """What a run cost the store: queries sent, bytes read, warnings it returned (partial data)."""

    queries: int = 0
    bytes_read: int = 0
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        if message not in self.warnings and len(self.warnings) < 50:
            self.warnings.append(message)


def _secret_file(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise PromError(f"{what} {path}: cannot read ({exc.strerror})") from None


def auth_headers(source: PrometheusSource) -> dict[str, str]:
    """The headers every request carries (credentials included: never log these)."""
    headers = {"User-Agent": f"vllm-diag/{__version__}", "Accept": "application/json"}
    token = source.bearer_token.get_secret_value() if source.bearer_token is not None else None
    if source.bearer_token_file is not None:
        token = _secret_file(source.bearer_token_file, "bearer_token_file")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    credentials = basic_credentials(source)
    if credentials is not None:
        raw = f"{credentials[0]}:{credentials[1]}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(raw).decode("ascii")
    if source.tenant:
        headers["X-Scope-OrgID"] = source.tenant
    return headers


def basic_credentials(source: PrometheusSource) -> tuple[str, str] | None:
    """(user, password) from ``basic_auth``, else from ``user:password@`` in the URL."""
    auth = source.basic_auth
    if auth is not None:
        if auth.password_file is not None:
            return auth.username, _secret_file(auth.password_file, "basic_auth.password_file")
        assert auth.password is not None
        return auth.username, auth.password.get_secret_value()
    parts = urlsplit(source.url)
    if parts.username is not None:
        return unquote(parts.username), unquote(parts.password or "")
    return None


def ssl_context(source: PrometheusSource) -> ssl.SSLContext | bool:
    tls = source.tls
    if tls.ca_file is None and tls.cert_file is None and not tls.insecure_skip_verify:
        return True  # the system's trust store
    try:
        context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
        if tls.cert_file is not None and tls.key_file is not None:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    except (OSError, ssl.SSLError) as exc:
        raise PromError(f"tls: cannot load certificates ({getattr(exc, 'strerror', None) or exc})") from None
    if tls.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class PromClient:
    """``async with PromClient(source) as client: await client.query(...)``."""

    def __init__(self, source: PrometheusSource) -> None:
        self.source = source
        self.shown = redact(source.url.rstrip("/"))  # what messages name: never user:password@
        self.base = redact(source.url, mark=None).rstrip("/")  # credentials travel in the header only
        self.stats = QueryStats()
        self._headers = auth_headers(source)
        self._ssl = ssl_context(source)
        self._limit = asyncio.Semaphore(source.max_concurrency)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> PromClient:
        self._session = aiohttp.ClientSession(
            headers=self._headers,
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self.source.max_concurrency),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def query(self, expr: str, at: float) -> dict[str, Any]:
        """``/api/v1/query``: the ``data`` member (resultType and result)."""
        return await self._post("query", {"query": expr, "time": _ts(at)})

    async def query_range(self, expr: str, start: float, end: float, step: float) -> dict[str, Any]:
        if (end - start) / step > 11000:
            raise PromError(f"query_range of {(end - start) / step:.0f} points per series: Prometheus allows 11000; "
                            "split the range")
        return await self._post("query_range", {"query": expr, "start": _ts(start), "end": _ts(end),
                                                "step": f"{step:g}"})

    async def series(self, selector: str, start: float, end: float) -> list[dict[str, str]]:
        data = await self._post("series", {"match[]": selector, "start": _ts(start), "end": _ts(end)})
        return list(data) if isinstance(data, list) else []

    async def query_body(self, expr: str, at: float) -> bytes:
        """``/api/v1/query``'s answer undecoded, once it is known to start as a success (the central reader scans
        range-selector answers itself: :mod:`exporter.promsource.scan`); anything else fails as ``query`` does.
        The caller decodes the body with ``data`` where its scan does not vouch for it (warnings included)."""
        status, reason, body = await self._fetch("query", {"query": expr, "time": _ts(at)})
        if status != 200 or not body.startswith(b'{"status":"success"'):
            self._data("query", status, reason, body)  # raises, unless a success spelled with other spacing
        return body

    def data(self, endpoint: str, body: bytes) -> Any:
        """A successful answer's ``data`` member, its warnings counted (``query_body``'s fallback)."""
        return self._data(endpoint, 200, "", body)

    async def _post(self, endpoint: str, form: dict[str, str]) -> Any:
        return self._data(endpoint, *await self._fetch(endpoint, form))

    async def _fetch(self, endpoint: str, form: dict[str, str]) -> tuple[int, str, bytes]:
        assert self._session is not None, "use PromClient as an async context manager"
        url = f"{self.base}/api/v1/{endpoint}"
        async with self._limit:
            self.stats.queries += 1
            try:
                async with asyncio.timeout(self.source.timeout):
                    async with self._session.post(url, data=form, allow_redirects=False) as response:
                        body = await self._read(response)
                        status, reason = response.status, response.reason or ""
            except TimeoutError:
                raise PromError(f"{self.shown}: no answer within {self.source.timeout:g} s "
                                "(a smaller range, a longer timeout, or a less loaded store)") from None
            except aiohttp.ClientSSLError as exc:
                raise PromError(f"{self.shown}: TLS failed ({_ssl_reason(exc)}); check tls.ca_file or the client "
                                "certificate") from None
            except aiohttp.ClientError as exc:
                raise PromError(f"{self.shown}: cannot connect ({_client_reason(exc)})") from None
        self.stats.bytes_read += len(body)
        return status, reason, body

    def _data(self, endpoint: str, status: int, reason: str, body: bytes) -> Any:
        payload = _json(body)
        if status != 200 or payload is None or payload.get("status") != "success":
            raise PromError(_api_error(self.shown, endpoint, status, reason, payload, body))
        for warning in payload.get("warnings") or ():
            self.stats.warn(f"{endpoint}: {' '.join(str(warning).split())}")  # e.g. Thanos partial response
        return payload.get("data")

    @staticmethod
    async def _read(response: aiohttp.ClientResponse) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(1 << 16):
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise PromError(f"answer larger than {MAX_RESPONSE_BYTES >> 20} MiB: narrow --match or the range")
            chunks.append(chunk)
        return b"".join(chunks)


def _ts(value: float) -> str:
    return f"{value:.3f}"


def _json(body: bytes) -> dict[str, Any] | None:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def _api_error(shown: str, endpoint: str, status: int, reason: str, payload: dict[str, Any] | None,
               body: bytes) -> str:
    if payload is not None and payload.get("status") == "error":
        kind = payload.get("errorType") or "error"
        message = " ".join(str(payload.get("error", "")).split())[:300]
        hint = "; fix the selector (--match)" if kind == "bad_data" else ""
        return f"{shown}: {endpoint} failed ({kind}): {message}{hint}"
    hint = HINTS.get(status, "is this a Prometheus-compatible API?")
    if status == 200:
        return f"{shown}: {endpoint} answered 200 without a Prometheus API response; {hint}"
    return f"{shown}: {endpoint} answered HTTP {status} {reason}; {hint}"


def _client_reason(exc: aiohttp.ClientError) -> str:
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror
    return type(exc).__name__


def _ssl_reason(exc: aiohttp.ClientSSLError) -> str:
    inner = getattr(exc, "certificate_error", None) or getattr(exc, "os_error", None)
    return getattr(inner, "reason", None) or getattr(inner, "verify_message", None) or type(exc).__name__
