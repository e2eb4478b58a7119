"""Catalog of the vLLM metrics the sidecar reads, across vLLM's naming generations.

Every metric has one canonical name: the current (0.12+) wire name of its family. Older
wire names are aliases that map onto it (vLLM's renames, by release: vllm/v1/metrics/loggers.py of each version), so the
rest of the pipeline never sees a version difference. A family absent from a scrape is
absent, never zero: the signals that need it abstain and list it under ``missing``.

This module is the one place a ``vllm:`` name is written: code elsewhere names a family by its
constant below (``vllm.KV_CACHE_USAGE_PERC`` with ``from exporter.catalog import metrics as vllm``),
so a typo fails at import and in mypy, not as a family that never appears (tests/unit/test_metric_names.py
keeps it so). ``METRICS`` are the families the sidecar reads (the parser keeps only these);
``UNREAD_METRICS`` the rest of what vLLM 0.32 exports, which the simulator exports too.
docs/vllm-metrics.md is generated from here (``vllm-diag render docs``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

NAMESPACE: Final = "vllm:"  # every vLLM family's name starts with it

# -- vLLM's family names (counters with the _total their samples carry) ---------------------------
NUM_REQUESTS_RUNNING: Final = "vllm:num_requests_running"
NUM_REQUESTS_WAITING: Final = "vllm:num_requests_waiting"
NUM_REQUESTS_WAITING_BY_REASON: Final = "vllm:num_requests_waiting_by_reason"
KV_CACHE_USAGE_PERC: Final = "vllm:kv_cache_usage_perc"
ENGINE_SLEEP_STATE: Final = "vllm:engine_sleep_state"
CACHE_CONFIG_INFO: Final = "vllm:cache_config_info"
NUM_PREEMPTIONS_TOTAL: Final = "vllm:num_preemptions_total"
PROMPT_TOKENS_TOTAL: Final = "vllm:prompt_tokens_total"
GENERATION_TOKENS_TOTAL: Final = "vllm:generation_tokens_total"
REQUEST_SUCCESS_TOTAL: Final = "vllm:request_success_total"
PREFIX_CACHE_QUERIES_TOTAL: Final = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS_TOTAL: Final = "vllm:prefix_cache_hits_total"
EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL: Final = "vllm:external_prefix_cache_queries_total"
EXTERNAL_PREFIX_CACHE_HITS_TOTAL: Final = "vllm:external_prefix_cache_hits_total"
PROMPT_TOKENS_BY_SOURCE_TOTAL: Final = "vllm:prompt_tokens_by_source_total"
ADMISSION_REJECTIONS_TOTAL: Final = "vllm:admission_rejections_total"
ESTIMATED_FLOPS_PER_GPU_TOTAL: Final = "vllm:estimated_flops_per_gpu_total"
ESTIMATED_READ_BYTES_PER_GPU_TOTAL: Final = "vllm:estimated_read_bytes_per_gpu_total"
TIME_TO_FIRST_TOKEN_SECONDS: Final = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY_SECONDS: Final = "vllm:inter_token_latency_seconds"
REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS: Final = "vllm:request_time_per_output_token_seconds"
E2E_REQUEST_LATENCY_SECONDS: Final = "vllm:e2e_request_latency_seconds"
REQUEST_QUEUE_TIME_SECONDS: Final = "vllm:request_queue_time_seconds"
REQUEST_PREFILL_TIME_SECONDS: Final = "vllm:request_prefill_time_seconds"
REQUEST_DECODE_TIME_SECONDS: Final = "vllm:request_decode_time_seconds"
REQUEST_INFERENCE_TIME_SECONDS: Final = "vllm:request_inference_time_seconds"
REQUEST_PROMPT_TOKENS: Final = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS: Final = "vllm:request_generation_tokens"
REQUEST_PARAMS_MAX_TOKENS: Final = "vllm:request_params_max_tokens"
ITERATION_TOKENS_TOTAL: Final = "vllm:iteration_tokens_total"  # a histogram, despite the _total
REQUEST_RENDER_DURATION_SECONDS: Final = "vllm:request_render_duration_seconds"  # 0.34: template + tokenisation
# KV block residency, sampled (--kv-cache-metrics, --kv-cache-metrics-sample; vllm/v1/core/kv_cache_metrics.py): a
# sampled block's allocation to its eviction, its last prefix-cache hit to its eviction, and the gaps between its
# hits, each observed when the block is evicted.
KV_BLOCK_LIFETIME_SECONDS: Final = "vllm:kv_block_lifetime_seconds"
KV_BLOCK_IDLE_BEFORE_EVICT_SECONDS: Final = "vllm:kv_block_idle_before_evict_seconds"
KV_BLOCK_REUSE_GAP_SECONDS: Final = "vllm:kv_block_reuse_gap_seconds"
REQUEST_NUM_PREEMPTIONS: Final = "vllm:request_num_preemptions"
# Speculative decoding (vllm/v1/spec_decode/metrics.py): registered only with --speculative-config.
SPEC_DECODE_NUM_DRAFTS_TOTAL: Final = "vllm:spec_decode_num_drafts_total"
SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL: Final = "vllm:spec_decode_num_draft_tokens_total"
SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL: Final = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL: Final = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# LoRA (vllm/v1/metrics/loggers.py): registered only with --enable-lora. No model_name, no engine label.
LORA_REQUESTS_INFO: Final = "vllm:lora_requests_info"
# vLLM 0.32 families the sidecar does not read.
ESTIMATED_WRITE_BYTES_PER_GPU_TOTAL: Final = "vllm:estimated_write_bytes_per_gpu_total"
MM_CACHE_QUERIES_TOTAL: Final = "vllm:mm_cache_queries_total"
MM_CACHE_HITS_TOTAL: Final = "vllm:mm_cache_hits_total"
PROMPT_TOKENS_CACHED_TOTAL: Final = "vllm:prompt_tokens_cached_total"
PROMPT_TOKENS_CACHED_BY_SOURCE_TOTAL: Final = "vllm:prompt_tokens_cached_by_source_total"
REQUEST_MAX_NUM_GENERATION_TOKENS: Final = "vllm:request_max_num_generation_tokens"
REQUEST_PARAMS_N: Final = "vllm:request_params_n"
REQUEST_PREFILL_KV_COMPUTED_TOKENS: Final = "vllm:request_prefill_kv_computed_tokens"
# Registered only with VLLM_COMPUTE_NANS_IN_LOGITS=1 (vllm/v1/metrics/loggers.py): read by the correctness page.
CORRUPTED_REQUESTS_TOTAL: Final = "vllm:corrupted_requests_total"
# The API-server process' own families (prometheus_client's defaults and the HTTP instrumentator).
PROCESS_CPU_SECONDS_TOTAL: Final = "process_cpu_seconds_total"
PROCESS_START_TIME_SECONDS: Final = "process_start_time_seconds"
HTTP_REQUEST_DURATION_SECONDS: Final = "http_request_duration_seconds"
# -- KV transfer and offload (disaggregated prefill/decode, KV connectors; issue 29) ------------------------------
# Registered only with --kv-transfer-config (or --kv-offloading-size): the fetch-stage gauge on a consumer
# (kv_role kv_consumer or kv_both, vllm/v1/metrics/loggers.py), the NIXL connector's transfer families
# (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py), the offloading connector's
# (.../v1/offloading/metrics.py, vllm/v1/kv_offload/cpu/common.py).
NUM_REQUESTS_KV_FETCH_BY_STAGE: Final = "vllm:num_requests_kv_fetch_by_stage"
NIXL_XFER_TIME_SECONDS: Final = "vllm:nixl_xfer_time_seconds"
NIXL_BYTES_TRANSFERRED: Final = "vllm:nixl_bytes_transferred"
NIXL_NUM_FAILED_TRANSFERS_TOTAL: Final = "vllm:nixl_num_failed_transfers_total"
NIXL_NUM_KV_EXPIRED_REQS_TOTAL: Final = "vllm:nixl_num_kv_expired_reqs_total"
KV_OFFLOAD_LOAD_BYTES_TOTAL: Final = "vllm:kv_offload_load_bytes_total"
KV_OFFLOAD_LOAD_TIME_TOTAL: Final = "vllm:kv_offload_load_time_total"
KV_OFFLOAD_TOTAL_BYTES_TOTAL: Final = "vllm:kv_offload_total_bytes_total"  # deprecated: transfer_type label
KV_OFFLOAD_TOTAL_TIME_TOTAL: Final = "vllm:kv_offload_total_time_total"  # deprecated: transfer_type label
KV_OFFLOAD_CPU_CACHE_USAGE_PERC: Final = "vllm:kv_offload_cpu_cache_usage_perc"
# The same, not read: NIXL's post time and descriptors, the offload store direction.
NIXL_POST_TIME_SECONDS: Final = "vllm:nixl_post_time_seconds"
NIXL_NUM_DESCRIPTORS: Final = "vllm:nixl_num_descriptors"
NIXL_NUM_FAILED_NOTIFICATIONS_TOTAL: Final = "vllm:nixl_num_failed_notifications_total"
KV_OFFLOAD_STORE_BYTES_TOTAL: Final = "vllm:kv_offload_store_bytes_total"
KV_OFFLOAD_STORE_TIME_TOTAL: Final = "vllm:kv_offload_store_time_total"


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric family the sidecar understands.

    ``name`` is the canonical (current) family name; for counters it keeps the ``_total``
    suffix because that is the name on the wire and in PromQL. ``aliases`` are older wire
    names, newest first; when a scrape carries both (vLLM 0.9.2-0.11 does), the canonical
    name wins. ``since`` is the first release whose /metrics carries ``name`` ("": every release
    the sidecar reads), ``aliases_last`` the last release series that still exports the aliases.
    """

    name: str
    kind: Kind
    help: str
    aliases: tuple[str, ...] = ()
    since: str = ""
    aliases_last: str = ""


_C, _G, _H, _I = Kind.COUNTER, Kind.GAUGE, Kind.HISTOGRAM, Kind.INFO

METRICS: tuple[MetricDef, ...] = (
    # Scheduler state (gauges, per engine)
    MetricDef(NUM_REQUESTS_RUNNING, _G, "Requests in model execution batches", since="0.7.1"),
    MetricDef(NUM_REQUESTS_WAITING, _G, "Requests waiting to be scheduled", since="0.7.1"),
    MetricDef(
        NUM_REQUESTS_WAITING_BY_REASON, _G,
        "Waiting requests by reason (capacity, deferred)", since="0.20",
    ),
    MetricDef(
        KV_CACHE_USAGE_PERC, _G, "Fraction of KV blocks held (0..1)",
        aliases=("vllm:gpu_cache_usage_perc",), since="0.9.2", aliases_last="0.11",
    ),
    MetricDef(ENGINE_SLEEP_STATE, _G, "Engine sleep state (one-hot)", since="0.11.1"),
    MetricDef(CACHE_CONFIG_INFO, _I, "KV cache configuration as labels", since="0.8.0"),
    # Counters (per engine)
    MetricDef(NUM_PREEMPTIONS_TOTAL, _C, "Preemptions (recompute) of running requests"),
    MetricDef(PROMPT_TOKENS_TOTAL, _C, "Prompt tokens of requests whose prefill completed"),
    MetricDef(GENERATION_TOKENS_TOTAL, _C, "Generated tokens"),
    MetricDef(REQUEST_SUCCESS_TOTAL, _C, "Finished requests by finished_reason"),
    MetricDef(
        PREFIX_CACHE_QUERIES_TOTAL, _C, "Prompt tokens looked up in the prefix cache",
        aliases=("vllm:gpu_prefix_cache_queries_total",), since="0.9.2", aliases_last="0.11",
    ),
    MetricDef(
        PREFIX_CACHE_HITS_TOTAL, _C, "Prompt tokens found in the prefix cache",
        aliases=("vllm:gpu_prefix_cache_hits_total",), since="0.9.2", aliases_last="0.11",
    ),
    MetricDef(EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL, _C, "Tokens offered to the KV connector", since="0.11.1"),
    MetricDef(EXTERNAL_PREFIX_CACHE_HITS_TOTAL, _C, "Tokens supplied by the KV connector", since="0.11.1"),
    MetricDef(PROMPT_TOKENS_BY_SOURCE_TOTAL, _C, "Prompt tokens by source", since="0.16"),
    MetricDef(ADMISSION_REJECTIONS_TOTAL, _C, "HTTP 503 admission rejections by reason", since="0.32"),
    # Analytic per-GPU work estimates; they move only with --enable-mfu-metrics (zeros otherwise).
    MetricDef(ESTIMATED_FLOPS_PER_GPU_TOTAL, _C, "Estimated FLOPs per GPU (MFU)", since="0.17"),
    MetricDef(ESTIMATED_READ_BYTES_PER_GPU_TOTAL, _C, "Estimated bytes read from GPU memory (MBU)",
              since="0.17"),
    # Histograms (per engine)
    MetricDef(TIME_TO_FIRST_TOKEN_SECONDS, _H, "Time to first token (frontend clock)"),
    MetricDef(
        INTER_TOKEN_LATENCY_SECONDS, _H, "Time between successive outputs of a request",
        aliases=("vllm:time_per_output_token_seconds",), since="0.10.2", aliases_last="0.14",
    ),
    MetricDef(REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS, _H, "Per-request mean time per output token",
              since="0.11.0"),
    MetricDef(E2E_REQUEST_LATENCY_SECONDS, _H, "Arrival to finish (frontend clock)"),
    MetricDef(REQUEST_QUEUE_TIME_SECONDS, _H, "Engine queue time (QUEUED to first SCHEDULED)"),
    MetricDef(REQUEST_PREFILL_TIME_SECONDS, _H, "First SCHEDULED to first token"),
    MetricDef(REQUEST_DECODE_TIME_SECONDS, _H, "First token to last token"),
    MetricDef(REQUEST_INFERENCE_TIME_SECONDS, _H, "First SCHEDULED to last token"),
    MetricDef(REQUEST_PROMPT_TOKENS, _H, "Prompt length per finished request"),
    MetricDef(REQUEST_GENERATION_TOKENS, _H, "Output length per finished request"),
    MetricDef(ITERATION_TOKENS_TOTAL, _H, "Tokens per engine output batch (about one per step)"),
    # The API server's rendering of a request (chat template, tokenisation, multimodal preprocessing), by
    # request_type (chat, completion); registered at the first rendered request (vllm/renderers/metrics.py).
    MetricDef(REQUEST_RENDER_DURATION_SECONDS, _H, "Time the API server spent rendering a request (template, "
              "tokenisation)", since="0.34"),
    # KV block residency, only with --kv-cache-metrics (sampled blocks, observed at their eviction).
    MetricDef(KV_BLOCK_LIFETIME_SECONDS, _H, "Sampled KV block: allocation to eviction", since="0.12.0"),
    MetricDef(KV_BLOCK_IDLE_BEFORE_EVICT_SECONDS, _H, "Sampled KV block: last prefix-cache hit (or allocation) "
              "to eviction", since="0.12.0"),
    MetricDef(KV_BLOCK_REUSE_GAP_SECONDS, _H, "Sampled KV block: gaps between its prefix-cache hits (up to 3 "
              "per block)", since="0.12.0"),
    # Speculative decoding, only with --speculative-config (V1 counters; V0's engine exported the
    # accepted and draft token counters under the same names, with gauges and an emitted-token counter
    # beside them that the V1 engine never had). Drafts: verify steps that carried a draft.
    MetricDef(SPEC_DECODE_NUM_DRAFTS_TOTAL, _C, "Speculative drafts verified (steps with a draft)",
              since="0.8.5"),
    MetricDef(SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL, _C, "Draft tokens proposed"),
    MetricDef(SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL, _C, "Draft tokens accepted"),
    MetricDef(SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL, _C,
              "Draft tokens accepted per draft position (label position)", since="0.8.5"),
    # LoRA, only with --enable-lora: a gauge whose labels carry the state (max_lora, and the adapter names
    # running and waiting, comma-joined) and whose value is the unix time of its last update. A new series
    # appears for every distinct label combination and old ones stay: the newest value is the current state.
    MetricDef(LORA_REQUESTS_INFO, _G, "LoRA adapters running and waiting against max_lora (value: update time)",
              since="0.8.0"),
    # API-server process (absent with --api-server-count > 1)
    MetricDef(PROCESS_CPU_SECONDS_TOTAL, _C, "API-server process CPU time"),
    MetricDef(PROCESS_START_TIME_SECONDS, _G, "API-server process start time"),
    # -- KV transfer and offload (issue 29), only with a KV connector or native offload ----------------------
    MetricDef(NUM_REQUESTS_KV_FETCH_BY_STAGE, _G,
              "Waiting requests by async KV load stage (waiting_to_start, in_progress, completed_waiting); "
              "registered on a KV consumer only", since="0.32"),
    MetricDef(NIXL_XFER_TIME_SECONDS, _H, "NIXL KV transfer duration per transfer", since="0.11.1"),
    MetricDef(NIXL_BYTES_TRANSFERRED, _H, "Bytes per NIXL KV transfer", since="0.11.1"),
    MetricDef(NIXL_NUM_FAILED_TRANSFERS_TOTAL, _C,
              "Failed NIXL KV transfers, handshake and notification failures included", since="0.11.1"),
    MetricDef(NIXL_NUM_KV_EXPIRED_REQS_TOTAL, _C,
              "Requests whose KV expired on the prefill instance before a decode instance read it", since="0.15.0"),
    MetricDef(KV_OFFLOAD_LOAD_BYTES_TOTAL, _C, "Bytes loaded from the offload tier to the GPU", since="0.24"),
    MetricDef(KV_OFFLOAD_LOAD_TIME_TOTAL, _C, "Seconds spent loading from the offload tier to the GPU",
              since="0.24"),
    MetricDef(KV_OFFLOAD_TOTAL_BYTES_TOTAL, _C,
              "Bytes moved by the offloading connector by transfer_type (CPU_to_GPU, GPU_to_CPU); deprecated "
              "beside the flat load/store names", since="0.16"),
    MetricDef(KV_OFFLOAD_TOTAL_TIME_TOTAL, _C,
              "Seconds of offloading transfers by transfer_type; deprecated beside the flat names", since="0.16"),
    MetricDef(KV_OFFLOAD_CPU_CACHE_USAGE_PERC, _G, "Share of the CPU offload tier in use (0..1)", since="0.24"),
)

# What else a vLLM 0.32 API server exports (tests/fixtures/vllm-0.32-cpu): known, so that the simulator
# exports the same /metrics and docs/vllm-metrics.md lists it, but never parsed.
UNREAD_METRICS: tuple[MetricDef, ...] = (
    MetricDef(ESTIMATED_WRITE_BYTES_PER_GPU_TOTAL, _C, "Estimated bytes written to GPU memory (MBU)", since="0.17"),
    MetricDef(MM_CACHE_QUERIES_TOTAL, _C, "Multi-modal cache queries, in items", since="0.11.1"),
    MetricDef(MM_CACHE_HITS_TOTAL, _C, "Multi-modal cache hits, in items", since="0.11.1"),
    MetricDef(PROMPT_TOKENS_CACHED_TOTAL, _C, "Cached prompt tokens (local and external)", since="0.16"),
    MetricDef(PROMPT_TOKENS_CACHED_BY_SOURCE_TOTAL, _C, "Prefix-cache hit tokens by the cache tier that supplied them",
              since="0.32"),
    MetricDef(REQUEST_MAX_NUM_GENERATION_TOKENS, _H, "Maximum requested generation tokens per request"),
    MetricDef(REQUEST_PARAMS_N, _H, "n request parameter"),
    MetricDef(REQUEST_PREFILL_KV_COMPUTED_TOKENS, _H, "New KV tokens computed during prefill (cached ones excluded)",
              since="0.13"),
    # Env-gated (VLLM_COMPUTE_NANS_IN_LOGITS=1): no signal reads it; the raw-series correctness page does.
    MetricDef(CORRUPTED_REQUESTS_TOTAL, _C, "Finished requests that had NaNs in their logits", since="0.11.1"),
    # Read by no signal: the parser skips them (tests/unit/test_needed_families.py keeps the two lists honest).
    MetricDef(REQUEST_PARAMS_MAX_TOKENS, _H, "max_tokens request parameter", since="0.8.0"),
    MetricDef(REQUEST_NUM_PREEMPTIONS, _H, "Preemptions per finished request", since="0.30"),
    MetricDef(HTTP_REQUEST_DURATION_SECONDS, _H, "HTTP request duration by handler"),
    # -- KV transfer and offload (issue 29): exported with the connector, not read -----------------------------
    MetricDef(NIXL_POST_TIME_SECONDS, _H, "NIXL KV transfer post time", since="0.11.1"),
    MetricDef(NIXL_NUM_DESCRIPTORS, _H, "Descriptors per NIXL KV transfer", since="0.11.1"),
    MetricDef(NIXL_NUM_FAILED_NOTIFICATIONS_TOTAL, _C, "Failed NIXL notifications (also in failed transfers)",
              since="0.11.1"),
    MetricDef(KV_OFFLOAD_STORE_BYTES_TOTAL, _C, "Bytes stored from the GPU to the offload tier", since="0.24"),
    MetricDef(KV_OFFLOAD_STORE_TIME_TOTAL, _C, "Seconds spent storing from the GPU to the offload tier",
              since="0.24"),
)

# Families known from vLLM's source only: the CPU build runs neither NIXL nor native CPU offload, and is 0.32 (the
# render duration is 0.34's), so no real capture holds them (tests/unit/test_metric_names.py; the fetch-stage
# gauge is in a real KV consumer's capture); the corrupted-requests counter needs VLLM_COMPUTE_NANS_IN_LOGITS=1,
# which no capture ran with.
FROM_SOURCE_ONLY: frozenset[str] = frozenset({
    REQUEST_RENDER_DURATION_SECONDS, CORRUPTED_REQUESTS_TOTAL,
    NIXL_XFER_TIME_SECONDS, NIXL_BYTES_TRANSFERRED, NIXL_NUM_FAILED_TRANSFERS_TOTAL,
    NIXL_NUM_KV_EXPIRED_REQS_TOTAL, NIXL_POST_TIME_SECONDS, NIXL_NUM_DESCRIPTORS, NIXL_NUM_FAILED_NOTIFICATIONS_TOTAL,
    KV_OFFLOAD_LOAD_BYTES_TOTAL, KV_OFFLOAD_LOAD_TIME_TOTAL, KV_OFFLOAD_TOTAL_BYTES_TOTAL, KV_OFFLOAD_TOTAL_TIME_TOTAL,
    KV_OFFLOAD_CPU_CACHE_USAGE_PERC, KV_OFFLOAD_STORE_BYTES_TOTAL, KV_OFFLOAD_STORE_TIME_TOTAL,
})

# Sample-name suffixes of a histogram family, mapped to the part they carry.
HISTOGRAM_PARTS: tuple[tuple[str, str], ...] = (("_bucket", "bucket"), ("_sum", "sum"), ("_count", "count"))


def _sample_index(metrics: Iterable[MetricDef]) -> dict[str, tuple[str, str, int]]:
    """Wire sample name -> (canonical family, part, alias rank); rank 0 is the current name."""
    index: dict[str, tuple[str, str, int]] = {}
    for metric in metrics:
        for rank, wire in enumerate((metric.name, *metric.aliases)):
            if metric.kind is Kind.HISTOGRAM:
                for suffix, part in HISTOGRAM_PARTS:
                    index[wire + suffix] = (metric.name, part, rank)
            else:
                index[wire] = (metric.name, "value", rank)
    return index


@dataclass(frozen=True, slots=True)
class Catalog:
    """The families one parse keeps (``exporter.parse.parse``): vLLM's, or another exporter's (DCGM)."""

    by_name: Mapping[str, MetricDef]
    sample_index: Mapping[str, tuple[str, str, int]]  # wire sample name -> (family, part, alias rank)

    @classmethod
    def of(cls, metrics: Iterable[MetricDef]) -> Catalog:
        metrics = tuple(metrics)
        return cls({m.name: m for m in metrics}, _sample_index(metrics))


VLLM = Catalog.of(METRICS)
BY_NAME: Mapping[str, MetricDef] = VLLM.by_name
SAMPLE_INDEX: Mapping[str, tuple[str, str, int]] = VLLM.sample_index


# Every family the catalog knows, read or not, by its canonical name.
KNOWN: Mapping[str, MetricDef] = {m.name: m for m in (*METRICS, *UNREAD_METRICS)}


def known(name: str) -> MetricDef:
    """The catalog entry of a canonical family name; KeyError names an unknown one."""
    try:
        return KNOWN[name]
    except KeyError:
        raise KeyError(f"{name} is not a metric the catalog knows (exporter/catalog/metrics.py)") from None


def wire_names() -> frozenset[str]:
    """Every sample name the catalog reads, current and old (for the dashboard/rule lint)."""
    return frozenset(SAMPLE_INDEX)


# The inputs a paging alert rule needs, by the name ``vllm_diag_input_available{input}`` carries, each
# with the canonical family that provides it (older wire names map onto it at parse time, above).
# ``cpu_source`` is no vLLM family: the host CPU source of a target that configures ``cpu:``.
CPU_SOURCE_INPUT = "cpu_source"
WATCHED_INPUTS: Mapping[str, str | None] = {
    "kv_usage": KV_CACHE_USAGE_PERC,
    "preemptions": NUM_PREEMPTIONS_TOTAL,
    "ttft_histogram": TIME_TO_FIRST_TOKEN_SECONDS,
    "itl_histogram": INTER_TOKEN_LATENCY_SECONDS,
    "finished_requests": REQUEST_SUCCESS_TOTAL,
    CPU_SOURCE_INPUT: None,
}
