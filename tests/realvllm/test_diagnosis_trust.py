"""Issue 11 on a real vLLM: no false alarm on healthy traffic, preemption explains the stutter,
and a calm engine's CPU sources (run-queue wait, PSI, CFS throttling) stay below the blame line.

Every test runs the sidecar in-process against the session's real vLLM with a SHORT window
(15-20 s, 1 s scrapes) instead of the shipped 180 s / 5 s, so that each test needs well under a
minute of load; "settled" evaluations are those after the first full window of the load.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import pytest

from .harness import RealVLLM, start_phase
from .sidecar import RunningSidecar, sidecar_settings
from .starve import cgroup_v2_root, own_cgroups

pytestmark = pytest.mark.realvllm

# Objectives a 2-layer, hidden-128 model on two shared CPU cores meets with one or two streams.
HEALTHY_SLO = {"ttft_p95_seconds": 1.0, "itl_p95_seconds": 0.25}


@dataclass
class Evaluation:
    t: float  # seconds since the load started
    doc: dict[str, Any]


def active(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Symptom id -> cause ids, for the symptoms that have an effect (informational ones left out)."""
    return {s["id"]: [c["id"] for c in s["causes"]] for s in doc["symptoms"] if not s["informational"]}


def informational_findings(doc: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(symptom, cause, cause informational?) of every symptom the document marks informational."""
    return [(s["id"], c["id"], c["informational"]) for s in doc["symptoms"] if s["informational"] for c in s["causes"]]


def explain(evaluations: list[Evaluation]) -> list[dict[str, Any]]:
    """What a failing assertion prints: per evaluation the verdict, scores, symptoms with evidence."""
    return [{"t": round(e.t, 1), "verdict": e.doc["verdict"], "layer_scores": e.doc["layer_scores"],
             "symptoms": [{"id": s["id"], "informational": s["informational"],
                           "causes": [(c["id"], c["informational"], c["strength"], c["evidence"]) for c in s["causes"]]}
                          for s in e.doc["symptoms"]],
             "signals": {k: e.doc["signals"].get(k) for k in (
                 "ttft_p95_seconds", "itl_p95_seconds", "itl_tail_ratio", "running_mean", "queued_fraction",
                 "preemptions", "preemptions_per_request", "kv_cache_usage_mean", "prefix_cache_hit_ratio",
                 "ttft_prefill_share", "cpu_starvation_score", "cpu_inputs")}}
            for e in evaluations]


async def run_and_watch(vllm: RealVLLM, phase: str, *, seconds: float, window: float,
                        slo: dict[str, float], **target: Any) -> tuple[list[Evaluation], Any]:
    """Run a load phase while the sidecar evaluates; returns the settled evaluations and the summary."""
    evaluations = []
    async with RunningSidecar(sidecar_settings(vllm, window=window, interval=1.0, slo=slo, **target)) as sidecar:
        await sidecar.wait_scrapes(1)
        t0 = time.monotonic()
        load = start_phase(vllm.base_url, phase, duration_s=seconds)
        while not load.done():
            await asyncio.sleep(1)
            doc = await sidecar.doc()
            # Settled: the window holds only this load (one more second for the scrape lag), and
            # the load is still issuing requests (not draining).
            t = time.monotonic() - t0
            if doc["state"] == "ok" and window + 1 <= t <= seconds:
                evaluations.append(Evaluation(t, doc))
        summary = await load
    return evaluations, summary


def report(name: str, evaluations: list[Evaluation]) -> None:
    """One line per settled evaluation in the captured output (pytest -rP shows it): the measurements."""
    for e in evaluations:
        sig = e.doc["signals"]
        shown = [(s["id"], [c["id"] for c in s["causes"]], s["informational"]) for s in e.doc["symptoms"]]
        print(f"{name} t={e.t:.0f} verdict={e.doc['verdict']['layer']} symptoms={shown} "
              f"ttft_p95={sig['ttft_p95_seconds']} itl_p95={sig['itl_p95_seconds']} "
              f"itl_p99={sig.get('itl_p99_seconds')} "
              f"itl_tail={sig['itl_tail_ratio']} running_mean={sig['running_mean']} "
              f"hit={sig['prefix_cache_hit_ratio']} preemptions={sig['preemptions']} "
              f"cpu={sig['cpu_starvation_score']} cpu_inputs={sig['cpu_inputs']}")


def assert_healthy(evaluations: list[Evaluation], slo: dict[str, float]) -> None:
    assert len(evaluations) >= 8, explain(evaluations)
    for e in evaluations:
        signals = e.doc["signals"]
        # The scenario itself: the load meets its objectives (else `none` would be wrong).
        assert signals["ttft_p95_seconds"] <= slo["ttft_p95_seconds"], explain([e])
        assert signals["itl_p95_seconds"] <= slo["itl_p95_seconds"], explain([e])
        assert e.doc["verdict"]["layer"] == "none", explain([e])
        assert active(e.doc) == {}, explain([e])
        # Whatever is still shown is context only, down to every cause.
        assert all(cause_info for _, _, cause_info in informational_findings(e.doc)), explain([e])


async def test_light_traffic_within_slo_is_none(real_vllm: RealVLLM) -> None:
    # One stream at a time: a few requests/s, no batches. Before issue 11 this was C2 (`request`).
    evaluations, summary = await run_and_watch(real_vllm, "light", seconds=30, window=15, slo=HEALTHY_SLO)
    report("light", evaluations)
    assert summary.failed == 0 and summary.completed > 0, summary
    assert_healthy(evaluations, HEALTHY_SLO)
    # Spare capacity may be reported, as information only: if C shows up it is C2, informational.
    shown = {(s, c) for e in evaluations for s, c, _ in informational_findings(e.doc)}
    assert {s for s, _ in shown} <= {"C", "F", "E"}, shown


async def test_rag_like_load_within_slo_is_none(real_vllm: RealVLLM) -> None:
    # Short shared system prompt (2 KV blocks) + unique ~600-token documents: only the prefix can
    # hit the cache (~10 % of prompt tokens). Before issue 11 this was F (`kv_cache`).
    evaluations, summary = await run_and_watch(real_vllm, "rag", seconds=32, window=15, slo=HEALTHY_SLO)
    report("rag", evaluations)
    assert summary.failed == 0 and summary.completed > 0, summary
    assert_healthy(evaluations, HEALTHY_SLO)
    hit = [e.doc["signals"]["prefix_cache_hit_ratio"] for e in evaluations]
    # The load is what it claims: the prefix is reused, the documents are not.
    assert all(h is not None and 0.02 <= h <= 0.3 for h in hit), hit


# An ITL objective the storm misses, so B has an effect to explain (and must still not fire). The
# storm's ITL p95 measured 23-44 ms on a loaded 2-core machine and 9.5-9.7 ms on a quiet one (the
# tiny CPU model's decode step); the objective sits under the step floor on purpose: 4 ms.
STORM_PHASE = "pressure"  # 24 streams > max-num-seqs 16, KV usage 1.0, ~30 preemptions per 20 s
STORM_SLO = {"ttft_p95_seconds": 0.5, "itl_p95_seconds": 0.004}


async def test_preemption_storm_is_kv_cache_and_explains_the_stutter(real_vllm: RealVLLM) -> None:
    window = 20
    evaluations, summary = await run_and_watch(real_vllm, STORM_PHASE, seconds=34, window=window, slo=STORM_SLO)
    report("storm", evaluations)
    assert summary.completed > 0, summary
    # Settled under the storm: preemptions in the window.
    storm = [e for e in evaluations if (e.doc["signals"]["preemptions"] or 0) > 0]
    assert len(storm) >= 8, explain(evaluations)
    for e in storm:
        signals = e.doc["signals"]
        assert signals["itl_p95_seconds"] > STORM_SLO["itl_p95_seconds"], explain([e])  # B has an effect to explain
        assert "B" not in active(e.doc), explain([e])
        # The old failure: B1/B2 named the scheduler during the storm. Nothing active may.
        assert not [c["id"] for s in e.doc["symptoms"] if not s["informational"] for c in s["causes"]
                    if c["layer"] == "scheduler"], explain([e])
    for e in storm[-5:]:
        assert "D" in active(e.doc), explain([e])
        assert e.doc["verdict"]["layer"] == "kv_cache", explain([e])


def _cpu_sources_available() -> str | None:
    if cgroup_v2_root() is None:
        return "no writable cgroup-v2 hierarchy with cpu.pressure"
    from .starve import CPU_V1

    if not (CPU_V1 / "cpu.cfs_quota_us").exists():
        return f"no cgroup-v1 cpu controller at {CPU_V1}"
    return None


async def test_calm_engine_cpu_score_stays_low_with_psi_and_throttling(real_vllm: RealVLLM) -> None:
    if (reason := _cpu_sources_available()) is not None:
        pytest.fail(f"cannot put vLLM into cgroups of its own here: {reason}", pytrace=False)
    # A container-like CPU limit sized for the load (the whole 2-core host): PSI of the vLLM
    # group and CFS throttling are then present beside the run-queue wait.
    with own_cgroups(real_vllm.pids(), cpus=2.0):
        evaluations, summary = await run_and_watch(real_vllm, "steady", seconds=26, window=12, slo=HEALTHY_SLO,
                                                   cpu={"pid": real_vllm.pid})
    report("calm-cpu", evaluations)
    assert summary.failed == 0, summary
    assert len(evaluations) >= 6, explain(evaluations)
    for e in evaluations:
        inputs = e.doc["signals"]["cpu_inputs"]
        assert {"run_queue_wait_share", "psi_some_share", "cfs_throttled_share"} <= set(inputs), inputs
        assert e.doc["signals"]["cpu_starvation_score"] <= 0.2, explain([e])
        assert e.doc["verdict"]["layer"] != "cpu", explain([e])


# An idle engine's run-queue wait share is a ratio of tiny numbers (measured 0.52-0.76 at 0.03-0.07
# cores): the score ignores it below cpu_demand_min_cores, so an idle engine on a busy host never pages.
async def test_idle_engine_cpu_score_stays_low_with_psi_and_throttling(real_vllm: RealVLLM) -> None:
    if (reason := _cpu_sources_available()) is not None:
        pytest.fail(f"cannot put vLLM into cgroups of its own here: {reason}", pytrace=False)
    window = 12
    scores, inputs = [], []
    with own_cgroups(real_vllm.pids(), cpus=2.0):
        settings = sidecar_settings(real_vllm, window=window, interval=1.0, slo=HEALTHY_SLO,
                                    cpu={"pid": real_vllm.pid})
        async with RunningSidecar(settings) as sidecar:
            await sidecar.wait_scrapes(1)
            for second in range(1, window + 8):
                await asyncio.sleep(1)
                doc = await sidecar.doc()
                if second > window:  # the window holds only idle time
                    scores.append(doc["signals"]["cpu_starvation_score"])
                    inputs.append(doc["signals"]["cpu_inputs"])
    for i in inputs:
        print(f"idle-cpu {i}")
    assert len(scores) >= 5, inputs
    assert all({"run_queue_wait_share", "psi_some_share"} <= set(i) for i in inputs), inputs
    assert all(s is not None and s <= 0.2 for s in scores), list(zip(scores, inputs))
