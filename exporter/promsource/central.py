"""``serve --prometheus``: one diagnoser for every vLLM server whose series a store holds.

Each cycle (every ``interval`` seconds, never two at once):

1. one instant query lists the targets that have a vLLM sample now
   (``group by (<target labels>) (...)``), and the shard keeps its own (``--shard i/N``: hashmod of
   the target labels, :mod:`exporter.promsource.batch`);
2. one range-selector query per family reads, for all the shard's targets at once, only the scrapes
   since the oldest one a target has fed, at most ``max_concurrency`` in flight; from 200 targets on, in
   2, 5 or 10 parts of the targets (``batch.split_read``), each part's queries sent while the part before
   is evaluated, so the store's work and the diagnoser's overlap instead of taking turns; targets new to
   the diagnoser get a second read of one window (narrowed to them with one target label; in parts of
   ``COLD_READ_TARGETS`` targets, each fed before the next is read, so a cold start over thousands of
   targets holds one part's numbers and no answer outgrows a store's limits);
3. each answer is scanned as bytes into compact series as it arrives (:mod:`exporter.promsource.scan`), each
   target's scrapes built into snapshots and fed to its pipeline (the sidecar's, window and hysteresis
   included), which is evaluated once, as soon as its part is read.

So a cycle costs 1 + one query per family and part (10 parts from 1,000 targets: 501 queries; twice the
families' when targets arrive), whatever the number of targets beyond that, and reads each stored sample
about once. Memory is one window per target, at most
``max_targets`` targets; a target without samples reads as down and is dropped after
``grace_seconds``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.config import Settings
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.promsource.batch import owned, parts_for, read_families, split_read
from exporter.promsource.client import PromClient, PromError
from exporter.promsource.rebuild import DISCOVERY_NAMES, TargetKey, selector
from exporter.promsource.scan import Layouts
from exporter.promsource.settings import PrometheusSource
from exporter.promsource.span import LEAD_SECONDS, target_for
from exporter.promsource.stored import Steady, StoredSeries, snapshots
from exporter.publish.exported import CENTRAL_EXPORTED
from exporter.server import SIDECAR, Sidecar, create_app
from exporter.snapshot import Snapshot
from exporter.state import TargetState

log = logging.getLogger(__name__)

# Targets whose whole window one read brings (a cold cycle): more are read in as many time slices.
COLD_READ_TARGETS = 1000
# Seconds of feeding and judging between two turns of the event loop in a cycle. Each turn moves the next part's
# queries one step (a query sent, an answer's bytes taken, the next query sent once one is done): a few turns a
# query, so they come often enough that the store rarely waits for its next query (a turn costs microseconds).
YIELD_SECONDS = 0.002
# Cycles between full collections of the garbage collector (an hour at 15 s; see CentralDiagnoser.cycle).
FULL_COLLECTION_CYCLES = 240


@dataclass
class CycleStats:
    """What the last cycle cost: for /metrics, the page and the fleet benchmark."""

    started_at: float = 0.0
    duration_seconds: float = 0.0
    queries: int = 0
    bytes_read: int = 0
    targets: int = 0
    diagnosed: int = 0
    error: str | None = None


@dataclass
class _Read:
    """One read of a cycle: the targets its answers are filed for and the matchers that ask for them, the span,
    each target's newest scrape fed before the cycle, and the targets judged once it is fed (their last read)."""

    keys: list[TargetKey]
    narrowings: list[str] | None  # None: batch.read_families works them out (``everything``: none needed)
    start: float
    end: float
    since: dict[TargetKey, float | None]
    judged: list[TargetKey]
    everything: bool


class CentralDiagnoser(Sidecar):
    """A :class:`Sidecar` whose targets come and go with the series in a Prometheus-compatible store."""

    pause_collector = True  # the cyclic garbage collector waits during a cycle (see cycle)

    def __init__(self, settings: Settings, source: PrometheusSource) -> None:
        # The configured targets only lend engine facts and SLOs by name: nothing polls them.
        super().__init__(settings.model_copy(update={"targets": []}))
        self.configured = settings
        self.source = source
        self.keys: dict[str, TargetKey] = {}
        self.last_seen: dict[str, float] = {}
        self.last_cycle = CycleStats()
        self.cycles_total = 0
        self.queries_total = 0
        self.bytes_read_total = 0
        self.errors_total = 0
        self.dropped_targets_total = 0
        self.fleet_targets = 0  # targets the store holds, every shard's
        self.registry.register(_CentralCollector(self))
        self.client: PromClient | None = None
        self.layouts = Layouts()  # each query's steady answer worked out, and a read's joined (scan.py)
        self.paused_cycles = 0  # cycles run with the collector paused (see cycle)

    def pending(self) -> list[str]:
        return [] if self.cycles_total else ["the first cycle against the store"]

    def _pipeline(self, key: TargetKey) -> TargetPipeline:
        pipeline = self.pipelines.get(key.name)
        if pipeline is None:
            target = target_for(self.configured, key.name, self.source, self.source.interval)
            pipeline = self.pipelines[key.name] = TargetPipeline(target, self.settings)
            self.keys[key.name] = key
        return pipeline

    async def discover(self, client: PromClient, now: float) -> list[TargetKey]:
        by = ", ".join(self.source.target_labels)
        data = await client.query(f"group by ({by}) ({selector(self.source.match, DISCOVERY_NAMES)})", now)
        found = sorted({TargetKey.of(item.get("metric", {}), self.source.target_labels)
                        for item in data.get("result") or []}, key=lambda k: k.name)
        keys = owned(found, self.source.shard, self.source.shards)
        self.fleet_targets = len(found)
        if len(keys) > self.source.max_targets:
            log.warning("%d targets match %s; diagnosing the first %d (max_targets)", len(keys), self.source.match,
                        self.source.max_targets)
        return keys[:self.source.max_targets]

    async def cycle(self, now: float | None = None) -> CycleStats:
        """Discover, read what is new for every target, evaluate; store errors never raise.

        ``now`` defaults to the wall clock; the fleet benchmark replays stored time with it.
        """
        # A cycle allocates millions of short-lived objects (decoded answers, snapshots) beside the long-lived
        # windows of every target: Python's cyclic collector, run every few hundred allocations, walked those
        # windows again and again (more than a third of a cycle's CPU at 1,000 targets, growing with them).
        # What a cycle leaves is freed by reference counting (a steady cycle's young collection found nothing to
        # free); what survives it, about 200 objects a target (new states, snapshots, window steps), goes to the
        # oldest generation unexamined (freeze, unfreeze): collecting it after every cycle walked millions of
        # objects out of cache, 0.17 ms a target at 10,000. A full collection every FULL_COLLECTION_CYCLES
        # cycles still frees any reference cycle left among them.
        paused = self.pause_collector and gc.isenabled()
        if paused:
            gc.disable()
        try:
            return await self._cycle(now)
        finally:
            if paused:
                self.paused_cycles += 1
                if self.paused_cycles % FULL_COLLECTION_CYCLES == 0:
                    gc.enable()
                    gc.collect()
                else:
                    gc.freeze()
                    gc.unfreeze()
                    gc.enable()

    async def _cycle(self, now: float | None) -> CycleStats:
        assert self.client is not None, "cycle before startup"
        client = self.client
        now = time.time() if now is None else now
        queries, read = client.stats.queries, client.stats.bytes_read
        stats = CycleStats(started_at=now)
        clock = time.perf_counter()
        try:
            keys = await self.discover(client, now)
        except PromError as exc:
            stats.error = str(exc)
            self.errors_total += 1
            log.warning("target discovery failed: %s", exc)
            keys = [self.keys[name] for name in self.pipelines]  # keep reading the known targets
        for key in keys:
            self.last_seen[key.name] = now
        states = dict(self.states)
        results = await self._refresh_all(client, keys, now, everything=self.source.shards == 1
                                          and len(keys) == self.fleet_targets)
        for key, state in zip(keys, results, strict=True):
            states[key.name] = state
            self.history_for(key.name).record(state)
        stats.diagnosed = sum(1 for state in results if state.status != "down")
        current = {key.name for key in keys}  # once: built per pipeline it cost N^2 names a cycle
        for name in [n for n in self.pipelines if n not in current]:
            if now - self.last_seen.get(name, now) > self.source.grace_seconds:
                log.info("target %s has had no series for %.0f s: dropped", name, now - self.last_seen[name])
                self.pipelines.pop(name, None)
                self.keys.pop(name, None)
                self.last_seen.pop(name, None)
                self.histories.pop(name, None)
                states.pop(name, None)
                self.dropped_targets_total += 1
            else:
                states[name] = self._down(name, now, "no vLLM series in Prometheus now")
        self.attempted = set(self.pipelines)
        self.states = states  # swapped whole: readers never see half a cycle
        stats.duration_seconds = time.perf_counter() - clock
        stats.queries = client.stats.queries - queries
        stats.bytes_read = client.stats.bytes_read - read
        stats.targets = len(keys)
        self.cycles_total += 1
        self.queries_total = client.stats.queries
        self.bytes_read_total = client.stats.bytes_read
        self.last_cycle = stats
        return stats

    def _down(self, name: str, now: float, why: str) -> TargetState:
        pipeline = self.pipelines[name]
        return pipeline.ingest(ScrapeResult(started_at=now, duration=0.0, error_reason="connect", error=why))

    async def _refresh_all(self, client: PromClient, keys: list[TargetKey], now: float,
                           everything: bool) -> list[TargetState]:
        """Read what is new for every target (one query per family and part), feed each, then evaluate each."""
        if not keys:
            return []
        reads = self._reads(keys, now, everything)
        judged: dict[TargetKey, TargetState] = {}

        def fetch(read: _Read) -> asyncio.Future[dict[TargetKey, list[StoredSeries | Steady]]]:
            return asyncio.ensure_future(read_families(client, self.source, read.keys, read.start, read.end,
                                                       everything=read.everything, narrowings=read.narrowings,
                                                       layouts=self.layouts))

        # Each read's answers are asked for before the one before is fed and evaluated: the store works out the
        # next part while this process evaluates this one (a turn of the event loop every YIELD_SECONDS sends its
        # next queries and takes their answers), instead of the two taking turns.
        pending: asyncio.Future[dict[TargetKey, list[StoredSeries | Steady]]] | None = fetch(reads[0])
        turn = time.perf_counter() + YIELD_SECONDS

        async def take_turn() -> None:
            nonlocal turn
            if time.perf_counter() >= turn:
                await asyncio.sleep(0)
                turn = time.perf_counter() + YIELD_SECONDS

        try:
            for index, read in enumerate(reads):
                assert pending is not None
                series = await pending
                pending = fetch(reads[index + 1]) if index + 1 < len(reads) else None
                for key in read.keys:  # fed one at a time, its stored series released as it goes
                    pipeline = self.pipelines[key.name]
                    newest = pipeline.window.latest
                    found = snapshots(series.pop(key), dict(key.labels),
                                      after=newest.timestamp if newest is not None else None,
                                      max_series_per_family=pipeline.target.max_series_per_family)
                    self._feed(key, found, read.since[key])
                    await take_turn()
                for key in read.judged:
                    judged[key] = self._judge(key, now)
                    await take_turn()
        except PromError as exc:
            self.errors_total += 1
            log.warning("reading %d targets failed: %s", len(keys) - len(judged), exc)
            for key in keys:
                if key not in judged:
                    judged[key] = self.pipelines[key.name].ingest(
                        ScrapeResult(started_at=now, duration=0.0, error_reason="http", error=str(exc)))
        finally:
            if pending is not None:  # a failed read, or a fault of this process' own: the next read is not wanted
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
        return [judged[key] for key in keys]

    def _reads(self, keys: list[TargetKey], now: float, everything: bool) -> list[_Read]:
        """The reads of a cycle: the known targets' new scrapes in parts, the new targets' windows in parts."""
        window = self.settings.window_seconds
        since: dict[TargetKey, float | None] = {}
        for key in keys:
            latest = self._pipeline(key).window.latest
            since[key] = latest.timestamp if latest is not None else None
        # Targets new to the diagnoser need a whole window; the others only what came since their newest
        # scrape: two reads when targets arrive, so one arrival does not make every target read a window.
        known = [key for key in keys if since[key] is not None]
        fresh = [key for key in keys if since[key] is None]
        horizon = now - window - LEAD_SECONDS
        reads: list[_Read] = []
        if known:
            # A range selector holds both its ends in Prometheus 2: a millisecond after the newest scrape
            # fed leaves that scrape out (stored timestamps are whole milliseconds).
            start = max(min(since[key] or 0.0 for key in known) + 0.001, horizon)
            split, unsure = split_read(self.source, known, everything and len(known) == len(keys),
                                       parts_for(len(known)))
            for index, part in enumerate(split):
                last = index == len(split) - 1
                judged = [key for key in part.keys if key not in unsure] + (unsure if last else [])
                reads.append(_Read(part.keys, part.narrowings, start, now, since, judged, False))
        if fresh:
            # A window for thousands of targets at once is an answer larger than a store serves in its time
            # limits, and more numbers than memory need hold: read in parts, each fed before the next is read.
            # By targets where one label names them (each sample read once); else by time slices (each slice
            # repeats the series' labels).
            parts = max(1, math.ceil(len(fresh) / COLD_READ_TARGETS))
            every = everything and not known and parts == 1
            if len(self.source.target_labels) == 1:
                size = math.ceil(len(fresh) / parts)
                for i in range(0, len(fresh), size):
                    group = fresh[i:i + size]
                    reads.append(_Read(group, None, horizon, now, since, group, every))
            else:
                edges = [horizon + (now - horizon) * i / parts for i in range(parts)] + [now]
                reads += [_Read(fresh, None, edges[i] + (0.001 if i else 0.0), edges[i + 1], since,
                                fresh if i == parts - 1 else [], every) for i in range(parts)]
        return reads

    def _feed(self, key: TargetKey, found: list[tuple[float, Snapshot | str]], since: float | None) -> None:
        pipeline = self.pipelines[key.name]
        if since is not None and found and found[0][0] - since > self.settings.window_seconds:
            pipeline.window.clear()  # back after a gap longer than the window: start afresh
        for at, scrape in found:
            if isinstance(scrape, str):  # what the parser decides (stored.snapshots)
                pipeline.ingest(ScrapeResult(started_at=at, duration=0.0, body=scrape.encode()), evaluate_now=False)
            else:
                pipeline.take(scrape, evaluate_now=False)

    def _judge(self, key: TargetKey, now: float) -> TargetState:
        pipeline = self.pipelines[key.name]
        newest = pipeline.window.latest
        if newest is None or newest.timestamp < now - min(self.source.staleness_seconds, self.settings.window_seconds):
            return self._down(key.name, now, "no recent samples in Prometheus")
        return pipeline.evaluate(now)


class _CentralCollector(Collector):
    """The diagnoser's own cost: cycles, queries, bytes read, targets (``vllm_diag_prometheus_*``)."""

    def __init__(self, central: CentralDiagnoser) -> None:
        self.central = central

    def collect(self) -> Iterable[Metric]:
        for metric in CENTRAL_EXPORTED:  # exporter/publish/exported.py
            kind = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
            family = kind(metric.name, metric.help, labels=list(metric.labels))
            family.add_metric([], metric.source(self.central))
            yield family


async def _run_cycles(app: web.Application) -> AsyncIterator[None]:
    central = app[SIDECAR]
    assert isinstance(central, CentralDiagnoser)
    async with PromClient(central.source) as client:
        central.client = client

        async def loop() -> None:
            while True:
                started = time.monotonic()
                try:
                    await central.cycle()
                except Exception:  # a bug in one cycle must not end the diagnoser: log it, try again
                    log.exception("diagnosis cycle failed")
                # Cycles never overlap: a slow one delays the next instead of stacking up.
                await asyncio.sleep(max(0.0, central.source.interval - (time.monotonic() - started)))

        task = asyncio.create_task(loop())
        log.info("diagnosing the vLLM series of %s matching %s every %g s", client.shown, central.source.match,
                 central.source.interval)
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def create_central_app(settings: Settings, source: PrometheusSource, start: bool = True) -> web.Application:
    app = create_app(settings, sidecar=CentralDiagnoser(settings, source), start_polling=False)
    if start:
        app.cleanup_ctx.append(_run_cycles)
    return app
