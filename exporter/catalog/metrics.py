"""Catalog of the vLLM metrics the sidecar reads, across vLLM's naming generations.

Every metric has one canonical name: the current (0.12+) wire name of its family. Older
wire names are aliases that map onto it (vLLM's renames, by release: vllm/v1/metrics/loggers.py of each version), so the
rest of the pipeline never sees a version difference. A family absent from a scrape is
absent, never zero: the signals that need it abstain and list it under ``missing``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


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
    name wins.
    """

    name: str
    kind: Kind
    help: str
    aliases: tuple[str, ...] = ()
    since: str = ""


_C, _G, _H, _I = Kind.COUNTER, Kind.GAUGE, Kind.HISTOGRAM, Kind.INFO

METRICS: tuple[MetricDef, ...] = (
    # Scheduler state (gauges, per engine)
    MetricDef("vllm:num_requests_running", _G, "Requests in model execution batches", since="0.7.3"),
    MetricDef("vllm:num_requests_waiting", _G, "Requests waiting to be scheduled", since="0.7.3"),
    MetricDef(
        "vllm:num_requests_waiting_by_reason", _G,
        "Waiting requests by reason (capacity, deferred)", since="0.20",
    ),
    MetricDef(
        "vllm:kv_cache_usage_perc", _G, "Fraction of KV blocks held (0..1)",
        aliases=("vllm:gpu_cache_usage_perc",), since="0.9.2",
    ),
    MetricDef("vllm:engine_sleep_state", _G, "Engine sleep state (one-hot)", since="0.11.1"),
    MetricDef("vllm:cache_config_info", _I, "KV cache configuration as labels", since="0.8.0"),
    # Counters (per engine)
    MetricDef("vllm:num_preemptions_total", _C, "Preemptions (recompute) of running requests"),
    MetricDef("vllm:prompt_tokens_total", _C, "Prompt tokens of requests whose prefill completed"),
    MetricDef("vllm:generation_tokens_total", _C, "Generated tokens"),
    MetricDef("vllm:request_success_total", _C, "Finished requests by finished_reason"),
    MetricDef(
        "vllm:prefix_cache_queries_total", _C, "Prompt tokens looked up in the prefix cache",
        aliases=("vllm:gpu_prefix_cache_queries_total",), since="0.9.2",
    ),
    MetricDef(
        "vllm:prefix_cache_hits_total", _C, "Prompt tokens found in the prefix cache",
        aliases=("vllm:gpu_prefix_cache_hits_total",), since="0.9.2",
    ),
    MetricDef("vllm:external_prefix_cache_queries_total", _C, "Tokens offered to the KV connector", since="0.11.1"),
    MetricDef("vllm:external_prefix_cache_hits_total", _C, "Tokens supplied by the KV connector", since="0.11.1"),
    MetricDef("vllm:prompt_tokens_by_source_total", _C, "Prompt tokens by source", since="0.16"),
    MetricDef("vllm:admission_rejections_total", _C, "HTTP 503 admission rejections by reason", since="0.32"),
    # Analytic per-GPU work estimates; they move only with --enable-mfu-metrics (zeros otherwise).
    MetricDef("vllm:estimated_flops_per_gpu_total", _C, "Estimated FLOPs per GPU (MFU)", since="0.17"),
    MetricDef("vllm:estimated_read_bytes_per_gpu_total", _C, "Estimated bytes read from GPU memory (MBU)",
              since="0.17"),
    # Histograms (per engine)
    MetricDef("vllm:time_to_first_token_seconds", _H, "Time to first token (frontend clock)"),
    MetricDef(
        "vllm:inter_token_latency_seconds", _H, "Time between successive outputs of a request",
        aliases=("vllm:time_per_output_token_seconds",), since="0.10.2",
    ),
    MetricDef("vllm:request_time_per_output_token_seconds", _H, "Per-request mean time per output token",
              since="0.11.0"),
    MetricDef("vllm:e2e_request_latency_seconds", _H, "Arrival to finish (frontend clock)"),
    MetricDef("vllm:request_queue_time_seconds", _H, "Engine queue time (QUEUED to first SCHEDULED)"),
    MetricDef("vllm:request_prefill_time_seconds", _H, "First SCHEDULED to first token"),
    MetricDef("vllm:request_decode_time_seconds", _H, "First token to last token"),
    MetricDef("vllm:request_inference_time_seconds", _H, "First SCHEDULED to last token"),
    MetricDef("vllm:request_prompt_tokens", _H, "Prompt length per finished request"),
    MetricDef("vllm:request_generation_tokens", _H, "Output length per finished request"),
    MetricDef("vllm:request_params_max_tokens", _H, "max_tokens request parameter", since="0.8.0"),
    MetricDef("vllm:iteration_tokens_total", _H, "Tokens per engine output batch (about one per step)"),
    MetricDef("vllm:request_num_preemptions", _H, "Preemptions per finished request", since="0.30"),
    # API-server process (absent with --api-server-count > 1)
    MetricDef("process_cpu_seconds_total", _C, "API-server process CPU time"),
    MetricDef("process_start_time_seconds", _G, "API-server process start time"),
    MetricDef("http_request_duration_seconds", _H, "HTTP request duration by handler"),
)

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


def wire_names() -> frozenset[str]:
    """Every sample name the catalog knows, current and old (for the dashboard/rule lint)."""
    return frozenset(SAMPLE_INDEX)


# The inputs a paging alert rule needs, by the name ``vllm_diag_input_available{input}`` carries, each
# with the canonical family that provides it (older wire names map onto it at parse time, above).
# ``cpu_source`` is no vLLM family: the host CPU source of a target that configures ``cpu:``.
CPU_SOURCE_INPUT = "cpu_source"
WATCHED_INPUTS: Mapping[str, str | None] = {
    "kv_usage": "vllm:kv_cache_usage_perc",
    "preemptions": "vllm:num_preemptions_total",
    "ttft_histogram": "vllm:time_to_first_token_seconds",
    "itl_histogram": "vllm:inter_token_latency_seconds",
    "finished_requests": "vllm:request_success_total",
    CPU_SOURCE_INPUT: None,
}
