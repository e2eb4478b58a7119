"""``vllm-diag demo``: simulated vLLM engines and the sidecar in one process, for a first look.

No GPU and no vLLM needed: each scenario of the built-in simulator is a target, with its
engine facts configured the way an operator would configure a real deployment.

The window is the three minutes the scenario docs judge verdicts over. So that the first
page already shows settled verdicts, the simulator's warm-up (by default those same three
minutes) is fed to the sidecar as the scrapes it would have taken, at the times it would
have taken them; live scrapes then continue the same simulated engines.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable

from aiohttp import web

from exporter.argtypes import non_negative, port, positive
from exporter.config import DEFAULT_LISTEN, Settings, load_settings
from exporter.dcgm import gpu_utilization
from exporter.poll import ScrapeResult
from exporter.server import SIDECAR, Sidecar, create_app
from exporter.shutdown import until_stopped
from exporter.simulator import get_scenario
from exporter.simulator.exposition import render_dcgm, render_vllm
from exporter.simulator.hostcpu import host_probes_for
from exporter.simulator.server import SIMS, LiveScenario, build_app

log = logging.getLogger(__name__)

DEMO_SCENARIOS = ("healthy", "kv-pressure", "cpu-starved", "itl-stutter", "template-instability")
SIMULATOR_PORT = 8000
WINDOW_SECONDS = 180.0  # docs/scenarios.md: a verdict is judged once three minutes are in the window
PRIME_SCRAPES = 18  # warm-up scrapes fed per scenario: enough for every window statistic, quick to start


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", action="append", metavar="NAME",
                        help=f"scenarios to simulate (default: {', '.join(DEMO_SCENARIOS)})")
    parser.add_argument("--listen", metavar="HOST:PORT", default=DEFAULT_LISTEN.replace("0.0.0.0", "127.0.0.1"),
                        help="sidecar address (default %(default)s)")
    parser.add_argument("--simulator-port", type=port, default=SIMULATOR_PORT, metavar="PORT",
                        help="port of the simulated vLLM /metrics on 127.0.0.1 (default %(default)s)")
    parser.add_argument("--speed", type=positive, default=1.0, metavar="X",
                        help="simulated seconds per wall second (default 1)")
    parser.add_argument("--interval", type=positive, default=2.0, metavar="SECONDS",
                        help="sidecar scrape interval (default 2)")
    parser.add_argument("--window", type=positive, default=WINDOW_SECONDS, metavar="SECONDS",
                        help="diagnosis window (default %(default)g, the three minutes docs/scenarios.md judges "
                             "verdicts over)")
    parser.add_argument("--warmup", type=non_negative, default=WINDOW_SECONDS, metavar="SECONDS",
                        help="simulated seconds already run at start and fed to the sidecar as past scrapes, "
                             "so the first page shows settled verdicts (default %(default)g)")


def settings_for(names: list[str], simulator: str, listen: str, interval: float,
                 window: float = WINDOW_SECONDS) -> Settings:
    targets = []
    for name in names:
        scenario = get_scenario(name)
        base = f"{simulator}/scenarios/{name}"
        targets.append({
            "name": name, "url": f"{base}/metrics", "scrape_interval": interval, "timeout": min(2.0, interval),
            "engine": scenario.engine_facts(), **({"dcgm_url": f"{base}/dcgm/metrics"} if scenario.dcgm else {}),
            **({"slo": scenario.slo} if scenario.slo else {}),
        })
    return load_settings(overrides={"listen": listen, "window_seconds": window, "targets": targets},
                         origins={"listen": "--listen", "window_seconds": "--window",
                                  "targets": "--interval"})


def prime(sidecar: Sidecar, sims: dict[str, LiveScenario], warmup: float, window: float) -> None:
    """Feed each target the scrapes it would have taken during the warm-up (the window's worth of it).

    The simulated engines advance exactly as the live server would move them, and each scrape
    is stamped with the wall time that simulated instant maps to, so live scrapes continue the
    same series. Nothing is invented: these are the engines' own expositions.
    """
    span = min(warmup, window)
    if span <= 0:
        return
    step = span / PRIME_SCRAPES
    for name, pipeline in sidecar.pipelines.items():
        live = sims.get(name)
        if live is None:  # a target that is not one of the simulated scenarios
            continue
        for index in range(1, PRIME_SCRAPES + 1):
            sim_time = warmup - span + index * step
            live.engine.advance_to(sim_time)
            wall = live.start_unix + sim_time / live.speed
            if live.scenario.dcgm:
                pipeline.observe_gpu(wall, gpu_utilization(render_dcgm(live.engine)))
            body = render_vllm(live.engine, start_unix=live.start_unix, speed=live.speed).encode("utf-8")
            pipeline.ingest(ScrapeResult(started_at=wall, duration=0.0, body=body))
    sidecar.states = {name: pipeline.state for name, pipeline in sidecar.pipelines.items()}


def _engine_reader(live: LiveScenario) -> Callable[[], object]:
    """Reads the scenario's engine when called; a function so that each reader binds its own ``live``."""
    return lambda: live.engine


def build(names: list[str], listen: str, simulator_port: int, speed: float, interval: float, warmup: float,
          window: float = WINDOW_SECONDS) -> tuple[web.Application, web.Application, Settings]:
    """The simulator's app (to serve on 127.0.0.1:``simulator_port``), the primed sidecar's app and its settings."""
    settings = settings_for(names, f"http://127.0.0.1:{simulator_port}", listen, interval, window)
    simulator_app = build_app(names, speed=speed, warmup_s=warmup)
    sims = simulator_app[SIMS]
    # The CPU source a real deployment configures (cpu: {match: "vllm serve"}), read from the engines.
    host_probes = host_probes_for({name: _engine_reader(live) for name, live in sims.items()})
    # The simulated engines answer /v1/models and /version like vLLM; the process on their port is
    # this demo, so looking for a vLLM command line there would only log that it is none.
    sidecar_app = create_app(settings, sidecar=Sidecar(settings, host_probes, read_processes=False))
    prime(sidecar_app[SIDECAR], sims, warmup, window)
    return simulator_app, sidecar_app, settings


async def _run(names: list[str], listen: str, simulator_port: int, speed: float, interval: float,
               warmup: float, window: float = WINDOW_SECONDS) -> None:
    simulator = f"http://127.0.0.1:{simulator_port}"
    simulator_app, sidecar_app, settings = build(names, listen, simulator_port, speed, interval, warmup, window)
    runners = []
    try:
        for app, host, port in ((simulator_app, "127.0.0.1", simulator_port),
                                (sidecar_app, settings.listen_host, settings.listen_port)):
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, host, port).start()
            runners.append(runner)
        sidecar = f"http://{settings.listen_host}:{settings.listen_port}"
        print(f"simulated vLLM engines ({', '.join(names)}): {simulator}/scenarios/<name>/metrics")
        print(f"diagnosis page:  {sidecar}/")
        print(f"diagnosis JSON:  {sidecar}/api/v1/diagnosis")
        print(f"sidecar metrics: {sidecar}/metrics")
        filled = min(warmup, settings.window_seconds)
        print(f"diagnosis window {settings.window_seconds:g} s, {filled:g} s of it already filled from the "
              "simulator's warm-up; Ctrl-C stops the demo", flush=True)
        await until_stopped()
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    names = args.scenario or list(DEMO_SCENARIOS)
    for name in names:
        get_scenario(name)  # unknown names fail here, before anything starts
    try:
        asyncio.run(_run(names, args.listen, args.simulator_port, args.speed, args.interval, args.warmup,
                         args.window))
    except KeyboardInterrupt:
        pass
    return 0
