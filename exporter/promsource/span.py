"""``diagnose --prometheus``: find the targets of a span, read each one's raw series in chunks,
and judge it at every step (``history.SpanJudge``).

Queries per run: one ``series`` call to find the targets, then per target one range-selector
query per chunk of at most ``chunk_seconds``; at most ``max_concurrency`` run at once.
"""

from __future__ import annotations

import asyncio
import fnmatch
import math
from dataclasses import dataclass
from typing import Any

from exporter.config import Settings, Target
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.promsource.client import PromClient, PromError
from exporter.promsource.history import SpanJudge
from exporter.promsource.rebuild import DISCOVERY_NAMES, WIRE_NAMES, TargetKey, scrapes, selector, targets
from exporter.promsource.settings import PrometheusSource
from exporter.promsource.timespec import iso
from exporter.publish.timeline import NO_DATA, StepVerdict
from exporter.state import TargetState

# The window keeps the newest scrape at or before its horizon (so it spans the whole window):
# read this much more than the window before the first step.
LEAD_SECONDS = 120.0


def target_for(settings: Settings, name: str, source: PrometheusSource, interval: float) -> Target:
    """A pipeline target for a discovered name: engine facts and SLOs of the config target whose
    name matches it (exact, else a glob such as ``vllm-*``), else a bare one."""
    configured = next((t for t in settings.targets if t.name == name), None) or next(
        (t for t in settings.targets if fnmatch.fnmatchcase(name, t.name)), None)
    fields: dict[str, Any] = configured.model_dump() if configured is not None else {}
    fields.update(name=name, url=source.url, scrape_interval=interval, record_dir=None, discover=False, cpu=None,
                  dcgm_url=None, timeout=min(fields.get("timeout", 3.0), interval))
    return Target(**fields)


async def discover(client: PromClient, source: PrometheusSource, start: float, end: float) -> list[TargetKey]:
    found = await client.series(selector(source.match, DISCOVERY_NAMES), start, end)
    return targets(found, source.target_labels)


async def read_scrapes(client: PromClient, source: PrometheusSource, key: TargetKey, start: float, end: float,
                       after: float | None = None) -> list[tuple[float, str]]:
    """Every scrape of one target in ``(start, end]``, oldest first, read in chunks."""
    expr = selector(source.match, WIRE_NAMES, dict(key.labels))
    out: list[tuple[float, str]] = []
    last = after if after is not None else start
    chunk_start = start
    while chunk_start < end:
        chunk_end = min(end, chunk_start + source.chunk_seconds)
        millis = max(1, math.ceil((chunk_end - chunk_start) * 1000))
        data = await client.query(f"{expr}[{millis}ms]", chunk_end)
        if data.get("resultType") != "matrix":
            raise PromError(f"{client.shown}: expected a matrix for a range selector, got {data.get('resultType')}")
        found = scrapes(data.get("result") or [], after=last)
        out += found
        if found:
            last = found[-1][0]
        chunk_start = chunk_end
    return out


@dataclass
class TargetSpan:
    key: TargetKey
    steps: list[StepVerdict]
    final_state: TargetState  # at the last step: the full report of `diagnose --at`
    scrapes: int
    pipeline: TargetPipeline | None = None  # its window at the last step (`advise --prometheus --at`)


def evaluation_steps(start: float, end: float, step: float) -> list[float]:
    count = int(math.floor((end - start) / step + 1e-9))
    return [start + i * step for i in range(count + 1)]


async def judge_span(client: PromClient, source: PrometheusSource, settings: Settings, start: float, end: float,
                     step: float) -> list[TargetSpan]:
    """Judge every target matching the selector at each step from ``start`` to ``end``."""
    window = settings.window_seconds
    read_from = start - window - LEAD_SECONDS
    keys = await discover(client, source, read_from, end)
    if not keys:
        raise PromError(f"{client.shown}: no vLLM series match {source.match} between "
                        f"{iso(read_from)} and {iso(end)} (check --match and the times)")
    steps = evaluation_steps(start, end, step)

    staleness = min(source.staleness_seconds, window)
    limit = asyncio.Semaphore(source.max_concurrency)  # targets in flight: bounds memory, not only queries

    async def one(key: TargetKey) -> TargetSpan:
        async with limit:
            pipeline = TargetPipeline(target_for(settings, key.name, source, min(step, window / 2, 3600.0)), settings)
            judge = SpanJudge(pipeline, steps, staleness)
            fed = 0
            chunk_start = read_from
            while chunk_start < end:  # chunk by chunk: memory holds one chunk and one window
                chunk_end = min(end, chunk_start + source.chunk_seconds)
                found = await read_scrapes(client, source, key, chunk_start, chunk_end, after=judge.latest)
                judge.feed(found, until=chunk_end)
                fed += len(found)
                chunk_start = chunk_end
            judge.feed((), until=end)
            final = judge.last_state
            if final is None or judge.results[-1].state == NO_DATA:
                why = f"no samples in the store within {staleness:g} s before {iso(end)}"
                final = pipeline.ingest(ScrapeResult(started_at=end, duration=0.0, error_reason="connect", error=why))
            return TargetSpan(key, judge.results, final, fed, pipeline)

    return list(await asyncio.gather(*(one(key) for key in keys)))
