"""``vllm-diag demo``: simulated vLLM engines and the sidecar in one process, for a first look.

No GPU and no vLLM needed: each scenario of the built-in simulator is a target, with its
engine facts configured the way an operator would configure a real deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from aiohttp import web

from exporter.config import DEFAULT_LISTEN, load_settings
from exporter.server import create_app
from exporter.simulator import get_scenario
from exporter.simulator.server import build_app

log = logging.getLogger(__name__)

DEMO_SCENARIOS = ("healthy", "kv-pressure", "cpu-starved", "itl-stutter", "template-instability")
SIMULATOR_PORT = 8000


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", action="append", metavar="NAME",
                        help=f"scenarios to simulate (default: {', '.join(DEMO_SCENARIOS)})")
    parser.add_argument("--listen", default=DEFAULT_LISTEN.replace("0.0.0.0", "127.0.0.1"),
                        help="sidecar address (default %(default)s)")
    parser.add_argument("--simulator-port", type=int, default=SIMULATOR_PORT,
                        help="port of the simulated vLLM /metrics on 127.0.0.1 (default %(default)s)")
    parser.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second")
    parser.add_argument("--interval", type=float, default=2.0, help="sidecar scrape interval (default 2 s)")
    parser.add_argument("--warmup", type=float, default=180.0,
                        help="simulated seconds already run at start, so scenarios have developed (default 180)")


def settings_for(names: list[str], simulator: str, listen: str, interval: float):
    targets = []
    for name in names:
        scenario = get_scenario(name)
        base = f"{simulator}/scenarios/{name}"
        targets.append({
            "name": name, "url": f"{base}/metrics", "scrape_interval": interval, "timeout": min(2.0, interval),
            "engine": scenario.engine_facts(), **({"dcgm_url": f"{base}/dcgm/metrics"} if scenario.dcgm else {}),
        })
    return load_settings(overrides={"listen": listen, "window_seconds": max(30.0, 10 * interval), "targets": targets})


async def _run(names: list[str], listen: str, simulator_port: int, speed: float, interval: float,
               warmup: float) -> None:
    simulator = f"http://127.0.0.1:{simulator_port}"
    settings = settings_for(names, simulator, listen, interval)
    runners = []
    try:
        for app, host, port in ((build_app(names, speed=speed, warmup_s=warmup), "127.0.0.1", simulator_port),
                                (create_app(settings), settings.listen_host, settings.listen_port)):
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, host, port).start()
            runners.append(runner)
        sidecar = f"http://{settings.listen_host}:{settings.listen_port}"
        print(f"simulated vLLM engines ({', '.join(names)}): {simulator}/scenarios/<name>/metrics")
        print(f"diagnosis page:  {sidecar}/")
        print(f"diagnosis JSON:  {sidecar}/api/v1/diagnosis")
        print(f"sidecar metrics: {sidecar}/metrics")
        print("first verdicts appear after two scrapes; Ctrl-C stops the demo", flush=True)
        await asyncio.Event().wait()
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    names = args.scenario or list(DEMO_SCENARIOS)
    for name in names:
        get_scenario(name)  # unknown names fail here, before anything starts
    try:
        asyncio.run(_run(names, args.listen, args.simulator_port, args.speed, args.interval, args.warmup))
    except KeyboardInterrupt:
        pass
    return 0
