"""apscheduler's skip warnings: routine for the advisor's long runs, a fault for a scrape."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from exporter.server import ADVISOR_BUSY


@pytest.mark.asyncio
async def test_a_busy_advisor_run_is_not_a_warning_but_a_late_scrape_is(caplog: pytest.LogCaptureFixture) -> None:
    logging.getLogger("apscheduler.scheduler").addFilter(ADVISOR_BUSY)
    scheduler = AsyncIOScheduler(event_loop=asyncio.get_running_loop(), timezone=UTC)
    done = asyncio.Event()

    async def running_until_done() -> None:  # outlasts its 0.2 s interval: the ticks meanwhile are skipped
        await done.wait()

    start = datetime.now(UTC) + timedelta(seconds=0.1)
    for name in ("advisor run", "scrape of a"):
        scheduler.add_job(running_until_done, "interval", seconds=0.2, name=name, max_instances=1, coalesce=True,
                          next_run_time=start)

    def skipped(name: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records
                if f'"{name}' in r.getMessage() and "maximum number of running" in r.getMessage()]

    with caplog.at_level(logging.DEBUG):
        scheduler.start()
        try:
            deadline = time.monotonic() + 20  # a loaded machine delays the ticks, not what they log
            while not skipped("scrape of a") and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)  # the advisor's ticks came due beside the scrape's
        finally:
            done.set()  # the runs end before the scheduler does: nothing is cancelled under them
            await asyncio.sleep(0.1)
            scheduler.shutdown(wait=False)
    assert any(r.levelno == logging.WARNING for r in skipped("scrape of a")), caplog.text
    assert skipped("advisor run") == [], "the advisor's skips reached the log"
    assert not any(r.levelno >= logging.WARNING for r in caplog.records if "advisor run" in r.getMessage())
    assert any("advisor run still going" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
