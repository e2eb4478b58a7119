"""A small discrete-time model of vLLM's V1 engine.

What is modelled, and why each piece exists:

* **Frontend (API server).** One process tokenises requests one at a time (chat template +
  tokenizer) and processes outputs (detokenise, stream). Its CPU work competes with the
  engine core for the cores the deployment has (``cpu_share``); TTFT starts at frontend
  arrival, so slow tokenisation shows up as TTFT that is neither queue nor prefill.
* **Scheduler** (one engine step at a time): a per-step token budget
  (``max_num_batched_tokens``), at most ``max_num_seqs`` running requests, decode first
  (every running decode gets its one token), then running chunked prefills, then waiting
  requests in FCFS order with head-of-line blocking; no new admissions in a step that
  preempted. A waiting request for a LoRA adapter that has no slot (``max_loras`` adapters
  already run) is skipped, not blocking: vLLM counts it as waiting ``deferred``, not for capacity.
* **KV cache**: ``num_gpu_blocks`` blocks of ``block_size`` tokens (block 0 is vLLM's null
  block). A prefix cache maps block hashes (a hash chain over the prompt's content) to
  blocks; freed blocks keep their hash and go to the tail of an LRU free queue, allocation
  takes from the head and evicts what it takes. Cache hits are whole blocks, capped at
  ``num_tokens - 1``. When a running request needs a block and none is free, the most
  recently admitted running request is preempted (recompute: its blocks are freed and it
  re-prefills later, possibly hitting its own still-cached blocks).
* **Step time**: roofline per step (GEMM FLOPs vs HBM bytes for weights + KV reads), a fixed
  GPU overhead, TP all-reduces (two per layer, latency + ring bandwidth), and engine-core
  CPU time per step divided by the CPU share.

Every decode request advances the same number of tokens per step (the budget is never below
``max_num_seqs`` times the tokens a decode schedules), so decodes are tracked in lock step on a
decode clock (tokens every decode has advanced so far) through heaps of the clock values at which
something happens to them (needs a new block, finishes). That keeps a step O(events) instead
of O(batch), which is what makes ten simulated minutes take a fraction of a second.

* **Speculative decoding** (``num_speculative_tokens`` > 0, vLLM's ``--speculative-config``): each
  decode schedules 1 + k tokens (its last token and k draft tokens, all verified in one forward
  pass, all within the token budget and KV slots) and emits 1 + the accepted drafts: draft position
  i is accepted when it and every position before it are, each with probability
  ``spec_acceptance``. One draw per step for the whole batch (lock step), so the counters vLLM
  exports (drafts, draft tokens, accepted tokens, accepted per position) and the inter-token
  latency, one observation per output event however many tokens it carries, follow vLLM's
  populations; per request, only the mean is right.

* **KV transfer and offload** (vLLM's ``--kv-transfer-config``, ``--kv-offloading-size``): on the decode
  instance of a disaggregated pair (``kv_role`` kv_consumer) every prompt's KV comes from a prefill
  instance: at admission the request gets its blocks and waits, *deferred*, while the connector loads
  them over one link (NIXL: ``kv_transfer_bandwidth`` shared in arrival order, plus a fixed latency per
  load); when the load is done it is scheduled with the prompt computed but its last token (vLLM stamps it
  SCHEDULED only then, so the wait is in its queue time). A load fails with ``kv_transfer_failure_rate``:
  the request then errors (``kv_load_failure_policy`` fail, vLLM's default) or prefills locally
  (recompute). With an offload tier (``kv_offload_blocks``) every computed block is also stored in a CPU
  LRU of that many blocks; a lookup continues there after the GPU prefix cache, and the blocks it finds
  are loaded over PCIe the same way (deferred), preempted requests included: a miss costs a copy.

The model only has a simulated clock (``Engine.now``, seconds since start); it never sleeps
and is deterministic for a given seed.

What a user of the model may replace, each through a protocol (the advisor's calibrated engine,
``exporter/advisor/model.py``, replaces all three):

* ``StepCostModel``: what one step costs (default ``RooflineCost``, the roofline above);
* ``ArrivalSource``: which requests reach the API server when (default ``SpecStream`` over the
  workload's generated requests; a closed loop of clients sends the next when one finishes);
* ``EngineObserver``: told of each first admission, token gap and finish (default: none).

The KV cache's block pool is its own module (``blockpool``).
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple, Protocol

from exporter.simulator.blockpool import BlockPool
from exporter.simulator.buckets import (
    HTTP_DURATION_BUCKETS,
    HTTP_DURATION_HIGHR_BUCKETS,
    INTER_TOKEN_LATENCY_BUCKETS,
    ITERATION_TOKENS_BUCKETS,
    NIXL_BYTES_BUCKETS,
    NIXL_XFER_TIME_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    REQUEST_NUM_PREEMPTIONS_BUCKETS,
    REQUEST_PARAMS_N_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
    request_token_buckets,
)
from exporter.simulator.workload import RequestSpec, Workload, generate

# vLLM's finished_reason label values: the engine counts finished requests by each.
FINISHED_REASONS: Final = ("stop", "length", "abort", "error", "repetition")

# --------------------------------------------------------------------------------------------
# Hardware and model descriptions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A dense decoder-only transformer, enough to cost its GEMMs, weights and KV cache."""

    name: str
    params: float  # parameters
    n_layers: int
    hidden: int
    n_kv_heads: int
    head_dim: int
    dtype_bytes: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        # K and V, every layer, every KV head.
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator and how it talks to its TP peers."""

    name: str  # short name, as a sidecar would be configured (engine facts)
    model_name: str  # what DCGM reports as modelName
    memory_bytes: float
    hbm_bandwidth: float  # bytes/s
    peak_flops: float  # dense bf16 FLOP/s
    link_bandwidth: float  # bytes/s per GPU for collectives (NVLink or PCIe)
    allreduce_latency_s: float  # fixed cost of one small all-reduce
    nvlink: bool
    idle_power_w: float
    max_power_w: float
    sm_clock_mhz: int
    mem_clock_mhz: int


LLAMA_3_1_8B: Final = ModelSpec(
    name="meta-llama/Llama-3.1-8B-Instruct", params=8.03e9, n_layers=32, hidden=4096,
    n_kv_heads=8, head_dim=128,
)
H100_SXM: Final = GpuSpec(
    name="H100", model_name="NVIDIA H100 80GB HBM3", memory_bytes=80e9, hbm_bandwidth=3.35e12,
    peak_flops=989e12, link_bandwidth=450e9, allreduce_latency_s=12e-6, nvlink=True,
    idle_power_w=70.0, max_power_w=700.0, sm_clock_mhz=1980, mem_clock_mhz=2619,
)
# TP=4 split over two nodes joined by a virtualised 50 GbE network (NCCL over TCP sockets, no
# RDMA): ~1.2 ms per all-reduce. The textbook way to make a model that fits on one GPU slower.
H100_TP_ACROSS_NODES_TCP: Final = GpuSpec(
    name="H100", model_name="NVIDIA H100 80GB HBM3", memory_bytes=80e9, hbm_bandwidth=3.35e12,
    peak_flops=989e12, link_bandwidth=5e9, allreduce_latency_s=1.2e-3, nvlink=False,
    idle_power_w=70.0, max_power_w=700.0, sm_clock_mhz=1980, mem_clock_mhz=2619,
)


@dataclass(frozen=True, slots=True)
class CostModel:
    """Efficiency and overhead constants of the step-time and frontend model."""

    compute_efficiency: float = 0.30  # achieved / peak FLOPs: ~18k prefill tok/s for 8B on H100
    bandwidth_efficiency: float = 0.80  # achieved / peak HBM bandwidth
    gpu_step_fixed_s: float = 0.0004  # kernel launches / graph replay per step
    step_cpu_s: float = 0.0020  # engine core: schedule, prepare inputs, sample, per step
    seq_cpu_s: float = 0.00002  # engine core, per scheduled request per step
    tp_step_cpu_s: float = 0.0004  # engine core, per extra TP worker per step (broadcast, gather)
    tokenize_base_s: float = 0.0010  # frontend: request parsing + chat template, per request
    tokenize_per_token_s: float = 1.5e-6  # frontend: tokenizer, per prompt token
    output_per_token_s: float = 0.00012  # frontend: detokenise + stream one output (SSE chunk)
    frontend_idle_cpu: float = 0.02  # frontend event loop / IPC polling, in cores
    activation_reserve_bytes: float = 3.0e9  # non-KV memory besides weights (graphs, workspace)
    activation_per_batched_token_bytes: float = 2.0e5  # profiling peak grows with the budget


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything about one vLLM deployment the model needs.

    ``cpu_share`` is the fraction of the CPU time vLLM's processes get when they want to run
    (1.0: uncontended; 0.3: other tenants or a CPU quota leave them 30 %). It slows the engine
    core's per-step work and the frontend alike. ``frontend_cost_scale`` multiplies the
    per-request pre-processing cost (heavy chat templates, tool schemas, multimodal inputs).
    """

    model: ModelSpec = LLAMA_3_1_8B
    gpu: GpuSpec = H100_SXM
    served_model_name: str | None = None
    max_model_len: int = 32768
    block_size: int = 16
    gpu_memory_utilization: float = 0.92
    num_gpu_blocks_override: int | None = None
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    enable_prefix_caching: bool = True
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    cpu_cores: int = 16
    cpu_share: float = 1.0
    frontend_cost_scale: float = 1.0
    enable_mfu_metrics: bool = False  # vLLM's --enable-mfu-metrics: the estimated_* counters move
    max_loras: int = 1  # vLLM's --max-loras: adapters in one batch (requests of the base model need none)
    enable_lora: bool = False  # vLLM's --enable-lora: registers vllm:lora_requests_info
    # Sleep mode (--enable-sleep-mode, then POST /sleep?level=N): the simulated second the engine is put to
    # sleep at (None: never) and the level (1: weights offloaded to CPU, 2: discarded). Asleep, it steps no more.
    sleep_at: float | None = None
    sleep_level: int = 1
    # vLLM's --speculative-config: draft tokens per step (0: off), and the chance that a draft token is
    # accepted given that the ones before it were (the drafter's fit to the traffic).
    num_speculative_tokens: int = 0
    spec_acceptance: float = 0.0
    spec_method: str = "ngram"
    # vLLM's scheduler_reserve_full_isl: a waiting request is admitted only when KV has room for its whole
    # prompt, not just its first chunk (off in the scenarios, which were written before it; on in the advisor).
    reserve_full_isl: bool = False
    costs: CostModel = field(default_factory=CostModel)
    # -- KV transfer and offload (issue 29) --
    kv_role: str | None = None  # --kv-transfer-config kv_role: kv_consumer = a disaggregated decode instance
    kv_connector: str = "NixlConnector"
    kv_transfer_bandwidth: float = 25e9  # bytes/s of the prefill -> decode link, shared by concurrent loads
    kv_transfer_latency_s: float = 0.004  # per load: post, remote read completion and notification
    kv_transfer_failure_rate: float = 0.0
    kv_load_failure_policy: str = "fail"  # vLLM's default; "recompute" prefills a failed load locally
    kv_offload_blocks: int = 0  # CPU offload tier in blocks (0: off), --kv-offloading-size / block bytes
    kv_offload_bandwidth: float = 20e9  # host <-> device bytes/s (PCIe)

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < self.max_num_seqs * (1 + self.num_speculative_tokens):
            # vLLM refuses the first; the lock-step decode model depends on both.
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs x (1 + num_speculative_tokens)")
        if self.num_speculative_tokens < 0 or not 0.0 <= self.spec_acceptance <= 1.0:
            raise ValueError("num_speculative_tokens must be >= 0 and spec_acceptance in [0, 1]")
        if not 0.0 < self.cpu_share <= 1.0:
            raise ValueError("cpu_share must be in (0, 1]")
        if self.kv_role not in (None, "kv_consumer", "kv_producer", "kv_both") or self.kv_load_failure_policy not in (
                "fail", "recompute") or not 0.0 <= self.kv_transfer_failure_rate <= 1.0:
            raise ValueError("kv_role, kv_load_failure_policy or kv_transfer_failure_rate out of range")
        if self.num_gpu_blocks * self.block_size < self.max_model_len:
            raise ValueError(
                f"KV cache ({self.num_gpu_blocks} blocks) cannot hold one max_model_len request"
            )

    @property
    def kv_consumer(self) -> bool:
        """vLLM's ``is_kv_consumer``: the engine loads KV (a decode instance, or native offload's kv_both)."""
        return self.kv_role in ("kv_consumer", "kv_both") or self.kv_offload_blocks > 0

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model.name

    @property
    def num_gpu_blocks(self) -> int:
        """KV blocks, as vLLM's memory profiling would size them (or the override)."""
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        tp = self.tensor_parallel_size
        budget = self.gpu.memory_bytes * self.gpu_memory_utilization
        reserve = (
            self.costs.activation_reserve_bytes
            + self.costs.activation_per_batched_token_bytes * self.max_num_batched_tokens
        )
        kv_bytes = budget - self.model.weight_bytes / tp - reserve
        per_block = self.model.kv_bytes_per_token / tp * self.block_size
        return max(0, int(kv_bytes // per_block))


# --------------------------------------------------------------------------------------------
# Statistics, accumulated the way vLLM's Prometheus logger accumulates them
# --------------------------------------------------------------------------------------------


class Histogram:
    """Cumulative-on-render histogram with fixed upper bounds (``+Inf`` implicit)."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        # Prometheus buckets are `le`: a value equal to a bound belongs to that bound.
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n

    def cumulative(self) -> list[int]:
        out: list[int] = []
        acc = 0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out


@dataclass(slots=True)
class GpuBin:
    """GPU activity within one simulated second (what DCGM samples)."""

    second: int
    busy_s: float = 0.0
    tensor_s: float = 0.0
    dram_s: float = 0.0
    comm_bytes: float = 0.0


class EngineStats:
    """Counters and histograms of one engine, in vLLM's units and populations."""

    def __init__(self, cfg: EngineConfig) -> None:
        tok = request_token_buckets(cfg.max_model_len)
        # counters
        self.prompt_tokens = 0
        self.prompt_tokens_local_compute = 0
        self.prompt_tokens_local_cache_hit = 0
        self.generation_tokens = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.num_preemptions = 0
        # LoRA (vllm:lora_requests_info): the simulated time each adapter set was last reported, by its
        # comma-joined names; vLLM keeps one series per distinct set, valued at its last update
        self.lora_updates: dict[str, float] = {}
        # speculative decoding (vllm/v1/spec_decode/metrics.py), counted only when it is on
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted_tokens = 0
        self.spec_accepted_per_pos = [0] * cfg.num_speculative_tokens
        # KV connector: the external prefix cache (first admissions), prompt tokens loaded, NIXL and offload
        self.external_prefix_queries = 0
        self.external_prefix_hits = 0
        self.prompt_tokens_external = 0
        self.nixl_xfer_time = Histogram(NIXL_XFER_TIME_BUCKETS)
        self.nixl_bytes = Histogram(NIXL_BYTES_BUCKETS)
        self.nixl_failed = 0
        self.offload_load_bytes = 0.0
        self.offload_load_time = 0.0
        self.offload_store_bytes = 0.0
        self.offload_store_time = 0.0
        self.request_success: dict[str, int] = {r: 0 for r in FINISHED_REASONS}
        # request histograms (observed at finish) and per-output histograms
        self.request_prompt_tokens = Histogram(tok)
        self.request_generation_tokens = Histogram(tok)
        self.request_max_num_generation_tokens = Histogram(tok)
        self.request_params_max_tokens = Histogram(tok)
        self.request_prefill_kv_computed_tokens = Histogram(tok)
        self.request_params_n = Histogram(REQUEST_PARAMS_N_BUCKETS)
        self.iteration_tokens = Histogram(ITERATION_TOKENS_BUCKETS)
        self.time_to_first_token = Histogram(TIME_TO_FIRST_TOKEN_BUCKETS)
        self.inter_token_latency = Histogram(INTER_TOKEN_LATENCY_BUCKETS)
        self.request_time_per_output_token = Histogram(INTER_TOKEN_LATENCY_BUCKETS)
        self.e2e_request_latency = Histogram(REQUEST_LATENCY_BUCKETS)
        self.request_queue_time = Histogram(REQUEST_LATENCY_BUCKETS)
        self.request_inference_time = Histogram(REQUEST_LATENCY_BUCKETS)
        self.request_prefill_time = Histogram(REQUEST_LATENCY_BUCKETS)
        self.request_decode_time = Histogram(REQUEST_LATENCY_BUCKETS)
        self.request_num_preemptions = Histogram(REQUEST_NUM_PREEMPTIONS_BUCKETS)
        # API-server (frontend) families
        self.http_requests = 0
        self.http_request_size_sum = 0.0
        self.http_first_request_at: float | None = None  # children are created lazily
        self.http_duration = Histogram(HTTP_DURATION_BUCKETS)
        self.http_duration_highr = Histogram(HTTP_DURATION_HIGHR_BUCKETS)
        self.frontend_cpu_s = 0.0  # CPU seconds of work done by the API server
        # model internals the real engine does not export (tests, DCGM, docs)
        self.steps = 0
        self.step_time_s = 0.0
        self.comm_time_s = 0.0
        self.comm_bytes = 0.0
        self.gpu_busy_s = 0.0
        # analytic work per GPU, as vLLM's --enable-mfu-metrics estimates it (independent of efficiency)
        self.estimated_flops = 0.0
        self.estimated_read_bytes = 0.0
        self.client_aborts = 0  # requests the client gave up on before they were scheduled
        self.gpu_bins: deque[GpuBin] = deque(maxlen=600)


# --------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------

_WAITING, _PREFILL, _DECODE, _DONE = 0, 1, 2, 3


class Request:
    """A request inside the engine. Plain slots class: it is touched on every event."""

    __slots__ = (
        "spec", "rid", "prompt_len", "out_len", "seg_ends", "seg_keys",
        "t_engine", "t_queued", "t_sched", "t_first", "t_last_out",
        "num_tokens", "generated", "target", "computed", "blocks", "n_hashed",
        "hits_first", "admitted_once", "preemptions", "order", "epoch", "phase",
        "c0", "t0", "g0", "remote", "ext_first", "load", "load_fails",
    )

    def __init__(self, spec: RequestSpec, t_engine: float) -> None:
        self.spec = spec
        self.rid = spec.rid
        self.prompt_len = spec.prompt_len
        self.out_len = spec.output_len
        self.seg_ends = spec.seg_ends
        self.seg_keys = spec.seg_keys
        self.t_engine = t_engine
        self.t_queued = t_engine
        self.t_sched = -1.0
        self.t_first = -1.0
        self.t_last_out = -1.0
        self.num_tokens = spec.prompt_len  # tokens that exist (prompt + generated)
        self.generated = 0
        self.target = spec.prompt_len  # tokens to (re)compute in the current prefill
        self.computed = 0
        self.blocks: list[int] = []
        self.n_hashed = 0  # leading blocks whose hash is registered (or that were hits)
        self.hits_first = 0
        self.admitted_once = False
        self.preemptions = 0
        self.order = 0
        self.epoch = 0
        self.phase = _WAITING
        self.c0 = 0  # decode clock when the current decode run started
        self.t0 = 0  # num_tokens at c0
        self.g0 = 0  # generated at c0
        self.remote = False  # its prompt's KV is to come from a prefill instance (a disaggregated decode)
        self.ext_first = 0  # prompt tokens loaded by the connector at its first admission
        self.load: tuple[str, float, float] | None = None  # the load under way: (kind, bytes, seconds)
        self.load_fails = False


# --------------------------------------------------------------------------------------------
# What a user of the model may replace: step cost, arrivals, observer
# --------------------------------------------------------------------------------------------


class StepTime(NamedTuple):
    """One step: its wall time and what the GPU did meanwhile (DCGM's view, vLLM's MFU estimates)."""

    wall_s: float
    gpu_s: float  # busy (kernels, and NCCL waiting on the link)
    tensor_s: float
    dram_s: float
    comm_s: float
    comm_bytes: float
    flops: float = 0.0  # analytic work per GPU, as --enable-mfu-metrics estimates it
    read_bytes: float = 0.0


class StepCostModel(Protocol):
    """What one engine step costs."""

    def step_time(self, now: float, n_decode: int, decode_context: int,
                  chunks: Sequence[tuple[Request, int, int]]) -> StepTime:
        """The step that starts at ``now``: ``n_decode`` decoding requests attending to ``decode_context``
        tokens in all, and prefill ``chunks`` of (request, tokens computed before, tokens now)."""
        ...


class ArrivalSource(Protocol):
    """The requests that reach the API server, in arrival order."""

    def next_arrival(self) -> float | None:
        """When the next request arrives (None: none is known yet)."""
        ...

    def arrived(self, now: float) -> Iterator[RequestSpec]:
        """Every request that has arrived by ``now`` and was not handed out yet, in order."""
        ...

    def finished(self, spec: RequestSpec, seen: float) -> None:
        """The client saw the request's last token at ``seen`` (a closed loop sends its next one)."""
        ...


class EngineObserver(Protocol):
    """Told what happens to requests, for bookkeeping beyond vLLM's own statistics."""

    def admitted(self, request: Request, step: int) -> None:
        """``request`` was scheduled for the first time, in step ``step``."""
        ...

    def token_gap(self, now: float, value: float, n: int) -> None:
        """``n`` inter-token-latency observations of ``value`` seconds, the step ending at ``now``."""
        ...

    def finished(self, request: Request, seen: float) -> None:
        """``request`` produced its last token; its client saw it at ``seen``."""
        ...


class SpecStream:
    """An :class:`ArrivalSource` over an iterator of requests in arrival order (open traffic)."""

    __slots__ = ("_specs", "_next")

    def __init__(self, specs: Iterator[RequestSpec]) -> None:
        self._specs = specs
        self._next: RequestSpec | None = next(specs, None)

    def next_arrival(self) -> float | None:
        return self._next.arrival if self._next is not None else None

    def arrived(self, now: float) -> Iterator[RequestSpec]:
        spec = self._next
        while spec is not None and spec.arrival <= now:
            yield spec
            spec = self._next = next(self._specs, None)

    def finished(self, spec: RequestSpec, seen: float) -> None:
        pass  # open traffic arrives whatever the engine does


class RooflineCost:
    """The default step cost: roofline per step (GEMM FLOPs vs HBM bytes for weights + KV reads), a fixed
    GPU overhead, TP all-reduces (two per layer, latency + ring bandwidth), and engine-core CPU time per
    step divided by the CPU share."""

    def __init__(self, cfg: EngineConfig) -> None:
        m, g, c = cfg.model, cfg.gpu, cfg.costs
        tp = cfg.tensor_parallel_size
        self._gpu = g
        self._gpu_fixed_s = c.gpu_step_fixed_s
        self._spec_k = cfg.num_speculative_tokens
        self._flops_per_token = 2.0 * m.params / tp
        self._attn_flops_per_pair = 4.0 * m.n_layers * m.hidden / tp
        self._weight_bytes_gpu = m.weight_bytes / tp
        self._kv_bytes_per_token_gpu = m.kv_bytes_per_token / tp
        self._weight_s = m.weight_bytes / tp / (g.hbm_bandwidth * c.bandwidth_efficiency)
        self._kv_s_per_token = m.kv_bytes_per_token / tp / (g.hbm_bandwidth * c.bandwidth_efficiency)
        self._flop_rate = g.peak_flops * c.compute_efficiency
        self._n_allreduce = 2 * m.n_layers if tp > 1 else 0
        self._ar_bytes_per_token = m.hidden * m.dtype_bytes
        self._ring = 2.0 * (tp - 1) / tp if tp > 1 else 0.0
        self._cpu_fixed = (c.step_cpu_s + c.tp_step_cpu_s * (tp - 1)) / cfg.cpu_share
        self._cpu_per_seq = c.seq_cpu_s / cfg.cpu_share

    def step_time(self, now: float, n_decode: int, decode_context: int,
                  chunks: Sequence[tuple[Request, int, int]]) -> StepTime:
        ctx = decode_context  # tokens attended by the decodes
        per_decode = 1 + self._spec_k  # its last token and the drafts, verified in one pass
        tokens = n_decode * per_decode
        pairs = float(ctx) * per_decode
        kv_tokens = ctx
        for _, k, c in chunks:
            tokens += c
            pairs += c * (k + c / 2.0)
            kv_tokens += k + c
        flops = self._flops_per_token * tokens + self._attn_flops_per_pair * pairs
        read_bytes = self._weight_bytes_gpu + self._kv_bytes_per_token_gpu * kv_tokens
        compute_s = flops / self._flop_rate
        dram_s = self._weight_s + self._kv_s_per_token * kv_tokens
        gpu_s = max(compute_s, dram_s) + self._gpu_fixed_s
        comm_s = comm_bytes = 0.0
        if self._n_allreduce:
            per_ar = tokens * self._ar_bytes_per_token * self._ring
            comm_bytes = per_ar * self._n_allreduce
            comm_s = self._n_allreduce * self._gpu.allreduce_latency_s + comm_bytes / self._gpu.link_bandwidth
        cpu_s = self._cpu_fixed + self._cpu_per_seq * (n_decode + len(chunks))
        # NCCL kernels keep the GPU "utilised" in DCGM's eyes while they wait on the link.
        return StepTime(cpu_s + gpu_s + comm_s, gpu_s + comm_s, compute_s, dram_s, comm_s, comm_bytes, flops,
                        read_bytes)


class Engine:
    """The simulated deployment: frontend + engine core + GPU(s), advanced by ``advance_to``.

    ``cost``, ``arrivals`` and ``observer`` replace the roofline step cost, the workload's generated
    requests and the absent observer (the protocols above); ``workload`` still gives the client timeout.
    """

    def __init__(self, config: EngineConfig, workload: Workload, seed: int = 0, *,
                 cost: StepCostModel | None = None, arrivals: ArrivalSource | None = None,
                 observer: EngineObserver | None = None) -> None:
        self.cfg = config
        self.stats = EngineStats(config)
        self.now = 0.0
        self.step_index = 0
        self.num_gpu_blocks = config.num_gpu_blocks
        self._bs = config.block_size
        self._own_cost = cost is None  # the roofline of the config: rebuilt when it changes (reconfigure)
        self.cost: StepCostModel = RooflineCost(config) if cost is None else cost
        self.arrivals: ArrivalSource = (SpecStream(generate(workload, seed, config.max_model_len))
                                        if arrivals is None else arrivals)
        self.observer = observer
        self._client_timeout = workload.client_timeout_s
        # frontend
        self._frontend_free = 0.0
        self._pending: deque[Request] = deque()  # tokenised, ready at t_engine (non-decreasing)
        # scheduler state
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}  # admission order; popitem() = lowest priority
        self._prefilling: dict[int, Request] = {}
        self._n_decode = 0
        # Decode clock: tokens every running decode has advanced so far (one per step without speculation).
        self._clock = 0
        self._ctx_base = 0  # sum over decode requests of (t0 - c0); context = base + n * clock
        self._blocks_due: list[tuple[int, int, int, Request]] = []  # (clock, order, epoch, r): grow KV
        self._finish_due: list[tuple[int, int, int, Request]] = []  # (clock, order, epoch, r): last token
        self._spec_k = config.num_speculative_tokens
        self._spec_rng = random.Random(f"spec-{seed}")
        self._order = 0
        self._preempted_this_step = False
        self._pool = BlockPool(self.num_gpu_blocks, self._bs)  # KV cache: block 0 is the null block
        # KV loads under way (done time, order, request), the links they share, requests whose load is done
        self._loading: list[tuple[float, int, Request]] = []
        self._link_free = {"nixl": 0.0, "offload": 0.0}
        self._kv_rng = random.Random(f"kv-{seed}")
        self._cpu_tier: OrderedDict[tuple[int, int], None] | None = (
            OrderedDict() if config.kv_offload_blocks > 0 else None)

    # ----------------------------------------------------------------- public read-outs

    @property
    def kv_cache_usage(self) -> float:
        """Held blocks / usable blocks; evictable cached blocks count as free (vLLM's rule)."""
        return self._pool.usage

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self._loading)

    @property
    def sleep_level(self) -> int:
        """0 while awake, else the level the engine sleeps at (vLLM's engine_sleep_state one-hot)."""
        asleep = self.cfg.sleep_at is not None and self.now >= self.cfg.sleep_at
        return self.cfg.sleep_level if asleep else 0

    @property
    def num_waiting_deferred(self) -> int:
        """Waiting requests whose LoRA adapter has no slot while ``max_loras`` adapters run, and those whose KV
        is loading or loaded but not yet scheduled (vLLM defers them from their admission until they run)."""
        loaded = self.num_kv_loaded_waiting
        running = {r.spec.lora for r in self.running.values() if r.spec.lora}
        if len(running) < self.cfg.max_loras:
            return len(self._loading) + loaded
        return len(self._loading) + loaded + sum(1 for r in self.waiting if r.spec.lora and r.spec.lora not in running)

    @property
    def kv_offload_usage(self) -> float:
        """Share of the CPU offload tier holding blocks (0 without one)."""
        tier = self._cpu_tier
        return len(tier) / self.cfg.kv_offload_blocks if tier is not None else 0.0

    @property
    def num_kv_loading(self) -> int:
        """Requests whose KV load is under way (vLLM's fetch stage in_progress)."""
        return len(self._loading)

    @property
    def num_kv_loaded_waiting(self) -> int:
        """Requests whose KV load is done, not yet scheduled (fetch stage completed_waiting)."""
        if not self.cfg.kv_consumer:
            return 0
        return sum(1 for r in self.waiting if r.blocks)  # only a loaded request waits holding blocks

    def gpu_window(self, seconds: int = 1) -> GpuBin:
        """GPU activity over the last ``seconds`` complete simulated seconds (DCGM sampling)."""
        end = int(self.now)
        start = end - seconds
        out = GpuBin(second=start)
        for b in reversed(self.stats.gpu_bins):
            if b.second < start:
                break
            if b.second < end:
                out.busy_s += b.busy_s
                out.tensor_s += b.tensor_s
                out.dram_s += b.dram_s
                out.comm_bytes += b.comm_bytes
        return out

    def reconfigure(self, config: EngineConfig) -> None:
        """Change the deployment's running conditions mid-run (a neighbour takes the CPU, a slower
        kernel path): CPU share, frontend cost and the cost model. The KV geometry stays as started."""
        if config.num_gpu_blocks != self.num_gpu_blocks or config.block_size != self.cfg.block_size:
            raise ValueError("reconfigure cannot change the KV cache's geometry")
        self.cfg = config
        if self._own_cost:
            self.cost = RooflineCost(config)

    # ----------------------------------------------------------------- main loop

    def advance_to(self, t: float) -> None:
        """Run the deployment until the simulated clock reaches ``t`` (a step that is under
        way at ``t`` completes, so the clock may end slightly past it)."""
        while self.now < t:
            if self.cfg.sleep_at is not None and self.now >= self.cfg.sleep_at:
                self.now = t  # asleep: vLLM's engine core steps no more until /wake_up
                break
            self._pull_arrivals(self.now)
            pending = self._pending
            while pending and pending[0].t_engine <= self.now:
                # vLLM's engine core takes new requests between steps and stamps them QUEUED then:
                # the wait for the step under way is TTFT but not queue time.
                r = pending.popleft()
                r.t_queued = self.now
                self.waiting.append(r)
            self._drop_timed_out()
            self._complete_loads()
            if self.running or self.waiting:
                self._step()
                continue
            # Idle GPU: jump to the next thing that can happen.
            if pending:
                nxt = pending[0].t_engine
            else:
                arrival = self.arrivals.next_arrival()
                nxt = arrival if arrival is not None else math.inf
            if self._loading:
                nxt = min(nxt, self._loading[0][0])
            if self.cfg.sleep_at is not None:
                nxt = min(nxt, max(self.cfg.sleep_at, self.now))
            if nxt >= t:
                self.now = t
                break
            self.now = nxt

    # ----------------------------------------------------------------- frontend

    def _pull_arrivals(self, now: float) -> None:
        """Tokenise every request that has arrived at the API server by ``now`` (FIFO)."""
        costs, cfg = self.cfg.costs, self.cfg
        for spec in self.arrivals.arrived(now):
            work = (costs.tokenize_base_s + costs.tokenize_per_token_s * spec.prompt_len) * cfg.frontend_cost_scale
            start = max(spec.arrival, self._frontend_free)
            self._frontend_free = start + work / cfg.cpu_share
            self.stats.frontend_cpu_s += work
            req = Request(spec, self._frontend_free)
            req.remote = cfg.kv_role == "kv_consumer"  # a decode instance: the proxy sent the prefill elsewhere
            self._pending.append(req)

    def _frontend_outputs(self, n_outputs: int) -> float:
        """Process one step's outputs in the API server; returns when clients see them.

        Output processing (detokenise, stream) shares the API server's single event loop with
        tokenisation, so a busy or CPU-starved frontend delays what the frontend clock
        measures (TTFT, e2e) while the engine-clock intervals (queue, prefill, decode,
        inference) stay as they were.
        """
        work = n_outputs * self.cfg.costs.output_per_token_s
        self._frontend_free = max(self._frontend_free, self.now) + work / self.cfg.cpu_share
        self.stats.frontend_cpu_s += work
        return self._frontend_free

    def _drop_timed_out(self) -> None:
        """Clients hang up on requests that waited too long; vLLM records them nowhere."""
        waiting, deadline = self.waiting, self.now - self._client_timeout
        while waiting and not waiting[0].admitted_once and waiting[0].spec.arrival <= deadline:
            waiting.popleft()
            self.stats.client_aborts += 1

    # ----------------------------------------------------------------- KV cache

    def _lookup(self, r: Request) -> list[int]:
        """Longest run of cached leading blocks of ``r`` (``BlockPool.lookup``); none without prefix caching."""
        if not self.cfg.enable_prefix_caching:
            return []
        return self._pool.lookup(r.seg_ends, r.seg_keys, r.num_tokens)

    def _register(self, r: Request, computed_tokens: int) -> None:
        """Make every full, computed block of ``r`` findable by later requests."""
        if not self.cfg.enable_prefix_caching:
            return
        r.n_hashed = self._pool.register(r.blocks, r.n_hashed, r.seg_ends, r.seg_keys, computed_tokens,
                                         stored=self._offload_store if self._cpu_tier is not None else None)

    def _free_blocks(self, r: Request) -> None:
        self._pool.release(r.blocks)
        r.blocks = []
        r.n_hashed = 0

    def _ensure_blocks(self, r: Request, tokens: int) -> bool:
        """Grow ``r`` to hold ``tokens`` slots, preempting from the running tail when short.
        Returns False when ``r`` itself had to be preempted."""
        need = -(-tokens // self._bs) - len(r.blocks)
        if need <= 0:
            return True
        free = self._pool.free
        while len(free) < need:
            _, victim = self.running.popitem()
            self._preempt(victim)
            if victim is r:
                return False
        r.blocks.extend(self._pool.allocate(need))
        return True

    def _preempt(self, r: Request) -> None:
        """Recompute preemption of ``r`` (already removed from ``running``)."""
        if r.phase == _DECODE:
            steps = self._clock - r.c0
            r.num_tokens = r.t0 + steps
            r.generated = r.g0 + steps
            r.t_last_out = self.now
            self._n_decode -= 1
            self._ctx_base -= r.t0 - r.c0
            self._register(r, r.num_tokens - 1)
        elif r.phase == _PREFILL:
            del self._prefilling[r.rid]
            self._register(r, r.computed)
        self._free_blocks(r)
        r.computed = 0
        r.target = r.num_tokens
        r.epoch += 1
        r.phase = _WAITING
        r.preemptions += 1
        self.stats.num_preemptions += 1
        self._preempted_this_step = True
        self.waiting.appendleft(r)

    # ----------------------------------------------------------------- scheduling

    def _admit(self, r: Request, budget: int) -> int:
        """Schedule waiting ``r`` with up to ``budget`` tokens; 0 if KV has no room for it (for its first
        chunk, or its whole prompt with ``reserve_full_isl``), -1 if its KV is to be loaded first (it got its
        blocks and waits, deferred, for the load: no budget used)."""
        if r.blocks:
            return self._admit_loaded(r, budget)
        pool = self._pool
        free = pool.free
        if not free:
            return 0  # cheap reject: any admission needs at least one new block
        hits = self._lookup(r)
        evictable = pool.evictable(hits)
        # vLLM's scheduler_reserve_full_isl: without it a long prompt admitted on a leftover chunk of
        # budget preempts itself on its next chunk.
        if self.cfg.reserve_full_isl and -(-r.num_tokens // self._bs) - len(hits) + evictable > len(free):
            return 0
        cached_tokens = len(hits) * self._bs
        external, kind = self._external_tokens(r, hits)
        if external:
            return self._start_load(r, hits, external, kind)
        n = min(r.num_tokens - cached_tokens, budget)
        if not self._take_blocks(r, hits, cached_tokens + n):
            return 0
        r.computed = cached_tokens
        if not r.admitted_once:
            # Prefix-cache counters: tokens, first admission only (re-admissions excluded).
            r.admitted_once = True
            r.hits_first = cached_tokens
            r.t_sched = self.now
            self.stats.prefix_cache_queries += r.num_tokens
            self.stats.prefix_cache_hits += cached_tokens
            if self.observer is not None:
                self.observer.admitted(r, self.step_index)
            if self.cfg.kv_consumer:  # the connector is asked for what the GPU cache missed, and found none
                self.stats.external_prefix_queries += r.num_tokens - cached_tokens
        self._run(r)
        return n

    def _run(self, r: Request) -> None:
        """``r`` joins the running batch, prefilling, as the lowest-priority request."""
        self._order += 1
        r.order = self._order
        r.phase = _PREFILL
        self.running[r.rid] = r
        self._prefilling[r.rid] = r

    def _take_blocks(self, r: Request, hits: list[int], tokens: int) -> bool:
        """Give ``r`` the cached ``hits`` and new blocks up to ``tokens`` slots; False if KV has no room."""
        pool = self._pool
        need = -(-tokens // self._bs) - len(hits)
        if need + pool.evictable(hits) > len(pool.free):
            return False
        pool.touch(hits)
        r.blocks = hits + pool.allocate(need)
        r.n_hashed = len(hits)
        r.target = r.num_tokens
        return True

    def _external_tokens(self, r: Request, hits: list[int]) -> tuple[int, str]:
        """Prompt tokens the KV connector would load after the ``hits`` of the GPU prefix cache, and from where:
        a prefill instance (a remote prefill: all but the last prompt token), or the CPU offload tier (its
        leading run of stored blocks, whole blocks, fewer than num_tokens)."""
        cached = len(hits) * self._bs
        if r.remote:
            return max(0, r.num_tokens - 1 - cached), "nixl"
        tier = self._cpu_tier
        if tier is None or not self.cfg.enable_prefix_caching:
            return 0, ""
        limit = (r.num_tokens - 1) // self._bs
        ends, keys, bs = r.seg_ends, r.seg_keys, self._bs
        found, j = 0, 0
        for i in range(len(hits), limit):
            end = (i + 1) * bs
            while ends[j] < end:
                j += 1
            h = (keys[j], i)
            if h not in tier:
                break
            tier.move_to_end(h)
            found += 1
        return found * bs, "offload"

    def _start_load(self, r: Request, hits: list[int], external: int, kind: str) -> int:
        """Give ``r`` blocks for its cached and loaded tokens and start the load; 0 if KV has no room."""
        cached_tokens = len(hits) * self._bs
        if not self._take_blocks(r, hits, cached_tokens + external):
            return 0
        r.computed = cached_tokens + external
        st = self.stats
        if not r.admitted_once:
            # vLLM records both prefix caches at this admission (a preempted request's lookups are not counted).
            r.admitted_once = True
            r.hits_first = cached_tokens
            r.ext_first = external
            st.prefix_cache_queries += r.num_tokens
            st.prefix_cache_hits += cached_tokens
            st.external_prefix_queries += r.num_tokens - cached_tokens
            st.external_prefix_hits += external
        size = external * self.cfg.model.kv_bytes_per_token
        bandwidth = self.cfg.kv_transfer_bandwidth if kind == "nixl" else self.cfg.kv_offload_bandwidth
        start = max(self.now, self._link_free[kind])  # loads share their link in the order they start
        self._link_free[kind] = start + size / bandwidth
        done = self._link_free[kind] + (self.cfg.kv_transfer_latency_s if kind == "nixl" else 0.0)
        r.load = (kind, size, done - self.now)
        r.load_fails = kind == "nixl" and self._kv_rng.random() < self.cfg.kv_transfer_failure_rate
        r.remote = False
        self._order += 1
        heapq.heappush(self._loading, (done, self._order, r))
        return -1

    def _complete_loads(self) -> None:
        """Loads done by now: the request waits for its turn again (vLLM's fetch stage completed_waiting), at the
        head of the queue; a failed load errors the request or leaves its prompt to compute here."""
        loading, st, done = self._loading, self.stats, []
        while loading and loading[0][0] <= self.now:
            _, _, r = heapq.heappop(loading)
            assert r.load is not None
            kind, size, seconds = r.load
            r.load = None
            if kind == "offload":
                st.offload_load_bytes += size
                st.offload_load_time += seconds
            elif r.load_fails:
                st.nixl_failed += 1
                if self.cfg.kv_load_failure_policy == "fail":
                    self._free_blocks(r)
                    r.phase = _DONE
                    st.request_success["error"] += 1
                    continue
                r.computed = r.hits_first  # recompute: the prompt is prefilled here, in the blocks it holds
                r.ext_first = 0
            else:
                st.nixl_xfer_time.observe(seconds)
                st.nixl_bytes.observe(size)
            done.append(r)
        if done:
            self.waiting.extendleft(reversed(done))

    def _admit_loaded(self, r: Request, budget: int) -> int:
        """Schedule ``r``, whose blocks it holds since its KV load: the rest of its prompt (its last token)."""
        n = min(r.num_tokens - r.computed, budget)
        need = -(-(r.computed + n) // self._bs) - len(r.blocks)
        if need > len(self._pool.free):
            return 0
        if need > 0:
            r.blocks.extend(self._pool.allocate(need))
        if r.t_sched < 0:
            r.t_sched = self.now  # vLLM stamps SCHEDULED now: the load's wait is queue time
        self._run(r)
        return n

    def _offload_store(self, h: tuple[int, int]) -> None:
        """A computed block's copy in the CPU tier (stored once, LRU when the tier is full)."""
        tier = self._cpu_tier
        assert tier is not None
        if h in tier:
            tier.move_to_end(h)
            return
        tier[h] = None
        if len(tier) > self.cfg.kv_offload_blocks:
            tier.popitem(last=False)
        size = self._bs * self.cfg.model.kv_bytes_per_token
        self.stats.offload_store_bytes += size
        self.stats.offload_store_time += size / self.cfg.kv_offload_bandwidth

    def _enter_decode(self, r: Request) -> None:
        """``r`` emitted a token at the end of this step (the clock already advanced); it decodes next step."""
        del self._prefilling[r.rid]
        r.phase = _DECODE
        r.c0 = self._clock
        r.t0 = r.num_tokens
        r.g0 = r.generated
        self._n_decode += 1
        self._ctx_base += r.t0 - r.c0
        finish = r.c0 + (r.out_len - r.g0)  # the clock at which its last token is out
        heapq.heappush(self._finish_due, (finish, r.order, r.epoch, r))
        self._push_block_due(r, finish)

    def _push_block_due(self, r: Request, finish: int) -> None:
        """When ``r`` next needs a block: a decode step at num_tokens T computes position T-1 and its k
        draft positions, so it needs ceil((T + k) / bs) blocks."""
        due = self._bs * len(r.blocks) - r.t0 + r.c0 - self._spec_k + 1
        due = max(due, self._clock)
        if due < finish:
            heapq.heappush(self._blocks_due, (due, r.order, r.epoch, r))

    def _grow_decode(self, r: Request) -> None:
        tokens = r.t0 + (self._clock - r.c0)
        if not self._ensure_blocks(r, tokens + self._spec_k):
            return
        self._register(r, tokens - 1)
        self._push_block_due(r, r.c0 + (r.out_len - r.g0))

    def _accepted(self) -> int:
        """Draft tokens accepted this step: the leading run of acceptances among the k drafts."""
        k, p, rng = self._spec_k, self.cfg.spec_acceptance, self._spec_rng
        accepted = 0
        while accepted < k and rng.random() < p:
            accepted += 1
        return accepted

    def _step(self) -> None:
        cfg = self.cfg
        self.step_index += 1
        self._preempted_this_step = False
        blocks_due, clock = self._blocks_due, self._clock

        # 1. Decodes first: each running decode needs one token (1 + k with speculation), some a new block.
        while blocks_due and blocks_due[0][0] <= clock:
            _, _, epoch, r = heapq.heappop(blocks_due)
            if r.epoch == epoch and r.phase == _DECODE:
                self._grow_decode(r)
        budget = cfg.max_num_batched_tokens - self._n_decode * (1 + self._spec_k)

        # 2. Running chunked prefills, in admission order.
        chunks: list[tuple[Request, int, int]] = []
        if self._prefilling and budget > 0:
            for r in list(self._prefilling.values()):
                if budget <= 0:
                    break
                if r.phase != _PREFILL:  # preempted by an earlier request in this loop
                    continue
                n = min(r.target - r.computed, budget)
                if not self._ensure_blocks(r, r.computed + n):
                    continue
                chunks.append((r, r.computed, n))
                r.computed += n
                budget -= n

        # 3. Waiting requests, FCFS with head-of-line blocking; none after a preemption. A request
        # whose LoRA adapter finds no free slot is set aside (vLLM's skipped waiting requests).
        if not self._preempted_this_step:
            waiting, running, max_seqs = self.waiting, self.running, cfg.max_num_seqs
            loras: set[int] | None = None  # adapters in the batch, built only when a LoRA request waits
            skipped: list[Request] = []
            while budget > 0 and waiting and len(running) < max_seqs:
                r = waiting[0]
                lora = r.spec.lora
                if lora:
                    if loras is None:
                        loras = {x.spec.lora for x in running.values() if x.spec.lora}
                    if lora not in loras and len(loras) >= cfg.max_loras:
                        skipped.append(waiting.popleft())
                        continue
                n = self._admit(r, budget)
                if n == 0:
                    break
                waiting.popleft()
                if n < 0:
                    continue  # its KV loads first: it waits deferred, holding its blocks
                if lora and loras is not None:
                    loras.add(lora)
                chunks.append((r, r.computed, n))
                r.computed += n
                budget -= n
            if skipped:
                waiting.extendleft(reversed(skipped))  # back at the head, in their order

        # 4. How long the step takes.
        n_decode = self._n_decode
        dt, gpu_s, tensor_s, dram_s, comm_s, comm_bytes, flops, read_bytes = self.cost.step_time(
            self.now, n_decode, self._ctx_base + n_decode * self._clock, chunks)
        t_start = self.now
        self.now = t_end = t_start + dt
        st = self.stats
        st.estimated_flops += flops
        st.estimated_read_bytes += read_bytes
        st.steps += 1
        st.step_time_s += dt
        st.comm_time_s += comm_s
        st.comm_bytes += comm_bytes
        st.gpu_busy_s += gpu_s
        bins = st.gpu_bins
        sec = int(t_start)
        if not bins or bins[-1].second != sec:
            bins.append(GpuBin(second=sec))
        b = bins[-1]
        b.busy_s += gpu_s
        b.tensor_s += tensor_s
        b.dram_s += dram_s
        b.comm_bytes += comm_bytes
        if self.cfg.enable_lora:
            # vLLM's frontend reports, after every step, the adapters of the requests it has seen run (a
            # request held back for a slot is not known as waiting until its first output brings its QUEUED
            # event), in 0.32 under both labels: one series per set of names, valued at its last update.
            names = sorted({r.spec.lora for r in self.running.values() if r.spec.lora})
            st.lora_updates[",".join(f"adapter-{n}" for n in names)] = t_end

        # 5. Outputs at the end of the step. The API server ran concurrently with the step:
        # requests that arrived meanwhile were tokenised as they came, before it sees this
        # step's outputs, which clients receive at `seen`.
        self._pull_arrivals(t_end)
        completing = sum(1 for r, _, _ in chunks if r.phase == _PREFILL and r.computed >= r.target)
        outputs = n_decode + completing
        seen = self._frontend_outputs(outputs) if outputs else t_end
        prompt_computed = 0
        advance = 1
        if n_decode:
            # Every decode emitted one output (1 + accepted drafts tokens); its previous output was at
            # the previous step's end, which is this step's start (the engine never idles while decodes run).
            st.inter_token_latency.observe(dt, n_decode)
            if self.observer is not None:
                self.observer.token_gap(t_end, dt, n_decode)
            if self._spec_k:
                accepted = self._accepted()
                advance += accepted
                st.spec_drafts += n_decode
                st.spec_draft_tokens += n_decode * self._spec_k
                st.spec_accepted_tokens += n_decode * accepted
                for pos in range(accepted):
                    st.spec_accepted_per_pos[pos] += n_decode
        self._clock = clock = clock + advance
        generated = n_decode * advance
        for r, _, _ in chunks:
            if r.phase != _PREFILL:
                continue
            if r.computed < r.target:
                self._register(r, r.computed)
                continue
            self._register(r, r.computed)
            r.num_tokens += 1
            r.generated += 1
            if r.t_first < 0:
                r.t_first = t_end
                st.time_to_first_token.observe(seen - r.spec.arrival)
                st.prompt_tokens += r.prompt_len
                st.prompt_tokens_local_cache_hit += r.hits_first
                st.prompt_tokens_external += r.ext_first
                st.prompt_tokens_local_compute += r.prompt_len - r.hits_first - r.ext_first
                prompt_computed += r.prompt_len - r.hits_first - r.ext_first
            else:
                # First output after a recompute: one long gap in the stream.
                st.inter_token_latency.observe(t_end - r.t_last_out)
                if self.observer is not None:
                    self.observer.token_gap(t_end, t_end - r.t_last_out, 1)
            r.t_last_out = t_end
            generated += 1
            if r.generated >= r.out_len:
                del self._prefilling[r.rid]
                del self.running[r.rid]
                self._finish(r, seen)
            else:
                self._enter_decode(r)
        finish_due = self._finish_due
        while finish_due and finish_due[0][0] <= clock:
            due, _, epoch, r = heapq.heappop(finish_due)
            if r.epoch == epoch and r.phase == _DECODE:
                generated -= clock - due  # a request stops at its last token, drafts beyond it are dropped
                r.num_tokens = r.t0 + (due - r.c0)
                r.generated = r.g0 + (due - r.c0)
                r.t_last_out = t_end
                self._n_decode -= 1
                self._ctx_base -= r.t0 - r.c0
                del self.running[r.rid]
                self._finish(r, seen)
        st.generation_tokens += generated
        if outputs:
            st.iteration_tokens.observe(prompt_computed + generated)

    def _finish(self, r: Request, seen: float) -> None:
        """``r`` produced its last token; its client saw it at ``seen`` (frontend clock)."""
        st = self.stats
        r.phase = _DONE
        self._free_blocks(r)
        spec = r.spec
        e2e = seen - spec.arrival
        st.request_success[spec.finished_reason] += 1
        st.e2e_request_latency.observe(e2e)
        st.request_queue_time.observe(r.t_sched - r.t_queued)
        st.request_prefill_time.observe(r.t_first - r.t_sched)
        st.request_decode_time.observe(r.t_last_out - r.t_first)
        st.request_inference_time.observe(r.t_last_out - r.t_sched)
        tpot = (r.t_last_out - r.t_first) / (r.generated - 1) if r.generated > 1 else 0.0
        st.request_time_per_output_token.observe(tpot)
        st.request_prompt_tokens.observe(r.prompt_len)
        st.request_generation_tokens.observe(r.generated)
        st.request_max_num_generation_tokens.observe(r.generated)
        st.request_params_n.observe(1)
        if spec.max_tokens is not None:
            st.request_params_max_tokens.observe(spec.max_tokens)
        st.request_prefill_kv_computed_tokens.observe(r.prompt_len - r.hits_first)
        st.request_num_preemptions.observe(r.preemptions)
        # The HTTP layer sees the whole stream plus a little routing overhead.
        if st.http_first_request_at is None:
            st.http_first_request_at = seen
        st.http_requests += 1
        st.http_request_size_sum += 4.0 * r.prompt_len + 310.0
        st.http_duration.observe(e2e + 0.0015)
        st.http_duration_highr.observe(e2e + 0.0015)
        if self.observer is not None:
            self.observer.finished(r, seen)
        self.arrivals.finished(spec, seen)
