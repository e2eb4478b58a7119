"""The loads that more than one test file reads, each run once per session on the session's vLLM.

test_diagnosis_trust.py and test_sidecar_e2e.py used to drive the same light load, the same KV
pressure and the same calm CPU load each for themselves (a minute and a half of load twice), and
test_harness_smoke.py a third KV pressure. Now
one run of each is watched by one in-process sidecar per reader, with that reader's own window,
objectives and recording, and every test asserts on its sidecar's view of the one run (or on
vLLM's own /metrics, scraped beside them). The
session fixtures that run them are in conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from exporter.config import Settings
from exporter.server import SIDECAR

from .harness import LoadSummary, RealVLLM, start_phase
from .sidecar import RunningSidecar, sidecar_settings
from .starve import CPU_V1, cgroup_v2_root, cpu_quota, own_cgroups

# Objectives a 2-layer, hidden-128 model on two shared CPU cores meets with one or two streams.
HEALTHY_SLO = {"ttft_p95_seconds": 1.0, "itl_p95_seconds": 0.25}
# An ITL objective the storm misses, so B has an effect to explain (and must still not fire). The
# storm's ITL p95 measured 23-44 ms on a loaded 2-core machine and 9.5-9.7 ms on a quiet one (the
# tiny CPU model's decode step); the objective sits under the step floor on purpose: 4 ms.
STORM_SLO = {"ttft_p95_seconds": 0.5, "itl_p95_seconds": 0.004}

# The one engine with non-default flags: a 32-token budget (prompts need many chunks: symptom A, not
# D), twice the harness's KV bytes and 4 sequences (the harness's overrides are applied). One start
# serves both readers; the test that stops it runs last (conftest.py).
SMALL_ENGINE: dict[str, int] = {"max_num_batched_tokens": 32, "kv_cache_memory_bytes": 2 * 3 * 1024 * 1024,
                                "max_num_seqs": 4}

# One stream at a time (the `light` phase): a few requests/s, no batches; within any SLO.
LIGHT_S, LIGHT_WINDOW = 32.0, 15.0
# 24 streams > max-num-seqs 16, KV usage 1.0, ~30 preemptions per 20 s (the `pressure` phase).
STORM_S, STORM_WINDOW = 35.0, 20.0
# Four streams (the `steady` phase) with the vLLM tree in cgroups of its own sized for the whole host.
CALM_S, CALM_WINDOW = 26.0, 12.0


@dataclass
class Observation:
    t: float  # seconds since the load started
    doc: dict[str, Any]  # the sidecar's /api/v1/diagnosis target
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]  # its /metrics


# A calm engine's CPU-starvation score: low as a rule, and never at the line where the cpu layer is blamed. At
# 1 s scrapes the recent horizon is 3 s, and on 2 cores the odd second when vLLM's own threads and the load
# generator queue for the cores reads up to ~0.35 (run-queue wait 0.45-0.50); that is not starvation.
CALM_SCORE_MEDIAN = 0.2


def calm_cpu_scores_problem(scores: list[float | None]) -> str | None:
    """Why these CPU-starvation scores of a calm engine are not calm, or None."""
    from exporter.catalog.thresholds import Thresholds

    blame = Thresholds().cpu_starvation_score
    if not scores or any(s is None for s in scores):
        return f"a score is missing: {scores}"
    known = [s for s in scores if s is not None]
    if max(known) >= blame:
        return f"a score reached the blame line {blame}: {known}"
    if statistics.median(known) > CALM_SCORE_MEDIAN:
        return f"median score over {CALM_SCORE_MEDIAN}: {known}"
    return None


@dataclass
class WatchedLoad:
    """One load phase as each of its sidecars saw it, once a second while the load ran."""

    phase: str
    seconds: float
    summary: LoadSummary
    before: dict[str, dict[str, Any]]  # per sidecar: its document after one scrape, before the load
    seen: dict[str, list[Observation]]
    final: dict[str, dict[str, Any]]  # per sidecar: the published state after polling stopped
    raw_before: str = ""  # vLLM's own /metrics just before the load,
    raw_during: list[str] = field(default_factory=list)  # every second while it ran,
    raw_after: str = ""  # and once it had drained (for tests that read vLLM, not the sidecar)
    record_dir: Path | None = None  # where a sidecar recorded its scrapes (record_dir), if one did

    def settled(self, sidecar: str, window: float) -> list[Observation]:
        """Evaluations whose window holds only this load (one more second for the scrape lag)
        while the load still issued requests (not draining)."""
        return [o for o in self.seen[sidecar] if o.doc["state"] == "ok" and window + 1 <= o.t <= self.seconds]

    def ok(self, sidecar: str) -> list[Observation]:
        return [o for o in self.seen[sidecar] if o.doc["state"] == "ok"]


async def watch_load(vllm: RealVLLM, phase: str, seconds: float, sidecars: dict[str, Settings]) -> WatchedLoad:
    """Run ``phase`` for ``seconds`` while every sidecar polls the engine; read each, and vLLM's own
    /metrics, every second."""
    seen: dict[str, list[Observation]] = {name: [] for name in sidecars}
    raw: list[str] = []
    async with AsyncExitStack() as stack:
        running = {name: await stack.enter_async_context(RunningSidecar(settings))
                   for name, settings in sidecars.items()}
        session = await stack.enter_async_context(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)))
        # One scrape each before the load: no rate exists yet, and the window starts idle.
        before = {name: await sidecar.wait_scrapes(1) for name, sidecar in running.items()}
        raw_before = await vllm.fetch_metrics_async(session)
        t0 = time.monotonic()
        load = start_phase(vllm.base_url, phase, duration_s=seconds)
        while not load.done():
            await asyncio.sleep(1)
            t = time.monotonic() - t0
            for name, sidecar in running.items():
                seen[name].append(Observation(t, await sidecar.doc(), await sidecar.samples()))
            raw.append(await vllm.fetch_metrics_async(session))
        summary = await load
        raw_after = await vllm.fetch_metrics_async(session)
    final = {name: sidecar.final_state() for name, sidecar in running.items()}
    return WatchedLoad(phase, seconds, summary, before, seen, final, raw_before, raw, raw_after)


def cpu_sources_missing() -> str | None:
    """Why vLLM cannot get cgroups of its own here (PSI and CFS throttling), or None."""
    if cgroup_v2_root() is None:
        return "no writable cgroup-v2 hierarchy with cpu.pressure"
    if not (CPU_V1 / "cpu.cfs_quota_us").exists():
        return f"no cgroup-v1 cpu controller at {CPU_V1}"
    return None


def light_load(vllm: RealVLLM) -> WatchedLoad:
    """Readers: trust (issue 11: none under HEALTHY_SLO) and e2e (healthy, the verdict does not flap)."""
    return asyncio.run(watch_load(vllm, "light", LIGHT_S, {
        "trust": sidecar_settings(vllm, window=LIGHT_WINDOW, interval=1.0, slo=HEALTHY_SLO),
        "e2e": sidecar_settings(vllm, window=LIGHT_WINDOW, interval=1.0),
    }))


def storm_load(vllm: RealVLLM, record_dir: Path) -> WatchedLoad:
    """Readers: trust (STORM_SLO: D explains the stutter, B does not fire), e2e (preemptions, KV
    usage, D and kv_cache live; its scrapes recorded in ``record_dir`` for the offline replay) and
    the harness smoke test (vLLM's own metrics under sustained pressure)."""
    load = asyncio.run(watch_load(vllm, "pressure", STORM_S, {
        "trust": sidecar_settings(vllm, window=STORM_WINDOW, interval=1.0, slo=STORM_SLO),
        "e2e": sidecar_settings(vllm, window=STORM_WINDOW, interval=1.0, record_dir=str(record_dir)),
    }))
    load.record_dir = record_dir
    return load


def calm_cpu_load(vllm: RealVLLM) -> WatchedLoad:
    """Readers: trust (the CPU score stays low with PSI and throttling present) and e2e (the calm
    baseline before its starved run). In cgroups of its own when the host allows (else trust fails
    saying why, and e2e reads the run-queue wait alone, as it did before)."""
    settings = {"calm": sidecar_settings(vllm, window=CALM_WINDOW, interval=1.0, slo=HEALTHY_SLO,
                                         cpu={"pid": vllm.pid})}
    groups = own_cgroups(vllm.pids(), cpus=2.0) if cpu_sources_missing() is None else contextlib.nullcontext()
    with groups:
        return asyncio.run(watch_load(vllm, "steady", CALM_S, settings))


# -- none -> cause -> none on the real engine (lab.transitions_live, and the suite's short version) ------

# Each cause switched on and off beside a light load (one stream at a time) that runs throughout.
# cause -> the layer a right diagnosis names. cpu: busy loops beside the engine (a noisy neighbour on the
# same cores); cpu-quota: the engine's processes held to a CFS quota (a container CPU limit, throttled).
LIVE_CAUSES: dict[str, str] = {"cpu": "cpu", "cpu-quota": "cpu", "kv": "kv_cache"}


@dataclass
class LiveEvaluation:
    t: float  # seconds since the quiet phase began (the sidecar's scrape time)
    layer: str
    recovering: bool
    cpu_score: float | None = None
    missed: tuple[str, ...] = ()  # objectives missed over the window (the user-visible effect), by name
    itl_p99: float | None = None  # seconds, over the window


@dataclass
class LiveTransition:
    """One quiet -> cause -> quiet run as one sidecar saw it: every evaluation, and when the cause acted."""

    cause: str
    layer: str
    start: float  # seconds since the quiet phase began
    end: float
    evaluations: list[LiveEvaluation]
    background: LoadSummary | None = None
    cause_load: LoadSummary | None = None


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[list[int]]:
    """``count`` CPU-bound processes beside the engine (a noisy neighbour); each stopped by its PID on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
             for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


async def watch_transition(vllm: RealVLLM, settings: Settings, cause: str, phase_s: float,
                           loops: int = 4, background_load: str = "open-light",
                           quota: float = 0.2) -> LiveTransition:
    """Quiet for ``phase_s``, the cause for ``phase_s``, quiet for ``phase_s``, with ``background_load`` (a
    preset of the harness's PHASES; by default a light open load, as users send) throughout, while one
    in-process sidecar (``settings``) polls the engine; every evaluation it made is kept. ``cpu``: ``loops``
    busy loops beside the engine; ``cpu-quota``: the engine held to ``quota`` CPUs (a cgroup-v1 CFS quota,
    tests/realvllm/starve.py); ``kv``: the ``pressure`` load (more streams than max_num_seqs, more KV
    than the cache: the engine preempts) on top of the background one."""
    if cause not in LIVE_CAUSES:
        raise ValueError(f"unknown cause {cause!r}: one of {', '.join(LIVE_CAUSES)}")
    evaluations: list[LiveEvaluation] = []
    async with RunningSidecar(settings) as sidecar:
        app = sidecar.app[SIDECAR]
        t0 = time.time()
        background = start_phase(vllm.base_url, background_load, duration_s=3 * phase_s)
        last: float | None = None

        async def follow(until: float) -> None:
            nonlocal last
            while time.time() < until:
                await asyncio.sleep(0.25)
                for state in app.snapshot():
                    if state.status == "ok" and state.evaluated_at != last:
                        last = state.evaluated_at
                        verdict = state.diagnosis.verdict
                        score = state.signals.cpu.starvation_score if state.signals is not None else None
                        missed = tuple(sorted(n for n, o in state.objectives.items() if o.met is False))
                        itl = state.signals.latency.quantile("itl", 0.99) if state.signals is not None else None
                        evaluations.append(LiveEvaluation(state.evaluated_at - t0, verdict.layer,
                                                          verdict.recovering, score, missed, itl))

        await follow(t0 + phase_s)
        start = time.time() - t0
        cause_load = None
        if cause == "cpu":
            with busy_loops(loops):
                await follow(t0 + 2 * phase_s)
        elif cause == "cpu-quota":
            with cpu_quota(vllm.pids(), cpus=quota):
                await follow(t0 + 2 * phase_s)
        else:
            pressure = start_phase(vllm.base_url, "pressure", duration_s=phase_s)
            await follow(t0 + 2 * phase_s)
        end = time.time() - t0
        await follow(t0 + 3 * phase_s)
        summary = await background
        if cause == "kv":
            cause_load = await pressure
    return LiveTransition(cause, LIVE_CAUSES[cause], start, end, evaluations, summary, cause_load)
