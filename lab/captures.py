"""A real engine's ``/metrics`` captured as the sidecar's ``record_dir`` writes it, and judged as one window
(the speculative-decoding, disaggregation and feature checks on the real vLLM)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from exporter.state import TargetState
from tests.realvllm.engine import fetch_metrics_async


async def capture_every(metrics_url: str, out: Path, stop: asyncio.Event, name: str, interval_s: float) -> int:
    """Capture ``/metrics`` every ``interval_s`` into ``out/<name>-NNNNN.txt`` (the sidecar's capture format)
    until ``stop`` is set, one last capture after it; returns the count."""
    from exporter.record import CAPTURE_HEADER

    out.mkdir(parents=True, exist_ok=True)
    count = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        while True:
            started = time.time()
            text = await fetch_metrics_async(metrics_url, session)
            (out / f"{name}-{count:05d}.txt").write_text(f"{CAPTURE_HEADER} target={name} scraped_at={started!r}\n"
                                                         + text)
            count += 1
            if stop.is_set():
                return count
            await asyncio.sleep(max(0.0, interval_s - (time.time() - started)))


def judge_captures(directory: Path, name: str, interval_s: float, slo: Mapping[str, Any]) -> TargetState:
    """The captures of ``capture_every`` judged as one window at the shipped defaults, with objectives ``slo``."""
    from exporter.config import load_settings
    from exporter.pipeline import TargetPipeline, replay

    files = sorted(directory.glob(f"{name}-*.txt"))

    def scraped_at(path: Path) -> float:
        return float(path.read_text().split("scraped_at=", 1)[1].split()[0])

    settings = load_settings(overrides={
        "listen": "127.0.0.1:1", "window_seconds": int(scraped_at(files[-1]) - scraped_at(files[0])) + 10,
        "slo": dict(slo), "targets": [{"name": name, "url": "http://127.0.0.1:1/metrics"}],
    })
    return replay(files, TargetPipeline(settings.targets[0], settings), interval_s)
