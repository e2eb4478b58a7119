"""The five worked cases of the method, the healthy-like scenarios (a correct diagnosis says ``none``), and the
faults added with the structured rules (restarts, preemption storms, LoRA slots, speculative decoding)."""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from exporter.simulator.engine import (
    CostModel,
    EngineConfig,
)
from exporter.simulator.scenarios.model import Expected, Scenario, chat, lognormal, single
from exporter.simulator.workload import (
    Arrivals,
    PrefixSpec,
    RequestClass,
)

# The five worked cases of the method.

_CASE1 = Scenario(
    name="case1-slow-first-token",
    description=(
        "Case 1: slow first token, generation fine. Bursts of ~6.5k-token prompts (2.5k shared "
        "instructions + ~4k of data) against a 1024 budget: TTFT rises, ITL stays normal, GPU "
        "medium, the waiting queue builds during bursts and drains after."
    ),
    knobs="budget 1024; bursty 0.4 -> 4.5 req/s for 40 s every 180 s; 2 groups x 2500 shared "
    "+ ~4000 own tokens",
    engine=EngineConfig(max_num_batched_tokens=1024),
    workload=single(
        RequestClass(
            name="analysis",
            arrivals=Arrivals("bursty", rate=0.4, burst_rate=4.5, burst_s=40.0, period_s=180.0),
            prompt=lognormal(4000, 0.35, 800, 16000),
            output=lognormal(200, 0.5, 10, 1000),
            prefix=PrefixSpec(groups=2, shared_len=2500),
            max_tokens=1024,
        )
    ),
    expected=Expected(
        verdict="scheduler", symptoms=("A",), causes=("A4",), also_possible=("A1", "A2", "F")
    ),
    case="case 1",
)


_CASE2 = Scenario(
    name="case2-stutter",
    description=(
        "Case 2: stuttering tokens, total throughput fine. Interactive chat shares a pool "
        "tuned for throughput (budget 16384) with an offline batch of 4k-token summaries; "
        "ITL worsens with concurrency."
    ),
    knobs="budget 16384, max_num_seqs 512; chat 10 req/s + batch 1.5 req/s of ~4k tokens; "
    "ITL objective 50 ms (interactive streaming)",
    engine=EngineConfig(max_num_batched_tokens=16384, max_num_seqs=512),
    workload=single(
        chat(10.0),
        RequestClass(
            name="batch",
            arrivals=Arrivals("steady", rate=1.5),
            prompt=lognormal(4000, 0.3, 1000, 24000),
            output=lognormal(300, 0.5, 20, 1000),
            max_tokens=1024,
        ),
    ),
    expected=Expected(verdict="scheduler", symptoms=("B",), causes=("B1",), also_possible=("B2", "B3", "F")),
    case="case 2",
    slo={"ttft": {"threshold_seconds": 2.5, "target": 0.95}, "itl": {"threshold_seconds": 0.05, "target": 0.95}},
)


_CASE3 = Scenario(
    name="case3-gpu-40pct",
    description=(
        "Case 3: GPU at ~40 %. Four cores for API server + engine core under contention; many "
        "short streamed requests make detokenisation and streaming eat the API server's CPU; "
        "few requests run at once."
    ),
    knobs="cpu_cores 4, cpu_share 0.185, frontend_cost_scale 4, 300 us of API-server CPU per "
    "streamed token; 8.5 req/s, ~300-token prompts, ~50 output",
    engine=EngineConfig(
        cpu_cores=4, cpu_share=0.185, frontend_cost_scale=4.0, costs=CostModel(output_per_token_s=3e-4)
    ),
    workload=single(
        chat(
            8.5,
            prompt=lognormal(300, 0.5, 10, 2000),
            output=lognormal(50, 0.5, 5, 800),
            prefix=PrefixSpec(groups=2, shared_len=200),
        )
    ),
    expected=Expected(verdict="cpu", symptoms=("C",), causes=("C1",), also_possible=("A", "A3", "F")),
    case="case 3",
)


_CASE4 = Scenario(
    name="case4-peak-jitter",
    description=(
        "Case 4: latency jitter at peak. Mean latency is fine, but traffic peaks with unbounded "
        "output tails exhaust a modest KV cache: preemptions cluster in the peaks and P95/P99 "
        "blow up."
    ),
    knobs="gpu_memory_utilization 0.4; bursty 0.8 -> 5 req/s for 40 s every 180 s; outputs "
    "lognormal mean 700 (sigma 1.0), max_tokens unset",
    engine=EngineConfig(gpu_memory_utilization=0.4),
    workload=single(
        chat(
            0.8,
            arrivals=Arrivals("bursty", rate=0.8, burst_rate=5.0, burst_s=40.0, period_s=180.0),
            prompt=lognormal(1200, 0.5, 50, 8000),
            output=lognormal(700, 1.0, 10, 16000),
            prefix=PrefixSpec(),
            max_tokens=None,
        )
    ),
    expected=Expected(
        verdict="kv_cache", symptoms=("D",), causes=("D",), also_possible=("A", "A2", "C", "C3", "E", "F")
    ),
    case="case 4",
)


_CASE5 = Scenario(
    name="case5-low-prefix-hit",
    description=(
        "Case 5: low prefix hit. Many similar requests, but the few-shot examples come in one "
        "of six orders and 80 % of requests carry a trace id injected at token 200 of the "
        "system prompt: no TTFT gain from caching."
    ),
    knobs="3 groups x 1500 tokens; variants 6 (few-shot order); instability 0.8 (trace id at "
    "token 200); 4 req/s",
    engine=EngineConfig(),
    workload=single(
        chat(
            4.0,
            prefix=PrefixSpec(
                groups=3, shared_len=1500, variants=6, instability=0.8, dynamic_pos=200,
                dynamic_len=10,
            ),
        )
    ),
    expected=Expected(verdict="request", symptoms=("F",), causes=("F1",), also_possible=("A", "A5", "A1")),
    case="case 5",
    # "No TTFT gain": 99 % of first tokens within 250 ms, which ~3.5 % miss and caching would meet.
    slo={"ttft": {"threshold_seconds": 0.25, "target": 0.99}, "itl": {"threshold_seconds": 0.1, "target": 0.95}},
)


# Healthy-like scenarios: a correct diagnosis says `none` (informational findings at most).

_LOW_TRAFFIC = Scenario(
    name="low-traffic",
    description=(
        "A few chat requests per second on a big engine, all well inside their objectives: "
        "small batches and an idle GPU are spare capacity, not a symptom."
    ),
    knobs="1.5 req/s chat; budget 8192, max_num_seqs 256",
    engine=EngineConfig(),
    workload=single(chat(1.5, prefix=PrefixSpec(groups=2, shared_len=600))),
    expected=Expected(verdict="none", also_possible=("C2",)),
    case="healthy",
)


_RAG = Scenario(
    name="rag-shared-prefix",
    description=(
        "Retrieval-augmented answers: a short shared system prompt (128 tokens) in front of "
        "~600 tokens of documents unique to each request. The token-weighted hit ratio is "
        "~20 %, all the prompts can share; every objective is met."
    ),
    knobs="3 req/s; 128-token shared system prompt + ~600 unique document tokens; ~200 output",
    engine=EngineConfig(),
    workload=single(
        chat(
            3.0,
            prompt=lognormal(600, 0.3, 200, 3000),
            output=lognormal(200, 0.5, 10, 1000),
            prefix=PrefixSpec(groups=1, shared_len=128),
        )
    ),
    expected=Expected(verdict="none", also_possible=("F",)),
    case="healthy (F is information)",
)


_SATURATED = Scenario(
    name="saturated-within-slo",
    description=(
        "A KV cache sized for the load: admission keeps it near full, a request sometimes "
        "waits a step, and every objective is met. V1's efficient operating point, not a "
        "headroom problem."
    ),
    knobs="gpu_memory_utilization 0.36 (~3.9k blocks), max_num_seqs 36; 4.2 req/s; ~1500 prompt, "
    "~300 output (max_tokens 512)",
    engine=EngineConfig(gpu_memory_utilization=0.36, max_num_seqs=36),
    # 4.2 req/s, not the 4.6 it had: at 4.6 some draws (seeds 11, 13, 14) queue past the first-token
    # objective for 14-25 % of the run, which contradicts "every objective is met" (docs/accuracy.md).
    workload=single(
        chat(
            4.2,
            prompt=lognormal(1500, 0.3, 100, 6000),
            output=lognormal(300, 0.4, 20, 512),
            prefix=PrefixSpec(),
            max_tokens=512,
        )
    ),
    expected=Expected(verdict="none", also_possible=("E", "F")),
    case="healthy (E is information)",
    # A throughput-sized pool: 95 % of token gaps within 100 ms (~2.5 % of them wait a step longer).
    slo={"itl": {"threshold_seconds": 0.1, "target": 0.95}},
)


_DP_RESTART = Scenario(
    name="dp-restart",
    description=(
        "Two data-parallel engines behind one API server; engine 1 crashes and restarts at "
        "t=300 s while engine 0 keeps serving. Its counters start again from zero: no spike, "
        "no symptom."
    ),
    knobs="data_parallel_size 2, engine 1 restarts at 300 s; 3 req/s chat per engine",
    engine=EngineConfig(),
    workload=single(chat(3.0)),
    expected=Expected(verdict="none"),
    case="healthy (partial reset)",
    data_parallel_size=2,
    restart_engine_at=((1, 300.0),),
)


# Faulty scenarios added with the structured rules.

_PREEMPTION_STORM = Scenario(
    name="preemption-storm",
    description=(
        "Long generations on a small KV cache at high concurrency: requests are preempted and "
        "recomputed over and over, and each recompute is a prefill that stalls every stream. "
        "The stutter is the preemption's, not the token budget's."
    ),
    knobs="gpu_memory_utilization 0.36, budget 16384; 1.2 req/s; ~3000 prompt, ~1500 output, max_tokens unset",
    engine=EngineConfig(gpu_memory_utilization=0.36, max_num_batched_tokens=16384),
    workload=single(
        chat(
            1.2,
            prompt=lognormal(3000, 0.4, 300, 12000),
            output=lognormal(1500, 0.6, 100, 6000),
            prefix=PrefixSpec(),
            max_tokens=None,
        )
    ),
    expected=Expected(verdict="kv_cache", symptoms=("D",), causes=("D",),
                      also_possible=("A", "A2", "C", "C3", "E", "F")),
    case="D (B explained)",
    # Streams feed another model, so inter-token latency has a tight objective that the storm breaks.
    slo={"ttft": {"threshold_seconds": 2.5, "target": 0.95}, "itl": {"threshold_seconds": 0.025, "target": 0.95}},
)


_COMPUTE_BOUND = Scenario(
    name="compute-bound",
    description=(
        "A quantised checkpoint whose kernels have no fast path on this GPU (dequantise, then "
        "an unfused matmul, in eager mode): every step reads the weights at ~4 % of HBM "
        "bandwidth, so decode crawls on a small batch while the GPU is never idle. vLLM runs "
        "with --enable-mfu-metrics."
    ),
    knobs="bandwidth efficiency 0.04, compute efficiency 0.05, 6 ms per-step launch overhead; "
    "--enable-mfu-metrics; 1 req/s chat",
    engine=EngineConfig(
        enable_mfu_metrics=True,
        costs=CostModel(bandwidth_efficiency=0.04, compute_efficiency=0.05, gpu_step_fixed_s=0.006),
    ),
    workload=single(chat(1.0)),
    expected=Expected(verdict="gpu_compute", symptoms=("B",), causes=("B4",), also_possible=("A", "A1", "F")),
    case="B4 (gpu_compute)",
)


# An effect without a known cause: what the catalog does not model must read `unknown`, never `none`.

_LORA_SLOTS = Scenario(
    name="lora-slots",
    description=(
        "Two LoRA adapters (two tenants' fine-tunes) on one engine started with --enable-lora --max-loras 1, "
        "under light load: while one adapter's requests run, the other's wait for the slot. vLLM counts them "
        "as waiting `deferred`, not for capacity, and its lora_requests_info names two adapters in flight "
        "over the window for one slot: requests wait for an adapter slot (A6), KV has room."
    ),
    knobs="--enable-lora, max_loras 1; two adapters at 0.5 req/s each, chat (~300-token prompts, ~250 output)",
    engine=EngineConfig(max_loras=1, enable_lora=True),
    workload=single(replace(chat(0.5, name="tenant-a"), lora=1), replace(chat(0.5, name="tenant-b"), lora=2)),
    expected=Expected(verdict="scheduler", symptoms=("A",), causes=("A6",), also_possible=("C2", "F")),
    case="A6 (scheduler)",
)


# Speculative decoding: one output event carries 1 + the accepted draft tokens, and vLLM observes one
# inter-token gap per event. The objective (99 % of token gaps within 25 ms, a bucket edge) is judged per
# token: each event's gap divided by the tokens it carried. Per event, the healthy run would miss it.
_SPEC_SLO: Final = {"itl": {"threshold_seconds": 0.025, "target": 0.99}}


_SPEC_HEALTHY = Scenario(
    name="speculative-healthy",
    description=(
        "Busy interactive chat with speculative decoding (3 draft tokens, 80 % of drafts accepted in turn: "
        "about 65 % acceptance, ~3 tokens per output event). About 5 % of the output events come more than "
        "25 ms apart, but per token the stream is well within its 25 ms objective: no stutter."
    ),
    knobs="--speculative-config num_speculative_tokens 3 (acceptance 0.8 per position); chat 12 req/s; "
    "ITL objective 99 % within 25 ms",
    engine=EngineConfig(num_speculative_tokens=3, spec_acceptance=0.8),
    workload=single(chat(12.0)),
    expected=Expected(verdict="none"),
    case="healthy (speculative)",
    slo=_SPEC_SLO,
)


_SPEC_COLLAPSE = Scenario(
    name="speculative-collapse",
    description=(
        "The same deployment after the traffic changed under its drafter: 10 % of drafts accepted in turn "
        "(about 4 % acceptance). Each verify step still computes the three draft positions and emits about one "
        "token, the batch grows, and the per-token gaps miss the 25 ms objective: drafts mostly rejected (B5)."
    ),
    knobs="--speculative-config num_speculative_tokens 3 (acceptance 0.1 per position); chat 12 req/s; "
    "ITL objective 99 % within 25 ms",
    engine=EngineConfig(num_speculative_tokens=3, spec_acceptance=0.1),
    workload=single(chat(12.0)),
    expected=Expected(verdict="gpu_compute", symptoms=("B",), causes=("B5",), also_possible=("B1", "B3")),
    case="B5 (gpu_compute)",
    slo=_SPEC_SLO,
)

CASES: tuple[Scenario, ...] = (
    _CASE1, _CASE2, _CASE3, _CASE4, _CASE5, _LOW_TRAFFIC, _RAG, _SATURATED, _DP_RESTART, _PREEMPTION_STORM,
    _COMPUTE_BOUND, _LORA_SLOTS, _SPEC_HEALTHY, _SPEC_COLLAPSE,
)
