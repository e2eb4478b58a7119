"""The signals' types: the small frozen groups, :class:`Signals` that composes them, and the JSON contract.

The JSON ``signals`` object is a contract (docs/method.md, "The JSON signals object"): :meth:`Signals.to_dict`
flattens the groups into one object, in the order of the dataclasses' fields (``FLAT_KEYS``, derived from
them): a new signal is one new field of its group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, ClassVar

from exporter.window import HistogramDelta

QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)


LATENCY_FAMILIES: tuple[str, ...] = ("ttft", "itl", "e2e")


@dataclass(frozen=True, slots=True)
class HostInputs:
    """CPU and GPU readings from outside vLLM's /metrics, already reduced to shares.

    Shares are 0..1 over the recent horizon (``recent_evaluations``: the host as it is now, which
    the rules judge); ``window`` holds the same readings over the whole window, when the source keeps
    them (published beside the recent ones). ``sources`` says where each came from (for the evidence).
    """

    cpu_wait_share: float | None = None  # run-queue wait / (run + wait) of the vLLM threads
    cpu_busy_cores: float | None = None  # run time of those threads / window: how much CPU they used
    cpu_throttled_share: float | None = None  # throttled CFS periods / periods
    cpu_psi_share: float | None = None  # PSI cpu 'some' avg10 / 100
    gpu_utilization: float | None = None  # DCGM GPU utilisation, 0..1, mean over the recent horizon
    sources: tuple[str, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()  # (source, reason) of reads that failed this time
    window: HostInputs | None = None  # the same readings over the whole window


@dataclass(frozen=True, slots=True)
class CacheFacts:
    """KV-cache configuration read from ``vllm:cache_config_info`` labels."""

    block_size: int | None = None
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_size_tokens: int | None = None
    enable_prefix_caching: bool | None = None


# Each group names its fields for what they are inside the group (``kv.usage_max``); ``FLAT``
# maps the fields whose JSON key differs (``kv_cache_usage_max``). Unmapped fields keep their name.


@dataclass(frozen=True, slots=True)
class Traffic:
    """Requests and tokens through the engine over the window."""

    requests_finished: float | None = None
    requests_per_second: float | None = None
    first_tokens: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    prompt_length_mean: float | None = None
    prompt_length_p95: float | None = None
    # The mean prompt of the requests whose first token came in the newest recent_evaluations steps: vLLM
    # counts a request's prompt tokens when its prefill completes, the step its TTFT is observed, while the
    # prompt-length histogram waits for the request to finish (after its whole answer). Without TTFT, the
    # histogram's recent steps.
    prompt_length_mean_recent: float | None = None
    # Finished requests whose prompt passed the long mark (the bucket edge at or below long_prompt_tokens),
    # and seconds from the newest step in which one got its first token (prompt tokens per first token of
    # the step at the mark; of those, the newest with a first token over the first-token objective when the
    # window holds one; the newest that finished one without vllm:prompt_tokens_total) to the window's end:
    # long prompts still arriving, or a burst that has ended while its first tokens are still in it.
    long_prompts: float | None = None
    long_prompt_age_seconds: float | None = None
    # Their pace: seconds between the first and the newest step in which one got its first token, over the
    # gaps between such steps (so never below the scrape interval; by finish and per prompt where the window
    # lacks the prompt-token counter): the burst's own rate, not the window's, which empties as the burst
    # leaves it. The pipeline sets the pace measured on the largest sample of the evaluations the window
    # covers (the most such steps), so the last prompts of a burst, or one chat prompt just over the mark
    # after it, do not stretch it; None with none measured.
    long_prompt_interval_seconds: float | None = None
    # Steps of the window in which a long prompt got its first token: the sample that pace is measured on.
    long_prompt_first_token_steps: float | None = None
    # First tokens over the first-token objective's threshold in the steps in which a long prompt got its
    # first token, or the step after (the requests that waited behind its prefill): the slow first tokens
    # the long prompts explain, aligned in time. None without the threshold or the series, or when long
    # prompts got first tokens in most steps (then every slow first token is "beside" one).
    long_prompt_slow_first_tokens: float | None = None
    generation_length_mean: float | None = None
    prefill_token_share: float | None = None  # computed prompt / (computed prompt + generated) tokens
    admission_rejections_per_second: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {}


@dataclass(frozen=True, slots=True)
class Kv:
    """KV-cache occupancy, preemptions and prefix-cache reuse over the window."""

    preemptions: float | None = None
    preemptions_recent: float | None = None  # over the newest recent_evaluations steps only
    preemption_rate: float | None = None
    preemptions_per_request: float | None = None
    # The recent steps' preemptions per first token in those steps: a storm as it starts, before the
    # window's ratio (diluted by the calm minutes it still holds) shows it.
    preemptions_per_request_recent: float | None = None
    usage: float | None = None
    usage_max: float | None = None
    usage_mean: float | None = None
    full_fraction: float | None = None  # share of scrapes at or above the high mark
    prefix_queried_tokens: float | None = None
    prefix_hit_ratio: float | None = None
    prefix_hit_ratio_recent: float | None = None  # over the newest recent_evaluations steps: the cache now
    # The lowest recent hit ratio of any evaluation the window holds (set by the pipeline): the prefix was
    # broken at some time the window covers, so the first tokens of those scrapes are the cache's.
    prefix_hit_ratio_recent_low: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "usage": "kv_cache_usage", "usage_max": "kv_cache_usage_max", "usage_mean": "kv_cache_usage_mean",
        "full_fraction": "kv_full_fraction", "prefix_queried_tokens": "prefix_cache_queried_tokens",
        "prefix_hit_ratio": "prefix_cache_hit_ratio", "prefix_hit_ratio_recent": "prefix_cache_hit_ratio_recent",
        "prefix_hit_ratio_recent_low": "prefix_cache_hit_ratio_recent_low",
    }


@dataclass(frozen=True, slots=True)
class Scheduler:
    """Who runs, who waits, and what each engine step carries."""

    steps_per_second: float | None = None  # engine output batches (about one per step)
    tokens_per_step: float | None = None
    tokens_per_step_p99: float | None = None
    busy_fraction: float | None = None  # steps/s x mean step time (ITL mean stands in for it)
    running: float | None = None
    running_mean: float | None = None
    running_max: float | None = None
    waiting: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    waiting_fraction: float | None = None
    # Share of scrapes where requests wait for engine capacity: the by-reason gauge where vLLM has it
    # (deferred requests wait for a LoRA slot or a KV transfer, not for the scheduler), else all waiting.
    queued_fraction: float | None = None
    queued_recent_fraction: float | None = None  # the same over the newest recent_evaluations scrapes
    # The highest queued_recent_fraction of any evaluation the window holds (set by the pipeline): 1.0 when a
    # queue was waiting in every scrape of some recent horizon the window covers.
    queued_recent_peak: float | None = None
    waiting_capacity: float | None = None
    waiting_deferred: float | None = None
    # Share of scrapes where requests wait deferred: waits no queue rule counts (only A0 names them).
    deferred_fraction: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "steps_per_second": "engine_steps_per_second", "busy_fraction": "engine_busy_fraction",
    }


@dataclass(frozen=True, slots=True)
class Latency:
    """Latency quantiles and means (seconds), and where TTFT and e2e time goes."""

    ttft_quantiles: Mapping[float, float] = field(default_factory=dict)
    itl_quantiles: Mapping[float, float] = field(default_factory=dict)
    e2e_quantiles: Mapping[float, float] = field(default_factory=dict)
    ttft_mean: float | None = None
    itl_mean: float | None = None
    e2e_mean: float | None = None
    tpot_mean: float | None = None
    queue_mean: float | None = None
    prefill_mean: float | None = None
    decode_mean: float | None = None
    inference_mean: float | None = None
    ttft_frontend_mean: float | None = None
    e2e_frontend_mean: float | None = None
    # Estimated part of the frontend means that is the wait for the engine step under way (step_wait).
    step_wait_mean: float | None = None
    ttft_queue_share: float | None = None
    ttft_prefill_share: float | None = None
    # The same two shares over the newest recent_evaluations steps (first tokens of requests admitted now).
    ttft_queue_share_recent: float | None = None
    ttft_prefill_share_recent: float | None = None
    ttft_frontend_share: float | None = None
    e2e_frontend_share: float | None = None
    observations: float | None = None
    unresolved_quantiles: tuple[str, ...] = ()
    # ITL p99 / p50 from quantiles the buckets resolve; a p50 inside the first bucket is replaced by
    # that bucket's upper bound, which makes the ratio a lower bound (see itl_tail_note).
    itl_tail_ratio: float | None = None
    itl_tail_note: str = ""
    itl_tail_ratio_recent: float | None = None  # the same over the newest recent_evaluations steps: the gaps now
    itl_median_recent: float | None = None  # seconds, the median gap over the same steps (per token, as itl_mean)
    # The window's TTFT and ITL histograms, which the objectives are judged on (exporter/objectives);
    # with no observation yet, their bucket edges alone. Not in the JSON ``signals`` (no flat key).
    ttft_histogram: HistogramDelta | None = None
    itl_histogram: HistogramDelta | None = None
    # First tokens of the newest recent_evaluations steps: an objective missed *now*, beside a cause's recent
    # evidence (vLLM records queue and prefill times when a request finishes, first tokens when they come).
    ttft_histogram_recent: HistogramDelta | None = None
    # Token gaps of the same steps (per token under speculative decoding, as itl_histogram).
    itl_histogram_recent: HistogramDelta | None = None
    # First tokens since the prefix hit ratio went low (set by the pipeline): the steps of the newest evaluations
    # in a row whose recent ratio is under the low mark, and the steps the first of them read; None while the
    # newest one is not low.
    ttft_histogram_prefix_low: HistogramDelta | None = None

    FLAT: ClassVar[Mapping[str, str]] = {"observations": "latency_observations"}

    def quantile(self, family: str, q: float) -> float | None:
        """The q-quantile of ``family`` (ttft, itl, e2e), None when the window has none."""
        quantiles: Mapping[float, float] = getattr(self, f"{family}_quantiles")
        return quantiles.get(q)


@dataclass(frozen=True, slots=True)
class Cpu:
    """CPU use of the API server and the inputs of the CPU-starvation score."""

    api_server_cores: float | None = None
    inputs: Mapping[str, float] = field(default_factory=dict)
    starvation_score: float | None = None  # over the recent horizon (recent_evaluations): what rules read
    starvation_score_window: float | None = None  # the same over the whole window, when the source keeps it
    # The highest recent score of any evaluation the window holds: the host starved vLLM at some time the window
    # covers (time-aligned: the effects of those scrapes are the starvation's). Set by the pipeline.
    starvation_score_peak: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "api_server_cores": "api_server_cpu_cores", "inputs": "cpu_inputs", "starvation_score": "cpu_starvation_score",
        "starvation_score_window": "cpu_starvation_score_window", "starvation_score_peak": "cpu_starvation_score_peak",
    }


@dataclass(frozen=True, slots=True)
class Gpu:
    """GPU readings: DCGM utilisation and vLLM's per-GPU MFU estimate (None when not enabled)."""

    utilization: float | None = None  # DCGM, over the recent horizon (recent_evaluations)
    read_bytes_per_second: float | None = None
    flops_per_second: float | None = None
    utilization_window: float | None = None  # DCGM, mean over the whole window
    # vLLM's MFU estimate of bytes read per second of engine stepping, over the newest recent_evaluations
    # steps: how fast the kernels move memory now (B4's slow path), whatever the load.
    read_bytes_per_busy_second_recent: float | None = None
    # The lowest such reading of any evaluation the window holds (set by the pipeline): the kernels were slow at
    # some time the window covers, so the token gaps of those scrapes are the GPU's.
    read_bytes_per_busy_second_recent_low: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "utilization": "gpu_utilization", "utilization_window": "gpu_utilization_window",
        "read_bytes_per_second": "read_bytes_per_gpu_per_second",
        "flops_per_second": "flops_per_gpu_per_second",
    }


@dataclass(frozen=True, slots=True)
class Speculative:
    """Speculative decoding over the window (vllm/v1/spec_decode/metrics.py); all None when it is off.

    vLLM registers the spec-decode counters only when the engine runs with ``--speculative-config``,
    so their presence says the feature is on. One output event then carries 1 + the accepted draft
    tokens, and vLLM's inter-token latency histogram observes one gap per output event, not per token:
    ``tokens_per_event`` (generated tokens after the first of each request, over ITL observations) is
    what divides the event gaps to judge the ITL objective per token (``per_token_itl``).
    """

    enabled: bool | None = None
    drafts: float | None = None  # verify steps that carried a draft, in the window
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    acceptance_rate: float | None = None  # accepted / draft tokens (vLLM's "draft acceptance rate")
    mean_accepted_length: float | None = None  # 1 + accepted / drafts (the bonus token included)
    acceptance_per_position: tuple[float, ...] = ()  # accepted at draft position i / drafts
    tokens_per_event: float | None = None  # output tokens per ITL observation (1 without speculation)
    event_gap_mean: float | None = None  # mean ITL observation, per output event (seconds)

    FLAT: ClassVar[Mapping[str, str]] = {
        "enabled": "spec_decode_enabled", "drafts": "spec_decode_drafts",
        "draft_tokens": "spec_decode_draft_tokens", "accepted_tokens": "spec_decode_accepted_tokens",
        "acceptance_rate": "spec_decode_acceptance_rate",
        "mean_accepted_length": "spec_decode_mean_accepted_length",
        "acceptance_per_position": "spec_decode_acceptance_per_position",
        "tokens_per_event": "tokens_per_output_event", "event_gap_mean": "itl_event_mean_seconds",
    }

    @property
    def itl_scale(self) -> float | None:
        """Tokens per output event when the ITL objective is judged per token (speculation on, > 1)."""
        if self.enabled and self.tokens_per_event is not None and self.tokens_per_event > 1.0:
            return self.tokens_per_event
        return None


@dataclass(frozen=True, slots=True)
class KvTransfer:
    """KV transfer between instances (disaggregated prefill/decode) and KV offload, over the window.

    vLLM registers ``vllm:num_requests_kv_fetch_by_stage`` only on a KV consumer (``kv_role`` kv_consumer or
    kv_both), the NIXL connector's families only with NIXL, the offloading connector's only with offload; the
    external prefix-cache counters always, moving only with a connector. A consumer's request waits for its
    KV as *deferred* (``num_requests_waiting_by_reason``) from admission until the load completes, and vLLM
    stamps it SCHEDULED only then: the wait is in its queue time and TTFT, not a wait for capacity
    (``_deferred_wait`` splits the queue time by the waiting reasons).
    """

    enabled: bool | None = None  # a KV connector or offload is at work (its families, or the external counters move)
    consumer: bool | None = None  # the fetch-stage gauge is registered: this instance loads KV (decode side)
    transferred_prompt_share: float | None = None  # prompt tokens by source external_kv_transfer / all
    external_queried_tokens: float | None = None
    external_hit_ratio: float | None = None  # connector hits / tokens offered (external_prefix_cache_*)
    deferred_wait_mean: float | None = None  # mean deferred wait per request: its share of the queue time
    deferred_ttft_share: float | None = None  # deferred_wait_mean / mean TTFT
    fetch_in_progress_mean: float | None = None  # requests whose KV load is under way, mean over scrapes
    transfers: float | None = None  # NIXL transfers in the window
    transfer_time_mean: float | None = None  # seconds per NIXL transfer
    transfer_time_p95: float | None = None
    transfer_bytes_per_second: float | None = None  # NIXL bytes moved / window
    transfer_bytes_mean: float | None = None  # bytes per NIXL transfer
    failures: float | None = None  # NIXL failed transfers (handshake and notification failures included)
    failure_share: float | None = None  # failures / (failures + transfers)
    kv_expired: float | None = None  # prefill side: requests whose KV expired before a decode read it
    errored_requests: float | None = None  # finished with reason error in the window (a failed KV load's end)
    offload_load_seconds: float | None = None  # offload tier -> GPU copy time in the window
    offload_load_bytes: float | None = None
    offload_load_bytes_per_second: float | None = None  # bytes loaded per second of loading (copy bandwidth)
    offload_cpu_usage: float | None = None  # share of the CPU offload tier in use, latest

    FLAT: ClassVar[Mapping[str, str]] = {
        "enabled": "kv_transfer_enabled", "consumer": "kv_consumer",
        "transferred_prompt_share": "kv_transferred_prompt_share",
        "external_queried_tokens": "external_prefix_cache_queried_tokens",
        "external_hit_ratio": "external_prefix_cache_hit_ratio",
        "deferred_wait_mean": "kv_deferred_wait_mean_seconds", "deferred_ttft_share": "kv_deferred_ttft_share",
        "fetch_in_progress_mean": "kv_fetch_in_progress_mean", "transfers": "kv_transfers",
        "transfer_time_mean": "kv_transfer_time_mean_seconds", "transfer_time_p95": "kv_transfer_time_p95_seconds",
        "transfer_bytes_per_second": "kv_transfer_bytes_per_second", "transfer_bytes_mean": "kv_transfer_bytes_mean",
        "failures": "kv_transfer_failures", "failure_share": "kv_transfer_failure_share",
        "kv_expired": "kv_transfer_expired_requests", "errored_requests": "requests_errored",
        "offload_load_seconds": "kv_offload_load_seconds", "offload_load_bytes": "kv_offload_load_bytes",
        "offload_load_bytes_per_second": "kv_offload_load_bytes_per_second",
        "offload_cpu_usage": "kv_offload_cpu_usage",
    }

    @property
    def offload(self) -> bool:
        """A miss comes back by a copy from a tier that keeps KV, not by a recompute: the offload families say it
        loads, or the connector served tokens without NIXL. A NIXL decode instance is no such tier: its prefill
        instance frees the KV once read, and a preempted request recomputes."""
        if not self.enabled:
            return False
        return (self.offload_load_bytes or 0) > 0 or ((self.external_hit_ratio or 0) > 0 and self.transfers is None)


@dataclass(frozen=True, slots=True)
class Lora:
    """LoRA adapter slots, from ``vllm:lora_requests_info`` (registered only with ``--enable-lora``).

    vLLM keeps the state in the labels of one gauge whose value is the unix time of its last update
    (``set_to_current_time``), and a new series appears for every distinct label combination while old
    ones stay: the series with the newest value is the state now, and the series updated while the window
    covers name every adapter that had requests in flight in it. The adapter labels are comma-joined names.
    vLLM's frontend learns that a request waits only with its first output (the QUEUED event rides on it),
    so a request held back for a slot is not named until it runs; 0.32 also fills both labels with every
    adapter that has a request in flight. ``waiting_adapters`` counts adapters named waiting and not
    running (older releases); ``adapters_seen`` against ``max_adapters`` is what every release tells.
    """

    enabled: bool | None = None
    max_adapters: float | None = None  # the max_lora label (--max-loras): adapters one batch can hold
    running_adapters: float | None = None  # adapters with requests in flight at the latest update
    waiting_adapters: float | None = None  # adapters named waiting and not running at the latest update
    adapters_seen: float | None = None  # distinct adapters named by the updates the window holds
    slots_full_fraction: float | None = None  # share of scrapes whose latest update fills every slot

    FLAT: ClassVar[Mapping[str, str]] = {
        "enabled": "lora_enabled", "max_adapters": "lora_max_adapters",
        "running_adapters": "lora_running_adapters", "waiting_adapters": "lora_waiting_adapters",
        "adapters_seen": "lora_adapters_seen", "slots_full_fraction": "lora_slots_full_fraction",
    }


@dataclass(frozen=True, slots=True)
class Engines:
    """The engines behind one /metrics: their sleep state, and per data-parallel engine its load and latency.

    vLLM labels every per-engine series with ``engine`` (the data-parallel rank); the other groups merge the
    engines. ``per_engine`` keeps each engine's own numbers (engine -> name -> value), so an engine that is
    slower or more loaded than its siblings does not hide in the merged ones: ``outlier`` is the engine
    whose ``load_ratio`` or ``latency_ratio`` (its value over the median of its siblings') is the largest.
    ``sleep_state`` is vLLM's one-hot ``engine_sleep_state`` at the latest scrape: ``awake``,
    ``weights_offloaded`` (level 1), ``discard_all`` (level 2) or ``asleep`` (awake 0 and no level: the KV
    cache released); ``sleeping`` counts the engines not awake.
    """

    count: float | None = None
    sleep_state: str | None = None
    sleeping: float | None = None
    per_engine: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    outlier: str | None = None
    load_ratio: float | None = None
    latency_ratio: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "count": "engines", "sleep_state": "engine_sleep_state", "sleeping": "engines_sleeping",
        "per_engine": "engine_signals", "outlier": "engine_outlier", "load_ratio": "engine_load_ratio",
        "latency_ratio": "engine_latency_ratio",
    }

    @property
    def asleep(self) -> bool:
        """Every engine sleeps (vLLM puts all of one server's engines to sleep together)."""
        return bool(self.count and self.sleeping is not None and self.sleeping >= self.count)


# The engine's own witnesses (exporter/signals/witnesses.py computes them).
@dataclass(frozen=True, slots=True)
class Witnesses:
    """Block residency, step size and render time over the window (None: vLLM did not export it)."""

    block_evictions: float | None = None  # sampled blocks evicted in the window
    block_lifetime_mean: float | None = None
    block_lifetime_p50: float | None = None
    block_idle_mean: float | None = None
    block_hit_life_share: float | None = None  # 1 - idle/lifetime over the evicted blocks: 0 = none reused
    block_reuse_gaps: float | None = None  # gaps between hits of the evicted blocks
    block_reuse_gaps_per_eviction: float | None = None
    block_reuse_gap_mean: float | None = None
    block_reuse_gap_p90: float | None = None
    steps: float | None = None  # engine output batches in the window
    step_histogram: HistogramDelta | None = None  # vllm:iteration_tokens_total over the window (not published)
    prefill_tokens_per_step: float | None = None  # computed prompt tokens an average step carried
    generated_tokens_per_step: float | None = None
    render_mean: float | None = None  # seconds per rendered request (0.34+)
    render_requests: float | None = None

    FLAT: ClassVar[Mapping[str, str]] = {
        "block_evictions": "kv_block_evictions", "block_lifetime_mean": "kv_block_lifetime_mean_seconds",
        "block_lifetime_p50": "kv_block_lifetime_p50_seconds", "block_idle_mean": "kv_block_idle_mean_seconds",
        "block_hit_life_share": "kv_block_hit_life_share", "block_reuse_gaps": "kv_block_reuse_gaps",
        "block_reuse_gaps_per_eviction": "kv_block_reuse_gaps_per_eviction",
        "block_reuse_gap_mean": "kv_block_reuse_gap_mean_seconds",
        "block_reuse_gap_p90": "kv_block_reuse_gap_p90_seconds",
        "steps": "engine_steps", "prefill_tokens_per_step": "prefill_tokens_per_step",
        "generated_tokens_per_step": "generated_tokens_per_step", "render_mean": "render_mean_seconds",
        "render_requests": "rendered_requests",
    }


Group = Traffic | Kv | Scheduler | Latency | Cpu | Gpu | Speculative | KvTransfer | Lora | Engines | Witnesses


GROUPS: tuple[tuple[str, type[Group]], ...] = (
    ("traffic", Traffic), ("kv", Kv), ("scheduler", Scheduler), ("latency", Latency), ("cpu", Cpu), ("gpu", Gpu),
    ("speculative", Speculative),
    ("kv_transfer", KvTransfer),
    ("lora", Lora), ("engines", Engines),
    ("witnesses", Witnesses),
)


# Grouped fields the JSON ``signals`` leaves out: the objectives' histograms, published judged instead
# (TargetState.objectives).
UNPUBLISHED: frozenset[str] = frozenset({"ttft_histogram", "itl_histogram", "ttft_histogram_recent",
                                         "itl_histogram_recent", "ttft_histogram_prefix_low",
                                         "step_histogram"})


# The quantile maps, published as one key per quantile (``<family>_p<q>_seconds``) after the others.
QUANTILE_MAPS: frozenset[str] = frozenset(f"{family}_quantiles" for family in LATENCY_FAMILIES)


def _flat_names() -> dict[str, tuple[str, str]]:
    """Flat key -> (group attribute, field), for every grouped field (quantile maps by field name)."""
    out: dict[str, tuple[str, str]] = {}
    for attribute, cls in GROUPS:
        for f in fields(cls):
            out[cls.FLAT.get(f.name, f.name)] = (attribute, f.name)
    return out


FLAT_FIELDS: Mapping[str, tuple[str, str]] = _flat_names()


def _plain(value: Any) -> Any:
    """A field value as the JSON document holds it (lists and dicts, not tuples, mappings and dataclasses)."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


@dataclass(frozen=True, slots=True)
class Signals:
    window_seconds: float
    scrapes: int
    restarts: int = 0
    traffic: Traffic = Traffic()
    kv: Kv = Kv()
    scheduler: Scheduler = Scheduler()
    latency: Latency = Latency()
    cpu: Cpu = Cpu()
    gpu: Gpu = Gpu()
    speculative: Speculative = Speculative()
    kv_transfer: KvTransfer = KvTransfer()
    lora: Lora = Lora()
    engines: Engines = Engines()
    witnesses: Witnesses = Witnesses()
    cache: CacheFacts = CacheFacts()
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``signals`` object: ``FLAT_KEYS`` in order, then the latency quantiles."""
        data: dict[str, Any] = {}
        for key, (attribute, name) in PUBLISHED.items():
            value = getattr(self, attribute)
            data[key] = _plain(value if name is None else getattr(value, name))
        for family in LATENCY_FAMILIES:
            for q, value in getattr(self.latency, f"{family}_quantiles").items():
                data[f"{family}_p{round(q * 100)}_seconds"] = value
        return data


def _published() -> dict[str, tuple[str, str | None]]:
    """JSON key -> (Signals field, group field or None), in the order of the dataclasses' fields.

    A top-level field is one key; a group is its fields in place, each under its flat key
    (``FLAT``), less the unpublished fields and the quantile maps.
    """
    groups: dict[str, type[Group]] = dict(GROUPS)
    out: dict[str, tuple[str, str | None]] = {}
    for top in fields(Signals):
        group = groups.get(top.name)
        if group is None:
            out[top.name] = (top.name, None)
            continue
        for f in fields(group):
            if f.name not in UNPUBLISHED and f.name not in QUANTILE_MAPS:
                out[group.FLAT.get(f.name, f.name)] = (top.name, f.name)
    return out


PUBLISHED: Mapping[str, tuple[str, str | None]] = _published()


# The JSON ``signals`` keys in their published order (docs/metrics.md lists them), followed by the latency
# quantiles as ``<family>_p<q>_seconds``. Derived: a new field of a group is published under its name.
FLAT_KEYS: tuple[str, ...] = tuple(PUBLISHED)
