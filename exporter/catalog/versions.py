"""Every ``vllm:`` metric name vLLM 0.6 to 0.34 exports, with the releases that added, deprecated, hid
and removed it, and the name that replaced it.

Read from vLLM's own source of each release in ``RELEASES_READ`` (the published wheels): every
``vllm:`` name a Prometheus metric is registered under (the V0 engine's ``vllm/engine/metrics.py``,
the V1 engine's ``vllm/v1/metrics/loggers.py``, speculative decoding, LoRA, the KV-connector and
offload families, the API server's own). A version below is the first *read* release with the
change (patch releases between two read ones were not all read: "0.8.5.post1" can mean "0.8.5").
Wire names: counters with the ``_total`` prometheus_client appends, histograms by their base name.
Not covered: the KVCR tier's four names, which vLLM builds from constants of the external ``kvcr``
package (``vllm/v1/kv_offload/tiering/kvcr/manager.py``, 0.30+), and 0.21.0 was read from its sdist
(PyPI has no x86-64 wheel of it).

vLLM's deprecation policy (its metrics usage guide): a metric deprecated in X.Y is hidden in X.Y+1 (it
comes back with ``--show-hidden-metrics-for-version=X.Y``) and removed in X.Y+2; the releases below
are what the code did, which sometimes came later. ``exporter/catalog/metrics.py`` (what the sidecar
reads, with its older names as aliases) must agree with this map (tests/unit/test_metric_versions.py);
``vllm-diag render all --check`` fails when a dashboard, rule or runbook reads a name that a supported
release lacks without also reading the name that release has (``exporter.render.lint.version_lint``).
docs/vllm-metric-versions.md is generated from here (``vllm-diag render docs``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from exporter.catalog.metrics import HISTOGRAM_PARTS, Kind

# The releases whose source was read for this map, oldest first.
RELEASES_READ: Final[tuple[str, ...]] = (
    "0.6.0", "0.6.1", "0.6.2", "0.6.3", "0.6.4", "0.6.5", "0.6.6", "0.6.6.post1",
    "0.7.0", "0.7.1", "0.7.2", "0.7.3", "0.8.0", "0.8.1", "0.8.2", "0.8.3",
    "0.8.4", "0.8.5", "0.8.5.post1", "0.9.0", "0.9.1", "0.9.2", "0.10.0", "0.10.1",
    "0.10.1.1", "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0",
    "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1",
    "0.19.0", "0.19.1", "0.20.0", "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0",
    "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0",
    "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0",
)

# The releases the generated dashboards, rules and runbooks must serve: from the first release whose
# default engine is V1 (0.8.0) to the newest read. One place: the version check and the docs read it.
OLDEST_SUPPORTED: Final = "0.8.0"
NEWEST_SUPPORTED: Final = "0.34.0"

# Why a name is absent from a scrape of a release that has it: registered only with a feature on.
SPEC = "--speculative-config"
LORA = "--enable-lora"
KV_METRICS = "--kv-cache-metrics"
NIXL = "NixlConnector"
OFFLOAD = "OffloadingConnector"
OFFLOAD_CPU = "OffloadingConnector, CPU tier"
OFFLOAD_TIERING = "OffloadingConnector, tiering"
SIMPLE_OFFLOAD = "SimpleCPUOffloadConnector"
MOONCAKE = "MooncakeConnector"
MOONCAKE_STORE = "MooncakeStoreConnector"
HF3FS = "HF3FS connector"
UMBP = "UMBP connector"
HISPARSE = "HiSparse connector"
KV_CONSUMER = "--kv-transfer-config role kv_consumer or kv_both"
DEV_MODE = "VLLM_SERVER_DEV_MODE=1"
OTEL = "--collect-detailed-traces (V0)"
NAN_ENV = "VLLM_COMPUTE_NANS_IN_LOGITS=1"
WATERMARK = "watermark_config"
TOOL_PARSER = "--tool-call-parser"
REALTIME = "the realtime task"
DIFFUSION = "a diffusion language model"


@dataclass(frozen=True, slots=True)
class History:
    """One wire name across releases."""

    name: str
    kind: Kind
    added: str  # first read release that exports it (either engine)
    deprecated: str = ""  # first release whose help text or code marks it deprecated (still exported)
    hidden: str = ""  # first release that exports it only with --show-hidden-metrics-for-version
    removed: str = ""  # first release without it ("": still in NEWEST_SUPPORTED)
    renamed_to: tuple[str, ...] = ()  # the name(s) that carry it on; two when one family was split
    engine: str = ""  # "v0": only the V0 engine (vllm/engine/metrics.py) exported it
    v1_added: str = ""  # first release whose V1 engine exports it, when the V0 engine did earlier
    condition: str = ""  # registered only with this feature on ("": always)


def version_key(version: str) -> tuple[int, ...]:
    """"0.8.5.post1" -> (0, 8, 5, 1); "0.20" -> (0, 20, 0, 0): releases sort and compare."""
    parts: list[int] = []
    for part in version.split("."):
        parts.append(int(part.removeprefix("post")))
    if len(parts) < 3:
        parts += [0] * (3 - len(parts))
    if len(parts) < 4:
        parts.append(0)
    return tuple(parts)


def exported_in(h: History, release: str, *, hidden_ok: bool = False) -> bool:
    """True when ``release`` exports ``h`` (by default, not behind --show-hidden-metrics-for-version)."""
    r = version_key(release)
    if r < version_key(h.added) or (h.removed and r >= version_key(h.removed)):
        return False
    return hidden_ok or not h.hidden or r < version_key(h.hidden)


_C, _G, _H, _I = Kind.COUNTER, Kind.GAUGE, Kind.HISTOGRAM, Kind.INFO

HISTORY: tuple[History, ...] = (
    History("vllm:admission_rejections_total", _C, "0.32.0"),
    History("vllm:avg_generation_throughput_toks_per_s", _G, "0.6.0", deprecated="0.6.0", removed="0.7.0", engine="v0"),
    History("vllm:avg_prompt_throughput_toks_per_s", _G, "0.6.0", deprecated="0.6.0", removed="0.7.0", engine="v0"),
    History("vllm:cache_config_info", _I, "0.6.0", v1_added="0.8.0"),
    History("vllm:corrupted_requests_total", _C, "0.11.1", condition=NAN_ENV),
    History("vllm:cpu_cache_usage_perc", _G, "0.6.0", deprecated="0.8.0", hidden="0.8.3", removed="0.9.1", engine="v0"),
    History("vllm:cpu_prefix_cache_hit_rate", _G, "0.6.0",
            deprecated="0.8.0", hidden="0.8.3", removed="0.9.1", engine="v0"),
    History("vllm:diffusion_num_canvas_positions_total", _C, "0.24.0", condition=DIFFUSION),
    History("vllm:diffusion_num_committed_tokens_total", _C, "0.24.0", condition=DIFFUSION),
    History("vllm:diffusion_num_denoising_steps_total", _C, "0.24.0", condition=DIFFUSION),
    History("vllm:e2e_request_latency_seconds", _H, "0.6.0", v1_added="0.7.3"),
    History("vllm:engine_sleep_state", _G, "0.11.1"),
    History("vllm:estimated_flops_per_gpu_total", _C, "0.17.0"),
    History("vllm:estimated_read_bytes_per_gpu_total", _C, "0.17.0"),
    History("vllm:estimated_write_bytes_per_gpu_total", _C, "0.17.0"),
    History("vllm:external_prefix_cache_hits_total", _C, "0.11.1"),
    History("vllm:external_prefix_cache_queries_total", _C, "0.11.1"),
    History("vllm:generation_tokens_total", _C, "0.6.0", v1_added="0.7.1"),
    History("vllm:gpu_cache_usage_perc", _G, "0.6.0",
            deprecated="0.9.2", hidden="0.11.0", removed="0.12.0",
            renamed_to=("vllm:kv_cache_usage_perc",), v1_added="0.7.1"),
    History("vllm:gpu_prefix_cache_hit_rate", _G, "0.6.0",
            deprecated="0.8.0", hidden="0.8.3", removed="0.9.1", engine="v0"),
    History("vllm:gpu_prefix_cache_hits_total", _C, "0.7.3",
            deprecated="0.9.2", hidden="0.11.0", removed="0.12.0", renamed_to=("vllm:prefix_cache_hits_total",)),
    History("vllm:gpu_prefix_cache_queries_total", _C, "0.7.3",
            deprecated="0.9.2", hidden="0.11.0", removed="0.12.0", renamed_to=("vllm:prefix_cache_queries_total",)),
    History("vllm:hf3fs_load_duration_seconds", _H, "0.20.0", condition=HF3FS),
    History("vllm:hf3fs_num_failed_load_total", _C, "0.20.0", condition=HF3FS),
    History("vllm:hf3fs_num_failed_save_total", _C, "0.20.0", condition=HF3FS),
    History("vllm:hf3fs_save_duration_seconds", _H, "0.20.0", condition=HF3FS),
    History("vllm:hisparse_cache_hits_total", _C, "0.32.0", condition=HISPARSE),
    History("vllm:hisparse_cache_misses_total", _C, "0.32.0", condition=HISPARSE),
    History("vllm:hisparse_host_block_idle_before_evict_seconds", _H, "0.32.0", condition=HISPARSE),
    History("vllm:hisparse_host_block_lifetime_seconds", _H, "0.32.0", condition=HISPARSE),
    History("vllm:hisparse_host_block_reuse_gap_seconds", _H, "0.32.0", condition=HISPARSE),
    History("vllm:hisparse_host_cache_usage_perc", _G, "0.32.0", condition=HISPARSE),
    History("vllm:hisparse_host_to_device_bytes_total", _C, "0.32.0", condition=HISPARSE),
    History("vllm:hisparse_pending_page_transfers", _G, "0.32.0", condition=HISPARSE),
    History("vllm:inter_token_latency_seconds", _H, "0.10.2"),
    History("vllm:iteration_tokens_total", _H, "0.6.4", v1_added="0.7.3"),
    History("vllm:kv_block_idle_before_evict_seconds", _H, "0.12.0", condition=KV_METRICS),
    History("vllm:kv_block_lifetime_seconds", _H, "0.12.0", condition=KV_METRICS),
    History("vllm:kv_block_reuse_gap_seconds", _H, "0.12.0", condition=KV_METRICS),
    History("vllm:kv_cache_usage_perc", _G, "0.9.2"),
    History("vllm:kv_offload_allocation_failure_total", _C, "0.26.0", condition=OFFLOAD),
    History("vllm:kv_offload_config_info", _I, "0.33.0", condition=OFFLOAD),
    History("vllm:kv_offload_cpu_allocation_size", _H, "0.26.0", condition=OFFLOAD_CPU),
    History("vllm:kv_offload_cpu_cache_read_usage_perc", _G, "0.26.0", condition=OFFLOAD_CPU),
    History("vllm:kv_offload_cpu_cache_usage_perc", _G, "0.24.0", condition=OFFLOAD_CPU),
    History("vllm:kv_offload_cpu_cache_write_usage_perc", _G, "0.26.0", condition=OFFLOAD_CPU),
    History("vllm:kv_offload_load_bytes_total", _C, "0.24.0", condition=OFFLOAD),
    History("vllm:kv_offload_load_size", _H, "0.24.0", condition=OFFLOAD),
    History("vllm:kv_offload_load_time_total", _C, "0.24.0", condition=OFFLOAD),
    History("vllm:kv_offload_lookup_async_delay_seconds", _H, "0.26.0", condition=OFFLOAD),
    History("vllm:kv_offload_lookup_sync_delay_seconds", _H, "0.26.0", condition=OFFLOAD),
    History("vllm:kv_offload_size", _H, "0.16.0",
            deprecated="0.24.0",
            renamed_to=("vllm:kv_offload_load_size", "vllm:kv_offload_store_size"), condition=OFFLOAD),
    History("vllm:kv_offload_store_bytes_total", _C, "0.24.0", condition=OFFLOAD),
    History("vllm:kv_offload_store_size", _H, "0.24.0", condition=OFFLOAD),
    History("vllm:kv_offload_store_time_total", _C, "0.24.0", condition=OFFLOAD),
    History("vllm:kv_offload_stores_skipped_total", _C, "0.24.0", condition=OFFLOAD_CPU),
    History("vllm:kv_offload_tiering_active_cascade_jobs", _G, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_active_promotion_jobs", _G, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_backpressure_blocks_dropped_total", _C, "0.31.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_backpressure_store_latency_ema", _G, "0.31.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_backpressure_stores_dropped_total", _C, "0.31.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_cascade_job_failures_total", _C, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_chunk_hits_total", _C, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_chunk_queries_total", _C, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_deferred_release_chunks", _G, "0.34.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_deferred_release_hold_seconds", _H, "0.34.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_lookup_async_delay_seconds", _H, "0.26.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_lookup_sync_delay_seconds", _H, "0.26.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_primary_read_usage_perc", _G, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_primary_write_usage_perc", _G, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_promotion_allocation_failures_total", _C, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_promotion_job_failures_total", _C, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_promotion_latency_seconds", _H, "0.33.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_read_bytes_total", _C, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_read_time_total", _C, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_write_bytes_total", _C, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_tiering_write_time_total", _C, "0.28.0", condition=OFFLOAD_TIERING),
    History("vllm:kv_offload_total_bytes_total", _C, "0.16.0",
            deprecated="0.24.0",
            renamed_to=("vllm:kv_offload_load_bytes_total", "vllm:kv_offload_store_bytes_total"), condition=OFFLOAD),
    History("vllm:kv_offload_total_time_total", _C, "0.16.0",
            deprecated="0.24.0",
            renamed_to=("vllm:kv_offload_load_time_total", "vllm:kv_offload_store_time_total"), condition=OFFLOAD),
    History("vllm:lora_requests_info", _G, "0.6.4", v1_added="0.8.0", condition=LORA),
    History("vllm:mm_cache_hits_total", _C, "0.11.1"),
    History("vllm:mm_cache_queries_total", _C, "0.11.1"),
    History("vllm:model_execute_time_milliseconds", _H, "0.6.4",
            deprecated="0.8.0", hidden="0.8.3", removed="0.9.1", engine="v0", condition=OTEL),
    History("vllm:model_forward_time_milliseconds", _H, "0.6.4",
            deprecated="0.8.0", hidden="0.8.3", removed="0.9.1", engine="v0", condition=OTEL),
    History("vllm:mooncake_bytes_transferred", _H, "0.33.0", condition=MOONCAKE),
    History("vllm:mooncake_num_descriptors", _H, "0.33.0", condition=MOONCAKE),
    History("vllm:mooncake_num_failed_recvs_total", _C, "0.33.0", condition=MOONCAKE),
    History("vllm:mooncake_num_failed_transfers_total", _C, "0.33.0", condition=MOONCAKE),
    History("vllm:mooncake_num_kv_expired_reqs_total", _C, "0.33.0", condition=MOONCAKE),
    History("vllm:mooncake_store_operation_bytes_total", _C, "0.22.0", condition=MOONCAKE_STORE),
    History("vllm:mooncake_store_operation_failed_keys_total", _C, "0.22.0", condition=MOONCAKE_STORE),
    History("vllm:mooncake_store_operation_keys_total", _C, "0.22.0", condition=MOONCAKE_STORE),
    History("vllm:mooncake_store_operation_time_seconds", _H, "0.22.0", condition=MOONCAKE_STORE),
    History("vllm:mooncake_store_operation_total", _C, "0.22.0", condition=MOONCAKE_STORE),
    History("vllm:mooncake_xfer_time_seconds", _H, "0.33.0", condition=MOONCAKE),
    History("vllm:nixl_bytes_transferred", _H, "0.11.1", condition=NIXL),
    History("vllm:nixl_num_descriptors", _H, "0.11.1", condition=NIXL),
    History("vllm:nixl_num_failed_notifications_total", _C, "0.11.1", condition=NIXL),
    History("vllm:nixl_num_failed_transfers_total", _C, "0.11.1", condition=NIXL),
    History("vllm:nixl_num_kv_expired_reqs_total", _C, "0.15.0", condition=NIXL),
    History("vllm:nixl_num_notifications_after_expiry_total", _C, "0.32.0", condition=NIXL),
    History("vllm:nixl_post_time_seconds", _H, "0.11.1", condition=NIXL),
    History("vllm:nixl_xfer_time_seconds", _H, "0.11.1", condition=NIXL),
    History("vllm:num_preemptions_total", _C, "0.6.0", v1_added="0.8.0"),
    History("vllm:num_requests_kv_fetch_by_stage", _G, "0.32.0", condition=KV_CONSUMER),
    History("vllm:num_requests_running", _G, "0.6.0", v1_added="0.7.1"),
    History("vllm:num_requests_swapped", _G, "0.6.0", deprecated="0.8.0", hidden="0.8.3", removed="0.9.1", engine="v0"),
    History("vllm:num_requests_waiting", _G, "0.6.0", v1_added="0.7.1"),
    History("vllm:num_requests_waiting_by_reason", _G, "0.20.0"),
    History("vllm:prefix_cache_hits_total", _C, "0.9.2"),
    History("vllm:prefix_cache_queries_total", _C, "0.9.2"),
    History("vllm:prompt_tokens_by_source_total", _C, "0.16.0"),
    History("vllm:prompt_tokens_cached_by_source_total", _C, "0.32.0"),
    History("vllm:prompt_tokens_cached_total", _C, "0.16.0"),
    History("vllm:prompt_tokens_recomputed_total", _C, "0.16.0", removed="0.20.0"),
    History("vllm:prompt_tokens_total", _C, "0.6.0", v1_added="0.7.1"),
    History("vllm:request_decode_time_seconds", _H, "0.6.4", v1_added="0.7.3"),
    History("vllm:request_generation_tokens", _H, "0.6.0", v1_added="0.7.1"),
    History("vllm:request_inference_time_seconds", _H, "0.6.4", v1_added="0.7.3"),
    History("vllm:request_max_num_generation_tokens", _H, "0.6.4", v1_added="0.8.0"),
    History("vllm:request_num_preemptions", _H, "0.30.0"),
    History("vllm:request_params_best_of", _H, "0.6.0", removed="0.6.3", engine="v0"),
    History("vllm:request_params_max_tokens", _H, "0.6.4", v1_added="0.8.0"),
    History("vllm:request_params_n", _H, "0.6.0", v1_added="0.8.0"),
    History("vllm:request_prefill_kv_computed_tokens", _H, "0.13.0"),
    History("vllm:request_prefill_time_seconds", _H, "0.6.4", v1_added="0.7.3"),
    History("vllm:request_prompt_tokens", _H, "0.6.0", v1_added="0.7.1"),
    History("vllm:request_queue_time_seconds", _H, "0.6.4", v1_added="0.7.3"),
    History("vllm:request_render_duration_seconds", _H, "0.34.0"),
    History("vllm:request_success_total", _C, "0.6.0", v1_added="0.7.2"),
    History("vllm:request_time_per_output_token_seconds", _H, "0.11.0"),
    History("vllm:rl_weight_update_operation_duration_seconds", _H, "0.32.0", condition=DEV_MODE),
    History("vllm:rl_weight_update_operations_in_flight", _G, "0.32.0", condition=DEV_MODE),
    History("vllm:simple_kv_offload_info", _I, "0.31.0", condition=SIMPLE_OFFLOAD),
    History("vllm:simple_kv_offload_load_blocks_total", _C, "0.31.0", condition=SIMPLE_OFFLOAD),
    History("vllm:simple_kv_offload_pending_store_blocks", _G, "0.31.0", condition=SIMPLE_OFFLOAD),
    History("vllm:simple_kv_offload_save_outcomes_total", _C, "0.31.0", condition=SIMPLE_OFFLOAD),
    History("vllm:simple_kv_offload_used_blocks", _G, "0.31.0", condition=SIMPLE_OFFLOAD),
    History("vllm:sleep_mode_operation_duration_seconds", _H, "0.32.0", condition=DEV_MODE),
    History("vllm:sleep_mode_operations_in_flight", _G, "0.32.0", condition=DEV_MODE),
    History("vllm:spec_decode_draft_acceptance_rate", _G, "0.6.0", removed="0.10.0", engine="v0", condition=SPEC),
    History("vllm:spec_decode_efficiency", _G, "0.6.0", removed="0.10.0", engine="v0", condition=SPEC),
    History("vllm:spec_decode_num_accepted_tokens_per_pos_total", _C, "0.8.5", condition=SPEC),
    History("vllm:spec_decode_num_accepted_tokens_total", _C, "0.6.0", v1_added="0.8.3", condition=SPEC),
    History("vllm:spec_decode_num_draft_tokens_total", _C, "0.6.0", v1_added="0.8.3", condition=SPEC),
    History("vllm:spec_decode_num_drafts_total", _C, "0.8.5", condition=SPEC),
    History("vllm:spec_decode_num_emitted_tokens_total", _C, "0.6.0", removed="0.10.0", engine="v0", condition=SPEC),
    History("vllm:time_in_queue_requests", _H, "0.6.4",
            deprecated="0.8.0", hidden="0.8.3", removed="0.9.1", engine="v0"),
    History("vllm:time_per_output_token_seconds", _H, "0.6.0",
            deprecated="0.10.2", hidden="0.12.0", removed="0.15.0",
            renamed_to=("vllm:inter_token_latency_seconds",), v1_added="0.7.1"),
    History("vllm:time_to_first_token_seconds", _H, "0.6.0", v1_added="0.7.1"),
    History("vllm:tokens_total", _C, "0.6.4", removed="0.8.0", engine="v0"),
    History("vllm:tool_call_parser_invocations_total", _C, "0.24.0", condition=TOOL_PARSER),
    History("vllm:umbp_transfer_bytes_total", _C, "0.33.0", condition=UMBP),
    History("vllm:umbp_transfer_completed_total", _C, "0.33.0", condition=UMBP),
    History("vllm:umbp_transfer_failed_total", _C, "0.33.0", condition=UMBP),
    History("vllm:umbp_transfer_submitted_total", _C, "0.33.0", condition=UMBP),
    History("vllm:watermark_requests_total", _C, "0.32.0", condition=WATERMARK),
    History("vllm:websocket_connection_duration_seconds", _H, "0.18.0", condition=REALTIME),
    History("vllm:websocket_connections_active", _G, "0.18.0", condition=REALTIME),
    History("vllm:websocket_connections_total", _C, "0.18.0", condition=REALTIME),
)

BY_WIRE: Mapping[str, History] = {h.name: h for h in HISTORY}
SUPPORTED: Final[tuple[str, ...]] = tuple(
    r for r in RELEASES_READ if version_key(OLDEST_SUPPORTED) <= version_key(r) <= version_key(NEWEST_SUPPORTED))


def names_in(release: str, *, hidden_ok: bool = False) -> frozenset[str]:
    """Every wire name ``release`` exports (features on), by default without the hidden ones."""
    return frozenset(h.name for h in HISTORY if exported_in(h, release, hidden_ok=hidden_ok))


def older_names(name: str, *, whole_only: bool = False) -> tuple[str, ...]:
    """The names ``name`` replaced, newest first, through every rename.

    A family vLLM split in two (one old name, a label telling the parts apart) is an older name of
    each part, unless ``whole_only``: the parser's aliases (``MetricDef.aliases``) are the whole
    renames only, since an old split family read as one part would count the other part too.
    """
    found: list[str] = []
    frontier = [name]
    while frontier:
        current = frontier.pop(0)
        before = sorted((h for h in HISTORY if current in h.renamed_to and (len(h.renamed_to) == 1 or not whole_only)),
                        key=lambda h: version_key(h.added), reverse=True)
        for h in before:
            if h.name not in found and h.name != name:
                found.append(h.name)
                frontier.append(h.name)
    return tuple(found)


def newer_names(name: str) -> tuple[str, ...]:
    """The names that replaced ``name``, oldest first, through every rename."""
    found: list[str] = []
    frontier = list(BY_WIRE[name].renamed_to) if name in BY_WIRE else []
    while frontier:
        current = frontier.pop(0)
        if current not in found:
            found.append(current)
            frontier += BY_WIRE[current].renamed_to
    return tuple(found)


def lineage(name: str) -> tuple[str, ...]:
    """Every name of one quantity: the newer, ``name`` itself and the older ones."""
    return (*reversed(newer_names(name)), name, *older_names(name))


def family_of_sample(sample: str) -> str | None:
    """The wire family a PromQL sample name reads (``..._bucket`` -> the histogram), None when unknown."""
    if sample in BY_WIRE:
        return sample
    for suffix, _ in HISTOGRAM_PARTS:
        base = sample.removesuffix(suffix)
        if base != sample and base in BY_WIRE and BY_WIRE[base].kind is Kind.HISTOGRAM:
            return base
    return None


def ranges(releases: Iterable[str], within: tuple[str, ...] = SUPPORTED) -> str:
    """``0.8.0-0.9.1, 0.11.0`` for a set of releases: runs of consecutive entries of ``within``."""
    chosen = set(releases)
    runs: list[list[str]] = []
    previous_in = False
    for release in within:
        if release in chosen:
            if previous_in:
                runs[-1].append(release)
            else:
                runs.append([release])
        previous_in = release in chosen
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
