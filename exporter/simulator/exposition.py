"""Render the simulated engine as vLLM 0.32's ``/metrics`` text, and GPUs as dcgm-exporter's.

The vLLM exposition copies a real vLLM 0.32 capture (``fixtures/vllm-0.32-cpu``): the same
families in the same order, the same HELP/TYPE lines (trailing spaces included), ``_created``
twins for every counter and histogram child, labels sorted alphabetically as prometheus_client
prints them, every per-engine child pre-created at zero, HTTP children created on the first
request, ``vllm:cache_config_info`` with the 0.32 label set and the simulated values. Bucket
boundaries are vLLM's (``exporter/simulator/buckets.py``).
Values are printed with prometheus_client's own float formatter. An engine run with
``--kv-cache-metrics`` adds the three block-residency histograms where 0.32 registers them; one serving
0.34 (``vllm_version``) adds the API server's render duration, registered at the first rendered request.

The DCGM exposition is ``dcgm``'s (``render_dcgm``, importable from here as before).
"""

from __future__ import annotations

from typing import Final

from prometheus_client.utils import floatToGoString

from exporter.catalog import metrics as vllm
from exporter.simulator.buckets import NIXL_DESCRIPTORS_BUCKETS, NIXL_POST_TIME_BUCKETS
from exporter.simulator.dataparallel import DataParallelEngine, merge_engine_expositions
from exporter.simulator.dcgm import DCGM_HELP as DCGM_HELP
from exporter.simulator.dcgm import render_dcgm as render_dcgm
from exporter.simulator.engine import FINISHED_REASONS, Engine, Histogram

WAITING_REASONS: Final = ("capacity", "deferred")
SLEEP_STATES: Final = ("awake", "weights_offloaded", "discard_all")
PROMPT_SOURCES: Final = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHED_SOURCES: Final = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS: Final = ("max_num_queued_reqs", "max_num_queued_tokens")
KV_FETCH_STAGES: Final = ("waiting_to_start", "in_progress", "completed_waiting")

HTTP_HANDLER: Final = "/v1/chat/completions"
CONTENT_TYPE: Final = "text/plain; version=1.0.0; charset=utf-8"  # prometheus_client 0.26


# --------------------------------------------------------------------------------------------
# HELP texts, verbatim from the 0.32 capture
# --------------------------------------------------------------------------------------------

_MFU = "(for Model Flops Utilization calculations)."
_HTTP_SIZE = (
    "Content length of {} by handler. Only value of header is respected. Otherwise ignored. "
    "No percentile calculated. "
)


def _family(counter: str) -> str:
    """A counter's family name as prometheus_client declares it: the catalog's sample name without _total."""
    return counter.removesuffix("_total")


# Keyed by the catalog's names (counters with _total); the API server's own families by family name.
HELP: Final[dict[str, str]] = {
    vllm.ESTIMATED_FLOPS_PER_GPU_TOTAL: f"Estimated number of floating point operations per GPU {_MFU}",
    vllm.ESTIMATED_READ_BYTES_PER_GPU_TOTAL: f"Estimated number of bytes read from memory per GPU {_MFU}",
    vllm.ESTIMATED_WRITE_BYTES_PER_GPU_TOTAL: f"Estimated number of bytes written to memory per GPU {_MFU}",
    vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL: "Number of spec decoding drafts.",
    vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL: "Number of draft tokens.",
    vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL: "Number of accepted tokens.",
    vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL: "Accepted tokens per draft position.",
    # -- KV transfer and offload (issue 29): vLLM's source, the CPU build registers neither NIXL nor offload --
    vllm.NIXL_XFER_TIME_SECONDS: "Histogram of transfer duration for NIXL KV Cache transfers.",
    vllm.NIXL_POST_TIME_SECONDS: "Histogram of transfer post time for NIXL KV Cache transfers.",
    vllm.NIXL_BYTES_TRANSFERRED: "Histogram of bytes transferred per NIXL KV Cache transfers.",
    vllm.NIXL_NUM_DESCRIPTORS: "Histogram of number of descriptors per NIXL  KV Cache transfers.",
    vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL: (
        "Number of failed NIXL KV Cache transfers, including handshake and notification failures. NOTE: KV "
        f"expiry is tracked separately in {_family(vllm.NIXL_NUM_KV_EXPIRED_REQS_TOTAL)}."
    ),
    vllm.NIXL_NUM_FAILED_NOTIFICATIONS_TOTAL: (
        "Number of failed NIXL KV Cache notifications. Retained for compatibility; these failures are also "
        f"included in {_family(vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL)}."
    ),
    vllm.NIXL_NUM_KV_EXPIRED_REQS_TOTAL: (
        "Number of requests that had their KV expire. NOTE: This metric is tracked on the P instance."
    ),
    vllm.KV_OFFLOAD_LOAD_BYTES_TOTAL: "Total bytes loaded from offload storage to GPU.",
    vllm.KV_OFFLOAD_LOAD_TIME_TOTAL: "Total load time from offload storage to GPU, in seconds.",
    vllm.KV_OFFLOAD_STORE_BYTES_TOTAL: "Total bytes stored from GPU to offload storage.",
    vllm.KV_OFFLOAD_STORE_TIME_TOTAL: "Total store time from GPU to offload storage, in seconds.",
    vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC: (
        "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated). "
        "Sustained high values indicate transfers (stores or promotions) may be dropped due to insufficient "
        "capacity."
    ),
    vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE: (
        "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = needs an async "
        "KV load that has not started; 'in_progress' = load started and not yet reported finished; "
        "'completed_waiting' = load finished, request not running yet."
    ),
    vllm.NUM_REQUESTS_RUNNING: "Number of requests in model execution batches.",
    vllm.NUM_REQUESTS_WAITING: "Number of requests waiting to be processed.",
    vllm.NUM_REQUESTS_WAITING_BY_REASON: (
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
        "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
        f"status). Sum of all reasons equals {vllm.NUM_REQUESTS_WAITING}."
    ),
    vllm.ENGINE_SLEEP_STATE: (
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
        "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
    ),
    vllm.KV_CACHE_USAGE_PERC: "KV-cache usage. 1 means 100 percent usage.",
    vllm.LORA_REQUESTS_INFO: "Running stats on lora requests.",
    vllm.PREFIX_CACHE_QUERIES_TOTAL: "Prefix cache queries, in terms of number of queried tokens.",
    vllm.PREFIX_CACHE_HITS_TOTAL: "Prefix cache hits, in terms of number of cached tokens.",
    vllm.EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL: (
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of "
        "number of queried tokens."
    ),
    vllm.EXTERNAL_PREFIX_CACHE_HITS_TOTAL: (
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
        "number of cached tokens."
    ),
    vllm.MM_CACHE_QUERIES_TOTAL: "Multi-modal cache queries, in terms of number of queried items.",
    vllm.MM_CACHE_HITS_TOTAL: "Multi-modal cache hits, in terms of number of cached items.",
    vllm.NUM_PREEMPTIONS_TOTAL: "Cumulative number of preemption from the engine.",
    vllm.PROMPT_TOKENS_TOTAL: "Number of prefill tokens processed.",
    vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL: "Number of prompt tokens by source.",
    vllm.PROMPT_TOKENS_CACHED_TOTAL: "Number of cached prompt tokens (local + external).",
    vllm.PROMPT_TOKENS_CACHED_BY_SOURCE_TOTAL: (
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
        "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
        f"external_unspecified. Counted at admission; sums to {_family(vllm.PREFIX_CACHE_HITS_TOTAL)} + "
        f"{_family(vllm.EXTERNAL_PREFIX_CACHE_HITS_TOTAL)}."
    ),
    vllm.GENERATION_TOKENS_TOTAL: "Number of generation tokens processed.",
    vllm.REQUEST_SUCCESS_TOTAL: "Count of successfully processed requests.",
    vllm.ADMISSION_REJECTIONS_TOTAL: "Number of admission attempts rejected by a queue limit, by reason.",
    vllm.REQUEST_PROMPT_TOKENS: "Number of prefill tokens processed.",
    vllm.REQUEST_GENERATION_TOKENS: "Number of generation tokens processed.",
    vllm.ITERATION_TOKENS_TOTAL: "Histogram of number of tokens per engine_step.",
    vllm.REQUEST_MAX_NUM_GENERATION_TOKENS: "Histogram of maximum number of requested generation tokens.",
    vllm.REQUEST_PARAMS_N: "Histogram of the n request parameter.",
    vllm.REQUEST_PARAMS_MAX_TOKENS: "Histogram of the max_tokens request parameter.",
    vllm.TIME_TO_FIRST_TOKEN_SECONDS: "Histogram of time to first token in seconds.",
    vllm.INTER_TOKEN_LATENCY_SECONDS: "Histogram of inter-token latency in seconds.",
    vllm.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS: "Histogram of time_per_output_token_seconds per request.",
    vllm.E2E_REQUEST_LATENCY_SECONDS: "Histogram of e2e request latency in seconds.",
    vllm.REQUEST_QUEUE_TIME_SECONDS: "Histogram of time spent in WAITING phase for request.",
    vllm.REQUEST_INFERENCE_TIME_SECONDS: "Histogram of time spent in RUNNING phase for request.",
    vllm.REQUEST_PREFILL_TIME_SECONDS: "Histogram of time spent in PREFILL phase for request.",
    vllm.REQUEST_DECODE_TIME_SECONDS: "Histogram of time spent in DECODE phase for request.",
    vllm.REQUEST_NUM_PREEMPTIONS: "Histogram of the number of times a request was preempted.",
    vllm.REQUEST_PREFILL_KV_COMPUTED_TOKENS: (
        "Histogram of new KV tokens computed during prefill (excluding cached tokens)."
    ),
    vllm.KV_BLOCK_LIFETIME_SECONDS: (
        "Histogram of KV cache block lifetime from allocation to eviction. Sampled metrics (controlled by "
        "--kv-cache-metrics-sample)."
    ),
    vllm.KV_BLOCK_IDLE_BEFORE_EVICT_SECONDS: (
        "Histogram of idle time before KV cache block eviction. Sampled metrics (controlled by "
        "--kv-cache-metrics-sample)."
    ),
    vllm.KV_BLOCK_REUSE_GAP_SECONDS: (
        "Histogram of time gaps between consecutive KV cache block accesses. Only the most recent accesses are "
        "recorded (ring buffer). Sampled metrics (controlled by --kv-cache-metrics-sample)."
    ),
    vllm.REQUEST_RENDER_DURATION_SECONDS: (
        "Time spent rendering a request, including chat templating, tokenization, and multimodal preprocessing."
    ),
    vllm.CACHE_CONFIG_INFO: "Information of the LLMEngine CacheConfig",
    "http_requests": "Total number of requests by method, status and handler.",
    "http_request_size_bytes": _HTTP_SIZE.format("incoming requests"),
    "http_response_size_bytes": _HTTP_SIZE.format("outgoing responses"),
    "http_request_duration_highr_seconds": (
        "Latency with many buckets but no API specific labels. Made for more accurate percentile "
        "calculations. "
    ),
    "http_request_duration_seconds": (
        "Latency with only few buckets by handler. Made to be only used if aggregation by handler "
        "is important. "
    ),
}

# Histograms in exposition order: (family, EngineStats attribute).
_VLLM_HISTOGRAMS: Final = (
    (vllm.REQUEST_PROMPT_TOKENS, "request_prompt_tokens"),
    (vllm.REQUEST_GENERATION_TOKENS, "request_generation_tokens"),
    (vllm.ITERATION_TOKENS_TOTAL, "iteration_tokens"),
    (vllm.REQUEST_MAX_NUM_GENERATION_TOKENS, "request_max_num_generation_tokens"),
    (vllm.REQUEST_PARAMS_N, "request_params_n"),
    (vllm.REQUEST_PARAMS_MAX_TOKENS, "request_params_max_tokens"),
    (vllm.TIME_TO_FIRST_TOKEN_SECONDS, "time_to_first_token"),
    (vllm.INTER_TOKEN_LATENCY_SECONDS, "inter_token_latency"),
    (vllm.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS, "request_time_per_output_token"),
    (vllm.E2E_REQUEST_LATENCY_SECONDS, "e2e_request_latency"),
    (vllm.REQUEST_QUEUE_TIME_SECONDS, "request_queue_time"),
    (vllm.REQUEST_INFERENCE_TIME_SECONDS, "request_inference_time"),
    (vllm.REQUEST_PREFILL_TIME_SECONDS, "request_prefill_time"),
    (vllm.REQUEST_DECODE_TIME_SECONDS, "request_decode_time"),
    (vllm.REQUEST_NUM_PREEMPTIONS, "request_num_preemptions"),
    (vllm.REQUEST_PREFILL_KV_COMPUTED_TOKENS, "request_prefill_kv_computed_tokens"),
)
# Registered only with --kv-cache-metrics, after the request histograms.
_KV_BLOCK_HISTOGRAMS: Final = (
    (vllm.KV_BLOCK_LIFETIME_SECONDS, "kv_block_lifetime"),
    (vllm.KV_BLOCK_IDLE_BEFORE_EVICT_SECONDS, "kv_block_idle"),
    (vllm.KV_BLOCK_REUSE_GAP_SECONDS, "kv_block_reuse_gap"),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


class _Text:
    """Accumulates exposition lines; every ``_created`` value comes from one creation clock."""

    def __init__(self, created_at: float) -> None:
        self.lines: list[str] = []
        self._created_at = created_at
        self._created_seq = 0

    def header(self, name: str, help_text: str, kind: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        self.lines.append(f"{name}{_labels(labels)} {floatToGoString(value)}")

    def created(self, base: str, help_text: str, children: list[dict[str, str]], at: float | None = None) -> None:
        """The ``<base>_created`` gauge family prometheus_client adds in single-process mode."""
        self.header(f"{base}_created", help_text, "gauge")
        for labels in children:
            # Children are created one after another at start-up; keep their spacing.
            self._created_seq += 1
            when = (at if at is not None else self._created_at) + self._created_seq * 1.3e-5
            self.sample(f"{base}_created", labels, when)

    def counter(self, name: str, children: list[tuple[dict[str, str], float]], at: float | None = None) -> None:
        """A vLLM counter by its catalog name (``..._total``), with its ``_created`` twins."""
        help_text = HELP[name]
        self.header(name, help_text, "counter")
        for labels, value in children:
            self.sample(name, labels, value)
        self.created(_family(name), help_text, [labels for labels, _ in children], at)

    def histogram(
        self, name: str, help_text: str, labels: dict[str, str], hist: Histogram, at: float | None = None
    ) -> None:
        self.header(name, help_text, "histogram")
        self.histogram_child(name, labels, hist)
        self.created(name, help_text, [labels], at)

    def histogram_child(self, name: str, labels: dict[str, str], hist: Histogram) -> None:
        cumulative = hist.cumulative()
        self.lines.extend(prefix + floatToGoString(count)
                          for prefix, count in zip(_bucket_prefixes(name, labels, hist.bounds), cumulative))
        self.sample(f"{name}_count", labels, hist.count)
        self.sample(f"{name}_sum", labels, hist.sum)


# "name_bucket{labels,le=...} " per bound and +Inf: the same few strings on every render (a replay
# renders thousands of scrapes), so they are formatted once; bounded, cleared when full.
_PREFIXES: dict[tuple[str, tuple[tuple[str, str], ...], tuple[float, ...]], tuple[str, ...]] = {}


def _bucket_prefixes(name: str, labels: dict[str, str], bounds: tuple[float, ...]) -> tuple[str, ...]:
    key = (name, tuple(labels.items()), bounds)
    prefixes = _PREFIXES.get(key)
    if prefixes is None:
        if len(_PREFIXES) >= 1024:
            _PREFIXES.clear()
        edges = [*map(floatToGoString, bounds), "+Inf"]
        prefixes = _PREFIXES[key] = tuple(f"{name}_bucket{_labels({**labels, 'le': le})} " for le in edges)
    return prefixes


def cache_config_labels(engine: Engine) -> dict[str, str]:
    """``vllm:cache_config_info`` labels: vLLM 0.32's CacheConfig fields, simulated values."""
    cfg = engine.cfg
    tokens = engine.num_gpu_blocks * cfg.block_size
    override = cfg.num_gpu_blocks_override
    return {
        "_block_size_resolved": "True",
        "block_size": str(cfg.block_size),
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(cfg.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(cfg.enable_prefix_caching),
        "engine": "0",
        "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(round(tokens / cfg.max_model_len, 2)),
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "auto",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(engine.num_gpu_blocks),
        "num_gpu_blocks_override": "None" if override is None else str(override),
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }


def render_vllm(engine: Engine | DataParallelEngine, *, start_unix: float, speed: float = 1.0) -> str:
    """The API server's ``/metrics`` at the engine's current simulated time.

    ``start_unix`` is the unix time of simulated second 0 (when the engine became ready);
    ``speed`` is simulated seconds per wall second, so that timestamps stay on the wall clock.
    """
    if isinstance(engine, DataParallelEngine):
        return merge_engine_expositions([
            render_vllm(rank, start_unix=start_unix + offset, speed=speed)
            for rank, offset in zip(engine.engines, engine.offsets)
        ])
    st = engine.stats
    now = engine.now
    base = {"engine": "0", "model_name": engine.cfg.model_name}
    out = _Text(created_at=start_unix - 0.6)  # loggers are built just before serving starts
    finished = sum(st.request_success.values())

    # prometheus_client's default collectors (API-server process only).
    gc_collected = (12000 + 9 * finished, 2500 + finished // 3, 480 + finished // 40)
    gc_collections = (1400 + finished // 2, 127 + finished // 25, 9 + finished // 400)
    out.header("python_gc_objects_collected_total", "Objects collected during gc", "counter")
    for gen, v in enumerate(gc_collected):
        out.sample("python_gc_objects_collected_total", {"generation": str(gen)}, v)
    out.header("python_gc_objects_uncollectable_total", "Uncollectable objects found during GC", "counter")
    for gen in range(3):
        out.sample("python_gc_objects_uncollectable_total", {"generation": str(gen)}, 0)
    out.header("python_gc_collections_total", "Number of times this generation was collected", "counter")
    for gen, v in enumerate(gc_collections):
        out.sample("python_gc_collections_total", {"generation": str(gen)}, v)
    out.header("python_info", "Python platform information", "gauge")
    out.sample(
        "python_info",
        {"implementation": "CPython", "major": "3", "minor": "12", "patchlevel": "11", "version": "3.12.11"},
        1.0,
    )
    out.header("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge")
    out.sample("process_virtual_memory_bytes", {}, 1.1876e10)
    out.header("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge")
    out.sample("process_resident_memory_bytes", {}, 1.41e9 + 4096.0 * min(finished, 100000))
    out.header("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "gauge")
    out.sample("process_start_time_seconds", {}, round(start_unix - 48.0, 2))
    out.header("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter")
    # Start-up (tokenizer load, engine handshake) + idle loop + the work the frontend did.
    idle = engine.cfg.costs.frontend_idle_cpu * engine.cfg.cpu_share * now
    out.sample("process_cpu_seconds_total", {}, round(14.2 + idle + st.frontend_cpu_s, 2))
    out.header("process_open_fds", "Number of open file descriptors.", "gauge")
    out.sample("process_open_fds", {}, 61 + min(engine.num_running + engine.num_waiting, 4000))
    out.header("process_max_fds", "Maximum number of open file descriptors.", "gauge")
    out.sample("process_max_fds", {}, 1048576)

    # vLLM engine families, in the order the 0.32 logger registers them: speculative decoding first,
    # registered only with --speculative-config.
    if engine.cfg.num_speculative_tokens:
        out.counter(vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL, [(base, st.spec_drafts)])
        out.counter(vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL, [(base, st.spec_draft_tokens)])
        out.counter(vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL, [(base, st.spec_accepted_tokens)])
        out.counter(vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL,
                    [({**base, "position": str(pos)}, n) for pos, n in enumerate(st.spec_accepted_per_pos)])
    cfg = engine.cfg
    if cfg.kv_role is not None and cfg.kv_connector == "NixlConnector":
        # The connector's families come next (KVConnectorProm), one child per engine from the start. The model
        # makes one transfer per request load; post time, descriptors and notifications are not modelled.
        out.histogram(vllm.NIXL_XFER_TIME_SECONDS, HELP[vllm.NIXL_XFER_TIME_SECONDS], base, st.nixl_xfer_time)
        out.histogram(vllm.NIXL_POST_TIME_SECONDS, HELP[vllm.NIXL_POST_TIME_SECONDS], base,
                      Histogram(NIXL_POST_TIME_BUCKETS))
        out.histogram(vllm.NIXL_BYTES_TRANSFERRED, HELP[vllm.NIXL_BYTES_TRANSFERRED], base, st.nixl_bytes)
        out.histogram(vllm.NIXL_NUM_DESCRIPTORS, HELP[vllm.NIXL_NUM_DESCRIPTORS], base,
                      Histogram(NIXL_DESCRIPTORS_BUCKETS))
        out.counter(vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL, [(base, st.nixl_failed)])
        out.counter(vllm.NIXL_NUM_FAILED_NOTIFICATIONS_TOTAL, [(base, 0)])
        out.counter(vllm.NIXL_NUM_KV_EXPIRED_REQS_TOTAL, [(base, 0)])
    if cfg.kv_offload_blocks:
        # The offloading connector's flat families (the model keeps no size histograms or lookup delays).
        out.counter(vllm.KV_OFFLOAD_LOAD_BYTES_TOTAL, [(base, st.offload_load_bytes)])
        out.counter(vllm.KV_OFFLOAD_LOAD_TIME_TOTAL, [(base, st.offload_load_time)])
        out.counter(vllm.KV_OFFLOAD_STORE_BYTES_TOTAL, [(base, st.offload_store_bytes)])
        out.counter(vllm.KV_OFFLOAD_STORE_TIME_TOTAL, [(base, st.offload_store_time)])
        out.header(vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC, HELP[vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC], "gauge")
        out.sample(vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC, base, engine.kv_offload_usage)
    mfu = engine.cfg.enable_mfu_metrics  # registered always, incremented only with the flag
    out.counter(vllm.ESTIMATED_FLOPS_PER_GPU_TOTAL, [(base, round(st.estimated_flops) if mfu else 0)])
    out.counter(vllm.ESTIMATED_READ_BYTES_PER_GPU_TOTAL, [(base, round(st.estimated_read_bytes) if mfu else 0)])
    out.counter(vllm.ESTIMATED_WRITE_BYTES_PER_GPU_TOTAL, [(base, 0)])
    out.header(vllm.NUM_REQUESTS_RUNNING, HELP[vllm.NUM_REQUESTS_RUNNING], "gauge")
    out.sample(vllm.NUM_REQUESTS_RUNNING, base, engine.num_running)
    out.header(vllm.NUM_REQUESTS_WAITING, HELP[vllm.NUM_REQUESTS_WAITING], "gauge")
    out.sample(vllm.NUM_REQUESTS_WAITING, base, engine.num_waiting)
    out.header(vllm.NUM_REQUESTS_WAITING_BY_REASON, HELP[vllm.NUM_REQUESTS_WAITING_BY_REASON], "gauge")
    # Deferred: requests whose LoRA adapter has no slot, and those loading KV (the model has no blocked states).
    deferred = engine.num_waiting_deferred
    for reason in WAITING_REASONS:
        waiting = engine.num_waiting - deferred if reason == "capacity" else deferred
        out.sample(vllm.NUM_REQUESTS_WAITING_BY_REASON, {**base, "reason": reason}, waiting)
    if cfg.kv_consumer:  # registered only where kv_transfer_config.is_kv_consumer
        out.header(vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE, HELP[vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE], "gauge")
        stages = {"waiting_to_start": 0, "in_progress": engine.num_kv_loading,
                  "completed_waiting": engine.num_kv_loaded_waiting}
        for stage in KV_FETCH_STAGES:
            out.sample(vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE, {**base, "stage": stage}, stages[stage])
    out.header(vllm.ENGINE_SLEEP_STATE, HELP[vllm.ENGINE_SLEEP_STATE], "gauge")
    for state in SLEEP_STATES:
        level = engine.sleep_level  # one-hot: awake, or the level it sleeps at (record_sleep_state)
        on = state == "awake" if not level else state == SLEEP_STATES[level]
        out.sample(vllm.ENGINE_SLEEP_STATE, {**base, "sleep_state": state}, 1 if on else 0)
    out.header(vllm.KV_CACHE_USAGE_PERC, HELP[vllm.KV_CACHE_USAGE_PERC], "gauge")
    out.sample(vllm.KV_CACHE_USAGE_PERC, base, engine.kv_cache_usage)
    out.counter(vllm.PREFIX_CACHE_QUERIES_TOTAL, [(base, st.prefix_cache_queries)])
    out.counter(vllm.PREFIX_CACHE_HITS_TOTAL, [(base, st.prefix_cache_hits)])
    out.counter(vllm.EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL, [(base, st.external_prefix_queries)])
    out.counter(vllm.EXTERNAL_PREFIX_CACHE_HITS_TOTAL, [(base, st.external_prefix_hits)])
    out.counter(vllm.MM_CACHE_QUERIES_TOTAL, [(base, 0)])
    out.counter(vllm.MM_CACHE_HITS_TOTAL, [(base, 0)])
    out.counter(vllm.NUM_PREEMPTIONS_TOTAL, [(base, st.num_preemptions)])
    out.counter(vllm.PROMPT_TOKENS_TOTAL, [(base, st.prompt_tokens)])
    by_source = {
        "local_compute": st.prompt_tokens_local_compute,
        "local_cache_hit": st.prompt_tokens_local_cache_hit,
        "external_kv_transfer": st.prompt_tokens_external,
    }
    out.counter(vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL, [({**base, "source": s}, by_source[s]) for s in PROMPT_SOURCES])
    out.counter(vllm.PROMPT_TOKENS_CACHED_TOTAL,
                [(base, st.prompt_tokens_local_cache_hit + st.prompt_tokens_external)])
    # The connector's hits by tier: the offload tier's are host memory, a prefill instance's p2p.
    tier = "host" if cfg.kv_offload_blocks else "p2p"
    cached = {"device": st.prefix_cache_hits, tier: st.external_prefix_hits}
    out.counter(
        vllm.PROMPT_TOKENS_CACHED_BY_SOURCE_TOTAL,
        [({**base, "source": s}, cached.get(s, 0)) for s in CACHED_SOURCES],
    )
    out.counter(vllm.GENERATION_TOKENS_TOTAL, [(base, st.generation_tokens)])
    out.counter(
        vllm.REQUEST_SUCCESS_TOTAL,
        [({**base, "finished_reason": r}, st.request_success[r]) for r in FINISHED_REASONS],
    )
    # Admission control lives in the API server: no `engine` label.
    out.counter(
        vllm.ADMISSION_REJECTIONS_TOTAL,
        [({"model_name": engine.cfg.model_name, "reason": r}, 0) for r in ADMISSION_REASONS],
    )
    for family, attr in _VLLM_HISTOGRAMS + (_KV_BLOCK_HISTOGRAMS if cfg.kv_cache_metrics_sample else ()):
        out.histogram(family, HELP[family], base, getattr(st, attr))
    if engine.cfg.enable_lora:
        # Registered only with --enable-lora, last before cache_config_info (a real 0.32 capture); no model_name
        # or engine label; one series per adapter set, valued at the unix time of its last update
        # (set_to_current_time), on the wall clock of simulated second 0 at start_unix.
        out.header(vllm.LORA_REQUESTS_INFO, HELP[vllm.LORA_REQUESTS_INFO], "gauge")
        for names, at in st.lora_updates.items():
            out.sample(vllm.LORA_REQUESTS_INFO, {"max_lora": str(engine.cfg.max_loras), "running_lora_adapters": names,
                                                 "waiting_lora_adapters": names}, round(start_unix + at / speed, 3))
    out.header(vllm.CACHE_CONFIG_INFO, HELP[vllm.CACHE_CONFIG_INFO], "gauge")
    out.sample(vllm.CACHE_CONFIG_INFO, cache_config_labels(engine), 1.0)

    # prometheus_fastapi_instrumentator. Per-handler children appear with the first request.
    first = st.http_first_request_at
    first_unix = None if first is None else start_unix + first / speed
    handler = {"handler": HTTP_HANDLER}
    handler_children = [] if first is None else [handler]
    out.header("http_requests_total", HELP["http_requests"], "counter")
    if first is not None:
        posted = {**handler, "method": "POST", "status": "2xx"}
        out.sample("http_requests_total", posted, st.http_requests)
        out.created("http_requests", HELP["http_requests"], [posted], first_unix)
    for fam, total in (
        ("http_request_size_bytes", st.http_request_size_sum),
        ("http_response_size_bytes", 0.0),  # streamed responses carry no Content-Length
    ):
        out.header(fam, HELP[fam], "summary")
        for labels in handler_children:
            out.sample(f"{fam}_count", labels, st.http_requests)
            out.sample(f"{fam}_sum", labels, total)
        if first is not None:
            out.created(fam, HELP[fam], handler_children, first_unix)
    fam = "http_request_duration_highr_seconds"
    out.histogram(fam, HELP[fam], {}, st.http_duration_highr, at=start_unix - 0.4)
    fam = "http_request_duration_seconds"
    out.header(fam, HELP[fam], "histogram")
    if first is not None:
        labels = {**handler, "method": "POST"}
        out.histogram_child(fam, labels, st.http_duration)
        out.created(fam, HELP[fam], [labels], first_unix)
    if cfg.observes_render and st.render_duration.count:
        # vLLM 0.34's renderer registers its histogram at the first render, after everything else; no engine label.
        fam = vllm.REQUEST_RENDER_DURATION_SECONDS
        out.histogram(fam, HELP[fam], {"model_name": cfg.model_name, "request_type": "chat"}, st.render_duration,
                      at=start_unix + (st.render_first_at or 0.0) / speed)
    return "\n".join(out.lines) + "\n"
