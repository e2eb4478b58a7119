"""The advisor in the sidecar: off the poll loop, one target at a time, with a CPU budget each.

Every ``advice_interval_seconds`` the worker copies each diagnosed target's window (the buffer
only: its scrapes are immutable) and runs ``advise`` on it in a separate process, with
``advice_cpu_seconds`` of CPU time per target. A process, not a thread: calibrating runs the engine
model in pure Python for seconds, and in a thread it would hold the interpreter lock the poll loop
needs for every scrape and every ``/metrics`` answer. Scrapes keep their schedule meanwhile; the
answer is handed to the target's pipeline, which publishes it with every following evaluation.
"""

from __future__ import annotations

import asyncio
import copyreg
import logging
import multiprocessing
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from types import MappingProxyType
from typing import Any

from exporter.advisor import advise
from exporter.advisor.result import AdviceResult
from exporter.catalog.thresholds import Thresholds
from exporter.config import EngineFacts
from exporter.facts.resolve import engine_facts
from exporter.pipeline import TargetPipeline
from exporter.window import Window

log = logging.getLogger(__name__)

# Snapshots and thresholds keep their mappings read-only (MappingProxyType), which pickle refuses;
# to cross to the worker process (and back) one travels as a plain dict and is wrapped again. This
# module is imported on both sides (the worker finds advise_window through it), so both know it.
def _read_only(mapping: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(mapping)


copyreg.pickle(MappingProxyType, lambda proxy: (_read_only, (dict(proxy),)))


def advise_window(window: Window, facts: EngineFacts, thresholds: Thresholds,
                  active_causes: frozenset[str]) -> AdviceResult:
    """What the worker process runs: everything it needs comes in as (picklable) arguments."""
    return advise(window, facts, thresholds, (), active_causes, cpu_budget_s=thresholds.advice_cpu_seconds)


def _new_executor() -> ProcessPoolExecutor:
    # spawn: a fresh interpreter, not a fork of the sidecar's event loop, sockets and scheduler threads
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


class AdvisorWorker:
    def __init__(self) -> None:
        self._executor = _new_executor()

    async def run(self, pipelines: Iterable[TargetPipeline]) -> None:
        loop = asyncio.get_running_loop()
        for pipeline in list(pipelines):
            state = pipeline.state
            if state.status != "ok":
                continue
            window = pipeline.window.copy()  # the poll loop goes on pushing to the original
            active = frozenset(c.id for c in state.diagnosis.active_causes if not c.informational)
            try:
                pipeline.advice = await loop.run_in_executor(
                    self._executor, advise_window, window, engine_facts(state.engine), pipeline.thresholds, active)
            except BrokenProcessPool:  # the worker died (killed, out of memory): a new one next time
                log.error("advisor process died while advising %s; starting a new one", pipeline.target.name)
                self._executor = _new_executor()
            except Exception:  # the advisor is a side feature: it never stops the diagnosis
                log.exception("advisor failed for %s", pipeline.target.name)

    def close(self) -> None:
        """Stop now: a calibration under way is abandoned, not waited for (it may take seconds)."""
        workers = list((getattr(self._executor, "_processes", None) or {}).values())  # no public handle before 3.14
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            if process.is_alive():
                process.terminate()
