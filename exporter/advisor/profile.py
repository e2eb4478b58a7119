"""``vllm-diag profile URL``: the engine's step cost measured by a short sweep, kept on disk for the advisor.

Most serving windows cannot split a step's cost into its fixed, per-prefill-token and per-decode parts:
their steps are all about one size (``stepcost``). A sweep can: it runs a few phases of closed-loop
requests whose steps differ on purpose (a few decodes, many decodes, long prompts beside them), scrapes
``/metrics`` every ``interval`` seconds and fits the same equation over every interval of every phase.
The file it writes (JSON: the engine's URL, model, when, each interval's row, the fitted evidence) is
read by ``vllm-diag advise --profile FILE`` and by the sidecar (a target's ``step_profile``); the advisor
takes a window's own reading first, the profile's where the window does not identify the split, and the
prior (``advice_decode_token_weight``) where neither does.

The sweep sends load: run it against an engine out of service (a canary, a replica drained from the
load balancer), never one serving users. It is bounded: ``len(PHASES) x seconds`` plus the requests in
flight at each phase's end.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from exporter.advisor.stepcost import StepEvidence, fit, rows
from exporter.parse import parse
from exporter.pipeline import COUNTERS
from exporter.window import Window

FORMAT = 1


@dataclass(frozen=True, slots=True)
class Phase:
    clients: int  # closed-loop clients, no think time
    prompt_words: int  # words of random text per prompt (a word is one to three tokens)
    max_tokens: int


# Steps of different make-up: one decode, a batch of decodes, long prompts beside a few decodes, a mix.
PHASES: tuple[Phase, ...] = (Phase(1, 8, 96), Phase(4, 8, 96), Phase(12, 8, 96), Phase(2, 400, 8),
                             Phase(6, 150, 48))
WORDS = tuple(f"w{i}" for i in range(4096))  # random words: no two prompts share a cached prefix


class ProfileError(Exception):
    """The engine cannot be profiled (unreachable, no model, no step metrics): one line saying why."""


async def _model(session: aiohttp.ClientSession, base: str) -> str:
    async with session.get(f"{base}/v1/models") as response:
        if response.status != 200:
            raise ProfileError(f"{base}/v1/models answered HTTP {response.status}")
        data = await response.json()
    models = [m.get("id") for m in data.get("data", []) if m.get("id")]
    if not models:
        raise ProfileError(f"{base}/v1/models lists no model")
    return str(models[0])


async def _client(session: aiohttp.ClientSession, base: str, model: str, phase: Phase, stop_at: float,
                  rng: random.Random, failures: list[str]) -> None:
    while time.monotonic() < stop_at:
        prompt = " ".join(rng.choice(WORDS) for _ in range(phase.prompt_words))
        payload = {"model": model, "prompt": prompt, "max_tokens": phase.max_tokens, "ignore_eos": True,
                   "temperature": 0.0}
        try:
            async with session.post(f"{base}/v1/completions", json=payload) as response:
                await response.read()
                if response.status != 200:
                    failures.append(f"HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            failures.append(type(exc).__name__)
            await asyncio.sleep(0.5)


async def _scrape(session: aiohttp.ClientSession, metrics_url: str, window: Window) -> None:
    async with session.get(metrics_url) as response:
        if response.status != 200:
            raise ProfileError(f"{metrics_url} answered HTTP {response.status}")
        window.push(parse(await response.text(), time.time()))


async def sweep(base: str, seconds: float = 20.0, interval: float = 2.0, seed: int = 0,
                phases: tuple[Phase, ...] = PHASES) -> dict[str, Any]:
    """Run the phases against ``base`` (the engine's http://host:port) and fit the step cost over them."""
    base = base.rstrip("/").removesuffix("/metrics")
    metrics_url = f"{base}/metrics"
    rng = random.Random(seed)
    all_rows: list[tuple[float, float, float, float]] = []
    failures: list[str] = []
    timeout = aiohttp.ClientTimeout(total=max(60.0, seconds * 3))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            model = await _model(session, base)
        except aiohttp.ClientError as exc:
            raise ProfileError(f"{base}: {exc}") from None
        per_phase = []
        for phase in phases:
            window = Window(seconds * 4, COUNTERS)
            stop_at = time.monotonic() + seconds
            clients = [asyncio.create_task(_client(session, base, model, phase, stop_at, rng, failures))
                       for _ in range(phase.clients)]
            await asyncio.sleep(min(interval, seconds / 4))  # the first steps, before the first scrape
            while time.monotonic() < stop_at:
                await _scrape(session, metrics_url, window)
                await asyncio.sleep(interval)
            await asyncio.gather(*clients)
            found = rows(window)
            per_phase.append({**asdict(phase), "intervals": len(found)})
            all_rows += found
    if not all_rows:
        raise ProfileError(f"{metrics_url}: no interval with engine steps and token gaps (is it vLLM, with "
                           "vllm:iteration_tokens_total and vllm:inter_token_latency_seconds?)")
    evidence = fit(all_rows)
    return {"format": FORMAT, "url": base, "model": model, "measured_at": time.time(), "seconds_per_phase": seconds,
            "phases": per_phase, "failed_requests": len(failures),
            "rows": [[round(v, 9) for v in r] for r in all_rows], "evidence": evidence.to_dict()}


def load(path: Path) -> StepEvidence:
    """The step cost a profile file holds; ProfileError when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{path}: not a readable profile ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("evidence"), dict):
        raise ProfileError(f"{path}: not a vllm-diag profile (format {FORMAT}); run `vllm-diag profile URL --out FILE`")
    return StepEvidence.from_dict(data["evidence"])
