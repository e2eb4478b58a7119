"""prometheus_client collector over the last published states.

``collect()`` only turns the current immutable states into metric families: nothing is
computed on scrape, so two Prometheus replicas see the same numbers and polling is never
stalled by a scraper.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.catalog.symptoms import CAUSES, LAYERS, SYMPTOMS, VERDICTS
from exporter.config import Settings
from exporter.signals import QUANTILES
from exporter.state import SCRAPE_ERROR_REASONS, TargetState

P = "vllm_diag_"

# (metric suffix, help, Signals attribute path): plain per-target gauges.
SIGNAL_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("preemption_rate", "Preemptions per second over the window.", "kv.preemption_rate"),
    ("preemptions_per_request", "Preemptions per admitted request over the window.",
     "kv.preemptions_per_request"),
    ("prefix_cache_hit_ratio", "Prefix-cache hit efficiency: cached / queried prompt tokens over the window.",
     "kv.prefix_hit_ratio"),
    ("requests_per_second", "Finished requests per second over the window.", "traffic.requests_per_second"),
    ("engine_steps_per_second", "Engine output batches (about one per step) per second over the window.",
     "scheduler.steps_per_second"),
    ("tokens_per_step", "Mean tokens per engine output batch over the window.",
     "scheduler.tokens_per_step"),
    ("prefill_token_share", "Computed prompt tokens / (computed prompt + generated tokens) over the window.",
     "traffic.prefill_token_share"),
    ("api_server_cpu_cores", "API-server CPU use in cores (rate of process_cpu_seconds_total).",
     "cpu.api_server_cores"),
    ("cpu_starvation_score", "CPU-starvation score 0..1 from the available CPU inputs.",
     "cpu.starvation_score"),
    ("gpu_utilization_ratio", "GPU utilisation 0..1 from the DCGM source, mean over the window.",
     "gpu.utilization"),
    ("window_span_seconds", "Seconds of scrapes the window currently covers.", "window_seconds"),
)


# (objective label, quantile label, Slo attribute): what the generated alert rules divide by.
SLO_OBJECTIVES: tuple[tuple[str, str, str], ...] = (
    ("ttft", "0.95", "ttft_p95_seconds"),
    ("itl", "0.95", "itl_p95_seconds"),
)


def _labels(state: TargetState) -> tuple[list[str], list[str]]:
    return ["target", "model_name"], [state.target, state.model_name]


class DiagnosisCollector(Collector):
    """Yields the ``vllm_diag_*`` families for every target's current state."""

    def __init__(self, states: Callable[[], Mapping[str, TargetState]], settings: Settings | None = None) -> None:
        self._states = states
        self._settings = settings

    def describe(self) -> Iterable[Metric]:
        return list(self._families([]))

    def collect(self) -> Iterable[Metric]:
        return self._families(list(self._states().values()))

    def _families(self, states: list[TargetState]) -> Iterator[Metric]:
        up = GaugeMetricFamily(P + "up", "vllm-diag: 1 if the last scrape of the target succeeded.", labels=["target"])
        duration = GaugeMetricFamily(P + "scrape_duration_seconds", "vllm-diag: last scrape + parse time.",
                                     labels=["target"])
        errors = CounterMetricFamily(P + "scrape_errors", "vllm-diag: failed scrapes by reason.",
                                     labels=["target", "reason"])
        last_ok = GaugeMetricFamily(P + "last_success_timestamp_seconds", "vllm-diag: unix time of the last good scrape.",
                                    labels=["target"])
        dropped = CounterMetricFamily(P + "dropped_samples", "vllm-diag: samples dropped (NaN/Inf, cardinality cap).",
                                      labels=["target"])
        restarts = CounterMetricFamily(P + "target_restarts", "vllm-diag: vLLM restarts (counter resets) detected.",
                                       labels=["target"])
        ready = GaugeMetricFamily(P + "evidence_ready", "1 when the window holds enough data to diagnose.",
                                  labels=["target", "model_name"])
        evaluated = GaugeMetricFamily(P + "last_evaluation_timestamp_seconds", "Unix time of the last diagnosis.",
                                      labels=["target", "model_name"])
        kv = GaugeMetricFamily(P + "kv_cache_usage_ratio", "KV cache usage 0..1: latest, and max/mean over the window.",
                               labels=["target", "model_name", "stat"])
        sched = GaugeMetricFamily(P + "requests", "Running and waiting requests at the last scrape.",
                                  labels=["target", "model_name", "state"])
        latency = {
            family: GaugeMetricFamily(P + f"{family}_seconds", f"{title} quantiles over the window.",
                                      labels=["target", "model_name", "quantile"])
            for family, title in (("ttft", "Time to first token"), ("itl", "Inter-token latency"),
                                  ("e2e_latency", "End-to-end request latency"))
        }
        breakdown = GaugeMetricFamily(P + "ttft_breakdown_seconds",
                                      "Mean TTFT per request over the window, by phase (queue, prefill, frontend).",
                                      labels=["target", "model_name", "phase"])
        throughput = GaugeMetricFamily(P + "throughput_tokens_per_second", "Tokens per second over the window.",
                                       labels=["target", "model_name", "kind"])
        cpu_signal = GaugeMetricFamily(P + "cpu_signal", "Each input of the CPU-starvation score, raw value.",
                                       labels=["target", "model_name", "signal"])
        plain = {suffix: GaugeMetricFamily(P + suffix, help_text, labels=["target", "model_name"])
                 for suffix, help_text, _ in SIGNAL_GAUGES}
        layer_score = GaugeMetricFamily(P + "layer_score", "Bottleneck score 0..1 per layer.",
                                        labels=["target", "model_name", "layer"])
        verdict = GaugeMetricFamily(P + "layer_verdict", "One-hot verdict over the layers, none and unknown.",
                                    labels=["target", "model_name", "layer"])
        symptom = GaugeMetricFamily(P + "symptom_active",
                                    "1 while a symptom class (A-G) is active with a user-visible effect.",
                                    labels=["target", "model_name", "symptom"])
        cause = GaugeMetricFamily(P + "cause_active", "1 while a cause is active, with its symptom and layer.",
                                  labels=["target", "model_name", "cause", "symptom", "layer"])
        finding = GaugeMetricFamily(P + "informational_finding",
                                    "1 while a cause holds only as information (capacity, saturation within "
                                    "objectives, unshareable prompts): never a verdict or an alert.",
                                    labels=["target", "model_name", "cause", "symptom", "layer"])
        pending = GaugeMetricFamily(P + "verdict_pending",
                                    "1 while the hysteresis holds back a different verdict (label layer).",
                                    labels=["target", "model_name", "layer"])
        rule_errors = CounterMetricFamily(P + "rule_errors", "vllm-diag: rule evaluations that raised, by cause.",
                                          labels=["target", "cause"])
        source_errors = CounterMetricFamily(P + "source_errors",
                                            "vllm-diag: failed reads of an extra source (dcgm, hostcpu:*), by reason.",
                                            labels=["target", "source", "reason"])
        fact = GaugeMetricFamily(P + "engine_fact", "A numeric engine fact (booleans as 0/1) and where it came from.",
                                 labels=["target", "fact", "source"])
        fact_info = GaugeMetricFamily(P + "engine_fact_info", "A text engine fact as the value label (always 1).",
                                      labels=["target", "fact", "source", "value"])

        for state in states:
            t = [state.target]
            h = state.health
            up.add_metric(t, 1.0 if h.up else 0.0)
            if h.last_duration_seconds is not None:
                duration.add_metric(t, h.last_duration_seconds)
            for reason in SCRAPE_ERROR_REASONS:
                errors.add_metric([state.target, reason], float(h.errors_total.get(reason, 0)))
            if h.last_success_timestamp is not None:
                last_ok.add_metric(t, h.last_success_timestamp)
            dropped.add_metric(t, float(h.dropped_samples_total))
            restarts.add_metric(t, float(h.restarts_total))
            for name, known in state.engine.items():
                if isinstance(known.value, str):
                    fact_info.add_metric([state.target, name, known.source, known.value], 1.0)
                else:
                    fact.add_metric([state.target, name, known.source], float(known.value))

            _, tm = _labels(state)
            ready.add_metric(tm, 1.0 if state.status == "ok" else 0.0)
            evaluated.add_metric(tm, state.evaluated_at)
            d = state.diagnosis
            for layer in VERDICTS:
                verdict.add_metric(tm + [layer], 1.0 if d.verdict.layer == layer else 0.0)
            if state.status == "ok":
                for layer in LAYERS:
                    layer_score.add_metric(tm + [layer], d.layer_scores.get(layer, 0.0))
                active_symptoms = {s.id for s in d.active_symptoms}
                for s in SYMPTOMS:
                    symptom.add_metric(tm + [s.id], 1.0 if s.id in active_symptoms else 0.0)
                active_causes = {c.id for c in d.active_causes if not c.informational}
                info_causes = {c.id for c in d.active_causes if c.informational}
                for c in CAUSES:
                    cause.add_metric(tm + [c.id, c.symptom, c.layer], 1.0 if c.id in active_causes else 0.0)
                    finding.add_metric(tm + [c.id, c.symptom, c.layer], 1.0 if c.id in info_causes else 0.0)
                if d.verdict.pending is not None:
                    pending.add_metric(tm + [d.verdict.pending], 1.0)
            for cause_id, count in sorted(state.rule_errors_total.items()):
                rule_errors.add_metric([state.target, cause_id], float(count))
            for (source, reason), count in sorted(state.source_errors_total.items()):
                source_errors.add_metric([state.target, source, reason], float(count))
            sig = state.signals
            if sig is None or state.status == "down":
                continue
            for stat, value in (("latest", sig.kv.usage), ("max", sig.kv.usage_max),
                                ("mean", sig.kv.usage_mean)):
                if value is not None:
                    kv.add_metric(tm + [stat], value)
            queue = sig.scheduler
            for name, value in (("running", queue.running), ("waiting", queue.waiting),
                                ("waiting_capacity", queue.waiting_capacity),
                                ("waiting_deferred", queue.waiting_deferred)):
                if value is not None:
                    sched.add_metric(tm + [name], value)
            for family, source in (("ttft", sig.latency.ttft_quantiles), ("itl", sig.latency.itl_quantiles),
                                   ("e2e_latency", sig.latency.e2e_quantiles)):
                for q in QUANTILES:
                    if q in source:
                        latency[family].add_metric(tm + [f"{q:g}"], source[q])
            for phase, value in (("queue", sig.latency.queue_mean), ("prefill", sig.latency.prefill_mean),
                                 ("frontend", sig.latency.ttft_frontend_mean)):
                if value is not None:
                    breakdown.add_metric(tm + [phase], value)
            for kind, value in (("prompt", sig.traffic.prompt_tokens_per_second),
                                ("generation", sig.traffic.generation_tokens_per_second)):
                if value is not None:
                    throughput.add_metric(tm + [kind], value)
            for name, value in sorted(sig.cpu.inputs.items()):
                cpu_signal.add_metric(tm + [name], value)
            for suffix, _, attribute in SIGNAL_GAUGES:
                value = attrgetter(attribute)(sig)
                if value is not None:
                    plain[suffix].add_metric(tm, float(value))

        yield from self._objectives()
        yield from (up, duration, errors, last_ok, dropped, restarts, fact, fact_info, ready, evaluated, kv, sched,
                    *latency.values(), breakdown, throughput, cpu_signal, *plain.values(),
                    layer_score, verdict, symptom, cause, finding, pending, rule_errors, source_errors)

    def _objectives(self) -> Iterator[Metric]:
        """Per-target SLOs and scrape intervals from the configuration (constant while serving)."""
        slo = GaugeMetricFamily(P + "slo_seconds", "The objective the alert rules compare with, per target.",
                                labels=["target", "objective", "quantile"])
        interval = GaugeMetricFamily(P + "scrape_interval_seconds", "Configured scrape interval of the target.",
                                     labels=["target"])
        if self._settings is not None:
            for target in self._settings.targets:
                objectives = self._settings.slo_for(target)
                for objective, quantile, attribute in SLO_OBJECTIVES:
                    slo.add_metric([target.name, objective, quantile], getattr(objectives, attribute))
                interval.add_metric([target.name], target.scrape_interval)
        yield slo
        yield interval
