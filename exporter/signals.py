"""Window -> derived diagnostic numbers (:class:`Signals`).

Every rate and ratio comes from deltas inside the window, never from lifetime counters.
A value is ``None`` when its inputs are absent or the window holds no such traffic; the
names of absent inputs are listed in ``missing`` so nothing reads as zero.

``Signals`` is a composition of small frozen groups (traffic, KV, scheduler, latency, CPU,
GPU, speculative decoding, KV transfer), each filled by its own function over the window. The JSON
``signals`` object is a contract (docs/method.md, "The JSON signals object"): :meth:`Signals.to_dict` flattens the
groups into one object, in the order of the dataclasses' fields (``FLAT_KEYS``, derived from them):
a new signal is one new field of its group.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar

from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.objectives import bad_share
from exporter.snapshot import LabelSet, Snapshot, label_value
from exporter.window import HistogramDelta, Window
from exporter.witnesses import Witnesses  # issue 50: the engine's own witnesses
from exporter.witnesses import compute as witnesses_of  # issue 50

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


# -- the groups --------------------------------------------------------------------------------
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


# -- LoRA, sleep and data-parallel engines (issue 29) ------------------------------------------
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


Group = Traffic | Kv | Scheduler | Latency | Cpu | Gpu | Speculative | KvTransfer | Lora | Engines | Witnesses
GROUPS: tuple[tuple[str, type[Group]], ...] = (
    ("traffic", Traffic), ("kv", Kv), ("scheduler", Scheduler), ("latency", Latency), ("cpu", Cpu), ("gpu", Gpu),
    ("speculative", Speculative),
    ("kv_transfer", KvTransfer),
    ("lora", Lora), ("engines", Engines),
    ("witnesses", Witnesses),  # issue 50
)

# Grouped fields the JSON ``signals`` leaves out: the objectives' histograms, published judged instead
# (TargetState.objectives).
UNPUBLISHED: frozenset[str] = frozenset({"ttft_histogram", "itl_histogram", "ttft_histogram_recent",
                                         "itl_histogram_recent", "ttft_histogram_prefix_low",
                                         "step_histogram"})  # step_histogram: issue 50
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
    witnesses: Witnesses = Witnesses()  # issue 50
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


# -- helpers -------------------------------------------------------------------------------------
def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _clamp01(value: float) -> float:
    return 0.0 if value < 0 else 1.0 if value > 1 else value


def _scale(value: float | None, floor: float, full: float) -> float | None:
    """Map value onto 0..1 between floor (0) and full (1)."""
    if value is None:
        return None
    if full <= floor:
        return 1.0 if value >= full else 0.0
    return _clamp01((value - floor) / (full - floor))


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _hist_mean(hist: HistogramDelta | None) -> float | None:
    return hist.mean() if hist is not None else None


def _share_positive(series: list[float]) -> float | None:
    """Share of scrapes with a value above zero."""
    return _ratio(sum(1 for v in series if v > 0), len(series))


def cache_facts(snapshot: Snapshot | None) -> CacheFacts:
    if snapshot is None:
        return CacheFacts()
    rows = snapshot.info.get(vllm.CACHE_CONFIG_INFO, ())
    if not rows:
        return CacheFacts()
    row = rows[0]

    def number(key: str, kind: type) -> Any:
        try:
            return kind(float(row[key])) if kind is int else kind(row[key])
        except (KeyError, ValueError, TypeError):
            return None

    enable = row.get("enable_prefix_caching")
    return CacheFacts(
        block_size=number("block_size", int),
        # With data parallelism every engine repeats the DP-summed block count: never sum it again.
        num_gpu_blocks=number("num_gpu_blocks", int),
        gpu_memory_utilization=number("gpu_memory_utilization", float),
        kv_cache_size_tokens=number("kv_cache_size_tokens", int),
        enable_prefix_caching=None if enable is None else enable == "True",
    )


def _reason(value: str) -> Callable[[LabelSet], bool]:
    return lambda labels: label_value(labels, "reason") == value


def _position(value: str) -> Callable[[LabelSet], bool]:
    return lambda labels: label_value(labels, "position") == value


def _source(value: str) -> Callable[[LabelSet], bool]:
    return lambda labels: label_value(labels, "source") == value


def _quantiles(hist: HistogramDelta | None, name: str, unresolved: list[str]) -> dict[float, float]:
    if hist is None:
        return {}
    out: dict[float, float] = {}
    for q in QUANTILES:
        value = hist.quantile(q)
        if value is None:
            continue
        out[q] = value
        if not hist.resolves(q):
            unresolved.append(f"{name}_p{round(q * 100)}")
    return out


def itl_tail(itl: HistogramDelta | None) -> tuple[float | None, str]:
    """ITL p99 over p50 from what the buckets resolve, and a note when it is bounded or unknown.

    vLLM's ITL buckets start at 10 ms: a median interpolated inside the first bucket is made up
    (it can be anything from 0 to the bound), so the bound stands in for it and the ratio becomes
    a lower bound. A p99 inside the first bucket means every gap is short: no stutter to measure.
    """
    if itl is None or not itl.bounds:
        return None, ""
    p50, p99 = itl.quantile(0.5), itl.quantile(0.99)
    if p50 is None or p99 is None:
        return None, ""
    first = itl.bounds[0]
    if not itl.resolves(0.99):
        return 1.0, f"ITL p99 is inside the first bucket (<= {first * 1000:.0f} ms): no tail to measure"
    if not itl.resolves(0.5):
        return p99 / first, f"ITL p50 is inside the first bucket (<= {first * 1000:.0f} ms): the ratio is a lower bound"
    if p50 <= 0:
        return None, ""
    return p99 / p50, ""


def step_wait(itl: HistogramDelta | None, steps_per_second: float | None,
              prefill_mean: float | None) -> float | None:
    """Mean wait of a new request for the engine step under way (seconds), estimated.

    vLLM's engine core takes new requests between steps and stamps them QUEUED then, so the time
    from arrival to QUEUED, read as frontend time, also holds the rest of the step under way: half
    a 300 ms prefill step is no tokenizer problem. An arrival lands in a step with probability
    ``busy`` (steps/s x mean step) and then waits its residual, E[S^2] / 2E[S]. The ITL gaps stand
    in for the step durations (uniform inside each bucket; scaled so the first moment matches the
    exact mean). A gap longer than twice the mean prefill time is no single step (a preempted
    request's gap holds its time back in the queue), so gaps count at most that long.
    """
    mean = itl.mean() if itl is not None else None
    if itl is None or mean is None or not steps_per_second or not itl.cumulative or itl.cumulative[-1] <= 0:
        return None
    cap = 2.0 * prefill_mean if prefill_mean else math.inf
    raw, first, second, below, lower = 0.0, 0.0, 0.0, 0.0, 0.0
    for bound, cum in zip(itl.bounds, itl.cumulative):
        upper = lower if math.isinf(bound) else bound  # the +Inf bucket: at the last finite bound
        n = cum - below
        raw += n * (lower + upper) / 2
        lo, hi = min(lower, cap), min(upper, cap)
        first += n * (lo + hi) / 2
        second += n * (lo * lo + lo * hi + hi * hi) / 3
        below, lower = cum, upper
    if raw <= 0 or first <= 0:
        return None
    scale = mean * itl.cumulative[-1] / raw  # exact mean over the buckets' uniform-spread mean
    busy = min(1.0, steps_per_second * first / itl.cumulative[-1] * scale)
    return busy * scale * second / first / 2.0


def cpu_starvation(
    inputs: Mapping[str, float], thresholds: Thresholds
) -> tuple[float | None, dict[str, float]]:
    """0..1 score from the direct CPU inputs, and the per-input scores behind it.

    Only direct evidence (run-queue wait, CFS throttling, PSI of the vLLM processes) makes the
    score: an API server under starvation *looks* calm (its CPU time drops), and time outside the
    engine may be a heavy template as well as a starved core. Without a direct source the score is
    None and the CPU rules abstain, naming the source to enable; the indirect inputs are still
    reported, for the evidence.
    """
    per_input: dict[str, float] = {}
    wait = _scale(inputs.get("run_queue_wait_share"), thresholds.cpu_wait_share_floor, thresholds.cpu_wait_share_full)
    busy = inputs.get("busy_cores")
    if wait is not None and busy is not None and busy < thresholds.cpu_demand_min_cores:
        wait = 0.0  # an idle engine's wait share is noise: nothing asks for CPU, nothing is starved
    direct = {
        "run_queue_wait": wait,
        "cfs_throttling": _scale(inputs.get("cfs_throttled_share"), thresholds.cpu_throttled_floor,
                                 thresholds.cpu_throttled_full),
        "psi": _scale(inputs.get("psi_some_share"), thresholds.cpu_psi_floor, thresholds.cpu_psi_full),
    }
    frontend = _scale(inputs.get("frontend_share"), thresholds.frontend_share / 3,
                      min(1.0, thresholds.frontend_share * 5 / 3))
    api = _scale(inputs.get("api_server_cpu_cores"), thresholds.api_server_busy_cores / 2,
                 thresholds.api_server_busy_cores)
    # A busy API server matters only when requests do spend time in the frontend; alone it
    # may just be a fast engine streaming many tokens.
    if api is not None and not frontend:
        api = 0.0
    indirect = {"frontend_share": frontend, "api_server_cpu": api}
    per_input.update({k: v for k, v in (*direct.items(), *indirect.items()) if v is not None})
    direct_scores = [v for v in direct.values() if v is not None]
    if direct_scores:
        return max(direct_scores), per_input
    return None, per_input


# -- reading the window ------------------------------------------------------------------------
# Every vLLM family the signals read, in the order ``missing`` lists the absent ones.
INPUTS: tuple[str, ...] = (
    vllm.REQUEST_SUCCESS_TOTAL, vllm.TIME_TO_FIRST_TOKEN_SECONDS, vllm.NUM_PREEMPTIONS_TOTAL,
    vllm.PREFIX_CACHE_QUERIES_TOTAL, vllm.PREFIX_CACHE_HITS_TOTAL, vllm.KV_CACHE_USAGE_PERC,
    vllm.NUM_REQUESTS_RUNNING, vllm.NUM_REQUESTS_WAITING, vllm.NUM_REQUESTS_WAITING_BY_REASON,
    vllm.INTER_TOKEN_LATENCY_SECONDS, vllm.E2E_REQUEST_LATENCY_SECONDS, vllm.REQUEST_QUEUE_TIME_SECONDS,
    vllm.REQUEST_PREFILL_TIME_SECONDS, vllm.REQUEST_DECODE_TIME_SECONDS,
    vllm.REQUEST_INFERENCE_TIME_SECONDS, vllm.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS,
    vllm.REQUEST_PROMPT_TOKENS, vllm.REQUEST_GENERATION_TOKENS, vllm.ITERATION_TOKENS_TOTAL,
    vllm.PROMPT_TOKENS_TOTAL, vllm.GENERATION_TOKENS_TOTAL,
)
API_SERVER_CPU_ABSENT = "process_cpu_seconds_total absent (API-server scale-out or non-Python frontend)"


def _increase(window: Window, name: str) -> float | None:
    return window.increase(name) if window.present(name) else None


def _rate(window: Window, name: str) -> float | None:
    return window.rate(name) if window.present(name) else None


def _histogram(window: Window, name: str) -> HistogramDelta | None:
    return window.histogram(name) if window.present(name) else None


def _with_edges(window: Window, name: str, hist: HistogramDelta | None) -> HistogramDelta | None:
    """``hist``, else an empty delta on the latest scrape's bucket edges: a threshold can be checked
    against the edges from the first scrape on, before the window holds a step."""
    if hist is not None:
        return hist
    latest = window.latest
    series = latest.histograms.get(name) if latest is not None else None
    if not series:
        return None
    common = set.intersection(*(set(sample.bounds) for sample in series.values()))
    bounds = tuple(sorted(common))
    return HistogramDelta(bounds, tuple(0.0 for _ in bounds), 0.0, 0.0) if bounds else None


def _series(window: Window, name: str) -> list[float]:
    return window.gauge_series(name) if window.present(name) else []


def _moving_rate(window: Window, name: str) -> float | None:
    """Rate of a counter that vLLM registers always but moves only when a feature is on."""
    if not window.present(name):
        return None
    rate = window.rate(name)
    return rate if rate else None


def missing_inputs(window: Window) -> tuple[str, ...]:
    return tuple(name for name in INPUTS if not window.present(name))


def traffic(window: Window, recent: int = 0) -> Traffic:
    """``recent``: the steps read as now (``recent_evaluations``)."""
    duration = window.duration
    finished = _increase(window, vllm.REQUEST_SUCCESS_TOTAL)
    ttft = _histogram(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    prompt_len = _histogram(window, vllm.REQUEST_PROMPT_TOKENS)
    prompt_rate = _rate(window, vllm.PROMPT_TOKENS_TOTAL)
    generation_rate = _rate(window, vllm.GENERATION_TOKENS_TOTAL)
    prefix_hits = _increase(window, vllm.PREFIX_CACHE_HITS_TOTAL)
    # Prompt tokens the engine computed: all of them minus the ones the prefix cache served.
    computed_prompt_rate = None
    if window.present(vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL):
        computed_prompt_rate = window.rate(vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL, _source("local_compute"))
    elif prompt_rate is not None and prefix_hits is not None and duration > 0:
        computed_prompt_rate = max(0.0, prompt_rate - prefix_hits / duration)
    prefill_share = None
    if computed_prompt_rate is not None and generation_rate is not None:
        prefill_share = _ratio(computed_prompt_rate, computed_prompt_rate + generation_rate)
    return Traffic(
        requests_finished=finished,
        requests_per_second=_ratio(finished, duration),
        first_tokens=ttft.count if ttft is not None else None,
        prompt_tokens_per_second=prompt_rate,
        generation_tokens_per_second=generation_rate,
        prompt_length_mean=_hist_mean(prompt_len),
        prompt_length_p95=prompt_len.quantile(0.95) if prompt_len is not None else None,
        prompt_length_mean_recent=(_hist_mean(window.histogram_recent(vllm.REQUEST_PROMPT_TOKENS, recent))
                                   if recent > 0 else None),
        generation_length_mean=_hist_mean(_histogram(window, vllm.REQUEST_GENERATION_TOKENS)),
        prefill_token_share=prefill_share,
        admission_rejections_per_second=_rate(window, vllm.ADMISSION_REJECTIONS_TOTAL),
    )


def long_prompt_arrivals(window: Window, long_tokens: float,
                         slow_seconds: float | None = None) -> dict[str, float | None]:
    """How many long prompts finished in the window, at what pace they came and how long ago the newest did:
    at their first tokens (the newest with a first token over ``slow_seconds``, when given and any had one),
    at their finishes without those series; and the slow first tokens beside them (Traffic fields)."""
    if not window.present(vllm.REQUEST_PROMPT_TOKENS):
        return {"long_prompts": None, "long_prompt_age_seconds": None, "long_prompt_interval_seconds": None,
                "long_prompt_first_token_steps": None, "long_prompt_slow_first_tokens": None}
    count, oldest, newest = 0.0, None, None
    for end, delta in window.histogram_by_step(vllm.REQUEST_PROMPT_TOKENS):
        edge = max((i for i, bound in enumerate(delta.bounds) if bound <= long_tokens), default=None)
        above = delta.count - (delta.cumulative[edge] if edge is not None else 0.0)
        if above > 0:
            count, newest = count + above, end
            oldest = end if oldest is None else oldest
    # When they came, seen at their first tokens (a long answer finishes minutes after its burst); the age
    # from the newest that hurt when any did (a chat prompt just over the mark after a burst is not the burst).
    steps = long_prompt_steps(window, long_tokens, slow_seconds)
    starts = [step.end for step in steps if step.long]
    hurt = [step.end for step in steps if step.long and step.slow >= 0.5]  # half an interpolated token is one
    if starts:
        newest, oldest, arrivals = starts[-1], starts[0], float(len(starts))
    else:
        arrivals = count
    last = hurt[-1] if hurt else newest
    age = window.steps[-1].end - last if last is not None else None
    interval = (newest - oldest) / (arrivals - 1) if (newest is not None and oldest is not None
                                                      and arrivals >= 2) else None
    # Alignment says something only when long prompts come in a minority of the steps (a RAG mix whose mean
    # prompt passes the mark in most steps would align every slow first token with "a long prompt").
    beside = None
    if slow_seconds is not None and steps and 2 * len(starts) <= sum(1 for step in steps if step.first_tokens >= 1):
        beside = sum(step.slow for i, step in enumerate(steps) if step.long or (i > 0 and steps[i - 1].long))
    return {"long_prompts": count, "long_prompt_age_seconds": age, "long_prompt_interval_seconds": interval,
            "long_prompt_first_token_steps": float(len(starts)) if steps else None,
            "long_prompt_slow_first_tokens": beside}


@dataclass(frozen=True, slots=True)
class LongPromptStep:
    """One step of the window as the long-prompt signals read it."""

    end: float
    first_tokens: float
    long: bool  # a long prompt got its first token in this step
    slow: float  # first tokens over the threshold in it (0 without one)


def long_prompt_steps(window: Window, long_tokens: float, slow_seconds: float | None = None) -> list[LongPromptStep]:
    """Per step, oldest first: whether a long prompt got its first token in it (prompt tokens per first token at
    or above ``long_tokens``: vLLM counts both when a prefill completes), and how many of its first tokens took
    longer than ``slow_seconds``. Empty without the two series."""
    if not window.present(vllm.PROMPT_TOKENS_TOTAL):
        return []
    out = []
    for step in window.steps:
        ttft = step.histograms.get(vllm.TIME_TO_FIRST_TOKEN_SECONDS, {}).values()
        first_tokens = sum(delta.count for delta in ttft)
        prompt_tokens = sum(step.counters.get(vllm.PROMPT_TOKENS_TOTAL, {}).values())
        slow = sum(_over(delta, slow_seconds) for delta in ttft) if slow_seconds is not None else 0.0
        long = first_tokens >= 1 and prompt_tokens / first_tokens >= long_tokens
        out.append(LongPromptStep(step.end, first_tokens, long, slow))
    return out


def _over(delta: HistogramDelta, threshold: float) -> float:
    counted = bad_share(delta, threshold)
    return counted.bad if counted is not None else 0.0


def first_token_prompt_mean(window: Window, first_tokens: HistogramDelta | None, recent: int) -> float | None:
    """Prompt tokens per first token over the newest ``recent`` steps: both are counted when a prefill
    completes, so a long prompt counts in the step its slow first token does."""
    tokens = window.increase_recent(vllm.PROMPT_TOKENS_TOTAL, recent) if recent > 0 else None
    if tokens is None or first_tokens is None or first_tokens.count < 1:
        return None
    return tokens / first_tokens.count


def kv(window: Window, thresholds: Thresholds, flow: Traffic, first_tokens_recent: float | None = None) -> Kv:
    """``first_tokens_recent``: first tokens of the recent steps (the latency group's recent TTFT count)."""
    duration = window.duration
    recent = int(thresholds.recent_evaluations)
    preemptions = _increase(window, vllm.NUM_PREEMPTIONS_TOTAL)
    # Requests admitted in the window: finished ones, or first tokens when long outputs finish later.
    admitted = max((v for v in (flow.requests_finished, flow.first_tokens) if v is not None), default=None)
    name = vllm.KV_CACHE_USAGE_PERC
    usage = window.gauge_series(name, "max") if window.present(name) else []
    queries = _increase(window, vllm.PREFIX_CACHE_QUERIES_TOTAL)
    hits = _increase(window, vllm.PREFIX_CACHE_HITS_TOTAL)
    preemptions_recent = window.increase_recent(vllm.NUM_PREEMPTIONS_TOTAL, recent)
    return Kv(
        preemptions=preemptions,
        preemptions_recent=preemptions_recent,
        # At least one request: a storm so heavy that no first token came in the recent steps still counts.
        preemptions_per_request_recent=(
            preemptions_recent / max(first_tokens_recent, 1.0)
            if preemptions_recent is not None and first_tokens_recent is not None else None),
        preemption_rate=_ratio(preemptions, duration),
        preemptions_per_request=_ratio(preemptions, admitted) if preemptions else (0.0 if admitted else None),
        usage=usage[-1] if usage else None,
        usage_max=max(usage) if usage else None,
        usage_mean=_mean(usage),
        full_fraction=_ratio(sum(1 for v in usage if v >= thresholds.kv_usage_high), len(usage)),
        prefix_queried_tokens=queries,
        prefix_hit_ratio=_ratio(hits, queries),
        prefix_hit_ratio_recent=_ratio(window.increase_recent(vllm.PREFIX_CACHE_HITS_TOTAL, recent),
                                       window.increase_recent(vllm.PREFIX_CACHE_QUERIES_TOTAL, recent) or None),
    )


def scheduler(window: Window, itl_mean: float | None, recent: int = 0) -> Scheduler:
    """``recent``: the scrapes read as now (``recent_evaluations``)."""
    duration = window.duration
    running = _series(window, vllm.NUM_REQUESTS_RUNNING)
    waiting = _series(window, vllm.NUM_REQUESTS_WAITING)
    by_reason = vllm.NUM_REQUESTS_WAITING_BY_REASON
    has_reason = window.present(by_reason)
    queued = window.gauge_series(by_reason, "sum", _reason("capacity")) if has_reason else waiting
    steps = _histogram(window, vllm.ITERATION_TOKENS_TOTAL)
    busy = None
    if steps is not None and itl_mean is not None and duration > 0:
        busy = min(1.0, steps.count / duration * (itl_mean or 0.0))
    return Scheduler(
        steps_per_second=_ratio(steps.count, duration) if steps is not None else None,
        tokens_per_step=_hist_mean(steps),
        tokens_per_step_p99=steps.quantile(0.99) if steps is not None else None,
        busy_fraction=busy,
        running=running[-1] if running else None,
        running_mean=_mean(running),
        running_max=max(running) if running else None,
        waiting=waiting[-1] if waiting else None,
        waiting_mean=_mean(waiting),
        waiting_max=max(waiting) if waiting else None,
        waiting_fraction=_share_positive(waiting),
        queued_fraction=_share_positive(queued),
        queued_recent_fraction=_share_positive(queued[-recent:]) if recent > 0 else None,
        waiting_capacity=window.gauge(by_reason, "sum", _reason("capacity")) if has_reason else None,
        waiting_deferred=window.gauge(by_reason, "sum", _reason("deferred")) if has_reason else None,
        deferred_fraction=(_share_positive(window.gauge_series(by_reason, "sum", _reason("deferred")))
                           if has_reason else None),
    )


def latency(window: Window, itl: HistogramDelta | None, recent: int = 0) -> Latency:
    """``itl`` is the window's ITL histogram (read once by ``compute``: the step-wait estimate needs it too);
    ``recent``: the steps read as now (``recent_evaluations``), for the recent shares of TTFT."""
    ttft = _histogram(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    e2e = _histogram(window, vllm.E2E_REQUEST_LATENCY_SECONDS)
    queue_mean = _hist_mean(_histogram(window, vllm.REQUEST_QUEUE_TIME_SECONDS))
    prefill_mean = _hist_mean(_histogram(window, vllm.REQUEST_PREFILL_TIME_SECONDS))
    inference_mean = _hist_mean(_histogram(window, vllm.REQUEST_INFERENCE_TIME_SECONDS))
    ttft_mean, e2e_mean = _hist_mean(ttft), _hist_mean(e2e)
    unresolved: list[str] = []
    quantiles = {family: _quantiles(hist, family, unresolved) for family, hist in (("ttft", ttft), ("itl", itl),
                                                                                   ("e2e", e2e))}
    tail_ratio, tail_note = itl_tail(itl)
    itl_recent = window.histogram_recent(vllm.INTER_TOKEN_LATENCY_SECONDS, recent) if recent > 0 else None
    # Frontend = time outside the engine: tokenization/templates before QUEUED, IPC and output handling.
    # Bucket-free: means from _sum/_count deltas, so coarse 0.3 s latency buckets do not matter.
    ttft_frontend = None
    if ttft_mean is not None and queue_mean is not None and prefill_mean is not None:
        ttft_frontend = max(0.0, ttft_mean - queue_mean - prefill_mean)
    e2e_frontend = None
    if e2e_mean is not None and queue_mean is not None and inference_mean is not None:
        e2e_frontend = max(0.0, e2e_mean - queue_mean - inference_mean)
    return Latency(
        ttft_quantiles=quantiles["ttft"],
        itl_quantiles=quantiles["itl"],
        e2e_quantiles=quantiles["e2e"],
        ttft_mean=ttft_mean,
        itl_mean=_hist_mean(itl),
        e2e_mean=e2e_mean,
        tpot_mean=_hist_mean(_histogram(window, vllm.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS)),
        queue_mean=queue_mean,
        prefill_mean=prefill_mean,
        decode_mean=_hist_mean(_histogram(window, vllm.REQUEST_DECODE_TIME_SECONDS)),
        inference_mean=inference_mean,
        ttft_frontend_mean=ttft_frontend,
        e2e_frontend_mean=e2e_frontend,
        ttft_queue_share=_ratio(queue_mean, ttft_mean),
        ttft_prefill_share=_ratio(prefill_mean, ttft_mean),
        ttft_queue_share_recent=_recent_share(window, vllm.REQUEST_QUEUE_TIME_SECONDS, recent),
        ttft_prefill_share_recent=_recent_share(window, vllm.REQUEST_PREFILL_TIME_SECONDS, recent),
        ttft_frontend_share=_ratio(ttft_frontend, ttft_mean),
        e2e_frontend_share=_ratio(e2e_frontend, e2e_mean),
        observations=e2e.count if e2e is not None else None,
        unresolved_quantiles=tuple(unresolved),
        itl_tail_ratio=tail_ratio,
        itl_tail_note=tail_note,
        itl_tail_ratio_recent=itl_tail(itl_recent)[0] if itl_recent is not None else None,
        itl_median_recent=itl_recent.quantile(0.5) if itl_recent is not None else None,
        ttft_histogram=_with_edges(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS, ttft),
        itl_histogram=_with_edges(window, vllm.INTER_TOKEN_LATENCY_SECONDS, itl),
        ttft_histogram_recent=(window.histogram_recent(vllm.TIME_TO_FIRST_TOKEN_SECONDS, recent)
                               if recent > 0 else None),
        itl_histogram_recent=itl_recent,
    )


def _recent_share(window: Window, part: str, recent: int) -> float | None:
    """Mean ``part`` (queue or prefill time) over mean TTFT, both over the newest ``recent`` steps."""
    if recent <= 0:
        return None
    return _ratio(_hist_mean(window.histogram_recent(part, recent)),
                  _hist_mean(window.histogram_recent(vllm.TIME_TO_FIRST_TOKEN_SECONDS, recent)))


def _net_share(outside: float | None, step_wait_s: float | None, total: float | None) -> float | None:
    """Time outside the engine net of the wait for the step under way, as a share of ``total``: vLLM
    stamps QUEUED between steps, so long steps (the budget's doing) read as frontend time otherwise."""
    if outside is None:
        return None
    return _ratio(max(0.0, outside - (step_wait_s or 0.0)), total)


def cpu(window: Window, thresholds: Thresholds, host: HostInputs, frontend_share: float | None) -> Cpu:
    """``frontend_share``: time outside the engine, net of the step wait, as a share of e2e (``_net_share``)."""
    api_cores = _rate(window, "process_cpu_seconds_total")
    inputs = _cpu_inputs(host, frontend_share, api_cores)
    score, _ = cpu_starvation(inputs, thresholds)
    over_window = None
    if host.window is not None:
        over_window, _ = cpu_starvation(_cpu_inputs(host.window, frontend_share, api_cores), thresholds)
    return Cpu(api_server_cores=api_cores, inputs=inputs, starvation_score=score,
               starvation_score_window=over_window)


def _cpu_inputs(host: HostInputs, frontend_share: float | None, api_cores: float | None) -> dict[str, float]:
    inputs: dict[str, float] = {}
    for key, value in (
        ("run_queue_wait_share", host.cpu_wait_share),
        ("busy_cores", host.cpu_busy_cores),
        ("cfs_throttled_share", host.cpu_throttled_share),
        ("psi_some_share", host.cpu_psi_share),
        # Share of e2e, not of TTFT: with a small fast model tokenization is a large share of a
        # tiny TTFT without anything being wrong; A3 reads the TTFT share once TTFT breaches.
        ("frontend_share", frontend_share),
        ("api_server_cpu_cores", api_cores),
    ):
        if value is not None:
            inputs[key] = value
    return inputs


def gpu(window: Window, host: HostInputs, recent: int = 0) -> Gpu:
    """``recent``: the steps read as now (``recent_evaluations``), for the bytes read per second of stepping."""
    per_busy = None
    read = _moving_rate(window, vllm.ESTIMATED_READ_BYTES_PER_GPU_TOTAL)
    if read is not None and recent > 0:
        read_recent = window.increase_recent(vllm.ESTIMATED_READ_BYTES_PER_GPU_TOTAL, recent)
        steps = window.histogram_recent(vllm.ITERATION_TOKENS_TOTAL, recent)
        itl_mean = _hist_mean(window.histogram_recent(vllm.INTER_TOKEN_LATENCY_SECONDS, recent))
        duration = window.duration_recent(recent)
        if read_recent and steps is not None and steps.count and itl_mean and duration > 0:
            # busy seconds = steps x mean step time (the ITL mean stands in for it, as for busy_fraction)
            per_busy = read_recent / min(duration, steps.count * itl_mean)
    return Gpu(
        read_bytes_per_busy_second_recent=per_busy,
        utilization=host.gpu_utilization,
        utilization_window=host.window.gpu_utilization if host.window is not None else None,
        read_bytes_per_second=_moving_rate(window, vllm.ESTIMATED_READ_BYTES_PER_GPU_TOTAL),
        flops_per_second=_moving_rate(window, vllm.ESTIMATED_FLOPS_PER_GPU_TOTAL),
    )


SPEC_DECODE_FAMILIES: tuple[str, ...] = (
    vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL, vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL,
    vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL, vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL,
)


def speculative(window: Window, itl: HistogramDelta | None) -> Speculative:
    """Acceptance and tokens per output event; ``Speculative()`` when no spec-decode family is exported."""
    if not any(window.present(name) for name in SPEC_DECODE_FAMILIES):
        return Speculative()
    drafts = _increase(window, vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL)
    draft_tokens = _increase(window, vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL)
    accepted = _increase(window, vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL)
    per_position: tuple[float, ...] = ()
    name = vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL
    latest = window.latest
    if drafts and latest is not None and window.present(name):
        positions = sorted({int(p) for labels in latest.scalars.get(name, {})
                            if (p := label_value(labels, "position")) is not None and p.isdigit()})
        per_position = tuple((window.increase(name, _position(str(p))) or 0.0) / drafts for p in positions)
    # Every generated token but each request's first arrives in an ITL-observed output event.
    generated = _increase(window, vllm.GENERATION_TOKENS_TOTAL)
    ttft = _histogram(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    per_event = None
    if generated is not None and ttft is not None and itl is not None and itl.count > 0:
        per_event = max(1.0, (generated - ttft.count) / itl.count)
    return Speculative(
        enabled=True, drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
        acceptance_rate=_ratio(accepted, draft_tokens),
        mean_accepted_length=1.0 + accepted / drafts if accepted is not None and drafts else None,
        acceptance_per_position=per_position, tokens_per_event=per_event, event_gap_mean=_hist_mean(itl),
    )


# KV transfer / offload families: any of them on /metrics says a connector or offload is configured.
KV_TRANSFER_FAMILIES: tuple[str, ...] = (
    vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE, vllm.NIXL_XFER_TIME_SECONDS, vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL,
    vllm.KV_OFFLOAD_LOAD_BYTES_TOTAL, vllm.KV_OFFLOAD_TOTAL_BYTES_TOTAL, vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC,
)


def _stage(value: str) -> Callable[[LabelSet], bool]:
    return lambda labels: label_value(labels, "stage") == value


def _transfer_type(value: str) -> Callable[[LabelSet], bool]:
    return lambda labels: label_value(labels, "transfer_type") == value


def _deferred_wait(window: Window, flow: Traffic, times: Latency, consumer: bool) -> float | None:
    """Mean time a request waits deferred (for its KV, on a consumer), in seconds.

    vLLM stamps a request SCHEDULED only once its KV load is done, so its queue time (QUEUED to SCHEDULED,
    exact per request) holds the wait for KV and any wait for capacity. The scrapes' mean deferred and
    capacity counts split it (all of it on a consumer no scrape caught waiting: its waits are short loads).
    Without the queue-time histogram, Little's law: the mean deferred count over the arrival rate.
    """
    by_reason = vllm.NUM_REQUESTS_WAITING_BY_REASON
    if not window.present(by_reason):
        return None
    deferred = _mean(window.gauge_series(by_reason, "sum", _reason("deferred")))
    capacity = _mean(window.gauge_series(by_reason, "sum", _reason("capacity")))
    if deferred is None:
        return None
    if times.queue_mean is not None:
        waiting = deferred + (capacity or 0.0)
        return times.queue_mean * (deferred / waiting if waiting > 0 else 1.0 if consumer else 0.0)
    if flow.first_tokens and window.duration > 0:
        return deferred / (flow.first_tokens / window.duration)
    return None


def kv_transfer(window: Window, flow: Traffic, times: Latency) -> KvTransfer:
    """KV transfer and offload signals; ``KvTransfer()`` when no connector is at work."""
    external_queries = _increase(window, vllm.EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL)
    if not (any(window.present(name) for name in KV_TRANSFER_FAMILIES) or external_queries):
        return KvTransfer()
    duration = window.duration
    by_source = vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL
    transferred_share = None
    if window.present(by_source):
        transferred_share = _ratio(window.increase(by_source, _source("external_kv_transfer")),
                                   window.increase(by_source))
    fetch = vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE
    deferred_wait = _deferred_wait(window, flow, times, window.present(fetch))
    xfer = _histogram(window, vllm.NIXL_XFER_TIME_SECONDS)
    xfer_bytes = _histogram(window, vllm.NIXL_BYTES_TRANSFERRED)
    failures = _increase(window, vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL)
    transfers = xfer.count if xfer is not None else None
    load_bytes, load_seconds = (_increase(window, vllm.KV_OFFLOAD_LOAD_BYTES_TOTAL),
                                _increase(window, vllm.KV_OFFLOAD_LOAD_TIME_TOTAL))
    if load_bytes is None and window.present(vllm.KV_OFFLOAD_TOTAL_BYTES_TOTAL):  # before the flat names
        load_bytes = window.increase(vllm.KV_OFFLOAD_TOTAL_BYTES_TOTAL, _transfer_type("CPU_to_GPU"))
        if window.present(vllm.KV_OFFLOAD_TOTAL_TIME_TOTAL):
            load_seconds = window.increase(vllm.KV_OFFLOAD_TOTAL_TIME_TOTAL, _transfer_type("CPU_to_GPU"))
    errored = (window.increase(vllm.REQUEST_SUCCESS_TOTAL, lambda labels: label_value(labels, "finished_reason")
                               == "error") if window.present(vllm.REQUEST_SUCCESS_TOTAL) else None)
    return KvTransfer(
        enabled=True,
        consumer=window.present(fetch),
        transferred_prompt_share=transferred_share,
        external_queried_tokens=external_queries,
        external_hit_ratio=_ratio(_increase(window, vllm.EXTERNAL_PREFIX_CACHE_HITS_TOTAL), external_queries),
        deferred_wait_mean=deferred_wait,
        deferred_ttft_share=(min(1.0, deferred_wait / times.ttft_mean)
                             if deferred_wait is not None and times.ttft_mean else None),
        fetch_in_progress_mean=_mean(window.gauge_series(fetch, "sum", _stage("in_progress")))
        if window.present(fetch) else None,
        transfers=transfers,
        transfer_time_mean=_hist_mean(xfer),
        transfer_time_p95=xfer.quantile(0.95) if xfer is not None and xfer.count else None,
        transfer_bytes_per_second=_ratio(xfer_bytes.sum, duration) if xfer_bytes is not None else None,
        transfer_bytes_mean=_hist_mean(xfer_bytes),
        failures=failures,
        failure_share=_ratio(failures, (failures or 0) + (transfers or 0)) if failures is not None else None,
        kv_expired=_increase(window, vllm.NIXL_NUM_KV_EXPIRED_REQS_TOTAL),
        errored_requests=errored,
        offload_load_seconds=load_seconds,
        offload_load_bytes=load_bytes,
        offload_load_bytes_per_second=_ratio(load_bytes, load_seconds),
        offload_cpu_usage=window.gauge(vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC, "max")
        if window.present(vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC) else None,
    )


def per_token(itl: HistogramDelta | None, tokens_per_event: float | None) -> HistogramDelta | None:
    """The ITL histogram with each event gap divided by the tokens an event carried on average."""
    if itl is None or tokens_per_event is None:
        return itl
    return HistogramDelta(tuple(b / tokens_per_event for b in itl.bounds), itl.cumulative,
                          itl.sum / tokens_per_event, itl.count)


# -- LoRA, sleep and data-parallel engines ---------------------------------------------------------
def _adapters(labels: LabelSet, name: str) -> frozenset[str]:
    value = label_value(labels, name) or ""
    return frozenset(part for part in value.split(",") if part)


def _lora_current(snapshot: Snapshot) -> tuple[LabelSet, float] | None:
    """The newest ``lora_requests_info`` series of a scrape (its value is the time of its update)."""
    series = snapshot.scalars.get(vllm.LORA_REQUESTS_INFO)
    if not series:
        return None
    return max(series.items(), key=lambda item: item[1])


def lora(window: Window) -> Lora:
    """Adapter slots; ``Lora()`` when the engine serves no LoRA (the family is registered only then)."""
    latest = window.latest
    current = _lora_current(latest) if latest is not None else None
    if latest is None or current is None:
        return Lora()
    labels, _ = current
    try:
        slots: float | None = float(label_value(labels, "max_lora") or "")
    except ValueError:
        slots = None
    running = _adapters(labels, "running_lora_adapters")
    waiting = _adapters(labels, "waiting_lora_adapters") - running
    # Updated while the window covers: the series' value (an update's unix time) is not older than its
    # oldest scrape. The scrape's own time stands in for vLLM's clock (the same host, or NTP).
    start = latest.timestamp - window.duration
    seen: set[str] = set()
    for series_labels, updated in latest.scalars.get(vllm.LORA_REQUESTS_INFO, {}).items():
        if updated >= start:
            seen |= _adapters(series_labels, "running_lora_adapters")
            seen |= _adapters(series_labels, "waiting_lora_adapters")
    full: list[float] = []
    if slots:
        for snapshot in window.snapshots:
            now = _lora_current(snapshot)
            if now is not None:
                full.append(1.0 if len(_adapters(now[0], "running_lora_adapters")) >= slots else 0.0)
    return Lora(enabled=True, max_adapters=slots, running_adapters=float(len(running)),
                waiting_adapters=float(len(waiting)), adapters_seen=float(len(seen | running)),
                slots_full_fraction=_mean(full))


def _engine(value: str) -> Callable[[LabelSet], bool]:
    return lambda labels: label_value(labels, "engine") == value


SLEEP_LEVELS: tuple[str, ...] = ("weights_offloaded", "discard_all")


def _sleep(snapshot: Snapshot) -> tuple[str | None, float | None]:
    """The sleep state at one scrape (the deepest any engine is in) and how many engines are not awake."""
    series = snapshot.scalars.get(vllm.ENGINE_SLEEP_STATE)
    if not series:
        return None, None
    state: dict[str, dict[str, float]] = {}
    for labels, value in series.items():
        state.setdefault(label_value(labels, "engine") or "", {})[label_value(labels, "sleep_state") or ""] = value
    asleep = [e for e, one_hot in state.items() if one_hot.get("awake", 1.0) == 0.0]
    if not asleep:
        return "awake", 0.0
    deepest = "asleep"  # awake 0 and no level set: vLLM's release_kv_cache_memory
    for level in SLEEP_LEVELS:
        if any(state[e].get(level, 0.0) > 0 for e in asleep):
            deepest = level
    return deepest, float(len(asleep))


def _engine_numbers(window: Window, engine: str) -> dict[str, float | None]:
    match = _engine(engine)
    ttft = window.histogram(vllm.TIME_TO_FIRST_TOKEN_SECONDS, match) if window.present(
        vllm.TIME_TO_FIRST_TOKEN_SECONDS) else None
    itl = window.histogram(vllm.INTER_TOKEN_LATENCY_SECONDS, match) if window.present(
        vllm.INTER_TOKEN_LATENCY_SECONDS) else None
    running = window.gauge_series(vllm.NUM_REQUESTS_RUNNING, "sum", match)
    waiting = window.gauge_series(vllm.NUM_REQUESTS_WAITING, "sum", match)
    load = [r + w for r, w in zip(running, waiting)] if len(running) == len(waiting) else running
    return {
        "requests_finished": window.increase(vllm.REQUEST_SUCCESS_TOTAL, match)
        if window.present(vllm.REQUEST_SUCCESS_TOTAL) else None,
        "first_tokens": ttft.count if ttft is not None else None,
        "load_mean": _mean(load),  # running + waiting, mean over the window's scrapes
        "ttft_mean": _hist_mean(ttft),
        "itl_mean": _hist_mean(itl),
        "kv_cache_usage_mean": _mean(window.gauge_series(vllm.KV_CACHE_USAGE_PERC, "max", match)),
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _over_siblings(numbers: Mapping[str, Mapping[str, float | None]], engine: str, key: str,
                   floor: float) -> float | None:
    """An engine's value over the median of its siblings' (each at least ``floor``, so idle ones do not divide)."""
    own = numbers[engine].get(key)
    others = [v for e, row in numbers.items() if e != engine and (v := row.get(key)) is not None]
    if own is None or not others:
        return None
    return max(own, floor) / max(_median(others), floor)


def engines(window: Window, thresholds: Thresholds) -> Engines:
    """Sleep state and per-engine signals; per-engine numbers only with two or more engines."""
    latest = window.latest
    if latest is None:
        return Engines()
    ranks = sorted({e for name in (vllm.NUM_REQUESTS_RUNNING, vllm.ENGINE_SLEEP_STATE)
                    for labels in latest.scalars.get(name, {}) if (e := label_value(labels, "engine")) is not None},
                   key=lambda e: (len(e), e))
    state, sleeping = _sleep(latest)
    if len(ranks) < 2:
        return Engines(count=float(len(ranks)) if ranks else None, sleep_state=state, sleeping=sleeping)
    numbers = {e: _engine_numbers(window, e) for e in ranks}
    # An engine is compared only while it and its siblings served enough first tokens to judge latency.
    judged = {e: row for e, row in numbers.items() if (row["first_tokens"] or 0) >= thresholds.evidence_min_requests}
    outlier, load_ratio, latency_ratio, worst = None, None, None, 0.0
    for e in judged if len(judged) >= 2 else ():
        load = _over_siblings(judged, e, "load_mean", 1.0)  # at least one request: an idle sibling is no ratio
        slow = [r for key, floor in (("ttft_mean", 0.001), ("itl_mean", 0.001))
                if (r := _over_siblings(judged, e, key, floor)) is not None]
        latency_ratio_e = max(slow) if slow else None
        score = max(load or 0.0, latency_ratio_e or 0.0)
        if score > worst:
            outlier, load_ratio, latency_ratio, worst = e, load, latency_ratio_e, score
    return Engines(count=float(len(ranks)), sleep_state=state, sleeping=sleeping, per_engine=numbers,
                   outlier=outlier, load_ratio=load_ratio, latency_ratio=latency_ratio)


def compute(window: Window, thresholds: Thresholds, host: HostInputs | None = None,
            slow_first_token_seconds: float | None = None) -> Signals:
    """Derive every signal from the window (and optional host readings).

    ``slow_first_token_seconds``: the first-token objective's threshold, when the target has one; long
    prompts that came with a first token over it date a burst (long_prompt_arrivals).

    Under speculative decoding the latency group's ITL (quantiles, mean, the objective's histogram) is
    per token; the engine-step estimates (busy fraction, step wait) keep the per-event gaps.
    """
    host = host or HostInputs()
    recent = int(thresholds.recent_evaluations)
    flow = replace(traffic(window, recent), **long_prompt_arrivals(window, thresholds.long_prompt_tokens,
                                                                    slow_first_token_seconds))
    itl = _histogram(window, vllm.INTER_TOKEN_LATENCY_SECONDS)
    spec = speculative(window, itl)
    times = latency(window, per_token(itl, spec.itl_scale), recent)
    if (aligned := first_token_prompt_mean(window, times.ttft_histogram_recent, recent)) is not None:
        flow = replace(flow, prompt_length_mean_recent=aligned)
    if spec.itl_scale and times.itl_histogram_recent is not None:  # per token, as the objective judges the gaps
        itl_recent = per_token(times.itl_histogram_recent, spec.itl_scale)
        times = replace(times, itl_histogram_recent=itl_recent,
                        itl_median_recent=itl_recent.quantile(0.5) if itl_recent is not None else None)
    steps = scheduler(window, _hist_mean(itl), recent)
    times = replace(times, step_wait_mean=step_wait(itl, steps.steps_per_second, times.prefill_mean))
    cpu_use = cpu(window, thresholds, host, _net_share(times.e2e_frontend_mean, times.step_wait_mean, times.e2e_mean))
    return Signals(
        window_seconds=window.duration,
        scrapes=len(window),
        restarts=window.restarts,
        traffic=flow,
        kv=kv(window, thresholds, flow,
              times.ttft_histogram_recent.count if times.ttft_histogram_recent is not None else None),
        scheduler=steps,
        latency=times,
        cpu=cpu_use,
        gpu=gpu(window, host, recent),
        speculative=spec,
        kv_transfer=kv_transfer(window, flow, times),
        lora=lora(window),
        engines=engines(window, thresholds),
        witnesses=witnesses_of(window),  # issue 50
        cache=cache_facts(window.latest),
        missing=missing_inputs(window),
        notes=() if cpu_use.api_server_cores is not None else (API_SERVER_CPU_ABSENT,),
    )
