"""Baseline process: the cheapest Python poller doing the same I/O as the sidecar.

aiohttp client + server, prometheus_client: every ``--interval`` seconds each target is
fetched and parsed with prometheus_client's text parser (nothing kept), and ``/metrics``
serves the default registry. The RSS and CPU figures of ``vllm-diag serve`` are printed
against this process run at the same time against the same local target server.

    python -m lab.minimal_poller --listen PORT --interval S URL [URL ...]
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
from aiohttp import web
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families


async def poll(session: aiohttp.ClientSession, url: str, interval: float) -> None:
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while True:
        try:
            async with session.get(url) as response:
                body = await response.read()
            for family in text_string_to_metric_families(body.decode("utf-8")):
                family.samples  # noqa: B018 - parsed, then dropped
        except aiohttp.ClientError:
            pass
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - loop.time()))


async def main(args: argparse.Namespace) -> None:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY))

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ready\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/readyz", ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.listen).start()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit_per_host=2)) as session:
        await asyncio.gather(*(poll(session, url, args.interval) for url in args.urls))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("urls", nargs="+")
    asyncio.run(main(parser.parse_args()))
