"""Project-owned harness for a REAL vLLM (CPU build) serving a tiny local model: the test suite's
load phases, on the engine and streaming client of tests/realvllm/engine.py (shared with
``python -m lab.advisor``).

Imported by pytest in the PROJECT venv (aiohttp, no vllm/torch): vLLM runs from its own venv
(made by install.sh) as a subprocess, and this module only talks HTTP to it on 127.0.0.1.

    with RealVLLM() as vllm:
        summary = asyncio.run(run_phase(vllm.base_url, "pressure", duration_s=40))
        text = vllm.fetch_metrics()
"""

from __future__ import annotations

import asyncio
import math
import random
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import aiohttp

from tests.realvllm.engine import (
    INSTALL_SH,
    RealVLLM,
    RequestResult,
    _assert_loopback,
    descendant_pids,
    fetch_metrics_async,
    free_port,
    make_text,
    model_dir,
    one_request,
    pid_alive,
    tokens_per_word,
    unavailable_reason,
    vllm_available,
    vllm_venv,
)

_install_lock = threading.Lock()
_install_done = False


def ensure_installed(timeout_s: float = 1800.0) -> None:
    """Run install.sh once per process (it is idempotent and fast when already installed)."""
    global _install_done
    with _install_lock:
        if _install_done:
            return
        proc = subprocess.run(
            ["bash", str(INSTALL_SH)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-40:])
            raise RuntimeError(f"{INSTALL_SH} failed (exit {proc.returncode}):\n{tail}")
        _install_done = True


async def scrape_until(
    metrics_url: str,
    done: asyncio.Future[Any] | asyncio.Task[Any],
    *,
    interval_s: float = 0.5,
    max_s: float = 600.0,
    on_scrape: Callable[[float, str], Awaitable[None] | None] | None = None,
) -> list[tuple[float, str]]:
    """Scrape /metrics every interval_s until `done` finishes (or max_s); returns (t, text) pairs."""
    out: list[tuple[float, str]] = []
    t0 = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        while True:
            finished = done.done()
            text = await fetch_metrics_async(metrics_url, session)
            t = time.monotonic() - t0
            out.append((t, text))
            if on_scrape is not None:
                res = on_scrape(t, text)
                if asyncio.iscoroutine(res):
                    await res
            if finished or t > max_s:
                return out
            # asyncio.wait neither raises the load's exception nor cancels it; the caller
            # awaits `done` itself.
            await asyncio.wait({done}, timeout=interval_s)


# --------------------------------------------------------------------------------------------
# Load generator
# --------------------------------------------------------------------------------------------


@dataclass
class LoadSummary:
    phase: str
    sent: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    elapsed_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    max_prompt_tokens: int = 0
    mean_ttft_s: float | None = None
    mean_latency_s: float | None = None
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def run_load(
    base_url: str,
    *,
    requests: int | None,
    concurrency: int,
    prompt_tokens: int | tuple[int, int],
    max_tokens: int,
    shared_prefix_tokens: int = 0,
    duration_s: float | None = None,
    timeout: float = 300.0,
    seed: int = 0,
    phase: str = "custom",
    rate: float | None = None,
) -> LoadSummary:
    """Stream /v1/completions from `concurrency` workers.

    With `rate` (requests/s) the load is open: requests are issued at Poisson arrival times (seeded),
    `concurrency` only caps how many are in flight; without it each worker sends its next request as
    soon as its last one ends (a closed loop).

    Stops issuing requests after `requests` requests (None: no count limit) or, if given, once
    `duration_s` has passed; everything is cut at `timeout` seconds (outstanding requests are
    cancelled and counted in `cancelled`). `prompt_tokens` is the unique part of each prompt
    (an int, or an inclusive (lo, hi) range drawn per request); `shared_prefix_tokens` of
    identical text come before it. Token counts are calibrated against the server's /tokenize.
    """
    _assert_loopback(base_url)
    if requests is None and duration_s is None:
        raise ValueError("run_load needs a request count or a duration: it must be bounded")
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    summary = LoadSummary(phase=phase)
    results: list[RequestResult] = []
    t0 = time.monotonic()
    stop_issuing_at = t0 + min(duration_s if duration_s is not None else math.inf, timeout)
    counter = 0
    # One connection per request (force_close): reusing keep-alive connections races with the
    # server closing idle ones when it is CPU-starved, which showed up as ServerDisconnectedError.
    connector = aiohttp.TCPConnector(limit=concurrency + 2, force_close=True)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=10)
    ) as session:
        ratio = await tokens_per_word(base_url, session)
        prefix = make_text(shared_prefix_tokens, random.Random(f"prefix-{seed}"), ratio) if shared_prefix_tokens else ""

        def next_prompt() -> str | None:
            nonlocal counter
            if requests is not None and counter >= requests:
                return None
            if time.monotonic() >= stop_issuing_at:
                return None
            i = counter
            counter += 1
            rng = random.Random(f"{phase}-{seed}-{i}")
            n = prompt_tokens if isinstance(prompt_tokens, int) else rng.randint(*prompt_tokens)
            return prefix + make_text(n, rng, ratio)

        arrivals = random.Random(f"{phase}-{seed}-arrivals")
        next_arrival = t0

        async def worker() -> None:
            nonlocal next_arrival
            while True:
                if rate is not None:
                    # Claimed before the await: one arrival per worker turn, in order.
                    at, next_arrival = next_arrival, next_arrival + arrivals.expovariate(rate)
                    await asyncio.sleep(max(0.0, at - time.monotonic()))
                if (prompt := next_prompt()) is None:
                    return
                summary.sent += 1
                results.append(await one_request(session, base_url, prompt, max_tokens))

        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, t0 + timeout - time.monotonic()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    summary.elapsed_s = time.monotonic() - t0
    summary.completed = sum(r.ok for r in results)
    summary.failed = sum(not r.ok for r in results)
    summary.cancelled = summary.sent - len(results)
    summary.prompt_tokens = sum(r.prompt_tokens for r in results)
    summary.completion_tokens = sum(r.completion_tokens for r in results)
    summary.max_prompt_tokens = max((r.prompt_tokens for r in results), default=0)
    ttfts = [r.ttft_s for r in results if r.ttft_s is not None]
    summary.mean_ttft_s = sum(ttfts) / len(ttfts) if ttfts else None
    lat = [r.latency_s for r in results if r.ok]
    summary.mean_latency_s = sum(lat) / len(lat) if lat else None
    summary.errors = [r.error for r in results if r.error][:10]
    return summary


# --------------------------------------------------------------------------------------------
# Phase presets
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    name: str
    requests: int | None
    concurrency: int
    prompt_tokens: int | tuple[int, int]
    max_tokens: int
    shared_prefix_tokens: int = 0
    rate: float | None = None  # requests/s of an open load (Poisson arrivals); None: closed-loop workers


PHASES: dict[str, Phase] = {
    # light load: nothing saturated
    "steady": Phase("steady", requests=40, concurrency=4, prompt_tokens=(30, 80), max_tokens=32),
    # one stream at a time (a couple of requests/s here): within any SLO, too sparse to form batches
    "light": Phase("light", requests=20, concurrency=1, prompt_tokens=(30, 80), max_tokens=32),
    # a light open load: Poisson arrivals at 1 request/s, so requests sometimes overlap and batch, as
    # users' requests do (a closed single stream only slows down evenly when the host is busy)
    "open-light": Phase("open-light", requests=None, concurrency=8, prompt_tokens=(30, 80), max_tokens=64,
                        rate=1.0),
    # RAG-like: a short shared system prompt (64 tokens = 2 KV blocks of 32) before a unique
    # ~600-token "document" per request; 2 streams keep 2 x ~700 KV tokens well inside the cache
    "rag": Phase("rag", requests=16, concurrency=2, prompt_tokens=(560, 640), max_tokens=32,
                 shared_prefix_tokens=64),
    # shared ~430-token system prompt + 20 unique tokens: most prompt blocks hit the prefix cache
    "prefix": Phase("prefix", requests=40, concurrency=4, prompt_tokens=20, max_tokens=16, shared_prefix_tokens=430),
    # 900-token prompts > max-num-batched-tokens 128: every prefill is chunked
    "chunked": Phase("chunked", requests=8, concurrency=2, prompt_tokens=900, max_tokens=8),
    # 24 concurrent > max-num-seqs 16, ~600 KV tokens each (> 3072-token cache): waiting queue,
    # KV usage 1.0, preemptions
    "pressure": Phase("pressure", requests=48, concurrency=24, prompt_tokens=200, max_tokens=400),
}


async def run_phase(
    base_url: str,
    name: str,
    *,
    duration_s: float | None = None,
    timeout: float = 300.0,
    seed: int = 0,
    **overrides: Any,
) -> LoadSummary:
    """Run a preset from PHASES. With duration_s, requests keep being issued until then
    (the preset's count no longer limits), so a condition holds over many scrapes."""
    phase = replace(PHASES[name], **overrides)
    requests = phase.requests if duration_s is None else overrides.get("requests")
    return await run_load(
        base_url,
        requests=requests,
        concurrency=phase.concurrency,
        prompt_tokens=phase.prompt_tokens,
        max_tokens=phase.max_tokens,
        shared_prefix_tokens=phase.shared_prefix_tokens,
        duration_s=duration_s,
        # A sustained phase gets room to drain after it stops issuing requests.
        timeout=timeout if duration_s is None else max(timeout, duration_s + 120.0),
        seed=seed,
        phase=name,
        rate=phase.rate,
    )


def start_phase(base_url: str, name: str, **kwargs: Any) -> asyncio.Task[LoadSummary]:
    """run_phase as a background task in the running loop, so a test can scrape meanwhile."""
    return asyncio.create_task(run_phase(base_url, name, **kwargs), name=f"realvllm-load-{name}")


async def steady(base_url: str, **kwargs: Any) -> LoadSummary:
    return await run_phase(base_url, "steady", **kwargs)


async def prefix(base_url: str, **kwargs: Any) -> LoadSummary:
    return await run_phase(base_url, "prefix", **kwargs)


async def chunked(base_url: str, **kwargs: Any) -> LoadSummary:
    return await run_phase(base_url, "chunked", **kwargs)


async def pressure(base_url: str, **kwargs: Any) -> LoadSummary:
    return await run_phase(base_url, "pressure", **kwargs)


async def light(base_url: str, **kwargs: Any) -> LoadSummary:
    return await run_phase(base_url, "light", **kwargs)


async def rag(base_url: str, **kwargs: Any) -> LoadSummary:
    return await run_phase(base_url, "rag", **kwargs)


__all__ = [
    "PHASES",
    "INSTALL_SH",
    "LoadSummary",
    "Phase",
    "RealVLLM",
    "chunked",
    "descendant_pids",
    "ensure_installed",
    "fetch_metrics_async",
    "free_port",
    "light",
    "make_text",
    "model_dir",
    "pid_alive",
    "prefix",
    "pressure",
    "rag",
    "run_load",
    "run_phase",
    "scrape_until",
    "start_phase",
    "steady",
    "tokens_per_word",
    "unavailable_reason",
    "vllm_available",
    "vllm_venv",
]
