"""End to end: a real vLLM (CPU build) -> the sidecar -> its metrics, JSON and verdicts.

Each test drives one load phase of the harness against the session's real vLLM and reads
the sidecar's own endpoints while the load runs. The KV-pressure, light and calm CPU loads are
shared with test_diagnosis_trust.py (loads.py: one run each, one sidecar per file watching it).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from exporter.record import capture_timestamp, is_capture_name, read_capture

from . import loads
from .conftest import Engines
from .harness import RealVLLM, start_phase
from .loads import WatchedLoad
from .sidecar import RunningSidecar, sidecar_settings
from .starve import cpu_quota

pytestmark = pytest.mark.realvllm

SYMPTOM = "vllm_diag_symptom_active"


def _active(doc: dict) -> dict[str, list[str]]:
    return {s["id"]: [c["id"] for c in s["causes"]] for s in doc["symptoms"]}


def test_kv_pressure_preempts_and_offline_replay_matches_live(storm_load: WatchedLoad) -> None:
    first = storm_load.before["e2e"]
    # One scrape is no evidence: no rate exists yet, so nothing may be diagnosed.
    assert first["state"] == "insufficient_evidence" and first["verdict"]["layer"] == "unknown"
    seen = storm_load.seen["e2e"]
    preemption_rates = [o.samples.get(("vllm_diag_preemption_rate", ()), 0.0) for o in seen]
    kv_max = [o.samples.get(("vllm_diag_kv_cache_usage_ratio", (("stat", "max"),)), 0.0) for o in seen]
    assert len(seen) >= 30, [o.t for o in seen]
    under_pressure = seen[29].doc  # 30 s into the load: the 20 s window holds only pressure
    summary, live, record = storm_load.summary, storm_load.final["e2e"], storm_load.record_dir
    assert record is not None

    assert summary.completed > 0, summary
    assert max(preemption_rates) > 0, preemption_rates
    assert max(kv_max) >= 0.9, kv_max
    # Sustained KV pressure: symptom D, verdict kv_cache (after the window filled with it).
    assert "D" in _active(under_pressure), under_pressure["symptoms"]
    assert under_pressure["verdict"]["layer"] == "kv_cache", under_pressure["layer_scores"]

    # The same scrapes, replayed offline through `vllm-diag diagnose`, give the same signals.
    stamped = sorted((capture_timestamp(read_capture(p).decode()), p) for p in record.iterdir()
                     if is_capture_name(p.name))
    files = [path for stamp, path in stamped if stamp is not None and stamp <= live["last_scrape_at"]]
    proc = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "diagnose", *map(str, files), "--interval", "1", "--window", "20",
         "--format", "json"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    offline = json.loads(proc.stdout)["targets"][0]
    assert offline["last_scrape_at"] == live["last_scrape_at"]
    assert offline["signals"] == live["signals"]


async def test_shared_prefix_hits_the_cache(real_vllm: RealVLLM) -> None:
    ratios = []
    async with RunningSidecar(sidecar_settings(real_vllm, window=10, interval=1.0)) as sidecar:
        load = start_phase(real_vllm.base_url, "prefix", duration_s=15)
        while not load.done():
            await asyncio.sleep(1)
            value = (await sidecar.samples()).get(("vllm_diag_prefix_cache_hit_ratio", ()))
            if value is not None:
                ratios.append(value)
        await load
    assert ratios and max(ratios) >= 0.5, ratios


def test_light_load_is_healthy_and_the_verdict_does_not_flap(light_load: WatchedLoad) -> None:
    docs = [o.doc for o in light_load.ok("e2e")]
    verdicts = [doc["verdict"]["layer"] for doc in docs]
    assert len(verdicts) >= 20, verdicts
    changes = sum(1 for a, b in zip(verdicts, verdicts[1:]) if a != b)
    assert changes <= 1, verdicts
    settled = docs[-1]
    assert settled["verdict"]["layer"] == "none", (settled["layer_scores"], settled["symptoms"])
    # Issue 11: spare capacity may be shown (C2 "underutilised"), as information only.
    assert [s for s in settled["symptoms"] if not s["informational"]] == [], settled["symptoms"]


async def test_prompts_longer_than_the_budget_are_symptom_a_not_d(real_vllm_engines: Engines) -> None:
    # A deployment that wants first tokens within 60 ms, with a 32-token budget: each 900-token
    # prompt needs about 28 chunks, so the first token waits for many scheduling rounds. (Measured on a
    # quiet 2-core machine: TTFT p50 ~75 ms, p95 ~99 ms; a 100 ms objective sat on the edge and failed
    # or passed with the machine's speed. 60 ms is a bucket edge of vLLM's TTFT histogram.)
    small_budget = real_vllm_engines.get(**loads.SMALL_ENGINE)
    settings = sidecar_settings(small_budget, window=15, interval=1.0,
                                slo={"ttft_p95_seconds": 0.06, "itl_p95_seconds": 0.25})
    async with RunningSidecar(settings) as sidecar:
        load = start_phase(small_budget.base_url, "chunked", duration_s=25)
        seen = []
        while not load.done():
            await asyncio.sleep(1)
            seen.append(await sidecar.doc())
        await load
    late = [d for d in seen[-8:] if d["state"] == "ok"]
    assert late
    for doc in late:
        active = _active(doc)
        assert "D" not in active, active
    assert any(set(_active(d).get("A", [])) & {"A1", "A4"} for d in late), [d["symptoms"] for d in late]


CPU_WINDOW = 12.0


async def _cpu_on_off(vllm: RealVLLM, on_s: float, off_s: float,
                      slo: dict[str, float]) -> tuple[list[dict], list[dict]]:
    """One sidecar through a CPU quota of 0.2 CPUs for ``on_s`` and then none for ``off_s``, under the steady
    load: its documents while the quota held and after it was lifted."""
    settings = sidecar_settings(vllm, window=CPU_WINDOW, interval=1.0, slo=slo, cpu={"pid": vllm.pid})
    on: list[dict] = []
    off: list[dict] = []
    async with RunningSidecar(settings) as sidecar:
        load = start_phase(vllm.base_url, "steady", duration_s=on_s + off_s)
        loop = asyncio.get_running_loop()
        with cpu_quota(vllm.pids(), cpus=0.2):
            until = loop.time() + on_s
            while loop.time() < until:
                await asyncio.sleep(1)
                on.append(await sidecar.doc())
        until = loop.time() + off_s
        while loop.time() < until:
            await asyncio.sleep(1)
            off.append(await sidecar.doc())
        await load
    return [d for d in on if d["state"] == "ok"], [d for d in off if d["state"] == "ok"]


async def test_cpu_starvation_is_named_while_it_lasts_and_released_after(real_vllm: RealVLLM,
                                                                         calm_cpu_load: WatchedLoad) -> None:
    calm = [o.doc for o in calm_cpu_load.ok("calm")]
    problem = loads.calm_cpu_scores_problem([d["signals"]["cpu_starvation_score"] for d in calm[-6:]])
    assert problem is None, (problem, [d["signals"]["cpu_inputs"] for d in calm[-6:]])

    # The deployment's objectives: what this load gets with its CPU, with room (2x the calm p95). A
    # CPU cause is named only with a user-visible effect, so the starved run must miss one of them.
    slo = {key: 2 * max(d["signals"][key] for d in calm[-6:]) for key in ("ttft_p95_seconds", "itl_p95_seconds")}
    starved, after = await _cpu_on_off(real_vllm, 25, CPU_WINDOW + 4, slo)
    late = starved[-6:]
    assert late
    scores = [d["signals"]["cpu_starvation_score"] for d in late]
    assert all(s is not None and s >= 0.5 for s in scores), [d["signals"]["cpu_inputs"] for d in late]
    missed = [key for key in slo if (late[-1]["signals"][key] or 0.0) > slo[key]]
    assert missed, (slo, {key: late[-1]["signals"][key] for key in slo})  # starvation has an effect
    assert late[-1]["verdict"]["layer"] == "cpu", (late[-1]["layer_scores"], late[-1]["symptoms"])
    assert "run_queue_wait_share" in late[-1]["signals"]["cpu_inputs"]
    # Lifted: the score falls over the recent horizon, the stutter the window still holds stays the CPU's
    # (recovering), never another layer's, and once the window holds none of the starved scrapes, nothing.
    assert after
    assert after[-1]["signals"]["cpu_starvation_score"] < 0.5, after[-1]["signals"]["cpu_inputs"]
    named = [(d["verdict"]["layer"], d["verdict"].get("recovering")) for d in after]
    assert all(layer in ("none", "cpu") for layer, _ in named), named
    assert named[-1][0] == "none" or named[-1] == ("cpu", True), named
