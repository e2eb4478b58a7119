"""Issue 51 on a real vLLM: more replicas help under a closed load past the engine's batch capacity, and
they do not under CPU starvation beside the engine.

The first reads the session's shared KV-pressure load (loads.storm_load: 24 closed-loop streams against
max-num-seqs 16 and a KV cache they overfill), so it costs no engine time of its own. The second holds
the engine's processes to 0.2 CPUs (a cgroup-v1 CFS quota, starve.py) under the steady load for 25 s,
with the objectives the calm run of the same load sets (twice its p95), as the CPU test of
test_sidecar_e2e.py does.
"""

from __future__ import annotations

import asyncio

import pytest

from exporter.scaling import CAPACITY_REASONS

from .harness import RealVLLM, start_phase
from .loads import STORM_WINDOW, WatchedLoad
from .sidecar import RunningSidecar, sidecar_settings
from .starve import cpu_quota

pytestmark = pytest.mark.realvllm

STARVED_S, STARVED_WINDOW = 25.0, 12.0


def _scaling(docs: list[dict]) -> list[tuple[str, bool, str, float]]:
    return [(d["verdict"]["layer"], d["scaling"]["helps"], d["scaling"]["reason"], d["scaling"]["desired_replicas"])
            for d in docs]


def test_a_closed_load_past_the_batch_capacity_says_more_replicas_help(storm_load: WatchedLoad) -> None:
    settled = storm_load.settled("e2e", STORM_WINDOW)
    assert len(settled) >= 8, len(settled)
    seen = _scaling([o.doc for o in settled])
    print("storm", seen)
    late = seen[-6:]
    # the load holds more streams than max-num-seqs: a capacity cause, and more than this replica needed
    assert all(helps and reason in CAPACITY_REASONS and desired > 1.0 for _, helps, reason, desired in late), seen
    samples = settled[-1].samples
    helps = {dict(labels)["reason"]: value for (name, labels), value in samples.items()
             if name == "vllm_diag_scale_helps"}
    assert len(helps) == 1 and next(iter(helps.values())) == 1.0, helps
    desired = [value for (name, _), value in samples.items() if name == "vllm_diag_desired_replicas"]
    assert desired and desired[0] > 1.0, desired


async def test_cpu_starvation_beside_the_engine_says_they_do_not(real_vllm: RealVLLM,
                                                               calm_cpu_load: WatchedLoad) -> None:
    calm = [o.doc for o in calm_cpu_load.ok("calm")][-6:]
    assert calm
    slo = {key: 2 * max(d["signals"][key] for d in calm) for key in ("ttft_p95_seconds", "itl_p95_seconds")}
    settings = sidecar_settings(real_vllm, window=STARVED_WINDOW, interval=1.0, slo=slo, cpu={"pid": real_vllm.pid})
    docs: list[dict] = []
    async with RunningSidecar(settings) as sidecar:
        load = start_phase(real_vllm.base_url, "steady", duration_s=STARVED_S)
        with cpu_quota(real_vllm.pids(), cpus=0.2):
            while not load.done():
                await asyncio.sleep(1)
                docs.append(await sidecar.doc())
        await load
    seen = _scaling([d for d in docs if d["state"] == "ok"])
    print("starved", seen)
    late = seen[-6:]
    assert late and late[-1][0] == "cpu", seen  # the diagnosis names the CPU (test_sidecar_e2e.py checks why)
    cpu = [(helps, desired) for layer, helps, reason, desired in late if reason == "cpu"]
    assert cpu and all(not helps and desired == 1.0 for helps, desired in cpu), seen
    # whatever the verdict said on the way in, more replicas were never asked for once the CPU was named
    assert not any(helps for _, helps, _, _ in late), seen
