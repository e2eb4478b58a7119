"""The advisor in the sidecar: off the poll loop, one target at a time, with a CPU budget each.

Every ``advice_interval_seconds`` the worker copies each diagnosed target's window (the buffer
only: its scrapes are immutable), and runs ``advise`` in its own single thread with
``advice_cpu_seconds`` of CPU time per target. Scrapes keep their schedule meanwhile; the answer is
handed to the target's pipeline, which publishes it with every following evaluation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from exporter.advisor import advise
from exporter.advisor.result import AdviceResult
from exporter.facts.resolve import engine_facts
from exporter.pipeline import TargetPipeline
from exporter.window import Window

log = logging.getLogger(__name__)


def advise_pipeline(pipeline: TargetPipeline, window: Window) -> AdviceResult:
    state = pipeline.state
    active = {c.id for c in state.diagnosis.active_causes if not c.informational}
    return advise(window, engine_facts(state.engine), pipeline.thresholds, (), active,
                  cpu_budget_s=pipeline.thresholds.advice_cpu_seconds)


class AdvisorWorker:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm-diag-advisor")

    async def run(self, pipelines: Iterable[TargetPipeline]) -> None:
        loop = asyncio.get_running_loop()
        for pipeline in list(pipelines):
            if pipeline.state.status != "ok":
                continue
            window = pipeline.window.copy()  # the poll loop goes on pushing to the original
            try:
                pipeline.advice = await loop.run_in_executor(self._executor, advise_pipeline, pipeline, window)
            except Exception:  # the advisor is a side feature: it never stops the diagnosis
                log.exception("advisor failed for %s", pipeline.target.name)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
