"""Serve simulated vLLM deployments over HTTP, the way a real vLLM and dcgm-exporter would.

Routes (for every scenario served): ``/scenarios/{name}/metrics`` (vLLM's exposition),
``/scenarios/{name}/dcgm/metrics`` (dcgm-exporter's) and, as vLLM 0.32 answers them next to its
/metrics, ``/scenarios/{name}/v1/models`` and ``/scenarios/{name}/version`` (each scenario is one
vLLM behind a path prefix, the way ``--root-path`` serves it). With a single scenario, also the
plain ``/metrics``, ``/dcgm/metrics``, ``/health``, ``/v1/models`` and ``/version`` a real
deployment answers. ``/`` lists the scenarios with their engine facts and expected diagnosis (JSON).

The model advances in simulated time in step with a clock: ``speed`` simulated seconds per
clock second (1.0 by default). Every scrape first brings the model up to date, and an
optional background task keeps it moving between scrapes so that a late scrape never has
to simulate a long stretch at once. Tests pass their own clock and no background task, so
they never sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import asdict, dataclass

from aiohttp import web

from exporter.shutdown import until_stopped
from exporter.simulator.dataparallel import DataParallelEngine
from exporter.simulator.engine import Engine
from exporter.simulator.exposition import CONTENT_TYPE, render_dcgm, render_vllm
from exporter.simulator.scenarios import Scenario, get_scenario

DEFAULT_PORT = 8000  # vLLM's default


@dataclass(slots=True)
class LiveScenario:
    """One scenario running against a clock."""

    scenario: Scenario
    engine: Engine | DataParallelEngine
    clock_start: float  # clock reading at simulated second 0
    start_unix: float  # wall time at simulated second 0
    speed: float

    def sim_time(self, clock_now: float) -> float:
        return max(0.0, (clock_now - self.clock_start) * self.speed)

    def advance(self, clock_now: float) -> None:
        self.engine.advance_to(self.sim_time(clock_now))

    def vllm_text(self) -> str:
        return render_vllm(self.engine, start_unix=self.start_unix, speed=self.speed)

    def dcgm_text(self) -> str:
        return render_dcgm(self.engine)


SIMS = web.AppKey("simulator_scenarios", dict[str, LiveScenario])
# A callable type is no class, so AppKey's type argument goes in the annotation.
CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("simulator_clock")
WALL_CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("simulator_wall_clock")  # dates /v1/models' cards


def _resolve(scenarios: Scenario | str | Iterable[Scenario | str]) -> list[Scenario]:
    if isinstance(scenarios, (Scenario, str)):
        scenarios = [scenarios]
    out = [get_scenario(s) if isinstance(s, str) else s for s in scenarios]
    if not out:
        raise ValueError("at least one scenario is needed")
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate scenario names: {names}")
    return out


def _metrics_response(text: str) -> web.Response:
    # aiohttp's content_type argument takes no parameters; the header carries them.
    return web.Response(body=text.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})


def _live(request: web.Request, name: str | None) -> LiveScenario:
    sims = request.app[SIMS]
    if name is None:
        name = next(iter(sims))
    live = sims.get(name)
    if live is None:
        raise web.HTTPNotFound(text=f"unknown scenario {name!r}; serving: {', '.join(sims)}\n")
    live.advance(request.app[CLOCK]())
    return live


async def _vllm_metrics(request: web.Request) -> web.Response:
    return _metrics_response(_live(request, request.match_info.get("name")).vllm_text())


async def _dcgm_metrics(request: web.Request) -> web.Response:
    live = _live(request, request.match_info.get("name"))
    if not live.scenario.dcgm:
        raise web.HTTPNotFound(text=f"scenario {live.scenario.name!r} serves no DCGM series\n")
    return _metrics_response(live.dcgm_text())


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="")


async def _models(request: web.Request) -> web.Response:
    """vLLM 0.32's ``GET /v1/models``: ``ModelList`` of one ``ModelCard`` (the served model, no LoRA),
    field for field as ``vllm/entrypoints/serve/engine/protocol.py`` dumps it."""
    cfg = _live(request, request.match_info.get("name")).engine.cfg
    created = int(request.app[WALL_CLOCK]())
    permission = {
        "id": f"modelperm-{uuid.uuid4().int & (2**64 - 1):016x}", "object": "model_permission", "created": created,
        "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True, "allow_search_indices": False,
        "allow_view": True, "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False,
    }
    card = {
        "id": cfg.model_name, "object": "model", "created": created, "owned_by": "vllm", "root": cfg.model.name,
        "parent": None, "max_model_len": cfg.max_model_len, "permission": [permission],
    }
    return web.json_response({"object": "list", "data": [card]})


async def _version(request: web.Request) -> web.Response:
    """vLLM's ``GET /version``: the release the scenario's engine serves (0.32, whose /metrics the simulator
    copies, unless the scenario runs a later one)."""
    cfg = _live(request, request.match_info.get("name")).engine.cfg  # 404 for an unknown scenario, as /metrics
    return web.json_response({"version": cfg.vllm_version})


async def _index(request: web.Request) -> web.Response:
    now = request.app[CLOCK]()
    single = len(request.app[SIMS]) == 1
    rows = []
    for name, live in request.app[SIMS].items():
        sc = live.scenario
        rows.append(
            {
                "name": name,
                "description": sc.description,
                "case": sc.case,
                "expected": asdict(sc.expected),
                "engine_facts": sc.engine_facts(),
                "simulated_seconds": round(live.sim_time(now), 3),
                "client_aborts": live.engine.stats.client_aborts,
                "speed": live.speed,
                "metrics_path": "/metrics" if single else f"/scenarios/{name}/metrics",
                "dcgm_path": (
                    None if not sc.dcgm else ("/dcgm/metrics" if single else f"/scenarios/{name}/dcgm/metrics")
                ),
            }
        )
    return web.json_response({"scenarios": rows})


def build_app(
    scenarios: Scenario | str | Iterable[Scenario | str],
    *,
    speed: float = 1.0,
    seed: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    background_interval_s: float | None = 1.0,
    warmup_s: float = 0.0,
) -> web.Application:
    """An aiohttp application serving the scenarios; the simulated clock starts now.

    ``clock`` drives the simulation (monotonic seconds); ``wall_clock`` only dates the
    exposition's timestamps. ``background_interval_s=None`` disables the background advance
    (the model then moves only when scraped). ``warmup_s`` simulated seconds have already
    passed when the app starts, so a demo shows a developed scenario at once.
    """
    if speed <= 0:
        raise ValueError("speed must be > 0")
    resolved = _resolve(scenarios)
    app = web.Application()
    if warmup_s < 0:
        raise ValueError("warmup_s must be >= 0")
    start, start_unix = clock() - warmup_s / speed, wall_clock() - warmup_s / speed
    app[CLOCK] = clock
    app[WALL_CLOCK] = wall_clock
    app[SIMS] = {
        sc.name: LiveScenario(sc, sc.build(seed), start, start_unix, speed) for sc in resolved
    }
    routes = [
        web.get("/", _index),
        web.get("/scenarios/{name}/metrics", _vllm_metrics),
        web.get("/scenarios/{name}/dcgm/metrics", _dcgm_metrics),
        web.get("/scenarios/{name}/v1/models", _models),
        web.get("/scenarios/{name}/version", _version),
    ]
    if len(resolved) == 1:
        routes += [
            web.get("/metrics", _vllm_metrics),
            web.get("/dcgm/metrics", _dcgm_metrics),
            web.get("/health", _health),
            web.get("/v1/models", _models),
            web.get("/version", _version),
        ]
    app.add_routes(routes)
    if background_interval_s is not None:
        interval = background_interval_s

        async def _keep_advancing(app: web.Application) -> AsyncIterator[None]:
            async def loop() -> None:
                while True:
                    await asyncio.sleep(interval)
                    now = app[CLOCK]()
                    for live in app[SIMS].values():
                        live.advance(now)

            task = asyncio.create_task(loop())
            yield
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        app.cleanup_ctx.append(_keep_advancing)
    return app


async def serve(
    scenario: Scenario | str | Iterable[Scenario | str],
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    speed: float = 1.0,
    seed: int | None = None,
) -> None:
    """Serve until cancelled."""
    runner = web.AppRunner(build_app(scenario, speed=speed, seed=seed))
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        await until_stopped()
    finally:
        await runner.cleanup()
