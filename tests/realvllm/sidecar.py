"""The sidecar, started in-process on 127.0.0.1 against a real vLLM, for the end-to-end tests."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Settings, load_settings
from exporter.hostcpu import host_probe_for
from exporter.publish import document
from exporter.server import SIDECAR, create_app

from .harness import RealVLLM

# SLOs for a 2-layer, hidden-128 model on two CPU cores: tight enough that a queue or a chunked
# 900-token prefill breaches them, loose enough that a light steady load never does.
TEST_SLO = {"ttft_p95_seconds": 0.5, "itl_p95_seconds": 0.25}


def sidecar_settings(vllm: RealVLLM, *, window: float = 20.0, interval: float = 1.0,
                     slo: dict[str, float] | None = None, **target: Any) -> Settings:
    entry = {"name": "real-vllm", "url": vllm.metrics_url, "scrape_interval": interval,
             "timeout": min(2.0, interval), "engine": vllm.engine_facts(), **target}
    return load_settings(overrides={"listen": "127.0.0.1:1", "window_seconds": window, "slo": slo or TEST_SLO,
                                    "targets": [entry]})


class RunningSidecar:
    """A real sidecar app on a real port; ``doc()`` and ``samples()`` read its endpoints."""

    def __init__(self, settings: Settings) -> None:
        self.app = create_app(settings, host_probes=host_probe_for)
        self.server = TestServer(self.app, host="127.0.0.1")
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> RunningSidecar:
        await self.server.start_server()
        self.session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.session is not None
        await self.session.close()
        await self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    async def doc(self) -> dict[str, Any]:
        assert self.session is not None
        async with self.session.get(f"{self.url}/api/v1/diagnosis") as response:
            return (await response.json())["targets"][0]

    async def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        assert self.session is not None
        async with self.session.get(f"{self.url}/metrics") as response:
            text = await response.text()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("target", "model_name")))
                out[(s.name, labels)] = s.value
        return out

    def final_state(self) -> dict[str, Any]:
        """The published state, read straight from the app (after polling stopped)."""
        return document.build(self.app[SIDECAR].snapshot())["targets"][0]

    async def wait_scrapes(self, count: int, timeout: float = 60.0) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            doc = await self.doc()
            if (doc["signals"] or {}).get("scrapes", 0) >= count or loop.time() > deadline:
                return doc
            await asyncio.sleep(0.2)
