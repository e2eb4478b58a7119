"""Scenarios of the features a deployment may run: disaggregated prefill/decode and KV offload, LoRA,
data-parallel engines, sleep mode."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from exporter.simulator.engine import (
    CostModel,
    EngineConfig,
)
from exporter.simulator.scenarios.faults import _EVICTION
from exporter.simulator.scenarios.model import Expected, Scenario, chat, lognormal, single
from exporter.simulator.workload import (
    Arrivals,
    PrefixSpec,
    Workload,
)

# A decode instance of a P/D pair (NIXL, kv_role kv_consumer): every request arrives with its prompt prefilled on
# a prefill instance, and waits, deferred, while its KV crosses the link (~1,500-token RAG prompts: 200 MB each
# for Llama-3.1-8B). Its first token is judged against the decode side's own objective: 95 % within 250 ms.
_PD_SLO: Final = {"ttft": {"threshold_seconds": 0.25, "target": 0.95}}


_PD_KNOBS: Final = "--kv-transfer-config kv_connector NixlConnector, kv_role kv_consumer; RAG chat 5 req/s, ~1500 " \
    "prompt, ~250 output; TTFT objective 95 % within 250 ms"


def _pd_decode(**kv: Any) -> EngineConfig:
    return EngineConfig(kv_role="kv_consumer", **kv)


def _pd_workload() -> Workload:
    return single(chat(5.0, prompt=lognormal(1500, 0.4, 200, 6000), prefix=PrefixSpec()))


_PD_HEALTHY = Scenario(
    name="pd-decode-healthy",
    description=(
        "The decode instance of a disaggregated pair on RDMA (25 GB/s): a prompt's KV arrives in about 10 ms, "
        "requests wait deferred for it (not for capacity), nearly every prompt token arrives by transfer. "
        "Healthy: the deferred queue is no scheduler queue."
    ),
    knobs=_PD_KNOBS + "; link 25 GB/s",
    engine=_pd_decode(),
    workload=_pd_workload(),
    expected=Expected(verdict="none"),
    case="healthy (P/D decode)",
    slo=_PD_SLO,
)


_PD_SLOW = Scenario(
    name="pd-decode-slow-transfer",
    description=(
        "The same decode instance after NIXL fell back to TCP (1.5 GB/s): a prompt's KV takes ~130 ms alone, "
        "~290 ms on average on a link 65 % busy where loads queue behind each other, and requests spend most "
        "of their first-token time waiting deferred for KV: KV transfer slow (A7, distributed)."
    ),
    knobs=_PD_KNOBS + "; link 1.5 GB/s",
    engine=_pd_decode(kv_transfer_bandwidth=1.5e9),
    workload=_pd_workload(),
    expected=Expected(verdict="distributed", symptoms=("A",), causes=("A7",)),
    case="A7 (distributed)",
    slo=_PD_SLO,
)


_PD_FAILING = Scenario(
    name="pd-decode-failing-transfer",
    description=(
        "The decode instance while 5 % of its KV loads fail (a peer's NIXL agent restarting, a flaky NIC): "
        "with vLLM's default kv_load_failure_policy (fail) each failed load errors its request. "
        "KV transfer failing (A8, distributed)."
    ),
    knobs=_PD_KNOBS + "; link 25 GB/s, 5 % of loads fail",
    engine=_pd_decode(kv_transfer_failure_rate=0.05),
    workload=_pd_workload(),
    expected=Expected(verdict="distributed", symptoms=("A",), causes=("A8",)),
    case="A8 (distributed)",
    slo=_PD_SLO,
)


# The cache-eviction deployment with a CPU offload tier of 100,000 blocks (200 GB, --kv-offloading-size 200):
# the prefixes the GPU cache evicts come back from host memory by a copy, not a prefill.
_OFFLOAD = Scenario(
    name="kv-offload-eviction",
    description=(
        "Hundreds of distinct 3000-token prefixes against a small GPU KV cache, as in cache-eviction, but with "
        "a CPU offload tier that holds them all: the GPU prefix cache still misses, the offload tier serves "
        "the misses by a copy over PCIe, and first tokens stay within their objective. A cheaper miss: no "
        "finding beyond information."
    ),
    knobs="gpu_memory_utilization 0.5; --kv-offloading-size 200 (100,000 blocks); 200 prefix groups x 3000 "
    "tokens; 2.6 req/s, ~600 output",
    engine=EngineConfig(gpu_memory_utilization=0.5, kv_offload_blocks=100_000),
    workload=_EVICTION.workload,
    expected=Expected(verdict="none", also_possible=("C2", "E", "F", "F6")),
    case="healthy (KV offload)",
)


# LoRA, data parallel and sleep (issue 29): healthy variants and the faults each feature adds.

_LORA_HEALTHY = Scenario(
    name="lora-healthy",
    description=(
        "The same two tenants' adapters on an engine started with --max-loras 2: both fit one batch, no "
        "request waits for a slot, every objective is met."
    ),
    knobs="--enable-lora, max_loras 2; two adapters at 0.5 req/s each, chat",
    engine=EngineConfig(max_loras=2, enable_lora=True),
    workload=single(replace(chat(0.5, name="tenant-a"), lora=1), replace(chat(0.5, name="tenant-b"), lora=2)),
    expected=Expected(verdict="none", also_possible=("C2", "F")),
    case="healthy (LoRA)",
)


_DP_HEALTHY = Scenario(
    name="dp-healthy",
    description=(
        "Two data-parallel engines behind one API server, each with its share of steady chat traffic: "
        "their load and latency match, every objective is met."
    ),
    knobs="data_parallel_size 2; 3 req/s chat per engine",
    engine=EngineConfig(),
    workload=single(chat(3.0)),
    expected=Expected(verdict="none"),
    case="healthy (data parallel)",
    data_parallel_size=2,
)


_DP_SLOW_ENGINE = Scenario(
    name="dp-slow-engine",
    description=(
        "Two data-parallel engines behind a round-robin balancer; engine 1's GPU is stuck at low memory "
        "clocks (under a tenth of its bandwidth): its streams crawl and its batch grows while engine 0 serves "
        "at full pace. Merged, the token gaps look like a stutter (a tail far above the median): one slow "
        "engine among fast ones (G2), not a scheduling cause."
    ),
    knobs="data_parallel_size 2; engine 1 at bandwidth efficiency 0.06 (engine 0: 0.8); 3 req/s chat per engine",
    engine=EngineConfig(),
    workload=single(chat(3.0)),
    expected=Expected(verdict="distributed", symptoms=("G",), causes=("G2",),
                      also_possible=("A", "A0", "A2", "B", "B0", "F")),
    case="G2 (distributed)",
    data_parallel_size=2,
    engine_overrides=((1, EngineConfig(costs=CostModel(bandwidth_efficiency=0.06))),),
)


_SLEEPING = Scenario(
    name="sleeping",
    description=(
        "An engine started with --enable-sleep-mode served chat, then its traffic moved elsewhere and the "
        "operator put it to sleep (POST /sleep?level=1: weights offloaded to CPU). vLLM's engine_sleep_state "
        "says weights_offloaded: the state is sleeping, judged by no latency rule, paging no one."
    ),
    knobs="--enable-sleep-mode; 2 req/s chat until 90 s, asleep (level 1) from 100 s",
    engine=EngineConfig(sleep_at=100.0, sleep_level=1),
    workload=single(chat(2.0, arrivals=Arrivals("steady", rate=2.0, stop_s=90.0))),
    expected=Expected(verdict="none"),
    case="sleeping (state)",
    expected_state="sleeping",
)

FEATURES: tuple[Scenario, ...] = (
    _PD_HEALTHY, _PD_SLOW, _PD_FAILING, _OFFLOAD, _LORA_HEALTHY, _DP_HEALTHY, _DP_SLOW_ENGINE, _SLEEPING,
)
