"""The sidecar: aiohttp app, one apscheduler interval job per target, and the HTTP endpoints.

``create_app(settings)`` builds everything; ``vllm-diag serve`` only runs it and tests use
aiohttp's test server on the same factory. The HTTP client session and the scheduler are
started and stopped by one cleanup context.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from exporter import __version__
from exporter.config import ADVISOR_TICK_SECONDS, Settings, Target
from exporter.dcgm import gpu_utilization
from exporter.facts.discovery import FactDiscovery
from exporter.pipeline import HostProbe, TargetPipeline
from exporter.poll import fetch
from exporter.publish import document, html, text, timeline
from exporter.publish.exposition import Exposition
from exporter.publish.process import ProcessMetrics
from exporter.publish.timeline import VerdictHistory
from exporter.record import Recorder, recorded_config
from exporter.state import TargetState
from exporter.webconfig import load_web_config

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

# What prometheus_client's generate_latest writes (tests/unit/test_process_metrics.py checks they agree).
CONTENT_TYPE_LATEST = "text/plain; version=1.0.0; charset=utf-8"

# (target, window seconds, the rules' recent horizon in evaluations) -> the target's host probe, or None
HostProbeFactory = Callable[[Target, float, int], HostProbe | None]

# Large payloads are parsed off the event loop so /metrics stays responsive meanwhile.
OFFLOAD_BYTES = 256 * 1024

# First runs are spread over the interval on slots at least this far apart: many targets must not parse in one
# burst each cycle, and the targets of one slot share one scheduler wakeup (a wakeup costs apscheduler about as
# much as the few runs it starts; 100 targets at 5 s: 20 wakeups a cycle, not 100).
SLOT_SECONDS = 0.25


def first_run_offset(index: int, count: int, interval: float) -> float:
    """Seconds after start of the first run of target ``index`` of ``count`` polled every ``interval``."""
    slots = max(1, min(count, int(interval / SLOT_SECONDS)))
    return interval * (index * slots // count) / slots


class Sidecar:
    """Holds the pipelines and the latest published state of every target."""

    def __init__(self, settings: Settings, host_probes: HostProbeFactory | None = None, *,
                 read_processes: bool = True) -> None:
        """``read_processes=False``: engine facts from the HTTP API only, never from the process on the
        target's port (the demo's engines are simulated in this very process)."""
        self.settings = settings
        recent = int(settings.resolved_thresholds().recent_evaluations)
        self.pipelines = {
            t.name: TargetPipeline(
                t, settings, host_probes(t, settings.window_seconds, recent) if host_probes else None)
            for t in settings.targets
        }
        self.states: dict[str, TargetState] = {name: p.state for name, p in self.pipelines.items()}
        for target in settings.targets:
            if target.record_dir is not None:  # started and stopped with the polling (_resources)
                self.pipelines[target.name].recorder = Recorder(target.name, target.record_dir,
                                                                target.record_retention,
                                                                config=recorded_config(target, settings))
        self.discoveries = {t.name: FactDiscovery(t, local=None if read_processes else False)
                            for t in settings.targets}
        self.attempted: set[str] = set()
        # /metrics = the vllm_diag_* families, each target's lines rendered once per published state that a
        # request reads (``exposition``), the process metrics, then whatever a subclass registers (``registry``).
        self.exposition = Exposition(settings)
        self.process = ProcessMetrics(namespace="vllm_diag")
        self._registry: CollectorRegistry | None = None
        self.session: aiohttp.ClientSession | None = None
        self.histories: dict[str, VerdictHistory] = {}  # the page's verdict timelines, bounded per target

    def history_for(self, name: str) -> VerdictHistory:
        history = self.histories.get(name)
        if history is None:
            history = self.histories[name] = VerdictHistory()
        return history

    async def scrape(self, name: str) -> TargetState:
        pipeline = self.pipelines[name]
        target = pipeline.target
        assert self.session is not None, "scrape before startup"
        agent = f"vllm-diag/{__version__}"
        discovery = self.discoveries[name]
        facts = None
        if discovery.due(time.time(), pipeline.state.health.restarts_total):
            # Concurrent with the scrape: a slow /v1/models never delays the metrics.
            facts = asyncio.create_task(discovery.refresh(self.session, pipeline))
        if target.dcgm_url is not None:
            result, gpu = await asyncio.gather(
                fetch(self.session, target.url, timeout=target.timeout, max_bytes=target.max_bytes, user_agent=agent),
                fetch(self.session, target.dcgm_url, timeout=target.timeout, max_bytes=target.max_bytes,
                      user_agent=agent),
            )
            reading = gpu_utilization(gpu.body.decode("utf-8", "replace")) if gpu.body is not None else None
            if gpu.body is None:
                pipeline.source_error("dcgm", gpu.error_reason or "connect")
                log.debug("DCGM source of %s failed: %s", name, gpu.error)
            elif reading is None:
                pipeline.source_error("dcgm", "parse")
            pipeline.observe_gpu(result.started_at, reading)
        else:
            result = await fetch(self.session, target.url, timeout=target.timeout, max_bytes=target.max_bytes,
                                 user_agent=agent)
        if facts is not None:
            await facts
        if result.body is not None and len(result.body) > OFFLOAD_BYTES:
            state = await asyncio.get_running_loop().run_in_executor(None, pipeline.ingest, result)
        else:
            state = pipeline.ingest(result)
        return self.publish(name, state)

    def publish(self, name: str, state: TargetState) -> TargetState:
        """Make a scrape's state the target's published one."""
        self.attempted.add(name)
        self.history_for(name).record(state)
        # Its /metrics lines are rendered by the next /metrics request, once (Exposition): a target polled every
        # 5 s and read every 15 s has two of its three states never rendered.
        # Swap the whole state: readers never see half of an evaluation.
        self.states = {**self.states, name: state}
        return state

    @property
    def registry(self) -> CollectorRegistry:
        """prometheus_client collectors served after the process metrics (the central mode's); the library loads
        with the first: a sidecar that scrapes vLLM never imports it."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry

            self._registry = CollectorRegistry(auto_describe=True)
        return self._registry

    def metrics(self) -> bytes:
        """The body of ``/metrics``."""
        body = self.exposition.render(self.states.values()) + self.process.render()
        if self._registry is None:
            return body
        from prometheus_client.exposition import generate_latest

        return body + generate_latest(self._registry)

    def recorders(self) -> list[Recorder]:
        return [p.recorder for p in self.pipelines.values() if p.recorder is not None]

    def pending(self) -> list[str]:
        """What /readyz still waits for: targets not scraped once yet."""
        return sorted(set(self.pipelines) - self.attempted)

    def snapshot(self) -> list[TargetState]:
        return list(self.states.values())


SIDECAR = web.AppKey("sidecar", Sidecar)
SCHEDULER = web.AppKey("scheduler", AsyncIOScheduler)


async def _resources(app: web.Application) -> AsyncIterator[None]:
    sidecar = app[SIDECAR]
    sidecar.session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit_per_host=2, ttl_dns_cache=60),
        auto_decompress=True,
    )
    # UTC: run times need no conversion from the local zone at each run.
    scheduler = AsyncIOScheduler(event_loop=asyncio.get_running_loop(), timezone=UTC)
    logging.getLogger("apscheduler.scheduler").addFilter(ADVISOR_BUSY)  # once: a logger keeps one of each filter
    now = datetime.now(UTC)
    count = max(1, len(sidecar.pipelines))
    for index, (name, pipeline) in enumerate(sidecar.pipelines.items()):
        interval = pipeline.target.scrape_interval
        offset = timedelta(seconds=first_run_offset(index, count, interval))
        scheduler.add_job(
            quiet_on_shutdown, "interval", args=[f"scrape of {name}", sidecar.scrape, name], seconds=interval,
            id=f"scrape:{name}", name=f"scrape of {name}", max_instances=1, coalesce=True,
            misfire_grace_time=max(1, int(interval)), next_run_time=now + offset,
        )
    from exporter.advisor.worker import AdvisorWorker  # the simulator loads only with the sidecar

    advisor = AdvisorWorker(sidecar.settings.advisor)
    if sidecar.settings.advisor.enabled:
        # A look at each target's state every tick; work only for targets with an active symptom.
        scheduler.add_job(quiet_on_shutdown, "interval", args=["advisor run", advisor.run, sidecar.pipelines.values()],
                          seconds=ADVISOR_TICK_SECONDS, id="advise", name="advisor run", max_instances=1, coalesce=True,
                          next_run_time=now + timedelta(seconds=ADVISOR_TICK_SECONDS))
    for recorder in sidecar.recorders():
        recorder.start()
    scheduler.start()
    app[SCHEDULER] = scheduler
    log.info("polling %d target(s): %s", len(sidecar.pipelines), ", ".join(sidecar.pipelines) or "none")
    try:
        yield
    finally:
        scheduler.shutdown(wait=False)
        advisor.close()
        await sidecar.session.close()
        for recorder in sidecar.recorders():  # what is queued reaches the disk before we exit
            await asyncio.get_running_loop().run_in_executor(None, recorder.close)


class AdvisorBusy(logging.Filter):
    """apscheduler warns when a tick finds the advisor run before it still going. A calibration takes seconds of
    CPU a target, so that is routine, not a fault: logged at debug. A scrape that outlasts its interval still
    warns."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.levelno == logging.WARNING and '"advisor run' in message and "maximum number of running" in message:
            log.debug("advisor run still going: this tick's run skipped")
            return False
        return True


ADVISOR_BUSY = AdvisorBusy()


async def quiet_on_shutdown(what: str, job: Callable[..., Awaitable[object]], *args: object) -> None:
    """An interval job's body: a run that shutdown cancels (a scrape, an advisor run waiting for its worker
    process) ends here, quietly. Re-raised, apscheduler would log the cancellation as a failed job, with a
    traceback, on every clean stop."""
    try:
        await job(*args)
    except asyncio.CancelledError:
        log.debug("%s cancelled (shutting down)", what)


# Above this many targets /metrics is joined in a worker thread: the states published since the last request
# are rendered there (about 0.25 ms a target), and the event loop keeps polling meanwhile.
# The thread is its own: in the loop's default executor a request would queue behind the engine-fact
# reads of every target (a thousand of them at start and every minute).
RENDER_OFFLOAD_TARGETS = 50
_RENDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm-diag-metrics")


async def handle_metrics(request: web.Request) -> web.Response:
    sidecar = request.app[SIDECAR]
    if len(sidecar.pipelines) >= RENDER_OFFLOAD_TARGETS:
        body = await asyncio.get_running_loop().run_in_executor(_RENDER, sidecar.metrics)
    else:
        body = sidecar.metrics()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def handle_diagnosis(request: web.Request) -> web.Response:
    doc = document.build(request.app[SIDECAR].snapshot())
    return web.Response(text=json.dumps(doc, allow_nan=False, default=_json_default), content_type="application/json")


async def handle_index(request: web.Request) -> web.Response:
    sidecar = request.app[SIDECAR]
    timelines = {name: timeline.svg(history.runs()) for name, history in sidecar.histories.items()}
    page = html.render(document.build(sidecar.snapshot()), runbook_base_url=sidecar.settings.runbook_base_url,
                       timelines=timelines)
    return web.Response(text=page, content_type="text/html", charset="utf-8")


async def handle_timeline(request: web.Request) -> web.Response:
    """Each target's recent verdict runs: ``{from, to, verdict, symptoms, causes, steps}``."""
    histories = request.app[SIDECAR].histories
    doc = {"targets": [{"target": name, "timeline": history.runs()} for name, history in sorted(histories.items())]}
    return web.Response(text=json.dumps(doc, allow_nan=False), content_type="application/json")


async def handle_text(request: web.Request) -> web.Response:
    return web.Response(text=text.render(document.build(request.app[SIDECAR].snapshot())))


async def handle_healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def handle_readyz(request: web.Request) -> web.Response:
    sidecar = request.app[SIDECAR]
    waiting = sidecar.pending()
    if waiting:
        return web.Response(status=503, text=f"first scrape pending: {', '.join(waiting)}\n")
    return web.Response(text="ready\n")


MAX_REQUEST_BYTES = 64 * 1024


@web.middleware
async def _request_limits(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every endpoint is a GET without a body: refuse large bodies before anything reads them."""
    if request.content_length is not None and request.content_length > MAX_REQUEST_BYTES:
        return web.Response(status=413, text="request body too large\n")
    return await handler(request)


def _json_default(value: object) -> object:
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def create_app(settings: Settings, *, host_probes: HostProbeFactory | None = None,
               start_polling: bool = True, sidecar: Sidecar | None = None) -> web.Application:
    middlewares: list[Middleware] = [_request_limits]
    web_config = load_web_config(settings.web_config_file) if settings.web_config_file else None
    if web_config is not None and web_config.users:
        middlewares.append(web_config.middleware())
    # We only ever answer GETs: a small request cap keeps a hostile client from costing memory.
    app = web.Application(client_max_size=MAX_REQUEST_BYTES, middlewares=middlewares)
    app[SIDECAR] = sidecar if sidecar is not None else Sidecar(settings, host_probes)
    if start_polling:
        app.cleanup_ctx.append(_resources)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/api/v1/diagnosis", handle_diagnosis)
    app.router.add_get("/api/v1/diagnosis.txt", handle_text)
    app.router.add_get("/api/v1/timeline", handle_timeline)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    app.router.add_get("/", handle_index)
    return app


def run(settings: Settings, host_probes: HostProbeFactory | None = None) -> None:
    app = create_app(settings, host_probes=host_probes)
    ssl_context = load_web_config(settings.web_config_file).ssl_context() if settings.web_config_file else None
    # run_app calls `print` once the socket is bound: "listening" is never logged for a port we did not get.
    web.run_app(app, host=settings.listen_host, port=settings.listen_port, access_log=None, ssl_context=ssl_context,
                print=lambda _: log.info("vllm-diag %s listening on %s (started %s)", __version__, settings.listen,
                                         time.strftime("%FT%T")))
