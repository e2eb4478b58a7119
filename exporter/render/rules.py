"""Prometheus alerting and recording rules, and the Alertmanager example, from the catalog.

Reads top-down: settings (with ``Options``, what `render rules --config/--sidecar-job/
--severity-labels` changes), recording rules (one `or` per vLLM naming generation), alerts
(symptom classes, root causes, operations, raw-series), the runbook-link post-processing step,
rendering. docs/alerting.md explains the choices and holds the measured alert matrix. Every
number in an expression comes from ``exporter.catalog.thresholds`` or ``exporter.config`` (the
test suite fails on any other comparison literal); ``for:`` durations and the rate window are
declared once below with the reason for their value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jinja2

from exporter.catalog.metrics import BY_NAME
from exporter.catalog.symptoms import CAUSE_BY_ID, CAUSES, SYMPTOMS, Cause, Symptom
from exporter.catalog.thresholds import DEFAULTS
from exporter.config import SLO_PERIOD_DAYS, Settings, Slo
from exporter.render import PromQL, fmt, slo

# ---------------------------------------------------------------------------------------------
# Settings (declared once; each says what it controls)
# ---------------------------------------------------------------------------------------------

ALERTS_FILE = "alert_rules/vllm-diag-alerts.yml"
RECORDING_FILE = "alert_rules/vllm-diag-recording.yml"
RAW_ALERTS_FILE = "alert_rules/vllm-diag-raw-alerts.yml"
ALERTMANAGER_FILE = "deploy/alertmanager/alertmanager.yml"

# Where runbook_url points: <base>/<alertname lowercased>.md. Change it when the docs are served
# elsewhere (a fork, an internal wiki mirror); the file names under docs/runbooks/ stay the same.
RUNBOOK_BASE_URL = "https://github.com/vllm-diag/vllm-diag/blob/main/docs/runbooks"
RUNBOOK_DIR = "docs/runbooks"

# Rate window of the recording rules: 5m spans >= 4 scrapes at Prometheus' common 15-60 s
# intervals, so rate() survives one missed scrape. It is part of the rule names (`:rate5m`).
RATE_WINDOW = "5m"

# Labels that tell one replica's alerts from another's: Kubernetes ServiceMonitors add namespace and
# pod, static configs add instance; `target` is the sidecar's name for the vLLM it watches (the pod
# name by default in deploy/kubernetes). Every join keeps them, and Alertmanager's inhibition
# `equal` and `group_by` include them, so one replica's alerts never silence or merge with another's.
# (A label absent on both sides compares equal in Alertmanager and in `on (...)`.)
IDENTITY: tuple[str, ...] = ("namespace", "pod", "instance", "job", "target")
INHIBIT_EQUAL: tuple[str, ...] = ("namespace", "pod", "instance", "target")
GROUP_BY: tuple[str, ...] = ("alertname", "namespace", "pod", "instance", "target", "model_name")

# Severities (kube-prometheus-stack / most routing trees): critical pages, warning tickets, info is
# context. `render rules --severity-labels critical=P1,...` renames them at render time.
SEVERITIES: tuple[str, ...] = ("critical", "warning", "info")

# `for:` durations. Chosen from the streaks measured on the simulator's scenarios (docs/alerting.md,
# tests/e2e/test_alert_matrix.py prints them): the smoothed symptom condition of each symptom's own
# scenario holds for 14-25 minutes without a break, its shortest streak on the scenarios expected to
# show the symptom is >= 8 minutes, and on the healthy-like scenarios it never holds at all. So `for:`
# only has to outlast evaluation jitter and short bursts, not the flapping of the raw 0/1 gauge.
FOR_SYMPTOM: Mapping[str, str] = {"critical": "5m", "warning": "5m", "info": "10m"}
# Root-cause alerts must reach Alertmanager before the symptom alerts they inhibit, or the symptoms
# are delivered first. Their conditions already average 5m, and on case 3 the CPU score's 5m average
# crosses 0.5 at 4.3 min while the symptoms' 10m share crosses 30 % at 1.5 min (both measured in
# the alert matrix): with `for: 1m` the root cause fires at 5.3 min, the symptoms (5m) at 6.5 min.
# They keep firing through a short dip so the symptoms they explain stay inhibited.
FOR_ROOT_CAUSE = "1m"
KEEP_FIRING_ROOT_CAUSE = "5m"
# Root-cause conditions read the sidecar's gauges smoothed over this range: preemptions come in
# bursts and the per-window ratio dips between them, which would reset `for` again and again.
SMOOTHING_RANGE = "5m"
SMOOTHING_SECONDS = 300
# A vLLM that was up and stops answering breaks serving: page sooner than a diagnosis does.
FOR_TARGET_DOWN = "3m"
# An outcome alert (SLO breach): sustained, not a burst.
FOR_SLO = "10m"
FOR_OPERATIONS = "10m"

# The Prometheus job that scrapes the sidecar itself (`render rules --sidecar-job NAME`). Exact: a
# Prometheus that loads these rules but scrapes no sidecar must not alert about one.
SIDECAR_JOB = "vllm-diag"

# vllm_diag_ttft_seconds / _itl_seconds expose 0.5, 0.95, 0.99 (exporter.signals.QUANTILES); the SLO
# is a p95 objective (vllm_diag_slo_seconds{quantile="0.95"}), so the rules compare the p95.
SLO_QUANTILE = "0.95"


def duration(seconds: float) -> str:
    """Seconds as a Prometheus duration: 900 -> 15m, 90 -> 90s."""
    seconds = int(round(seconds))
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True, slots=True)
class Options:
    """What a deployment may change at render time (`vllm-diag render rules --config FILE ...`)."""

    slo: Slo = Slo()
    thresholds: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULTS))
    sidecar_job: str = SIDECAR_JOB
    severity_labels: Mapping[str, str] = field(default_factory=lambda: {s: s for s in SEVERITIES})

    @classmethod
    def from_settings(cls, settings: Settings, **extra: Any) -> Options:
        return cls(slo=settings.slo, thresholds=settings.resolved_thresholds().as_dict(), **extra)

    def severity(self, name: str) -> str:
        return self.severity_labels[name]


DEFAULT_OPTIONS = Options()
T = DEFAULTS  # catalog threshold defaults by key (runbook texts read the defaults)


def _on(*extra: str) -> str:
    return f"on ({', '.join((*IDENTITY, *extra))})"


# ---------------------------------------------------------------------------------------------
# Recording rules (for users without the sidecar: the core signals straight from vLLM)
# ---------------------------------------------------------------------------------------------

# Recording rules aggregate the data-parallel engines of one vLLM away and keep everything else
# (namespace, pod, instance, job, model_name): one series per replica, so dashboards filter them by
# the selected target and raw-series alerts name the replica. Sum again for a fleet view.
RAW = PromQL(without=("engine",))


@dataclass(frozen=True, slots=True)
class Recording:
    record: str
    expr: str
    help: str  # rendered as a comment above the rule and used in the runbooks/dashboards
    labels: Mapping[str, str] = field(default_factory=dict)


def frontend_overhead(q: PromQL, window: str) -> str:
    """mean(e2e) - mean(queue) - mean(inference), clamped at 0: per-request time outside the engine.

    The three means come from different histograms whose buckets close at slightly different times,
    so the difference can dip below zero; negative time outside the engine is meaningless.
    """
    diff = "\n-\n".join(f"({q.mean(h, window)})" for h in (
        "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds"))
    return f"clamp_min(\n{diff},\n0)"


def generations(build: Callable[[Callable[[str], str]], str], *families: str) -> str:
    """``build`` once per vLLM naming generation, joined with ``or`` (newest first).

    ``build`` receives a function mapping a canonical family name to its wire name in that
    generation (exporter.catalog.metrics aliases, newest first). vLLM 0.9.2-0.11 exports both names;
    ``or`` keeps the newest where both exist, so nothing is counted twice.
    """
    depth = max(len(BY_NAME[f].aliases) for f in families)
    variants = []
    for rank in range(depth + 1):
        def wire(name: str, rank: int = rank) -> str:
            names = (name, *BY_NAME[name].aliases) if name in BY_NAME else (name,)
            return names[min(rank, len(names) - 1)]
        variants.append(build(wire))
    return "\nor\n".join(f"(\n{v}\n)" if len(variants) > 1 else v for v in dict.fromkeys(variants))


def sli_recording_rules(o: Options = DEFAULT_OPTIONS) -> list[Recording]:
    """The objectives as constants, then per window: per-replica events and bad events per objective,
    their per-model sums, and the burn rates of both (exporter.render.slo explains the method)."""
    out = [Recording(slo.ERROR_BUDGET_RECORD, f"vector({fmt(slo.error_budget(obj, o.slo))})",
                     f"Error budget of the {slo.OBJECTIVE_TITLE[obj]} objective (1 - target "
                     f"{fmt(slo.target(obj, o.slo))}) over {SLO_PERIOD_DAYS} days, rendered from the configuration.",
                     {"objective": obj})
           for obj in slo.OBJECTIVES]
    out += [Recording(slo.THRESHOLD_RECORD, f"vector({fmt(objective.threshold_seconds)})",
                      f"Threshold of the {slo.OBJECTIVE_TITLE[name]} objective (a bucket edge of vLLM's histogram).",
                      {"objective": name}) for name, objective in o.slo.objectives().items()]
    for w in slo.SLI_WINDOWS:
        for obj in slo.OBJECTIVES:
            out.append(Recording(slo.pod_events(w), slo.events(obj, w),
                                 f"{slo.OBJECTIVE_TITLE[obj]} SLI: events per second over {w}, per replica.",
                                 {"objective": obj}))
            out.append(Recording(slo.pod_bad_events(w), slo.bad_events(obj, o.slo, w),
                                 f"{slo.OBJECTIVE_TITLE[obj]} SLI: bad events per second over {w}, per replica.",
                                 {"objective": obj}))
        out += [
            Recording(slo.model_events(w), slo.model_sum(slo.pod_events(w)),
                      f"SLI events per second over {w}, per model (all replicas)."),
            Recording(slo.model_bad_events(w), slo.model_sum(slo.pod_bad_events(w)),
                      f"SLI bad events per second over {w}, per model (all replicas)."),
            Recording(slo.pod_burn(w), slo.burn(slo.pod_bad_events(w), slo.pod_events(w)),
                      f"Error-budget burn rate over {w}, per replica (1 = the budget lasts the period)."),
            Recording(slo.model_burn(w), slo.burn(slo.model_bad_events(w), slo.model_events(w)),
                      f"Error-budget burn rate over {w}, per model (1 = the budget lasts the period)."),
        ]
    return out


def recording_rules() -> list[Recording]:
    w = RATE_WINDOW
    finished = RAW.sum_rate("vllm:request_success_total", w, drop=("finished_reason",))
    kv, hits, queries = "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
    itl = "vllm:inter_token_latency_seconds"
    return [
        Recording(f"model:vllm_preemptions:rate{w}", RAW.sum_rate("vllm:num_preemptions_total", w),
                  "Preemptions per second."),
        Recording(f"model:vllm_requests_finished:rate{w}", finished,
                  "Finished requests per second, all finished_reason values (client aborts are not counted by vLLM)."),
        Recording(f"model:vllm_preemptions_per_request:ratio_rate{w}",
                  RAW.divide(RAW.sum_rate("vllm:num_preemptions_total", w), finished),
                  "Preemptions per finished request (symptom D reads this)."),
        Recording(f"model:vllm_prefix_cache_hit:ratio_rate{w}",
                  generations(lambda n: RAW.ratio(n(hits), n(queries), w), hits, queries),
                  "Prefix-cache hit efficiency: cached / queried prompt tokens (symptom F); "
                  "vLLM <= 0.9 names: gpu_prefix_cache_*."),
        Recording("model:vllm_kv_cache_usage:max", generations(lambda n: RAW.agg("max", n(kv)), kv),
                  "Highest KV cache usage (0..1) across the model's engines and replicas; "
                  "vLLM <= 0.9 name: gpu_cache_usage_perc."),
        Recording(f"model:vllm_ttft_seconds:p95_rate{w}",
                  RAW.quantile(0.95, "vllm:time_to_first_token_seconds", w), "TTFT p95 (the SLO quantile)."),
        Recording(f"model:vllm_ttft_seconds:p99_rate{w}",
                  RAW.quantile(0.99, "vllm:time_to_first_token_seconds", w), "TTFT p99 (tail latency)."),
        Recording(f"model:vllm_itl_seconds:p95_rate{w}",
                  generations(lambda n: RAW.quantile(0.95, n(itl), w), itl),
                  "Inter-token latency p95 (the SLO quantile); vLLM <= 0.10 name: time_per_output_token_seconds."),
        Recording(f"model:vllm_requests_waiting:deriv{w}",
                  f"sum {RAW._without()} (deriv(vllm:num_requests_waiting[{w}]))",
                  "Queue growth: waiting requests added per second (positive = the queue builds up)."),
        Recording(f"model:vllm_frontend_overhead_seconds:mean_rate{w}",
                  frontend_overhead(RAW, w),
                  "Mean time per request outside the engine: e2e - queue - inference, clamped at 0 (tokenization, "
                  "templates, IPC, output handling; the CPU path)."),
    ]


# ---------------------------------------------------------------------------------------------
# Alerts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verify:
    """A query for the runbook's "how to verify" section."""

    what: str
    expr: str


@dataclass(frozen=True, slots=True)
class Mitigation:
    """An immediate mitigation (no engine restart) with what it costs."""

    what: str
    cost: str


_SCALE_OUT = Mitigation("scale out: add a replica (HPA max, `kubectl scale`), or move traffic to another pool",
                        "cost of the extra replica; it needs the model load time before it helps")
_SHED = Mitigation("shed load at the gateway: lower the rate limit or the concurrency cap for this pool, reject "
                   "batch/offline clients first", "rejected or delayed requests for the clients shed")
_CAP_TOKENS = Mitigation("cap max_tokens at the gateway (or in the client defaults) for requests that leave it unset",
                         "long answers are truncated")
_ROUTE_LONG = Mitigation("route long-context requests (large prompts) to a separate pool or replica",
                         "needs a second pool; the long requests may wait longer there")
_SPLIT_BATCH = Mitigation("move offline/batch traffic off the interactive pool (or pause it)",
                          "batch jobs finish later")
_FREE_CPU = Mitigation("move noisy neighbours off the node (cordon + evict the CPU-heavy pods) or raise the "
                       "pod's CPU limit in place where the cluster allows it", "other workloads move or get less CPU")
_NO_MITIGATION = Mitigation("nothing urgent: no user-visible effect yet; schedule the knob change below",
                            "none")
_ROLL_BACK = Mitigation("if it began with a rollout (new image, driver, quantised checkpoint, --enforce-eager), "
                        "roll back to the last good version", "loses whatever the rollout brought")
_ROUTE_PREFIX = Mitigation("route requests by prefix at the load balancer (session/prefix affinity) where it "
                           "supports it", "uneven load across replicas")
# Immediate mitigations per cause: what buys time before a knob change and a restart.
IMMEDIATE_BY_CAUSE: Mapping[str, tuple[Mitigation, ...]] = {
    "A1": (_ROUTE_LONG, _SCALE_OUT), "A2": (_SCALE_OUT, _SHED), "A3": (_FREE_CPU, _SCALE_OUT),
    "A4": (_ROUTE_LONG, _SCALE_OUT), "A5": (_NO_MITIGATION,),
    "B1": (_SPLIT_BATCH, _ROUTE_LONG), "B2": (_SPLIT_BATCH, _ROUTE_LONG), "B3": (_SHED, _SCALE_OUT),
    "B4": (_ROLL_BACK, _SCALE_OUT),
    "C1": (_FREE_CPU, _SCALE_OUT), "C2": (_NO_MITIGATION,), "C3": (_CAP_TOKENS, _SHED, _SCALE_OUT),
    "D": (_CAP_TOKENS, _SHED, _SCALE_OUT, _ROUTE_LONG), "E": (_CAP_TOKENS, _SCALE_OUT),
    "F": (_NO_MITIGATION,), "F6": (_ROUTE_PREFIX, _SCALE_OUT), "G": (_SCALE_OUT,),
}


def cause_mitigations(causes: Sequence[Cause]) -> tuple[tuple[str, Mitigation], ...]:
    """(when, mitigation) rows: each cause's immediate mitigations, labelled with the cause."""
    return tuple((f"{c.id}: {c.title}", m) for c in causes for m in IMMEDIATE_BY_CAUSE[c.id])


def always(*items: Mitigation) -> tuple[tuple[str, Mitigation], ...]:
    return tuple(("any cause", m) for m in items)


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    expr: str
    severity: str
    symptom: str  # A-G, or "none" for alerts that are not a symptom class
    layer: str  # a catalog layer, or "unknown" when the alert does not attribute one
    summary: str  # static
    description: str  # Go template: {{ $value }}, {{ $labels.target }}
    meaning: str  # runbook: what it means
    causes: tuple[Cause, ...] = ()
    verify: tuple[Verify, ...] = ()
    action: str = ""  # when empty, derived from the causes' catalog actions
    tradeoff: str = ""
    for_: str = ""
    keep_firing_for: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)  # extra/overrides, e.g. runbook_url
    # Runbook: what on-call can do right now, without a restart (before the knobs that need one).
    mitigations: tuple[tuple[str, Mitigation], ...] = ()  # (when: a cause, or "any cause"; mitigation)
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def duration(self) -> str:
        return self.for_ or FOR_SYMPTOM[self.severity]

    def actions_text(self) -> tuple[str, str]:
        """(action, tradeoff) annotations from the catalog.

        One cause: all its actions, each with its cost. Several: each cause's first (primary)
        action, prefixed with the cause id; the runbook lists the rest.
        """
        if self.action:
            return self.action, self.tradeoff
        if len(self.causes) == 1:
            acts = self.causes[0].actions
            return "; ".join(a.action for a in acts), "; ".join(f"{a.action}: {a.cost}" for a in acts)
        firsts = [(c.id, c.actions[0]) for c in self.causes]
        return (" | ".join(f"{cid}: {a.action}" for cid, a in firsts),
                " | ".join(f"{cid}: {a.cost}" for cid, a in firsts))


def _causes_of(symptom: str) -> tuple[Cause, ...]:
    return tuple(c for c in CAUSES if c.symptom == symptom)


# Verification queries per symptom class: the sidecar's view, then the raw vLLM series behind it.
_W = RATE_WINDOW
SYMPTOM_VERIFY: Mapping[str, tuple[Verify, ...]] = {
    "A": (
        Verify("TTFT quantiles over the sidecar window", "vllm_diag_ttft_seconds"),
        Verify("where the first token's time goes (queue, prefill, frontend)", "vllm_diag_ttft_breakdown_seconds"),
        Verify("raw TTFT p95", RAW.quantile(0.95, "vllm:time_to_first_token_seconds", _W)),
        Verify("raw mean queue time", RAW.mean("vllm:request_queue_time_seconds", _W)),
        Verify("raw mean prompt length (tokens)", RAW.mean("vllm:request_prompt_tokens", _W)),
    ),
    "B": (
        Verify("ITL quantiles (p99 over p50 = stutter)", "vllm_diag_itl_seconds"),
        Verify("prompt share of computed tokens", "vllm_diag_prefill_token_share"),
        Verify("raw ITL p95", RAW.quantile(0.95, "vllm:inter_token_latency_seconds", _W)),
        Verify("running requests", RAW.agg("sum", "vllm:num_requests_running")),
    ),
    "C": (
        Verify("throughput", "vllm_diag_throughput_tokens_per_second"),
        Verify("running and waiting requests", "vllm_diag_requests"),
        Verify("CPU-starvation score and its inputs", "vllm_diag_cpu_starvation_score"),
        Verify("raw generation tokens per second", RAW.sum_rate("vllm:generation_tokens_total", _W)),
    ),
    "D": (
        Verify("preemptions per finished request", "vllm_diag_preemptions_per_request"),
        Verify("KV usage (latest, window max and mean)", "vllm_diag_kv_cache_usage_ratio"),
        Verify("raw preemptions per second", RAW.sum_rate("vllm:num_preemptions_total", _W)),
        Verify("raw requests waiting for capacity", RAW.agg("sum", "vllm:num_requests_waiting_by_reason",
                                                               'reason="capacity"')),
    ),
    "E": (
        Verify("KV usage (latest, window max and mean)", "vllm_diag_kv_cache_usage_ratio"),
        Verify("raw KV usage", RAW.agg("max", "vllm:kv_cache_usage_perc")),
        Verify("raw preemptions per second (still rare for E)", RAW.sum_rate("vllm:num_preemptions_total", _W)),
    ),
    "F": (
        Verify("prefix-cache hit ratio", "vllm_diag_prefix_cache_hit_ratio"),
        Verify("raw hit ratio", RAW.ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", _W)),
        Verify("raw mean prompt length (tokens)", RAW.mean("vllm:request_prompt_tokens", _W)),
        Verify("KV usage: full means eviction (F6), room means prompts differ (F)", "vllm_diag_kv_cache_usage_ratio"),
    ),
    "G": (
        Verify("ITL quantiles", "vllm_diag_itl_seconds"),
        Verify("KV usage (low = memory to spare)", "vllm_diag_kv_cache_usage_ratio"),
        Verify("distributed layer score", 'vllm_diag_layer_score{layer="distributed"}'),
    ),
}


def symptom_condition(symptom: str, o: Options = DEFAULT_OPTIONS) -> str:
    """The share of the smoothing range a symptom was active: the raw 0/1 gauge flaps with bursty
    traffic, its average over minutes does not."""
    rng = duration(o.thresholds["alert_smoothing_seconds"])
    return (f'avg_over_time(vllm_diag_symptom_active{{symptom="{symptom}"}}[{rng}])\n'
            f'>= {fmt(o.thresholds["alert_symptom_active_share"])}')


def symptom_alert(s: Symptom, o: Options = DEFAULT_OPTIONS) -> Alert:
    causes = _causes_of(s.id)
    layers = ", ".join(dict.fromkeys(f"{c.id} {c.layer}" for c in causes))
    share, rng = o.thresholds["alert_symptom_active_share"], duration(o.thresholds["alert_smoothing_seconds"])
    return Alert(
        name=s.alert,
        expr=symptom_condition(s.id, o),
        severity=s.severity,
        symptom=s.id,
        # The layer of the cause that is active decides; the alert cannot know it statically.
        layer="see_cause" if len({c.layer for c in causes}) > 1 else causes[0].layer,
        summary=f"vLLM symptom {s.id}: {s.title}.",
        description=(f"Symptom {s.id} ({s.title}) was active {{{{ $value | humanizePercentage }}}} of the last "
                     f"{rng} on {{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}). Possible causes: "
                     f"{layers}. Active now: {{{{ range query "
                     f"(printf \"vllm_diag_cause_active{{target=%q,symptom=\\\"{s.id}\\\"}} == 1\" "
                     f"$labels.target) }}}}{{{{ .Labels.cause }}}} ({{{{ .Labels.layer }}}}) {{{{ end }}}}."),
        meaning=(f"The sidecar's diagnosis reported symptom class {s.id}, \"{s.title}\", in at least "
                 f"{fmt(share * 100)}% of its evaluations over the last {rng}, for longer than "
                 f"{FOR_SYMPTOM[s.severity]}. The `layer` label is `see_cause` when the causes sit in different "
                 "layers: vllm_diag_cause_active names the cause and its layer."),
        causes=causes,
        verify=(Verify("active causes and their layers", f'vllm_diag_cause_active{{symptom="{s.id}"}} == 1'),
                *SYMPTOM_VERIFY[s.id]),
        mitigations=cause_mitigations(causes),
    )


def slo_ratio(o: Options = DEFAULT_OPTIONS) -> str:
    """Smoothed p95 over the target's own objective (vllm_diag_slo_seconds), per objective: > 1 breaches."""
    q, rng = SLO_QUANTILE, SMOOTHING_RANGE
    return (f'(\n  label_replace(avg_over_time(vllm_diag_ttft_seconds{{quantile="{q}"}}[{rng}]), '
            f'"objective", "ttft", "", "")\n  or\n'
            f'  label_replace(avg_over_time(vllm_diag_itl_seconds{{quantile="{q}"}}[{rng}]), '
            f'"objective", "itl", "", "")\n)\n'
            f"/ ignoring (model_name) group_left\nvllm_diag_slo_seconds")


def enough_requests(o: Options = DEFAULT_OPTIONS) -> str:
    """Enough finished requests in the smoothing range for a p95 to mean something."""
    return (f"avg_over_time(vllm_diag_requests_per_second[{SMOOTHING_RANGE}]) * {SMOOTHING_SECONDS}\n"
            f">= {fmt(o.thresholds['slo_min_requests'])}")


def slo_breach(o: Options = DEFAULT_OPTIONS) -> str:
    """One series per target and model while any objective is breached with enough requests."""
    return (f"max by ({', '.join((*IDENTITY, 'model_name'))}) (\n{_indent(slo_ratio(o))}\n  > 1\n)\n"
            f"and {_on('model_name')}\n{enough_requests(o)}")


def cpu_evidence(o: Options = DEFAULT_OPTIONS) -> str:
    """Host-side CPU evidence (run-queue wait, CFS throttling, PSI), each above the level that means contention."""
    t = o.thresholds
    parts = [(sig, t[key]) for sig, key in (("run_queue_wait_share", "cpu_wait_share_floor"),
                                             ("cfs_throttled_share", "cpu_evidence_throttled_share"),
                                             ("psi_some_share", "cpu_evidence_psi_share"))]
    inner = "\n  or\n".join(f'  avg_over_time(vllm_diag_cpu_signal{{signal="{sig}"}}[{SMOOTHING_RANGE}]) > {fmt(v)}'
                            for sig, v in parts)
    return f"max by ({', '.join((*IDENTITY, 'model_name'))}) (\n{inner}\n)"


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _cpu_alert(o: Options, *, with_evidence: bool) -> Alert:
    cpu = o.thresholds["cpu_starvation_score"]
    base = (f"avg_over_time(vllm_diag_cpu_starvation_score[{SMOOTHING_RANGE}]) >= {fmt(cpu)}\n"
            f"and {_on('model_name')}\n"
            f"avg_over_time(vllm_diag_requests_per_second[{SMOOTHING_RANGE}]) >= "
            f"{fmt(o.thresholds['traffic_min_requests_per_second'])}")
    gate = "and" if with_evidence else "unless"
    expr = f"(\n{_indent(base)}\n)\n{gate} {_on('model_name')}\n{cpu_evidence(o)}"
    cpu_causes = tuple(c for c in CAUSES if c.layer == "cpu")
    verify = (Verify("the score", "vllm_diag_cpu_starvation_score"),
              Verify("each input of the score (host evidence: run_queue_wait_share, cfs_throttled_share, "
                     "psi_some_share)", "vllm_diag_cpu_signal"),
              Verify("API-server CPU in cores", "vllm_diag_api_server_cpu_cores"),
              Verify("raw frontend overhead per request (e2e - queue - inference)",
                     frontend_overhead(RAW, RATE_WINDOW)))
    if with_evidence:
        return Alert(
            name="VLLMCPUStarvation", expr=expr, severity="critical", symptom="C", layer="cpu",
            for_=FOR_ROOT_CAUSE, keep_firing_for=KEEP_FIRING_ROOT_CAUSE,
            summary="vLLM's processes are short of CPU: the engine loop or the frontend stalls.",
            description=(f"CPU-starvation score of {{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}) "
                         f"is {{{{ $value | printf \"%.2f\" }}}} (threshold {fmt(cpu)}) with host evidence (run-queue "
                         "wait, CFS throttling or CPU PSI) while it serves traffic."),
            meaning=("Root cause, not a symptom: the CPU layer holds vLLM back. The score combines run-queue wait "
                     "of the vLLM threads, cgroup throttling, CPU PSI and the frontend's share of request time, "
                     f"whichever are available (vllm_diag_cpu_signal). It pages only when the score is at "
                     f"{fmt(cpu)} or more, the target serves traffic, and at least one host input (run-queue wait "
                     f"> {fmt(o.thresholds['cpu_wait_share_floor'])}, throttled share > "
                     f"{fmt(o.thresholds['cpu_evidence_throttled_share'])}, PSI > "
                     f"{fmt(o.thresholds['cpu_evidence_psi_share'])}) confirms it; without host evidence "
                     "VLLMCPUStarvationSuspected (warning) fires instead."),
            causes=cpu_causes, verify=verify, mitigations=cause_mitigations(cpu_causes))
    return Alert(
        name="VLLMCPUStarvationSuspected", expr=expr, severity="warning", symptom="C", layer="cpu",
        for_=FOR_ROOT_CAUSE, keep_firing_for=KEEP_FIRING_ROOT_CAUSE,
        summary="vLLM looks short of CPU, from request timings only (no host CPU evidence).",
        description=(f"CPU-starvation score of {{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}) is "
                     f"{{{{ $value | printf \"%.2f\" }}}} (threshold {fmt(cpu)}) from proxies only (frontend share of "
                     "request time, API-server CPU): no run-queue, throttling or PSI input confirms it."),
        meaning=("The CPU-starvation score is high while the target serves traffic, but the only inputs are "
                 "proxies from vLLM's own metrics (time outside the engine, API-server CPU): a slow tokenizer or "
                 "chat template reads the same. A warning, not a page; configure a CPU source on the target "
                 "(`cpu: {match: \"vllm serve\"}`, same PID namespace) so the sidecar can confirm it."),
        causes=cpu_causes, verify=verify, mitigations=cause_mitigations(cpu_causes))


def root_cause_alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    t = o.thresholds
    ppr, kv_high, rate_min = t["preemptions_per_request"], t["kv_usage_high"], t["kv_page_preemption_rate"]
    shortage = (f"avg_over_time(vllm_diag_preemptions_per_request[{SMOOTHING_RANGE}]) > {fmt(ppr)}\n"
                f"and {_on('model_name')}\n"
                f'max_over_time(vllm_diag_kv_cache_usage_ratio{{stat="max"}}[{SMOOTHING_RANGE}]) > {fmt(kv_high)}')
    impact = (f"avg_over_time(vllm_diag_preemption_rate[{SMOOTHING_RANGE}]) >= {fmt(rate_min)}\n"
              f"or {_on('model_name')}\n{slo_breach(o)}")
    return [
        Alert(
            name="VLLMKVCachePressure",
            expr=f"(\n{_indent(shortage)}\n)\nand {_on('model_name')}\n(\n{_indent(impact)}\n)",
            severity="critical", symptom="D", layer="kv_cache",
            for_=FOR_ROOT_CAUSE, keep_firing_for=KEEP_FIRING_ROOT_CAUSE,
            summary="vLLM is short of KV cache: requests are preempted and recomputed, and users notice.",
            description=(f"{{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}) preempts "
                         f"{{{{ $value | printf \"%.2f\" }}}} times per finished request "
                         f"(threshold {fmt(ppr)}) while KV usage peaked above {fmt(kv_high)}, "
                         f"with at least {fmt(rate_min)} preemptions/s or a latency SLO breached: "
                         "latency rises and GPU work is wasted."),
            meaning=("Root cause, not a symptom: KV cache space is the bottleneck. Preemption is frequent "
                     f"(over {fmt(ppr)} per finished request) and KV usage reached {fmt(kv_high)} in the same "
                     f"{SMOOTHING_RANGE}. It pages only with user impact: at least {fmt(rate_min)} preemptions per "
                     "second, or a TTFT/ITL p95 above the target's objective (vllm_diag_slo_seconds) with at "
                     f"least {fmt(t['slo_min_requests'])} requests in the range. The same shortage also caps "
                     f"concurrency (cause C3, {CAUSE_BY_ID['C3'].title.lower()})."),
            causes=(CAUSE_BY_ID["D"],),
            verify=(*SYMPTOM_VERIFY["D"], Verify("SLO ratio per objective (> 1 breaches)", slo_ratio(o))),
            mitigations=cause_mitigations((CAUSE_BY_ID["D"],)),
        ),
        _cpu_alert(o, with_evidence=True),
        _cpu_alert(o, with_evidence=False),
    ]


def ops_alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    t = o.thresholds
    sidecar_up = f'up{{job="{o.sidecar_job}"}}'
    grace = duration(t["target_startup_grace_seconds"])
    stale_n = t["stale_after_intervals"]
    down_verify = (Verify("scrape state", "vllm_diag_up"),
                   Verify("failed scrapes by reason", "rate(vllm_diag_scrape_errors_total[5m]) > 0"),
                   Verify("seconds since the last good scrape", "time() - vllm_diag_last_success_timestamp_seconds"))
    return [
        Alert(
            name="VLLMLatencyAboveSLO",
            expr=f"{slo_ratio(o)}\n> 1\nand {_on('model_name')}\n{enough_requests(o)}",
            severity="warning", symptom="none", layer="unknown", for_=FOR_SLO,
            summary="vLLM latency p95 is above the deployment's objective.",
            description=(f"{{{{ $labels.objective | toUpper }}}} p95 of {{{{ $labels.target }}}} (model "
                         f"{{{{ $labels.model_name }}}}) has been {{{{ $value | printf \"%.2f\" }}}} "
                         "times its objective (vllm_diag_slo_seconds) on average over "
                         f"{SMOOTHING_RANGE}, with enough requests to trust the quantile."),
            meaning=("An outcome, not a layer: the TTFT or ITL p95 (label `objective`) averaged over "
                     f"{SMOOTHING_RANGE} exceeds the objective configured for this target (`slo`, or `targets[].slo`, "
                     "exported as vllm_diag_slo_seconds), while at least "
                     f"{fmt(t['slo_min_requests'])} requests finished in that range. The symptom and root-cause "
                     "alerts (or vllm_diag_layer_verdict) say where it comes from; a root-cause page inhibits it."),
            verify=(Verify("SLO ratio per objective (> 1 breaches)", slo_ratio(o)),
                    Verify("the objectives", "vllm_diag_slo_seconds"),
                    Verify("raw TTFT p95", RAW.quantile(0.95, "vllm:time_to_first_token_seconds", RATE_WINDOW)),
                    Verify("current verdict layer", "vllm_diag_layer_verdict == 1"),
                    Verify("active symptoms", "vllm_diag_symptom_active == 1")),
            action="follow the active symptom or root-cause alert's runbook (vllm_diag_layer_verdict names the layer)",
            tradeoff="depends on the cause; every knob trades TTFT against ITL, throughput or memory",
            mitigations=always(_SCALE_OUT, _SHED, _CAP_TOKENS),
        ),
        Alert(
            name="VLLMTargetDown",
            expr=f"vllm_diag_up == 0\nand {_on()}\nvllm_diag_last_success_timestamp_seconds",
            severity="critical", symptom="none", layer="unknown", for_=FOR_TARGET_DOWN,
            summary="A vLLM that was serving stopped answering its /metrics.",
            description=("vllm-diag scraped {{ $labels.target }} successfully before and now fails; "
                         "vllm_diag_up is {{ $value }}. The engine is down, hung or unreachable, and its "
                         "diagnosis is suspended."),
            meaning=("The target was up since the sidecar started (vllm_diag_last_success_timestamp_seconds "
                     "exists) and its last scrapes failed (timeout, HTTP error, connection refused, unparsable or "
                     "too large). Serving is probably broken, and the alerts it inhibits would only repeat stale "
                     "evidence. A target that has never been up is VLLMTargetNeverUp, after the startup grace."),
            verify=down_verify,
            action="check the vLLM process/pod (logs, OOM kills, restarts) and that the target URL is reachable "
                   "from the sidecar",
            tradeoff="none: restoring the engine has no downside; a restart drops in-flight requests",
            mitigations=always(Mitigation("move traffic away from this replica (remove it from the load balancer) "
                                          "until it answers", "less capacity meanwhile")),
        ),
        Alert(
            name="VLLMTargetNeverUp",
            expr=f"vllm_diag_up == 0\nunless {_on()}\nvllm_diag_last_success_timestamp_seconds",
            severity="critical", symptom="none", layer="unknown", for_=grace,
            summary="A vLLM target has not come up within the startup grace.",
            description=("vllm-diag has not scraped {{ $labels.target }} once since it started, for longer than "
                         f"the {grace} startup grace (vllm_diag_up {{{{ $value }}}}): "
                         "the model load hangs, crashes or the URL is wrong."),
            meaning=("The sidecar (or its pod) started and the target has never answered since. Model loads take "
                     f"minutes, so this waits `target_startup_grace_seconds` ({grace}, the deployment's "
                     "startupProbe budget) before paging: a rollout never pages while replicas load."),
            verify=down_verify,
            action="check the vLLM container's logs (download, OOM at load, CUDA errors) and the target URL",
            tradeoff="none",
            mitigations=always(Mitigation("roll back the rollout (`kubectl rollout undo`) if the new version does "
                                          "not load", "back to the previous version")),
        ),
        Alert(
            name="VLLMDiagSidecarDown",
            expr=(f"{sidecar_up} == 0\nor\n(\n  absent({sidecar_up})\n  and on ()\n"
                  f"  count(max_over_time(vllm_diag_up[1h])) > 0\n)"),
            severity="warning", symptom="none", layer="unknown", for_=FOR_OPERATIONS,
            summary="Prometheus cannot scrape the vllm-diag sidecar.",
            description=("{{ if $labels.instance }}The vllm-diag sidecar {{ $labels.instance }} "
                         "(job {{ $labels.job }}) is down"
                         "{{ else }}The vllm-diag job has vanished from Prometheus' targets{{ end }} "
                         "(value {{ $value }}): no diagnosis alert can fire while it is gone."),
            meaning=(f"Prometheus' job `{o.sidecar_job}` (set with `vllm-diag render rules --sidecar-job NAME`) "
                     "either has an instance that is down (`up == 0`, one alert per instance), or has vanished "
                     "although sidecar metrics were stored within the last hour (discovery lost it, the "
                     "ServiceMonitor was deleted). A Prometheus that never scraped a sidecar does not fire it. "
                     "Serving may be fine; the diagnosis alerts are blind."),
            verify=(Verify("sidecar scrape state", sidecar_up),),
            action="check the sidecar container (logs, restarts) and the Prometheus scrape config / ServiceMonitor",
            tradeoff="none",
        ),
        Alert(
            name="VLLMDiagnosisStale",
            expr=("timestamp(vllm_diag_last_evaluation_timestamp_seconds)\n"
                  "- vllm_diag_last_evaluation_timestamp_seconds\n"
                  f"> ignoring (model_name) group_left\n{fmt(stale_n)} * vllm_diag_scrape_interval_seconds"),
            severity="warning", symptom="none", layer="unknown", for_=FOR_OPERATIONS,
            summary="The vllm-diag diagnosis has stopped updating.",
            description=("When Prometheus last scraped it, the diagnosis of {{ $labels.target }} (model "
                         "{{ $labels.model_name }}) was {{ $value | humanizeDuration }} old, more than "
                         f"{fmt(stale_n)} of its scrape intervals: the published verdict is stale."),
            meaning=("The sidecar evaluates each target on every scrape, failed ones included, so a diagnosis "
                     f"older than {fmt(stale_n)} scrape intervals (vllm_diag_scrape_interval_seconds, per target) at "
                     "the moment Prometheus scraped it means the polling loop is wedged while the HTTP endpoint "
                     "still answers. Measured at scrape time, so Prometheus' own scrape interval does not count."),
            verify=(Verify("age of the diagnosis at scrape time",
                           "timestamp(vllm_diag_last_evaluation_timestamp_seconds) - "
                           "vllm_diag_last_evaluation_timestamp_seconds"),
                    Verify("scrape duration", "vllm_diag_scrape_duration_seconds")),
            action="restart the sidecar and report the hang with its logs",
            tradeoff="none: a restart empties the window, so the diagnosis reads insufficient_evidence for one window",
        ),
    ]


def raw_alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    """Alerts on the recording rules alone, for fleets without the sidecar. The objectives are rendered
    in (`vllm-diag render rules --config FILE` takes the deployment's `slo`): raw series carry none."""
    w = RATE_WINDOW
    rps = f"model:vllm_requests_finished:rate{w}"
    # `unless`: replicas a sidecar watches alert through VLLMLatencyAboveSLO with their own
    # objectives; these rules cover the rest, never both. A sidecar's target is its pod's name (the
    # downward API default), so the sidecar's `target` label names the vLLM pod it watches, whether
    # the sidecar runs in that pod or watches it from elsewhere.
    gate = (f"and ignoring (le)\n{rps} * {SMOOTHING_SECONDS} >= {fmt(o.thresholds['slo_min_requests'])}\n"
            'unless on (namespace, pod)\nlabel_replace(vllm_diag_up, "pod", "$1", "target", "(.+)")')
    out = []
    for name, record, objective, threshold in (
            ("VLLMRawTTFTAboveSLO", f"model:vllm_ttft_seconds:p95_rate{w}", "TTFT", o.slo.ttft.threshold_seconds),
            ("VLLMRawITLAboveSLO", f"model:vllm_itl_seconds:p95_rate{w}", "ITL", o.slo.itl.threshold_seconds)):
        out.append(Alert(
            name=name, expr=f"{record} > {fmt(threshold)}\n{gate}",
            severity="warning", symptom="none", layer="unknown", for_=FOR_SLO,
            summary=f"vLLM {objective} p95 is above the objective (raw series, no sidecar).",
            description=(f"{objective} p95 of model {{{{ $labels.model_name }}}} (job {{{{ $labels.job }}}}) is "
                         f"{{{{ $value | humanizeDuration }}}} over {w}, above the {fmt(threshold)} s objective."),
            meaning=(f"Computed by Prometheus from vLLM's own histograms ({record}), per model and deployment, "
                     f"for fleets without the sidecar. The objective ({fmt(threshold)} s) is rendered into the rule "
                     "from the configuration given to `vllm-diag render rules --config FILE`; at least "
                     f"{fmt(o.thresholds['slo_min_requests'])} requests must have finished in {w}. Quiet for a "
                     "replica whose pod runs the sidecar (it alerts through VLLMLatencyAboveSLO instead)."),
            verify=(Verify(f"{objective} p95", record), Verify("finished requests per second", rps)),
            action="deploy the sidecar for a diagnosis, or follow the symptom runbooks (A for TTFT, B for ITL)",
            tradeoff="depends on the cause",
            mitigations=always(_SCALE_OUT, _SHED),
        ))
    return out


def alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    """Every alert, runbook links added (the one post-processing step)."""
    return add_runbook_links([a for _, _, build in ALERT_GROUPS for a in build(o)])


# Alertmanager inhibition: a root cause silences the symptom alerts it explains on the same replica
# (INHIBIT_EQUAL), and the outcome alert it causes.
_ALERT_OF = {s.id: s.alert for s in SYMPTOMS}
_CPU_EXPLAINS = (*(_ALERT_OF[s] for s in "ABC"), "VLLMLatencyAboveSLO")
INHIBITIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("VLLMKVCachePressure", (*(_ALERT_OF[s] for s in "ACDEF"), "VLLMLatencyAboveSLO")),
    ("VLLMCPUStarvation", (*_CPU_EXPLAINS, "VLLMCPUStarvationSuspected")),
    ("VLLMCPUStarvationSuspected", _CPU_EXPLAINS),
    ("VLLMTargetDown", (*(_ALERT_OF[s.id] for s in SYMPTOMS), "VLLMKVCachePressure", "VLLMCPUStarvation",
                        "VLLMCPUStarvationSuspected", "VLLMLatencyAboveSLO", "VLLMDiagnosisStale")),
)

# ---------------------------------------------------------------------------------------------
# Post-processing: runbook links (kubernetes-mixin's add-runbook-links, in one place)
# ---------------------------------------------------------------------------------------------


def runbook_file(alert_name: str) -> str:
    return f"{RUNBOOK_DIR}/{alert_name.lower()}.md"


def runbook_url(alert_name: str, base_url: str = RUNBOOK_BASE_URL) -> str:
    return f"{base_url.rstrip('/')}/{alert_name.lower()}.md"


def add_runbook_links(items: Sequence[Alert], base_url: str = RUNBOOK_BASE_URL) -> list[Alert]:
    """Set ``runbook_url`` on every alert from the lowercased alert name, unless one is set already."""
    return [a if "runbook_url" in a.annotations
            else replace(a, annotations={**a.annotations, "runbook_url": runbook_url(a.name, base_url)})
            for a in items]


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

TEMPLATES = Path(__file__).with_name("templates")


def _yaml_str(value: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar; Go templates inside stay untouched.
    return json.dumps(value, ensure_ascii=False)


def environment() -> jinja2.Environment:
    """Jinja2 with delimiters that leave Go templates ({{ $value }}) in annotations alone."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        variable_start_string="[[", variable_end_string="]]",
        block_start_string="[%", block_end_string="%]",
        comment_start_string="[#", comment_end_string="#]",
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=False,
    )
    env.filters["q"] = _yaml_str
    return env


def alert_rule(a: Alert, o: Options = DEFAULT_OPTIONS) -> dict[str, Any]:
    action, tradeoff = a.actions_text()
    return {
        "alert": a.name, "expr": a.expr, "for": a.duration,
        **({"keep_firing_for": a.keep_firing_for} if a.keep_firing_for else {}),
        "labels": {"severity": o.severity(a.severity), "symptom": a.symptom, "layer": a.layer, **a.extra_labels},
        "annotations": {"summary": a.summary, "description": a.description, "action": action,
                        "tradeoff": tradeoff, **a.annotations},
    }


# (file, group name, builder): the sidecar's alerts, and the raw-series alerts for fleets without it.
ALERT_GROUPS: tuple[tuple[str, str, Callable[[Options], list[Alert]]], ...] = (
    (ALERTS_FILE, "vllm-diag.symptoms", lambda o: [symptom_alert(s, o) for s in SYMPTOMS]),
    (ALERTS_FILE, "vllm-diag.root-causes", root_cause_alerts),
    (ALERTS_FILE, "vllm-diag.operations", ops_alerts),
    (RAW_ALERTS_FILE, "vllm-diag.raw", raw_alerts),
)


def rule_groups(o: Options = DEFAULT_OPTIONS) -> dict[str, list[dict[str, Any]]]:
    """File -> rule groups, as plain data (what the template writes, and what tests read)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path, name, build in ALERT_GROUPS:
        out.setdefault(path, []).append(
            {"name": name, "rules": [alert_rule(a, o) for a in add_runbook_links(build(o))]})
    out[RECORDING_FILE] = [
        {"name": "vllm-diag.recording", "rules": [_record(r) for r in recording_rules()]},
        {"name": "vllm-diag.slo-recording", "rules": [_record(r) for r in sli_recording_rules(o)]},
    ]
    return out


def _record(r: Recording) -> dict[str, Any]:
    return {"record": r.record, "expr": r.expr, "help": r.help, **({"labels": dict(r.labels)} if r.labels else {})}


def render_files(o: Options = DEFAULT_OPTIONS) -> dict[str, str]:
    template = environment().get_template("rules.yml.j2")
    return {path: template.render(groups=groups) for path, groups in rule_groups(o).items()}


def render_alertmanager(o: Options = DEFAULT_OPTIONS) -> dict[str, str]:
    template = environment().get_template("alertmanager.yml.j2")
    return {ALERTMANAGER_FILE: template.render(
        inhibitions=[{"source": src, "targets": "|".join(targets)} for src, targets in INHIBITIONS],
        group_by=list(GROUP_BY), equal=list(INHIBIT_EQUAL),
        severities={s: o.severity(s) for s in SEVERITIES},
    )}


def all_expressions(o: Options = DEFAULT_OPTIONS) -> list[str]:
    """Every PromQL expression in the rendered rules (alerts and recording rules)."""
    return [rule["expr"] for groups in rule_groups(o).values() for g in groups for rule in g["rules"]]


def recording_names() -> frozenset[str]:
    return frozenset(r.record for r in (*recording_rules(), *sli_recording_rules()))
