"""`vllm-diag demo` starts quietly: its simulated engines answer /v1/models and /version as vLLM 0.32
does, so the sidecar's first scrape of each reads their engine facts and logs nothing about a source it
cannot read. The demo's own parts (exporter.demo.build), in process, one scrape per target."""

from __future__ import annotations

import logging

import aiohttp
from aiohttp import web

from exporter import demo
from exporter.server import SIDECAR
from tests.helpers import free_port


async def test_the_demo_reads_every_engine_fact_source_it_asks_and_logs_no_complaint(caplog) -> None:
    caplog.set_level(logging.INFO)
    names = list(demo.DEMO_SCENARIOS)
    port = free_port()
    simulator_app, sidecar_app, _ = demo.build(names, f"127.0.0.1:{free_port()}", port, speed=1.0, interval=2.0,
                                               warmup=30.0)
    runner = web.AppRunner(simulator_app, access_log=None)
    await runner.setup()
    sidecar = sidecar_app[SIDECAR]
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        async with aiohttp.ClientSession() as session:
            sidecar.session = session
            states = {name: await sidecar.scrape(name) for name in names}
    finally:
        await runner.cleanup()
    complaints = [r.getMessage() for r in caplog.records
                  if r.name.startswith("exporter.facts") and r.levelno >= logging.INFO]
    assert complaints == []
    for name, state in states.items():
        assert state.health.up, name
        assert state.engine["vllm_version"].value == "0.32.0" and state.engine["vllm_version"].source == "version_api"
        assert state.engine["max_model_len"].source == "models_api", name
