"""The statistics of a simulated engine, accumulated the way vLLM's Prometheus logger accumulates them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from typing import Final

from exporter.simulator.buckets import (
    HTTP_DURATION_BUCKETS,
    HTTP_DURATION_HIGHR_BUCKETS,
    INTER_TOKEN_LATENCY_BUCKETS,
    ITERATION_TOKENS_BUCKETS,
    KV_CACHE_RESIDENCY_BUCKETS,
    NIXL_BYTES_BUCKETS,
    NIXL_XFER_TIME_BUCKETS,
    RENDER_DURATION_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    REQUEST_NUM_PREEMPTIONS_BUCKETS,
    REQUEST_PARAMS_N_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
    request_token_buckets,
)
from exporter.simulator.deployment import EngineConfig

# vLLM's finished_reason label values: the engine counts finished requests by each.
FINISHED_REASONS: Final = ("stop", "length", "abort", "error", "repetition")


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
        # sampled KV blocks at their eviction (--kv-cache-metrics; ``residency``)
        self.kv_block_lifetime = Histogram(KV_CACHE_RESIDENCY_BUCKETS)
        self.kv_block_idle = Histogram(KV_CACHE_RESIDENCY_BUCKETS)
        self.kv_block_reuse_gap = Histogram(KV_CACHE_RESIDENCY_BUCKETS)
        # API-server (frontend) families
        self.http_requests = 0
        self.http_request_size_sum = 0.0
        self.http_first_request_at: float | None = None  # children are created lazily
        self.http_duration = Histogram(HTTP_DURATION_BUCKETS)
        self.http_duration_highr = Histogram(HTTP_DURATION_HIGHR_BUCKETS)
        self.frontend_cpu_s = 0.0  # CPU seconds of work done by the API server
        self.render_duration = Histogram(RENDER_DURATION_BUCKETS)  # per request (exposed from vLLM 0.34)
        self.render_first_at: float | None = None
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
