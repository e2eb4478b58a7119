"""Catalog of the metrics the sidecar EXPORTS (``vllm_diag_*``): name, type, unit, help, labels, source.

It lives next to its renderer, not in ``exporter.catalog``: each family's ``source`` reads the
published state (``exporter.state``, ``exporter.signals``), and the catalog package is a leaf that
imports nothing of the pipeline. ``/metrics`` (``exporter.publish.exposition``) is a loop over
``EXPORTED``, in this order; the
lint of generated rules and dashboards (``exporter.render.lint``) and the dashboard builders
(``exporter.render.dashboards``) check every ``vllm_diag_*`` name they use against it. Names,
help texts and labels are a contract with alert rules, dashboards and users' queries: change
them only together with ``vllm-diag render all``.

``source`` says where the samples come from: a function of the published target states (and,
for the objectives, of the configuration) yielding ``(label values, value)`` in label order.
Nothing is computed on scrape: every value is read from immutable state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar, get_args

from exporter.catalog import metrics as vllm
from exporter.catalog.symptoms import CAUSES, LAYERS, SYMPTOMS, VERDICTS
from exporter.config import Settings
from exporter.signals import QUANTILES, Signals
from exporter.state import SCRAPE_ERROR_REASONS, TargetState, TargetStatus

PREFIX = "vllm_diag_"

Sample = tuple[list[str], float]
Source = Callable[[Sequence[TargetState], Settings | None], Iterator[Sample]]
TM = ("target", "model_name")
S = TypeVar("S")


class CycleNumbers(Protocol):
    duration_seconds: float
    queries: int
    bytes_read: int
    targets: int
    diagnosed: int


class CentralNumbers(Protocol):
    """What the central diagnoser (exporter.promsource.central) counts about itself."""

    cycles_total: int
    queries_total: int
    bytes_read_total: int
    errors_total: int
    dropped_targets_total: int
    fleet_targets: int

    @property
    def last_cycle(self) -> CycleNumbers: ...


CentralSource = Callable[[CentralNumbers], float]  # the central diagnoser's own, unlabelled numbers


@dataclass(frozen=True, slots=True)
class ExportedMetric(Generic[S]):
    """One exported family; ``name`` has no ``_total`` (the client adds it to counter samples)."""

    name: str
    type: Literal["gauge", "counter"]
    unit: str  # base unit of the value: seconds, ratio (0..1), cores, requests, ... or "" for a count/flag
    help: str
    labels: tuple[str, ...]
    source: S

    @property
    def sample_name(self) -> str:
        """The series name queries use (``_total`` on counters)."""
        return self.name + "_total" if self.type == "counter" else self.name


# -- sources: small adapters from one target's state to its samples ---------------------------------
def each_state(samples: Callable[[TargetState], Iterable[Sample]]) -> Source:
    """Samples of every target, whatever its status."""
    def source(states: Sequence[TargetState], settings: Settings | None) -> Iterator[Sample]:
        for state in states:
            yield from samples(state)
    return source


def each_ok_state(samples: Callable[[TargetState], Iterable[Sample]]) -> Source:
    """Samples of the targets with a diagnosis (status ``ok``)."""
    return each_state(lambda state: samples(state) if state.status == "ok" else ())


def each_signals(values: Callable[[Signals], Iterable[tuple[Sequence[str], float | None]]]) -> Source:
    """Per-target signal samples under (target, model_name, *extra labels); absent values are left out.

    A target that is down publishes no signals: its last numbers would read as current.
    """
    def samples(state: TargetState) -> Iterator[Sample]:
        if state.signals is None or state.status == "down":
            return
        for extra, value in values(state.signals):
            if value is not None:
                yield [state.target, state.model_name, *extra], value
    return each_state(samples)


def signal(value: Callable[[Signals], float | None]) -> Source:
    """One plain per-target gauge from the signals."""
    return each_signals(lambda s: [((), _float(value(s)))])


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _tm(state: TargetState) -> list[str]:
    return [state.target, state.model_name]


def _objectives(states: Sequence[TargetState], settings: Settings | None) -> Iterator[Sample]:
    """Each latency objective's threshold, per target (constant while serving): the bucket edge the
    generated alert rules count bad events above."""
    if settings is None:
        return
    for target in settings.targets:
        for name, objective in settings.slo_for(target).objectives().items():
            yield [target.name, name], objective.threshold_seconds


def _targets(states: Sequence[TargetState], settings: Settings | None) -> Iterator[Sample]:
    """Each objective's target share, per target: its error budget is 1 minus it."""
    if settings is None:
        return
    for target in settings.targets:
        slo = settings.slo_for(target)
        for name, objective in slo.objectives().items():
            yield [target.name, name], objective.target
        yield [target.name, "availability"], slo.availability.target


def _on_edge(state: TargetState) -> Iterator[Sample]:
    """Whether each threshold is a bucket edge of the target's histogram, once a scrape showed the edges."""
    for name, status in state.objectives.items():
        if status.threshold_on_bucket_edge is not None:
            yield [state.target, name], 1.0 if status.threshold_on_bucket_edge else 0.0


def _intervals(states: Sequence[TargetState], settings: Settings | None) -> Iterator[Sample]:
    if settings is None:
        return
    for target in settings.targets:
        yield [target.name], target.scrape_interval


def _engine_facts(state: TargetState, text: bool) -> Iterator[Sample]:
    for name, known in state.engine.items():
        if isinstance(known.value, str):
            if text:
                yield [state.target, name, known.source, known.value], 1.0
        elif not text:
            yield [state.target, name, known.source], float(known.value)


def _advice_value(value: object) -> str:
    """A knob value as a label: integers without a decimal point, a combined what-if as k=v pairs."""
    if value is None:
        return "unset"
    if isinstance(value, dict):
        return ",".join(f"{k}={_advice_value(v)}" for k, v in value.items())
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.6g}"
    return str(value)


def _advice(state: TargetState) -> Iterator[Sample]:
    """The what-if advisor's top recommendation (exporter/advisor), once it has one."""
    top = state.advice.top if state.advice is not None else None
    if top is not None:
        yield [state.target, state.model_name, top.knob, _advice_value(top.current), _advice_value(top.proposed)], 1.0


def _advice_errors(state: TargetState) -> Iterator[Sample]:
    """The advisor's error on the latest real change of each knob (exporter/advisor/track.py)."""
    if state.advice_track is not None:
        for knob, metric, value in state.advice_track.errors():
            yield [state.target, knob, metric], value


def _quantiles(family: str) -> Source:
    def values(s: Signals) -> Iterator[tuple[Sequence[str], float | None]]:
        quantiles = getattr(s.latency, f"{family}_quantiles")
        for q in QUANTILES:
            if q in quantiles:
                yield [f"{q:g}"], quantiles[q]
    return each_signals(values)


def _active_causes(state: TargetState, informational: bool) -> Iterator[Sample]:
    active = {c.id for c in state.diagnosis.active_causes if c.informational == informational}
    for c in CAUSES:
        yield [*_tm(state), c.id, c.symptom, c.layer], 1.0 if c.id in active else 0.0


def _active_symptoms(state: TargetState) -> Iterator[Sample]:
    active = {s.id for s in state.diagnosis.active_symptoms}
    for s in SYMPTOMS:
        yield [*_tm(state), s.id], 1.0 if s.id in active else 0.0


def _kv_role(state: TargetState) -> Iterator[Sample]:
    """The configured kv_role, else the role the target's /metrics imply; nothing without a KV connector."""
    if state.signals is None or state.status == "down":
        return
    fact = state.engine.get("kv_role")
    role = str(fact.value) if fact is not None else None
    kt = state.signals.kv_transfer
    if role is None and kt.enabled:
        if kt.consumer:
            role = "kv_consumer" if kt.transfers is not None else "kv_both"
        elif kt.transfers is not None or kt.kv_expired is not None:
            role = "kv_producer"
    if role is not None:
        yield [*_tm(state), role], 1.0


def _pending(state: TargetState) -> Iterator[Sample]:
    pending = state.diagnosis.verdict.pending
    if pending is not None:
        yield [*_tm(state), pending], 1.0


def _latency_family(family: str, title: str) -> ExportedMetric[Source]:
    name = "e2e_latency" if family == "e2e" else family
    return ExportedMetric(PREFIX + f"{name}_seconds", "gauge", "seconds", f"{title} quantiles over the window.",
                          (*TM, "quantile"), _quantiles(family))


def _gauge(name: str, unit: str, help_text: str, value: Callable[[Signals], float | None]) -> ExportedMetric[Source]:
    """A plain per-target gauge of one signal."""
    return ExportedMetric(PREFIX + name, "gauge", unit, help_text, TM, signal(value))


# -- the catalog, in the order /metrics lists the families ----------------------------------------
EXPORTED: tuple[ExportedMetric[Source], ...] = (
    # objectives from the configuration
    ExportedMetric(PREFIX + "slo_seconds", "gauge", "seconds",
                   "A latency objective's threshold per target: events above it are bad (ttft, itl).",
                   ("target", "objective"), _objectives),
    ExportedMetric(PREFIX + "slo_target_ratio", "gauge", "ratio",
                   "An objective's target share of good events per target (ttft, itl, availability); "
                   "the error budget is 1 minus it.",
                   ("target", "objective"), _targets),
    ExportedMetric(PREFIX + "slo_threshold_on_bucket_edge", "gauge", "",
                   "1 when the objective's threshold is a bucket edge of the target's histogram (bad events "
                   "counted exactly), 0 when the share over it is interpolated inside a bucket.",
                   ("target", "objective"), each_state(_on_edge)),
    ExportedMetric(PREFIX + "input_available", "gauge", "",
                   "1 when an input a paging alert rule needs is in the target's latest successful scrape "
                   "(cpu_source: the configured host CPU source is readable); 0 while the target is down.",
                   ("target", "input"),
                   each_state(lambda s: [([s.target, name], 1.0 if ok else 0.0) for name, ok in s.inputs.items()])),
    ExportedMetric(PREFIX + "scrape_interval_seconds", "gauge", "seconds", "Configured scrape interval of the target.",
                   ("target",), _intervals),
    # scrape health, per target
    ExportedMetric(PREFIX + "up", "gauge", "", "vllm-diag: 1 if the last scrape of the target succeeded.",
                   ("target",), each_state(lambda s: [([s.target], 1.0 if s.health.up else 0.0)])),
    ExportedMetric(PREFIX + "scrape_duration_seconds", "gauge", "seconds", "vllm-diag: last scrape + parse time.",
                   ("target",), each_state(lambda s: [([s.target], s.health.last_duration_seconds)]
                                           if s.health.last_duration_seconds is not None else [])),
    ExportedMetric(PREFIX + "scrape_errors", "counter", "", "vllm-diag: failed scrapes by reason.",
                   ("target", "reason"),
                   each_state(lambda s: [([s.target, reason], float(s.health.errors_total.get(reason, 0)))
                                         for reason in SCRAPE_ERROR_REASONS])),
    ExportedMetric(PREFIX + "last_success_timestamp_seconds", "gauge", "seconds",
                   "vllm-diag: unix time of the last good scrape.",
                   ("target",), each_state(lambda s: [([s.target], s.health.last_success_timestamp)]
                                           if s.health.last_success_timestamp is not None else [])),
    ExportedMetric(PREFIX + "dropped_samples", "counter", "", "vllm-diag: samples dropped (NaN/Inf, cardinality cap).",
                   ("target",), each_state(lambda s: [([s.target], float(s.health.dropped_samples_total))])),
    ExportedMetric(PREFIX + "target_restarts", "counter", "", "vllm-diag: vLLM restarts (counter resets) detected.",
                   ("target",), each_state(lambda s: [([s.target], float(s.health.restarts_total))])),
    # engine facts
    ExportedMetric(PREFIX + "engine_fact", "gauge", "",
                   "A numeric engine fact (booleans as 0/1) and where it came from.",
                   ("target", "fact", "source"), each_state(lambda s: _engine_facts(s, text=False))),
    ExportedMetric(PREFIX + "engine_fact_info", "gauge", "", "A text engine fact as the value label (always 1).",
                   ("target", "fact", "source", "value"), each_state(lambda s: _engine_facts(s, text=True))),
    ExportedMetric(PREFIX + "advice_info", "gauge", "",
                   "The what-if advisor's top recommendation: knob, current and proposed value (always 1; absent "
                   "until the advisor has one). The predictions are in the JSON.",
                   (*TM, "knob", "current", "proposed"), each_state(_advice)),
    ExportedMetric(PREFIX + "advice_error_ratio", "gauge", "ratio",
                   "The what-if advisor's error on the latest real change of a knob: predicted / measured - 1 "
                   "(ttft_p95, itl_p95; preemptions_per_s padded by advice_preemption_floor), the prediction "
                   "made from the last window before the change, the measurement the first whole window after "
                   "it. Absent until a change was seen. The history is in the JSON (advice_track).",
                   ("target", "knob", "metric"), each_state(_advice_errors)),
    # evaluation
    ExportedMetric(PREFIX + "evidence_ready", "gauge", "", "1 when the window holds enough data to diagnose.",
                   TM, each_state(lambda s: [(_tm(s), 1.0 if s.status == "ok" else 0.0)])),
    ExportedMetric(PREFIX + "target_state", "gauge", "",
                   "One-hot state of the target: ok (diagnosed), insufficient_evidence, down, or sleeping (vLLM's "
                   "engine_sleep_state: every engine asleep; no rule judges it, nothing pages).", (*TM, "state"),
                   each_state(lambda s: [([*_tm(s), state], 1.0 if s.status == state else 0.0)
                                         for state in get_args(TargetStatus)])),
    ExportedMetric(PREFIX + "last_evaluation_timestamp_seconds", "gauge", "seconds",
                   "Unix time of the last diagnosis.", TM, each_state(lambda s: [(_tm(s), s.evaluated_at)])),
    # signals over the window
    ExportedMetric(PREFIX + "kv_cache_usage_ratio", "gauge", "ratio",
                   "KV cache usage 0..1: latest, and max/mean over the window.", (*TM, "stat"),
                   each_signals(lambda s: [(["latest"], s.kv.usage), (["max"], s.kv.usage_max),
                                           (["mean"], s.kv.usage_mean)])),
    ExportedMetric(PREFIX + "requests", "gauge", "requests", "Running and waiting requests at the last scrape.",
                   (*TM, "state"),
                   each_signals(lambda s: [(["running"], s.scheduler.running), (["waiting"], s.scheduler.waiting),
                                           (["waiting_capacity"], s.scheduler.waiting_capacity),
                                           (["waiting_deferred"], s.scheduler.waiting_deferred)])),
    _latency_family("ttft", "Time to first token"),
    _latency_family("itl", "Inter-token latency (per token: with speculative decoding each output event's gap "
                    "divided by the tokens it carried on average)"),
    _latency_family("e2e", "End-to-end request latency"),
    ExportedMetric(PREFIX + "ttft_breakdown_seconds", "gauge", "seconds",
                   "Mean TTFT per request over the window, by phase (queue, prefill, frontend).", (*TM, "phase"),
                   each_signals(lambda s: [(["queue"], s.latency.queue_mean), (["prefill"], s.latency.prefill_mean),
                                           (["frontend"], s.latency.ttft_frontend_mean)])),
    ExportedMetric(PREFIX + "throughput_tokens_per_second", "gauge", "tokens_per_second",
                   "Tokens per second over the window.", (*TM, "kind"),
                   each_signals(lambda s: [(["prompt"], s.traffic.prompt_tokens_per_second),
                                           (["generation"], s.traffic.generation_tokens_per_second)])),
    ExportedMetric(PREFIX + "cpu_signal", "gauge", "", "Each input of the CPU-starvation score, raw value.",
                   (*TM, "signal"), each_signals(lambda s: [([name], value) for name, value
                                                            in sorted(s.cpu.inputs.items())])),
    _gauge("preemption_rate", "preemptions_per_second", "Preemptions per second over the window.",
           lambda s: s.kv.preemption_rate),
    _gauge("preemptions_per_request", "ratio", "Preemptions per admitted request over the window.",
           lambda s: s.kv.preemptions_per_request),
    _gauge("prefix_cache_hit_ratio", "ratio",
           "Prefix-cache hit efficiency: cached / queried prompt tokens over the window.",
           lambda s: s.kv.prefix_hit_ratio),
    _gauge("requests_per_second", "requests_per_second", "Finished requests per second over the window.",
           lambda s: s.traffic.requests_per_second),
    _gauge("engine_steps_per_second", "steps_per_second",
           "Engine output batches (about one per step) per second over the window.",
           lambda s: s.scheduler.steps_per_second),
    _gauge("tokens_per_step", "tokens", "Mean tokens per engine output batch over the window.",
           lambda s: s.scheduler.tokens_per_step),
    _gauge("spec_decode_acceptance_ratio", "ratio",
           "Speculative decoding: accepted / proposed draft tokens over the window (absent when it is off).",
           lambda s: s.speculative.acceptance_rate),
    _gauge("spec_decode_mean_accepted_tokens", "tokens",
           "Speculative decoding: 1 + accepted / drafts, tokens a verify step emits per request (bonus included).",
           lambda s: s.speculative.mean_accepted_length),
    ExportedMetric(PREFIX + "lora_adapters", "gauge", "adapters",
                   f"LoRA ({vllm.LORA_REQUESTS_INFO}, absent without --enable-lora): adapter slots (max), adapters "
                   "with requests in flight now (running), named waiting and not running (waiting), and seen in "
                   "flight over the window (seen).", (*TM, "kind"),
                   each_signals(lambda s: [(["max"], s.lora.max_adapters), (["running"], s.lora.running_adapters),
                                           (["waiting"], s.lora.waiting_adapters), (["seen"], s.lora.adapters_seen)])),
    ExportedMetric(PREFIX + "engine_imbalance_ratio", "gauge", "ratio",
                   "Data parallel: the most outlying engine's mean load (running + waiting) and mean latency over "
                   "the median of its siblings' (label engine; absent with one engine).", (*TM, "engine", "kind"),
                   each_signals(lambda s: [([s.engines.outlier, "load"], s.engines.load_ratio),
                                           ([s.engines.outlier, "latency"], s.engines.latency_ratio)]
                                if s.engines.outlier is not None else [])),
    _gauge("tokens_per_output_event", "tokens",
           "Speculative decoding: tokens one output event carried on average; ITL is judged per token by it.",
           lambda s: s.speculative.tokens_per_event),
    # -- KV transfer and offload (issue 29): absent without a KV connector or offload --
    ExportedMetric(PREFIX + "kv_transfer_role", "gauge", "",
                   "The target's KV transfer role (always 1): kv_role from --kv-transfer-config, else what its "
                   "/metrics say (kv_consumer: vLLM registered the KV fetch-stage gauge; kv_both: offload; "
                   "kv_producer: NIXL families without it). Pairs prefill and decode instances of a model.",
                   (*TM, "role"), each_state(_kv_role)),
    _gauge("kv_deferred_ttft_share", "ratio",
           "KV consumer: mean wait for KV (the deferred share of the queue time) as a share of mean TTFT (A7).",
           lambda s: s.kv_transfer.deferred_ttft_share),
    _gauge("kv_transfer_time_seconds", "seconds", "Mean time of one KV transfer (NIXL) over the window.",
           lambda s: s.kv_transfer.transfer_time_mean),
    _gauge("kv_transferred_prompt_share", "ratio",
           "Prompt tokens that arrived by KV transfer or from an offload tier over all prompt tokens.",
           lambda s: s.kv_transfer.transferred_prompt_share),
    _gauge("kv_transfer_failure_ratio", "ratio", "Failed KV transfers over all transfers in the window (A8).",
           lambda s: s.kv_transfer.failure_share),
    _gauge("external_prefix_cache_hit_ratio", "ratio",
           "Tokens the KV connector (offload tier, another instance) supplied over the tokens offered to it.",
           lambda s: s.kv_transfer.external_hit_ratio),
    _gauge("prefill_token_share", "ratio",
           "Computed prompt tokens / (computed prompt + generated tokens) over the window.",
           lambda s: s.traffic.prefill_token_share),
    _gauge("api_server_cpu_cores", "cores", "API-server CPU use in cores (rate of process_cpu_seconds_total).",
           lambda s: s.cpu.api_server_cores),
    _gauge("cpu_starvation_score", "ratio", "CPU-starvation score 0..1 from the available CPU inputs.",
           lambda s: s.cpu.starvation_score),
    _gauge("gpu_utilization_ratio", "ratio", "GPU utilisation 0..1 from the DCGM source, mean over the window.",
           lambda s: s.gpu.utilization),
    _gauge("window_span_seconds", "seconds", "Seconds of scrapes the window currently covers.",
           lambda s: s.window_seconds),
    # the diagnosis
    ExportedMetric(PREFIX + "layer_score", "gauge", "ratio", "Bottleneck score 0..1 per layer.", (*TM, "layer"),
                   each_ok_state(lambda s: [([*_tm(s), layer], s.diagnosis.layer_scores.get(layer, 0.0))
                                            for layer in LAYERS])),
    ExportedMetric(PREFIX + "layer_verdict", "gauge", "", "One-hot verdict over the layers, none and unknown.",
                   (*TM, "layer"),
                   each_state(lambda s: [([*_tm(s), layer], 1.0 if s.diagnosis.verdict.layer == layer else 0.0)
                                         for layer in VERDICTS])),
    ExportedMetric(PREFIX + "symptom_active", "gauge", "",
                   "1 while a symptom class (A-G) is active with a user-visible effect.", (*TM, "symptom"),
                   each_ok_state(_active_symptoms)),
    ExportedMetric(PREFIX + "cause_active", "gauge", "", "1 while a cause is active, with its symptom and layer.",
                   (*TM, "cause", "symptom", "layer"), each_ok_state(lambda s: _active_causes(s, informational=False))),
    ExportedMetric(PREFIX + "informational_finding", "gauge", "",
                   "1 while a cause holds only as information (capacity, saturation within "
                   "objectives, unshareable prompts): never a verdict or an alert.",
                   (*TM, "cause", "symptom", "layer"), each_ok_state(lambda s: _active_causes(s, informational=True))),
    ExportedMetric(PREFIX + "verdict_recovering", "gauge", "",
                   "1 while the verdict layer's causes have ended and their effect is still in the window "
                   "(the layer is kept, recovering); 0 otherwise.", TM,
                   each_ok_state(lambda s: [(_tm(s), 1.0 if s.diagnosis.verdict.recovering else 0.0)])),
    ExportedMetric(PREFIX + "verdict_pending", "gauge", "",
                   "1 while the hysteresis holds back a different verdict (label layer).", (*TM, "layer"),
                   each_ok_state(_pending)),
    # scaling on the diagnosis (exporter/scaling.py; issue 51): KEDA / HPA read these, summed per model
    ExportedMetric(PREFIX + "scale_helps", "gauge", "",
                   "1 when more replicas would relieve the target's active cause (a capacity cause: "
                   "queue, kv_pool, batch_slots), else 0; reason names why (cpu, configuration, prefix_breakage, "
                   "transfer, workload, unknown, none).",
                   (*TM, "reason"), each_state(lambda s: [([*_tm(s), s.scaling.reason], float(s.scaling.helps))])),
    ExportedMetric(PREFIX + "desired_replicas", "gauge", "",
                   "replicas this target's traffic needs at the objectives (1: itself; summed per "
                   "model it is the model's replica count); never more than 1 while a non-capacity cause acts.",
                   TM, each_state(lambda s: [(_tm(s), s.scaling.desired_replicas)])),
    ExportedMetric(PREFIX + "scale_utilization_ratio", "gauge", "ratio",
                   "demand on the binding resource (layer: scheduler = batch slots, kv_cache = KV pool) "
                   "over its capacity; stat now (this evaluation) or peak (over the stabilisation window).",
                   (*TM, "layer", "stat"),
                   each_ok_state(lambda s: [([*_tm(s), s.scaling.layer or "", stat], value) for stat, value in (
                       ("now", s.scaling.utilization), ("peak", s.scaling.utilization_peak)) if value is not None])),
    # failures of the sidecar's own parts
    ExportedMetric(PREFIX + "rule_errors", "counter", "", "vllm-diag: rule evaluations that raised, by cause.",
                   ("target", "cause"),
                   each_state(lambda s: [([s.target, cause], float(count))
                                         for cause, count in sorted(s.rule_errors_total.items())])),
    ExportedMetric(PREFIX + "source_errors", "counter", "",
                   "vllm-diag: failed reads of an extra source (dcgm, hostcpu:*), by reason.",
                   ("target", "source", "reason"),
                   each_state(lambda s: [([s.target, source, reason], float(count))
                                         for (source, reason), count in sorted(s.source_errors_total.items())])),
    # recorded captures (record_dir), per target that records
    ExportedMetric(PREFIX + "record_bytes", "gauge", "bytes",
                   "vllm-diag: bytes of the target's recorded captures in its record_dir (kept under "
                   "record_retention.max_bytes).",
                   ("target",), each_state(lambda s: [([s.target], float(s.recording.bytes))]
                                           if s.recording is not None else [])),
    ExportedMetric(PREFIX + "record_pruned", "counter", "",
                   "vllm-diag: recorded captures deleted by the retention (oldest first), since start.",
                   ("target",), each_state(lambda s: [([s.target], float(s.recording.pruned_total))]
                                           if s.recording is not None else [])),
    ExportedMetric(PREFIX + "record_errors", "counter", "",
                   "vllm-diag: captures not recorded, by reason (write_failed: full, read-only or missing "
                   "folder; queue_full: the writer fell behind a slow disk). The diagnosis goes on.",
                   ("target", "reason"),
                   each_state(lambda s: [([s.target, reason], float(count))
                                         for reason, count in s.recording.errors_total.items()]
                              if s.recording is not None else [])),
)

# The central diagnoser's own cost (``vllm-diag serve --prometheus``), beside the per-target families.
CENTRAL = PREFIX + "prometheus_"
CENTRAL_EXPORTED: tuple[ExportedMetric[CentralSource], ...] = (
    ExportedMetric(CENTRAL + "cycles", "counter", "", "Diagnosis cycles run against the store.", (),
                   lambda c: c.cycles_total),
    ExportedMetric(CENTRAL + "queries", "counter", "", "HTTP API queries sent to the store.", (),
                   lambda c: c.queries_total),
    ExportedMetric(CENTRAL + "read_bytes", "counter", "bytes", "Bytes of API answers read from the store.", (),
                   lambda c: c.bytes_read_total),
    ExportedMetric(CENTRAL + "errors", "counter", "", "Failed discovery or target reads.", (),
                   lambda c: c.errors_total),
    ExportedMetric(CENTRAL + "dropped_targets", "counter", "", "Targets dropped after their grace period.", (),
                   lambda c: c.dropped_targets_total),
    ExportedMetric(CENTRAL + "cycle_duration_seconds", "gauge", "seconds", "Duration of the last cycle.", (),
                   lambda c: c.last_cycle.duration_seconds),
    ExportedMetric(CENTRAL + "targets", "gauge", "", "Targets found in the last cycle.", (),
                   lambda c: c.last_cycle.targets),
    ExportedMetric(CENTRAL + "fleet_targets", "gauge", "",
                   "Targets the store holds, every shard's: the shards' targets add up to it.", (),
                   lambda c: c.fleet_targets),
    ExportedMetric(CENTRAL + "targets_diagnosed", "gauge", "",
                   "Targets with fresh samples, diagnosed in the last cycle.", (),
                   lambda c: c.last_cycle.diagnosed),
    ExportedMetric(CENTRAL + "cycle_queries", "gauge", "", "Queries the last cycle sent.", (),
                   lambda c: c.last_cycle.queries),
    ExportedMetric(CENTRAL + "cycle_read_bytes", "gauge", "bytes", "Bytes the last cycle read.", (),
                   lambda c: c.last_cycle.bytes_read),
)

ALL_EXPORTED: tuple[ExportedMetric[Source] | ExportedMetric[CentralSource], ...] = (*EXPORTED, *CENTRAL_EXPORTED)
BY_NAME: dict[str, ExportedMetric[Source] | ExportedMetric[CentralSource]] = {m.name: m for m in ALL_EXPORTED}


def sample_names() -> frozenset[str]:
    """Every series name vllm-diag exports (``_total`` on counters): what queries may read."""
    return frozenset(m.sample_name for m in ALL_EXPORTED)


def exported(sample_name: str) -> ExportedMetric[Source] | ExportedMetric[CentralSource]:
    """The catalog entry of a series name a rule or dashboard reads; KeyError names an unknown one."""
    for metric in ALL_EXPORTED:
        if metric.sample_name == sample_name:
            return metric
    raise KeyError(f"{sample_name} is not an exported vllm-diag metric (exporter/publish/exported.py)")
