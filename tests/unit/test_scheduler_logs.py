"""apscheduler's skip warnings: routine for the advisor's long runs, a fault for a scrape."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from exporter.server import ADVISOR_BUSY


async def _slow() -> None:
    await asyncio.sleep(1.6)


@pytest.mark.asyncio
async def test_a_busy_advisor_run_is_not_a_warning_but_a_late_scrape_is(caplog: pytest.LogCaptureFixture) -> None:
    logging.getLogger("apscheduler.scheduler").addFilter(ADVISOR_BUSY)
    scheduler = AsyncIOScheduler(event_loop=asyncio.get_running_loop(), timezone=UTC)
    start = datetime.now(UTC) + timedelta(seconds=0.1)
    for name in ("advisor run", "scrape of a"):  # each outlasts its 0.5 s interval: later ticks are skipped
        scheduler.add_job(_slow, "interval", seconds=0.5, name=name, max_instances=1, coalesce=True,
                          next_run_time=start)
    with caplog.at_level(logging.DEBUG):
        scheduler.start()
        try:
            await asyncio.sleep(1.4)
        finally:
            scheduler.shutdown(wait=False)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any('"scrape of a' in m and "maximum number of running" in m for m in warned), warned
    assert not any("advisor run" in m for m in warned), warned
    assert any("advisor run still going" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
