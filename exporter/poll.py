"""Fetch one target's /metrics: aiohttp, a timeout, a payload cap, gzip accepted.

Only I/O lives here. Failures come back as a reason from a closed set (timeout, http,
too_large, connect) with a one-line message, never as an exception.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp

from exporter.config import redact

ACCEPT = "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    started_at: float  # unix time the scrape began: the snapshot's timestamp
    duration: float
    body: bytes | None = None
    error_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.body is not None


async def fetch(
    session: aiohttp.ClientSession, url: str, *, timeout: float, max_bytes: int, user_agent: str = "vllm-diag"
) -> ScrapeResult:
    started = time.time()
    clock = time.perf_counter()

    shown = redact(url)  # credentials in a target URL never reach a log line or an error message

    def failed(reason: str, message: str) -> ScrapeResult:
        return ScrapeResult(started, time.perf_counter() - clock, error_reason=reason, error=message)

    try:
        async with asyncio.timeout(timeout):
            async with session.get(
                url,
                headers={"Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": user_agent},
                allow_redirects=False,
            ) as response:
                if response.status != 200:
                    return failed("http", f"HTTP {response.status} from {shown}")
                declared = response.content_length
                if declared is not None and declared > max_bytes:
                    return failed("too_large", f"payload of {declared} bytes exceeds the {max_bytes}-byte cap")
                chunks: list[bytes] = []
                size = 0
                # Decompressed bytes are counted, so a small gzip bomb cannot exhaust memory.
                async for chunk in response.content.iter_chunked(65536):
                    size += len(chunk)
                    if size > max_bytes:
                        return failed("too_large", f"payload exceeds the {max_bytes}-byte cap")
                    chunks.append(chunk)
                return ScrapeResult(started, time.perf_counter() - clock, body=b"".join(chunks))
    except TimeoutError:
        return failed("timeout", f"no complete answer from {shown} within {timeout:g}s")
    except aiohttp.ClientConnectorError as exc:
        return failed("connect", f"cannot connect to {shown}: {exc.os_error or type(exc).__name__}")
    except (aiohttp.ClientPayloadError, aiohttp.ClientResponseError) as exc:
        return failed("http", f"bad HTTP response from {shown}: {type(exc).__name__}")
    except aiohttp.ClientError as exc:
        return failed("connect", f"{type(exc).__name__} talking to {shown}")
