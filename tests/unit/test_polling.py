"""The sidecar's polling loop (server.every): slots kept, missed ones not made up for, failures survived."""

from __future__ import annotations

import asyncio
import logging

import pytest

from exporter.server import every


async def test_every_keeps_its_slots_skips_the_missed_ones_and_survives_a_failure(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    runs: list[float] = []

    async def scrape(name: str) -> None:
        assert name == "t"
        runs.append(loop.time() - start)
        if len(runs) == 2:
            await asyncio.sleep(0.5)  # overruns the slots at 0.5 and 0.7
        if len(runs) == 3:
            raise RuntimeError("boom")

    caplog.set_level(logging.ERROR)
    task = asyncio.create_task(every("scrape of t", 0.2, 0.1, scrape, "t"))
    while len(runs) < 5:
        await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert runs[0] >= 0.1 and runs[1] - runs[0] >= 0.19
    # The second run ended at 0.8: the next is the slot at 0.9, not one run per slot missed, right away.
    assert runs[2] - runs[1] >= 0.59
    assert runs[3] - runs[2] >= 0.19  # the failed run did not stop the loop, and the phase holds
    assert "scrape of t failed" in caplog.text and "RuntimeError: boom" in caplog.text
