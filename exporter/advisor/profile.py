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
from exporter.catalog import metrics as vllm
from exporter.parse import parse
from exporter.pipeline import COUNTERS
from exporter.window import Window

FORMAT = 1


@dataclass(frozen=True, slots=True)
class Phase:
    clients: int  # closed-loop clients, no think time
    prompt_share: float  # prompt length as a share of the engine's max_model_len (at least 8 tokens)
    max_tokens: int


# Steps of different make-up: one decode, a batch of decodes, long prompts beside a few decodes, a mix.
PHASES: tuple[Phase, ...] = (Phase(1, 0.0, 96), Phase(4, 0.0, 96), Phase(12, 0.0, 96), Phase(2, 0.6, 8),
                             Phase(6, 0.25, 48))
MIN_PROMPT_TOKENS = 8
FAILED_SHARE = 0.5  # more requests refused than this: the sweep stops and says why
WORDS = tuple(f"w{i}" for i in range(4096))  # random words: no two prompts share a cached prefix


class ProfileError(Exception):
    """The engine cannot be profiled (unreachable, no model, no step metrics): one line saying why."""


async def _model(session: aiohttp.ClientSession, base: str) -> tuple[str, int]:
    """The served model's name and its max_model_len (vLLM's /v1/models says both; 2048 when it does not)."""
    async with session.get(f"{base}/v1/models") as response:
        if response.status != 200:
            raise ProfileError(f"{base}/v1/models answered HTTP {response.status}")
        data = await response.json()
    models = [m for m in data.get("data", []) if m.get("id")]
    if not models:
        raise ProfileError(f"{base}/v1/models lists no model")
    return str(models[0]["id"]), int(models[0].get("max_model_len") or 2048)


async def _tokens_per_word(session: aiohttp.ClientSession, base: str, model: str) -> float:
    """Tokens a random word takes (vLLM's /tokenize); 3 when the server has no such endpoint."""
    sample = " ".join(WORDS[i * 37 % len(WORDS)] for i in range(200))
    try:
        async with session.post(f"{base}/tokenize", json={"model": model, "prompt": sample}) as response:
            if response.status == 200:
                count = (await response.json()).get("count")
                if count:
                    return float(count) / 200
    except (aiohttp.ClientError, TimeoutError, ValueError):
        pass
    return 3.0


async def _client(session: aiohttp.ClientSession, base: str, model: str, words: int, phase: Phase,
                  stop_at: float, rng: random.Random, done: list[str]) -> None:
    while time.monotonic() < stop_at:
        prompt = " ".join(rng.choice(WORDS) for _ in range(words))
        payload = {"model": model, "prompt": prompt, "max_tokens": phase.max_tokens, "ignore_eos": True,
                   "temperature": 0.0}
        try:
            async with session.post(f"{base}/v1/completions", json=payload) as response:
                body = await response.read()
                done.append("" if response.status == 200 else
                            f"HTTP {response.status}: {body[:160].decode('utf-8', 'replace')}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            done.append(f"{type(exc).__name__}: {exc}")
        if done[-1]:
            await asyncio.sleep(0.5)  # a refusal is not retried at full speed


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
    done: list[str] = []  # per request: "" when it finished, else why not
    timeout = aiohttp.ClientTimeout(total=max(60.0, seconds * 3))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            model, max_model_len = await _model(session, base)
        except aiohttp.ClientError as exc:
            raise ProfileError(f"{base}: {exc}") from None
        per_word = await _tokens_per_word(session, base, model)
        per_phase = []
        for phase in phases:
            tokens = max(MIN_PROMPT_TOKENS, int(phase.prompt_share * max_model_len))
            tokens = min(tokens, max_model_len - phase.max_tokens - 16)  # room for the output and the template
            words = max(1, int(tokens / per_word))
            window = Window(seconds * 4, COUNTERS)
            stop_at = time.monotonic() + seconds
            clients = [asyncio.create_task(_client(session, base, model, words, phase, stop_at, rng, done))
                       for _ in range(phase.clients)]
            await asyncio.sleep(min(interval, seconds / 4))  # the first steps, before the first scrape
            while time.monotonic() < stop_at:
                await _scrape(session, metrics_url, window)
                await asyncio.sleep(interval)
            await asyncio.gather(*clients)
            failed = [why for why in done if why]
            if len(failed) > FAILED_SHARE * len(done):
                raise ProfileError(f"the engine refused {len(failed)} of {len(done)} requests ({failed[0]})")
            found = rows(window)
            per_phase.append({**asdict(phase), "prompt_words": words, "intervals": len(found)})
            all_rows += found
    if not all_rows:
        raise ProfileError(f"{metrics_url}: no interval with engine steps and token gaps (is it vLLM, with "
                           f"{vllm.ITERATION_TOKENS_TOTAL} and {vllm.INTER_TOKEN_LATENCY_SECONDS}?)")
    evidence = fit(all_rows)
    return {"format": FORMAT, "url": base, "model": model, "measured_at": time.time(), "seconds_per_phase": seconds,
            "max_model_len": max_model_len, "phases": per_phase, "requests": len(done),
            "failed_requests": sum(1 for why in done if why),
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
