"""The advisor in the sidecar: off the poll loop, one target at a time, only while a symptom is active.

Every ``ADVISOR_TICK_SECONDS`` the sidecar looks at each target's last state (nothing else: no
window is copied, no process started). A target with an active symptom and a whole window (a
sidecar just started waits until its window has filled) whose advice is missing or
``advisor.interval`` old is due; the due targets go, oldest advice first, to one worker process,
which calibrates and predicts on a copy of the window (the buffer only: its scrapes are immutable)
with a CPU budget of ``ADVISOR_CORE_SHARE`` of the interval per target (one candidate is always
evaluated, the others only within the budget). A healthy target costs
nothing and its advice is withdrawn; advice older than ``ADVICE_MAX_AGE_SECONDS`` is withdrawn too.

The same tick keeps the advisor's track record (``exporter.advisor.track``): the summary of each
target's last calibrated window is kept (on disk in its ``record_dir``), and when the engine's knobs
change, the first whole window after the change is compared with what the advisor would have predicted
from the kept one. That comparison runs whatever the target's health (a change that cured the symptom
is the one most worth scoring), once per change.

The worker process keeps each target's last calibration: while the engine facts are unchanged, its
fitted step cost is reused when it reproduces the new window (most of a calibration's CPU time),
and fitted afresh when it does not. It predicts the primary traffic reading only (``vllm-diag
advise`` shows both when the traffic is unclear).

A process, not a thread: calibrating runs the engine model in pure Python for seconds, and in a
thread it would hold the interpreter lock the poll loop needs for every scrape and every
``/metrics`` answer. It is spawned at the first symptom, not at start. Scrapes keep their schedule
meanwhile; the answer is handed to the target's pipeline, which publishes it with every following
evaluation.
"""

from __future__ import annotations

import asyncio
import copyreg
import logging
import multiprocessing
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from exporter.advisor.track import Summary, TrackRecord, file_path, knobs, predict_move
from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.config import ADVICE_MAX_AGE_SECONDS, Advisor, EngineFacts
from exporter.facts.resolve import engine_facts
from exporter.pipeline import TargetPipeline
from exporter.window import Window

if TYPE_CHECKING:  # the model and the simulator load in the worker process, or with the first comparison
    from exporter.advisor import Calibration, Fitted
    from exporter.advisor.result import AdviceResult

log = logging.getLogger(__name__)

# Snapshots and thresholds keep their mappings read-only (MappingProxyType), which pickle refuses;
# to cross to the worker process (and back) one travels as a plain dict and is wrapped again. This
# module is imported on both sides (the worker finds advise_window through it), so both know it.
def _read_only(mapping: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(mapping)


copyreg.pickle(MappingProxyType, lambda proxy: (_read_only, (dict(proxy),)))

# In the worker process: each target's last calibration, with the facts and thresholds it was made under.
_CALIBRATIONS: dict[str, tuple[EngineFacts, Thresholds, Calibration]] = {}


def advise_window(window: Window, facts: EngineFacts, thresholds: Thresholds, active_causes: frozenset[str],
                  target: str = "", cpu_budget_s: float | None = None,
                  profile: Path | None = None) -> tuple[AdviceResult, Fitted | None]:
    """What the worker process runs: everything it needs comes in as (picklable) arguments; the advice,
    and the calibration it rests on (for the track record). ``profile``: the target's ``step_profile``
    file, read here (a file that is not one is logged and left out: the prior stands in)."""
    from exporter.advisor import advise_calibrated
    from exporter.advisor.profile import ProfileError
    from exporter.advisor.profile import load as load_profile

    evidence = None
    if profile is not None:
        try:
            evidence = load_profile(profile)
        except ProfileError as exc:
            log.warning("advisor: %s", exc)
    budget = thresholds.advice_cpu_seconds if cpu_budget_s is None else min(cpu_budget_s, thresholds.advice_cpu_seconds)
    kept = _CALIBRATIONS.get(target)
    prior = kept[2] if kept is not None and kept[0] == facts and kept[1] == thresholds else None
    result, calibration = advise_calibrated(window, facts, thresholds, (), active_causes, cpu_budget_s=budget,
                                            prior=prior, both_readings=False, profile=evidence)
    if calibration is not None:
        _CALIBRATIONS[target] = (facts, thresholds, calibration.calibration)
    return result, calibration


def _new_executor() -> ProcessPoolExecutor:
    # spawn: a fresh interpreter, not a fork of the sidecar's event loop, sockets and scheduler threads
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def _symptomatic(pipeline: TargetPipeline) -> bool:
    state = pipeline.state
    return state.status == "ok" and bool(state.diagnosis.active_symptoms)


def _filled(pipeline: TargetPipeline) -> bool:
    """The window spans the configured window_seconds (within two scrapes)."""
    return pipeline.window.duration + 2 * pipeline.target.scrape_interval >= pipeline.window.span_seconds


def _started(window: Window) -> float | None:
    """The engine's process start time at the window's last scrape, when it exports one."""
    latest = window.latest
    series = latest.scalars.get(vllm.PROCESS_START_TIME_SECONDS) if latest is not None else None
    return max(series.values()) if series else None


class AdvisorWorker:
    def __init__(self, settings: Advisor | None = None) -> None:
        self.settings = settings or Advisor()
        self._executor: ProcessPoolExecutor | None = None  # spawned at the first symptom (or knob change)
        self._advised_at: dict[str, float] = {}  # target -> monotonic time its published advice's window ended
        self.tracks: dict[str, TrackRecord] = {}  # target -> its track record, loaded at the first tick

    def _executor_now(self) -> ProcessPoolExecutor:
        if self._executor is None:
            # The answers are unpickled on the executor's own thread, which would import the model's and the
            # simulator's modules for their classes into a malloc arena of its own: imported here, on the loop's.
            import exporter.advisor.result  # noqa: F401

            self._executor = _new_executor()
        return self._executor

    def track_record(self, pipeline: TargetPipeline) -> TrackRecord:
        name = pipeline.target.name
        record = self.tracks.get(name)
        if record is None:
            record = self.tracks[name] = TrackRecord.load(file_path(pipeline.target.record_dir, name))
            if record.summary is not None or record.history:
                pipeline.advice_track = record.report()
        return record

    async def track(self, pipeline: TargetPipeline) -> None:
        """Look for a knob change since the kept window; once a whole window after it is in, score the
        advisor's what-if for it against that window (in the worker process: it simulates)."""
        record = self.track_record(pipeline)
        state, window = pipeline.state, pipeline.window
        latest = window.latest
        if record.summary is None or state.status != "ok" or latest is None:
            return
        waiting = record.move
        move = record.see(knobs(engine_facts(state.engine).model_dump()), _started(window), latest.timestamp)
        if move is not waiting:
            pipeline.advice_track = record.report()
        if move is None or not record.ready(window, _filled(pipeline)):
            return
        from exporter.advisor.calibrate import observe

        summary, measured, end = record.summary, observe(window), latest.timestamp
        loop = asyncio.get_running_loop()
        try:
            predicted, reason = await loop.run_in_executor(self._executor_now(), predict_move, summary, move,
                                                           pipeline.thresholds)
        except BrokenProcessPool:
            log.error("advisor process died while scoring a knob change of %s; starting a new one",
                      pipeline.target.name)
            self._executor = None
            return
        if record.move is not move:  # the knobs moved again meanwhile: score the newer change
            return
        comparison = record.compare(predicted, measured, end, pipeline.thresholds, reason)
        log.info("%s: %s %s -> %s; advisor's error %s", pipeline.target.name, comparison.knob, comparison.current,
                 comparison.proposed, ", ".join(f"{k} {v:+.0%}" for k, v in comparison.errors.items()
                                                if v is not None) or comparison.reason or "unknown")
        await loop.run_in_executor(None, record.save)
        pipeline.advice_track = record.report()

    def due(self, pipelines: Iterable[TargetPipeline], now: float | None = None) -> list[TargetPipeline]:
        """Withdraw advice that is stale or whose target is healthy; the targets to advise, oldest first."""
        now = time.monotonic() if now is None else now
        out: list[tuple[float, TargetPipeline]] = []
        for pipeline in pipelines:
            name = pipeline.target.name
            at = self._advised_at.get(name)
            if not _symptomatic(pipeline):
                if pipeline.advice is not None or at is not None:
                    pipeline.advice = None
                    self._advised_at.pop(name, None)
                continue
            if not _filled(pipeline):  # a sidecar just started: advice is computed on a whole window
                continue
            if at is not None and now - at >= ADVICE_MAX_AGE_SECONDS:
                pipeline.advice = None
            if at is None or now - at >= self.settings.interval:
                out.append((at if at is not None else -1.0, pipeline))
        out.sort(key=lambda item: item[0])
        return [pipeline for _, pipeline in out]

    async def run(self, pipelines: Iterable[TargetPipeline]) -> None:
        loop = asyncio.get_running_loop()
        pipelines = list(pipelines)
        for pipeline in pipelines:
            try:
                await self.track(pipeline)
            except Exception:  # the track record is a side feature too
                log.exception("advisor track record failed for %s", pipeline.target.name)
        for pipeline in self.due(pipelines):
            if not _symptomatic(pipeline):  # it recovered while an earlier target was advised
                continue
            state = pipeline.state
            window = pipeline.window.copy()  # the poll loop goes on pushing to the original
            copied, stamp = time.monotonic(), time.time()
            active = frozenset(c.id for c in state.diagnosis.active_causes if not c.informational)
            facts = engine_facts(state.engine)
            try:
                result, fitted = await loop.run_in_executor(
                    self._executor_now(), advise_window, window, facts, pipeline.thresholds, active,
                    pipeline.target.name, self.settings.cpu_budget_seconds, pipeline.target.step_profile)
                # when its window ended: the advice is withdrawn ADVICE_MAX_AGE_SECONDS later at the latest
                calibration = result.calibration
                pipeline.advice = result if calibration is None else replace(
                    result, calibration=replace(calibration, window_end=round(stamp, 3)))
                latest = window.latest
                if fitted is not None and result.observed is not None and latest is not None:
                    record = self.track_record(pipeline)
                    if record.keep(Summary(fitted, result.observed, knobs(facts.model_dump()), _started(window),
                                           latest.timestamp)):
                        await loop.run_in_executor(None, record.save)
                        pipeline.advice_track = record.report()
            except BrokenProcessPool:  # the worker died (killed, out of memory): a new one next time
                log.error("advisor process died while advising %s; starting a new one", pipeline.target.name)
                self._executor, pipeline.advice = None, None
            except Exception:  # the advisor is a side feature: it never stops the diagnosis
                log.exception("advisor failed for %s", pipeline.target.name)
                pipeline.advice = None
            # Due again one interval later, whatever happened: a failing target is not retried every tick.
            self._advised_at[pipeline.target.name] = copied

    def close(self) -> None:
        """Stop now: a calibration under way is abandoned, not waited for (it may take seconds)."""
        if self._executor is None:
            return
        workers = list((getattr(self._executor, "_processes", None) or {}).values())  # no public handle before 3.14
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            if process.is_alive():
                process.terminate()
