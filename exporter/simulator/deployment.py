"""What a simulated engine runs as: the model, the accelerator, the step costs and vLLM's engine arguments
(``EngineConfig``). Moved out of ``engine`` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

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


# The release whose /metrics the exposition copies, and what a simulated engine's /version answers by default.
VLLM_VERSION: Final = "0.32.0"


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
    # --kv-cache-metrics with --kv-cache-metrics-sample: the share of KV blocks whose residency is observed (0: off)
    kv_cache_metrics_sample: float = 0.0
    # The release served: from 0.34 the API server observes each request's render (template, tokenisation).
    vllm_version: str = VLLM_VERSION
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
        if not 0.0 <= self.kv_cache_metrics_sample <= 1.0:
            raise ValueError("kv_cache_metrics_sample must be in [0, 1]")
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
    def observes_render(self) -> bool:
        """vLLM 0.34+: the API server exports vllm:request_render_duration_seconds."""
        return tuple(int(x) for x in self.vllm_version.split(".")[:2]) >= (0, 34)

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
