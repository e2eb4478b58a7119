"""Named scenarios: a deployment, its traffic, and the diagnosis the method expects for it.

Each scenario is one frozen dataclass: the engine configuration (including the facts vLLM
does not export: token budget, max_num_seqs, TP size, GPU, CPU cores and CPU contention),
the workload, and the expected diagnosis (verdict layer, symptom ids, cause ids) from the
layered method (``docs/method.md``). ``docs/scenarios.md`` is the table of all
of them; ``tests/simulator`` checks the physics each one relies on.

Numbers are production-scale: Llama-3.1-8B on one H100 unless said otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Final

from exporter.simulator.dataparallel import DataParallelEngine
from exporter.simulator.engine import (
    H100_TP_ACROSS_NODES_TCP,
    CostModel,
    Engine,
    EngineConfig,
)
from exporter.simulator.workload import (
    Arrivals,
    LengthDist,
    PrefixSpec,
    RequestClass,
    Workload,
)

LAYERS: Final = ("request", "scheduler", "kv_cache", "gpu_compute", "cpu", "distributed")


@dataclass(frozen=True, slots=True)
class Expected:
    """What a correct layered diagnosis says about the scenario once its window is full.

    ``symptoms``/``causes`` must be active; ``also_possible`` may co-fire without the
    diagnosis being wrong (the method's classes overlap, e.g. KV pressure also makes the
    scheduler conservative). ``verdict`` is a layer id, ``none``, or ``unknown`` for an objective
    missed that no cause the catalog knows explains (A0, B0).
    """

    verdict: str
    symptoms: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    also_possible: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.verdict not in (*LAYERS, "none", "unknown"):
            raise ValueError(f"unknown verdict layer {self.verdict!r}")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str  # what it models, one or two sentences
    knobs: str  # the settings that make it what it is (for the docs table)
    engine: EngineConfig
    workload: Workload
    expected: Expected
    case: str = ""  # symptom class / worked case it demonstrates, e.g. "A1" or "case 3"
    dcgm: bool = True  # also serve DCGM-style GPU series
    seed: int = 0
    # The deployment's objectives, when not the global default: {"ttft": {"threshold_seconds", "target"}, ...},
    # thresholds on the simulated histograms' bucket edges (vLLM's defaults) so the shares are exact.
    slo: dict[str, dict[str, float]] | None = None
    data_parallel_size: int = 1  # engines behind one API server (each gets the workload)
    restart_engine_at: tuple[tuple[int, float], ...] = ()  # (rank, simulated second) engine restarts
    # (rank, its own configuration) for a data-parallel engine that differs from its siblings (a slow GPU)
    engine_overrides: tuple[tuple[int, EngineConfig], ...] = ()
    # The target state a correct sidecar reports (ok; sleeping for an engine put to sleep).
    expected_state: str = "ok"

    @property
    def cpu_share(self) -> float:
        """CPU contention: the share of CPU time vLLM's processes get (1.0 = none)."""
        return self.engine.cpu_share

    @property
    def tensor_parallel_size(self) -> int:
        return self.engine.tensor_parallel_size

    def engine_facts(self) -> dict[str, Any]:
        """The engine facts vLLM does not export, keyed as in the sidecar's config."""
        e = self.engine
        return {
            "max_num_batched_tokens": e.max_num_batched_tokens,
            "max_num_seqs": e.max_num_seqs,
            "tensor_parallel_size": e.tensor_parallel_size,
            "pipeline_parallel_size": e.pipeline_parallel_size,
            "gpu": e.gpu.name,
            "cpu_cores": e.cpu_cores,
            "model_weight_bytes": e.model.weight_bytes,
            **({"data_parallel_size": self.data_parallel_size} if self.data_parallel_size > 1 else {}),
            **({"speculative_method": e.spec_method, "num_speculative_tokens": e.num_speculative_tokens}
               if e.num_speculative_tokens else {}),
            **({"kv_connector": e.kv_connector, "kv_role": e.kv_role,
                "kv_load_failure_policy": e.kv_load_failure_policy} if e.kv_role else {}),
            **({"enable_lora": True, "max_loras": e.max_loras} if e.enable_lora else {}),
        }

    def build(self, seed: int | None = None) -> Engine | DataParallelEngine:
        """A fresh engine (or data-parallel group) at simulated time 0."""
        seed = self.seed if seed is None else seed
        if self.data_parallel_size > 1:
            return DataParallelEngine(self.engine, self.workload, seed, self.data_parallel_size,
                                      dict(self.restart_engine_at), dict(self.engine_overrides))
        return Engine(self.engine, self.workload, seed)


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------


def _lognormal(mean: float, sigma: float, lo: int = 1, hi: int = 1_000_000) -> LengthDist:
    return LengthDist("lognormal", mean, sigma, lo, hi)


def _chat(
    rate: float,
    *,
    prompt: LengthDist | None = None,
    output: LengthDist | None = None,
    prefix: PrefixSpec | None = None,
    arrivals: Arrivals | None = None,
    max_tokens: int | None = 1024,
    name: str = "chat",
) -> RequestClass:
    """Interactive chat: a shared system prompt, a few hundred tokens of user text."""
    return RequestClass(
        name=name,
        arrivals=arrivals or Arrivals("steady", rate=rate),
        prompt=prompt or _lognormal(300, 0.6, 10, 4000),
        output=output or _lognormal(250, 0.7, 5, 2000),
        prefix=prefix if prefix is not None else PrefixSpec(groups=4, shared_len=1200, zipf_s=0.5),
        max_tokens=max_tokens,
    )


def _one(*classes: RequestClass) -> Workload:
    return Workload(classes=classes)


# --------------------------------------------------------------------------------------------
# The scenarios
# --------------------------------------------------------------------------------------------

_HEALTHY = Scenario(
    name="healthy",
    description=(
        "Moderate steady chat traffic on a well-sized deployment: short queue, ample KV, "
        "stable system prompts that the prefix cache reuses."
    ),
    knobs="4 req/s Poisson; 1200-token shared system prompt (4 groups) + ~300 user tokens; "
    "~250 output; budget 8192, max_num_seqs 256, 0.92 memory",
    engine=EngineConfig(),
    workload=_one(_chat(4.0)),
    expected=Expected(verdict="none"),
    case="healthy",
)

_LONG_PROMPTS = Scenario(
    name="long-prompts",
    description=(
        "Document QA with ~28k-token prompts at a low rate: TTFT is high because prefilling a "
        "long prompt takes that long, not because anything waits."
    ),
    knobs="0.06 req/s; prompts lognormal mean 28k (8k-60k), no shared prefix; ~150 output; "
    "max_model_len 65536; budget 8192",
    engine=EngineConfig(max_model_len=65536),
    workload=_one(
        RequestClass(
            name="docqa",
            arrivals=Arrivals("steady", rate=0.06),
            prompt=_lognormal(28000, 0.3, 8000, 60000),
            output=_lognormal(150, 0.5, 20, 1000),
            max_tokens=1024,
        )
    ),
    expected=Expected(verdict="request", symptoms=("A",), causes=("A1",), also_possible=("A5", "C", "C2", "F")),
    case="A1",
    # Answers over long documents are read once complete: the stream needs 95 % of its token gaps within
    # 100 ms (the p95 objective the scenario was built against); a new prompt's prefill stalls ~0.5 % of them.
    slo={"itl": {"threshold_seconds": 0.1, "target": 0.95}},
)

_SMALL_BUDGET = Scenario(
    name="small-token-budget",
    description=(
        "max_num_batched_tokens far below the prompt length: every prompt is chopped into ~16 "
        "chunks that share each step's budget with the running decodes (which go first), so "
        "prefill crawls, the queue builds and TTFT climbs while the KV cache stays mostly free "
        "and ITL is excellent."
    ),
    knobs="budget 256 (max_num_seqs 256); 3 req/s; ~4000-token prompts, ~400 output",
    engine=EngineConfig(max_num_batched_tokens=256, max_num_seqs=256),
    workload=_one(
        _chat(
            3.0,
            prompt=_lognormal(4000, 0.4, 200, 16000),
            output=_lognormal(400, 0.5, 20, 3000),
            prefix=PrefixSpec(),
        )
    ),
    expected=Expected(
        verdict="scheduler", symptoms=("A",), causes=("A4",), also_possible=("A2", "F")
    ),
    case="A4",
)

_QUEUE_BACKLOG = Scenario(
    name="queue-backlog",
    description=(
        "Arrivals above what the concurrency cap can serve: max_num_seqs is full, the waiting "
        "queue grows for as long as clients wait (they give up after 600 s), and the KV cache "
        "is nowhere near full."
    ),
    knobs="max_num_seqs 32; 4 req/s with ~800-token outputs (capacity ~3 req/s); KV ~7 % used",
    engine=EngineConfig(max_num_seqs=32),
    workload=_one(_chat(4.0, output=_lognormal(800, 0.4, 50, 3000), max_tokens=4096)),
    expected=Expected(verdict="scheduler", symptoms=("A",), causes=("A2",)),
    case="A2",
)

_CPU_STARVED = Scenario(
    name="cpu-starved",
    description=(
        "Two cores shared with noisy neighbours (vLLM gets ~25 % of the CPU it asks for) and a "
        "heavy chat template with tool schemas: the API server's event loop runs at its CPU "
        "share, tokenisation queues in front of the engine, the engine core steps slowly and "
        "the GPU idles between steps."
    ),
    knobs="cpu_share 0.2, cpu_cores 2, frontend_cost_scale 10 (tools + long template); "
    "5 req/s, ~1500-token prompts, ~60 output",
    engine=EngineConfig(cpu_cores=2, cpu_share=0.2, frontend_cost_scale=10.0),
    workload=_one(_chat(5.0, output=_lognormal(60, 0.6, 5, 1000))),
    expected=Expected(
        verdict="cpu", symptoms=("A", "C"), causes=("A3", "C1"), also_possible=("B",)
    ),
    case="A3/C1",
)

_ITL_STUTTER = Scenario(
    name="itl-stutter",
    description=(
        "A huge token budget (throughput-style tuning) with a steady stream of 2.5k-8k-token "
        "prompts next to interactive chat: each long prefill lands whole in one step and every "
        "decoding stream stalls for it. ITL p95 above 100 ms, p99 ~30x the median, TTFT fine."
    ),
    knobs="budget 16384; chat 4 req/s + RAG 2.5 req/s of ~2.5k tokens + documents 0.2 req/s "
    "of ~8k tokens",
    engine=EngineConfig(max_num_batched_tokens=16384),
    workload=_one(
        _chat(4.0),
        RequestClass(
            name="documents",
            arrivals=Arrivals("steady", rate=0.2),
            prompt=_lognormal(8000, 0.25, 4000, 30000),
            output=_lognormal(120, 0.5, 10, 600),
            max_tokens=512,
        ),
        RequestClass(
            name="rag",
            arrivals=Arrivals("steady", rate=2.5),
            prompt=_lognormal(2500, 0.3, 500, 8000),
            output=_lognormal(200, 0.5, 10, 800),
            max_tokens=512,
        ),
    ),
    expected=Expected(verdict="scheduler", symptoms=("B",), causes=("B1", "B2"), also_possible=("F",)),
    case="B1/B2",
)

_SPARSE = Scenario(
    name="sparse-traffic",
    description=(
        "A few requests a minute: batches of one, the GPU idles most of the time and throughput "
        "is low. Nothing to tune; the workload does not batch."
    ),
    knobs="0.2 req/s Poisson; ~400-token prompts, ~150 output",
    engine=EngineConfig(),
    workload=_one(
        _chat(
            0.2,
            arrivals=Arrivals("sparse", rate=0.2),
            prompt=_lognormal(400, 0.5, 20, 3000),
            output=_lognormal(150, 0.5, 5, 1000),
            prefix=PrefixSpec(),
        )
    ),
    # Demand is met: spare capacity is information (C2), not a symptom.
    expected=Expected(verdict="none", also_possible=("C2", "F")),
    case="C2 (information)",
)

_KV_PRESSURE = Scenario(
    name="kv-pressure",
    description=(
        "Long generations, many at once, and a KV cache squeezed by a low "
        "gpu_memory_utilization (GPU shared with another model): blocks run out, requests are "
        "preempted and recomputed over and over, and concurrency is capped by cache space."
    ),
    knobs="gpu_memory_utilization 0.36 (~3.9k blocks); 1.15 req/s; ~1500 prompt, ~1500 output, "
    "max_tokens unset",
    engine=EngineConfig(gpu_memory_utilization=0.36),
    workload=_one(
        _chat(
            1.15,
            prompt=_lognormal(1500, 0.5, 100, 8000),
            output=_lognormal(1500, 0.6, 100, 8000),
            prefix=PrefixSpec(),
            max_tokens=None,
        )
    ),
    expected=Expected(
        verdict="kv_cache", symptoms=("D", "C"), causes=("D", "C3"), also_possible=("A", "A2", "E", "F")
    ),
    case="D, C3",
)

_HEADROOM = Scenario(
    name="headroom-risk",
    description=(
        "RAG prompts (~3000 tokens) with unbounded, heavy-tailed outputs on a KV budget sized "
        "for the average: admission keeps the cache at 90-100 % most of the time and a queue "
        "forms, yet preemptions stay rare (a few per hundred requests). Nothing looks broken; "
        "there is no headroom for a burst or a long outlier."
    ),
    knobs="gpu_memory_utilization 0.36 (~3.9k blocks); 3.9 req/s; prompts ~3000; outputs "
    "lognormal mean 150 (sigma 1.2, tail to thousands), max_tokens unset",
    engine=EngineConfig(gpu_memory_utilization=0.36),
    workload=_one(
        _chat(
            3.9,
            prompt=_lognormal(3000, 0.3, 200, 20000),
            output=_lognormal(150, 1.2, 10, 20000),
            prefix=PrefixSpec(),
            max_tokens=None,
        )
    ),
    expected=Expected(
        verdict="kv_cache",
        symptoms=("E",),
        causes=("E",),
        also_possible=("A", "A2", "B", "B1", "B2", "C", "C3", "D", "F"),
    ),
    case="E",
)

_TEMPLATE = Scenario(
    name="template-instability",
    description=(
        "Every request carries the same 2000-token system prompt, except that a request id is "
        "injected 24 tokens in: the hash chain breaks at the second block, so prompts span "
        "many full blocks yet almost nothing hits."
    ),
    knobs="4 groups x 2000-token system prompt; instability 0.9 (request id at token 24); "
    "3 req/s",
    engine=EngineConfig(),
    workload=_one(
        _chat(
            3.0,
            prefix=PrefixSpec(
                groups=4, shared_len=2000, zipf_s=0.5, instability=0.9, dynamic_pos=24, dynamic_len=12
            ),
        )
    ),
    expected=Expected(verdict="kv_cache", symptoms=("F",), causes=("F",), also_possible=("A", "A5", "A1")),
    case="F",
    # An interactive assistant: the broken prefix costs the first token its 300 ms objective.
    slo={"ttft": {"threshold_seconds": 0.25, "target": 0.95}, "itl": {"threshold_seconds": 0.1, "target": 0.95}},
)

_EVICTION = Scenario(
    name="cache-eviction",
    description=(
        "Stable prompts, but hundreds of distinct 3000-token prefixes (per-tenant instructions) "
        "against a KV cache that running requests mostly occupy: the LRU evicts a prefix long "
        "before it is asked for again."
    ),
    knobs="gpu_memory_utilization 0.5 (~9k blocks); 200 prefix groups x 3000 tokens, uniform; "
    "2.6 req/s, ~600 output",
    engine=EngineConfig(gpu_memory_utilization=0.5),
    workload=_one(
        _chat(
            2.6,
            prompt=_lognormal(200, 0.5, 10, 2000),
            output=_lognormal(600, 0.5, 20, 3000),
            prefix=PrefixSpec(groups=200, shared_len=3000),
            max_tokens=4096,
        )
    ),
    expected=Expected(
        verdict="kv_cache",
        symptoms=("F",),
        causes=("F6",),
        also_possible=("A", "A2", "A5", "B", "B1", "B2", "C", "C3", "D"),
    ),
    case="F6",
)

_TP = Scenario(
    name="tp-overhead",
    description=(
        "Llama-3.1-8B, which fits on one H100, served with TP=4 across two nodes joined by "
        "50 GbE without RDMA (added for KV room it does not need): two all-reduces per layer "
        "per step cost ~1.2 ms each, so every step and the ITL are ~10x slower than with TP=1, "
        "uniformly, while the KV cache is nearly empty."
    ),
    knobs="tensor_parallel_size 4 over NCCL/TCP (~1.2 ms per all-reduce, 5 GB/s); 2 req/s chat",
    engine=EngineConfig(gpu=H100_TP_ACROSS_NODES_TCP, tensor_parallel_size=4),
    workload=_one(_chat(2.0)),
    expected=Expected(verdict="distributed", symptoms=("G",), causes=("G",)),
    case="G",
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
    workload=_one(
        RequestClass(
            name="analysis",
            arrivals=Arrivals("bursty", rate=0.4, burst_rate=4.5, burst_s=40.0, period_s=180.0),
            prompt=_lognormal(4000, 0.35, 800, 16000),
            output=_lognormal(200, 0.5, 10, 1000),
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
    workload=_one(
        _chat(10.0),
        RequestClass(
            name="batch",
            arrivals=Arrivals("steady", rate=1.5),
            prompt=_lognormal(4000, 0.3, 1000, 24000),
            output=_lognormal(300, 0.5, 20, 1000),
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
    workload=_one(
        _chat(
            8.5,
            prompt=_lognormal(300, 0.5, 10, 2000),
            output=_lognormal(50, 0.5, 5, 800),
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
    workload=_one(
        _chat(
            0.8,
            arrivals=Arrivals("bursty", rate=0.8, burst_rate=5.0, burst_s=40.0, period_s=180.0),
            prompt=_lognormal(1200, 0.5, 50, 8000),
            output=_lognormal(700, 1.0, 10, 16000),
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
    workload=_one(
        _chat(
            4.0,
            prefix=PrefixSpec(
                groups=3, shared_len=1500, variants=6, instability=0.8, dynamic_pos=200,
                dynamic_len=10,
            ),
        )
    ),
    expected=Expected(verdict="kv_cache", symptoms=("F",), causes=("F",), also_possible=("A", "A5", "A1")),
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
    workload=_one(_chat(1.5, prefix=PrefixSpec(groups=2, shared_len=600))),
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
    workload=_one(
        _chat(
            3.0,
            prompt=_lognormal(600, 0.3, 200, 3000),
            output=_lognormal(200, 0.5, 10, 1000),
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
    workload=_one(
        _chat(
            4.2,
            prompt=_lognormal(1500, 0.3, 100, 6000),
            output=_lognormal(300, 0.4, 20, 512),
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
    workload=_one(_chat(3.0)),
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
    workload=_one(
        _chat(
            1.2,
            prompt=_lognormal(3000, 0.4, 300, 12000),
            output=_lognormal(1500, 0.6, 100, 6000),
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
    workload=_one(_chat(1.0)),
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
    workload=_one(replace(_chat(0.5, name="tenant-a"), lora=1), replace(_chat(0.5, name="tenant-b"), lora=2)),
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
    workload=_one(_chat(12.0)),
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
    workload=_one(_chat(12.0)),
    expected=Expected(verdict="gpu_compute", symptoms=("B",), causes=("B5",), also_possible=("B1", "B3")),
    case="B5 (gpu_compute)",
    slo=_SPEC_SLO,
)

# -- Disaggregated prefill/decode and KV offload (issue 29) ---------------------------------------------------
# A decode instance of a P/D pair (NIXL, kv_role kv_consumer): every request arrives with its prompt prefilled on
# a prefill instance, and waits, deferred, while its KV crosses the link (~1,500-token RAG prompts: 200 MB each
# for Llama-3.1-8B). Its first token is judged against the decode side's own objective: 95 % within 250 ms.
_PD_SLO: Final = {"ttft": {"threshold_seconds": 0.25, "target": 0.95}}
_PD_KNOBS: Final = "--kv-transfer-config kv_connector NixlConnector, kv_role kv_consumer; RAG chat 5 req/s, ~1500 " \
    "prompt, ~250 output; TTFT objective 95 % within 250 ms"


def _pd_decode(**kv: Any) -> EngineConfig:
    return EngineConfig(kv_role="kv_consumer", **kv)


def _pd_workload() -> Workload:
    return _one(_chat(5.0, prompt=_lognormal(1500, 0.4, 200, 6000), prefix=PrefixSpec()))


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
    workload=_one(replace(_chat(0.5, name="tenant-a"), lora=1), replace(_chat(0.5, name="tenant-b"), lora=2)),
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
    workload=_one(_chat(3.0)),
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
    workload=_one(_chat(3.0)),
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
    workload=_one(_chat(2.0, arrivals=Arrivals("steady", rate=2.0, stop_s=90.0))),
    expected=Expected(verdict="none"),
    case="sleeping (state)",
    expected_state="sleeping",
)

SCENARIOS: Final[MappingProxyType[str, Scenario]] = MappingProxyType(
    {
        s.name: s
        for s in (
            _HEALTHY, _LONG_PROMPTS, _SMALL_BUDGET, _QUEUE_BACKLOG, _CPU_STARVED, _ITL_STUTTER,
            _SPARSE, _KV_PRESSURE, _HEADROOM, _TEMPLATE, _EVICTION, _TP,
            _CASE1, _CASE2, _CASE3, _CASE4, _CASE5,
            _LOW_TRAFFIC, _RAG, _SATURATED, _DP_RESTART, _PREEMPTION_STORM, _COMPUTE_BOUND, _LORA_SLOTS,
            _SPEC_HEALTHY, _SPEC_COLLAPSE,
            _PD_HEALTHY, _PD_SLOW, _PD_FAILING, _OFFLOAD,
            # issue 29: LoRA, data parallel, sleep
            _LORA_HEALTHY, _DP_HEALTHY, _DP_SLOW_ENGINE, _SLEEPING,
        )
    }
)


def scenario_names() -> tuple[str, ...]:
    return tuple(SCENARIOS)


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
