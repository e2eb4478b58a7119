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

from exporter.catalog import buckets
from exporter.catalog import metrics as vllm
from exporter.catalog.metrics import BY_NAME
from exporter.catalog.symptoms import (
    CAUSE_BY_ID,
    CAUSES,
    EXPLAINED_BY,
    RUNBOOK_BASE_URL,
    SYMPTOMS,
    Cause,
    Symptom,
    runbook_url,
)
from exporter.catalog.thresholds import DEFAULTS
from exporter.config import SLO_PERIOD_DAYS, Settings, Slo
from exporter.render import slo
from exporter.render.promql import PromQL, fmt

# ---------------------------------------------------------------------------------------------
# Settings (declared once; each says what it controls)
# ---------------------------------------------------------------------------------------------

ALERTS_FILE = "alert_rules/vllm-diag-alerts.yml"
RECORDING_FILE = "alert_rules/vllm-diag-recording.yml"
RAW_ALERTS_FILE = "alert_rules/vllm-diag-raw-alerts.yml"
ALERTMANAGER_FILE = "deploy/alertmanager/alertmanager.yml"
ALERTMANAGER_CONFIG_FILE = "deploy/kubernetes/alertmanagerconfig.yaml"

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
# A model is (cluster, namespace, model_name): pages group on it, so a fleet-wide problem on N replicas
# is one notification; tickets and context also split by alert name.
MODEL_EQUAL: tuple[str, ...] = slo.MODEL_LABELS
PAGE_GROUP_BY: tuple[str, ...] = slo.MODEL_LABELS
GROUP_BY: tuple[str, ...] = ("alertname", *slo.MODEL_LABELS)

# Severities (kube-prometheus-stack / most routing trees): critical pages, warning tickets, info is
# context. `render rules --severity-labels critical=P1,...` renames them at render time.
SEVERITIES: tuple[str, ...] = ("critical", "warning", "info")

# `for:` durations. Chosen from the streaks measured on the simulator's scenarios (docs/alerting.md,
# tests/e2e/test_alert_matrix.py prints them): the smoothed symptom condition of each symptom's own
# scenario holds for 14-25 minutes without a break, its shortest streak on the scenarios expected to
# show the symptom is >= 8 minutes, and on the healthy-like scenarios it never holds at all. So `for:`
# only has to outlast evaluation jitter and short bursts, not the flapping of the raw 0/1 gauge.
# Symptoms wait 5 minutes longer than the root causes that explain them (FOR_ROOT_CAUSE): a root
# cause's 5m average crosses its bar up to ~3 minutes after the symptoms' 10m share does (case 3:
# 4.3 vs 1.5 min), and it must reach Alertmanager first to inhibit them. 10m still fires well inside
# the shortest expected streak (14.9 min at the shipped window).
FOR_SYMPTOM: Mapping[str, str] = {"critical": "10m", "warning": "10m", "info": "15m"}
# Root-cause alerts are warnings that name the layer (the page is the model's burn, which carries
# the cause itself), so they need not race the symptoms: 5m, like the symptoms, outlasts a burst.
FOR_ROOT_CAUSE = "5m"
# Burn-rate pages: the windows already demand a sustained burn (a 3-minute burst at 50 % bad spends
# 2.5 % of an hour: 2.5x, far below 14.4x); `for` only rides out one evaluation's jitter.
FOR_BURN = "2m"
FOR_BURN_SLOW = "30m"
# A stalled engine: running requests and no token in STALL_WINDOW, for one more minute.
STALL_WINDOW = "5m"
FOR_STALLED = "1m"
# kube-prometheus' TargetDown: a share of the targets down for 10 minutes is a warning.
FOR_TARGETS_DOWN = "10m"
FOR_MODEL_DOWN = "5m"
# An input a cause alert needs, missing this long, is a warning (a rename after an upgrade).
FOR_INPUT_MISSING = "30m"
ERRORS_WINDOW = "15m"


def smoothing(o: Options) -> str:
    """The range root-cause conditions average the sidecar's gauges over, the symptoms' one
    (`alert_smoothing_seconds`): preemptions come in bursts and the per-window ratio dips between
    them, and a root cause that resolved between bursts would lift its inhibition (no rule relies
    on keep_firing_for to bridge that)."""
    return duration(o.thresholds["alert_smoothing_seconds"])
# One replica down: context that inhibits its stale alerts (not a page).
FOR_TARGET_DOWN = "3m"
FOR_OPERATIONS = "10m"

# The Prometheus job that scrapes the sidecar itself (`render rules --sidecar-job NAME`). Exact: a
# Prometheus that loads these rules but scrapes no sidecar must not alert about one.
SIDECAR_JOB = "vllm-diag"



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

    # The engines' histogram edges per --custom-histogram-buckets family (vLLM's defaults unless the
    # deployment replaced a family): every objective's threshold must be one of them.
    histogram_edges: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: dict(buckets.DEFAULT_EDGES))

    def __post_init__(self) -> None:
        problems = slo.off_edge_thresholds(self.slo, self.histogram_edges)
        if problems:
            raise ValueError("; ".join(problems))

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
        vllm.E2E_REQUEST_LATENCY_SECONDS, vllm.REQUEST_QUEUE_TIME_SECONDS, vllm.REQUEST_INFERENCE_TIME_SECONDS))
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
    finished = RAW.sum_rate(vllm.REQUEST_SUCCESS_TOTAL, w, drop=("finished_reason",))
    kv, hits, queries = vllm.KV_CACHE_USAGE_PERC, vllm.PREFIX_CACHE_HITS_TOTAL, vllm.PREFIX_CACHE_QUERIES_TOTAL
    itl = vllm.INTER_TOKEN_LATENCY_SECONDS
    return [
        Recording(f"model:vllm_preemptions:rate{w}", RAW.sum_rate(vllm.NUM_PREEMPTIONS_TOTAL, w),
                  "Preemptions per second."),
        Recording(f"model:vllm_requests_finished:rate{w}", finished,
                  "Finished requests per second, all finished_reason values (client aborts are not counted by vLLM)."),
        Recording(f"model:vllm_preemptions_per_request:ratio_rate{w}",
                  RAW.divide(RAW.sum_rate(vllm.NUM_PREEMPTIONS_TOTAL, w), finished),
                  "Preemptions per finished request (symptom D reads this)."),
        Recording(f"model:vllm_prefix_cache_hit:ratio_rate{w}",
                  generations(lambda n: RAW.ratio(n(hits), n(queries), w), hits, queries),
                  "Prefix-cache hit efficiency: cached / queried prompt tokens (symptom F); "
                  "vLLM <= 0.9 names: gpu_prefix_cache_*."),
        Recording("model:vllm_kv_cache_usage:max", generations(lambda n: RAW.agg("max", n(kv)), kv),
                  "Highest KV cache usage (0..1) across the model's engines and replicas; "
                  "vLLM <= 0.9 name: gpu_cache_usage_perc."),
        Recording(f"model:vllm_ttft_seconds:p95_rate{w}",
                  RAW.quantile(0.95, vllm.TIME_TO_FIRST_TOKEN_SECONDS, w), "TTFT p95 (the SLO quantile)."),
        Recording(f"model:vllm_ttft_seconds:p99_rate{w}",
                  RAW.quantile(0.99, vllm.TIME_TO_FIRST_TOKEN_SECONDS, w), "TTFT p99 (tail latency)."),
        Recording(f"model:vllm_itl_seconds:p95_rate{w}",
                  generations(lambda n: RAW.quantile(0.95, n(itl), w), itl),
                  "Inter-token latency p95 (the SLO quantile); vLLM <= 0.10 name: time_per_output_token_seconds."),
        Recording(f"model:vllm_requests_waiting:deriv{w}",
                  f"sum {RAW._without()} (deriv({vllm.NUM_REQUESTS_WAITING}[{w}]))",
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
_ROUTE_OFF_SPECULATION = Mitigation("route the traffic the drafter does not fit (sampled at high temperature, "
                                    "new languages or tasks) to replicas without speculative decoding",
                                    "needs a second pool; the routed traffic loses whatever speed-up it had")
_PREFILL_LOCALLY = Mitigation("have the P/D proxy send short prompts (or all, for now) to an instance that prefills "
                              "them itself, without the KV transfer", "prefill work on decode instances: their "
                              "streams slow down while it runs")
_DRAIN_PEER = Mitigation("take the prefill instance whose transfers fail out of the P/D proxy's pool (or restart "
                         "it)", "less prefill capacity until it is back")
_ROUTE_ADAPTER = Mitigation("route the hottest adapter's requests to a replica that keeps it loaded (a second "
                            "pool, or the gateway's adapter-affinity routing)", "needs a second pool or a router "
                            "that reads the adapter name")
_DRAIN_ENGINE = Mitigation("restart the replica whose engine is the outlier (or take it out of the load balancer) "
                           "while its GPU is checked", "less capacity meanwhile; in-flight requests on it are lost")
AWAKE = 'sleep_state="awake"'  # vllm:engine_sleep_state's awake bit: 0 while the engine sleeps
# Immediate mitigations per cause: what buys time before a knob change and a restart.
IMMEDIATE_BY_CAUSE: Mapping[str, tuple[Mitigation, ...]] = {
    "A7": (_PREFILL_LOCALLY, _SCALE_OUT), "A8": (_DRAIN_PEER, _PREFILL_LOCALLY),
    "A0": (_ROLL_BACK, _SCALE_OUT), "B0": (_ROLL_BACK, _SCALE_OUT),
    "A1": (_ROUTE_LONG, _SCALE_OUT), "A2": (_SCALE_OUT, _SHED), "A3": (_FREE_CPU, _SCALE_OUT),
    "A4": (_ROUTE_LONG, _SCALE_OUT), "A5": (_NO_MITIGATION,),
    "B1": (_SPLIT_BATCH, _ROUTE_LONG), "B2": (_SPLIT_BATCH, _ROUTE_LONG), "B3": (_SHED, _SCALE_OUT),
    "B4": (_ROLL_BACK, _SCALE_OUT), "B5": (_ROUTE_OFF_SPECULATION, _ROLL_BACK, _SCALE_OUT),
    "C1": (_FREE_CPU, _SCALE_OUT), "C2": (_NO_MITIGATION,), "C3": (_CAP_TOKENS, _SHED, _SCALE_OUT),
    "D": (_CAP_TOKENS, _SHED, _SCALE_OUT, _ROUTE_LONG), "E": (_CAP_TOKENS, _SCALE_OUT),
    "F": (_NO_MITIGATION,), "F6": (_ROUTE_PREFIX, _SCALE_OUT), "G": (_SCALE_OUT,),
    # issue 29: LoRA adapter slots, data-parallel engines
    "A6": (_ROUTE_ADAPTER, _SCALE_OUT), "G2": (_DRAIN_ENGINE, _SCALE_OUT),
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
    annotations: Mapping[str, str] = field(default_factory=dict)  # extra/overrides, e.g. runbook_url
    # Which labels identify what the alert is about (runbook queries are scoped to them): one sidecar
    # target, one replica of raw series, a whole model, or a namespace.
    scope: str = "target"
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
        Verify("raw TTFT p95", RAW.quantile(0.95, vllm.TIME_TO_FIRST_TOKEN_SECONDS, _W)),
        Verify("raw mean queue time", RAW.mean(vllm.REQUEST_QUEUE_TIME_SECONDS, _W)),
        Verify("raw mean prompt length (tokens)", RAW.mean(vllm.REQUEST_PROMPT_TOKENS, _W)),
    ),
    "B": (
        Verify("ITL quantiles (p99 over p50 = stutter)", "vllm_diag_itl_seconds"),
        Verify("prompt share of computed tokens", "vllm_diag_prefill_token_share"),
        Verify("raw ITL p95 (per output event: with speculative decoding an event carries several tokens)",
               generations(lambda n: RAW.quantile(0.95, n(vllm.INTER_TOKEN_LATENCY_SECONDS), _W),
                           vllm.INTER_TOKEN_LATENCY_SECONDS)),
        Verify("running requests", RAW.agg("sum", vllm.NUM_REQUESTS_RUNNING)),
        Verify("with speculative decoding: draft acceptance rate (B5 below the low mark)",
               RAW.ratio(vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL, vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL, _W)),
    ),
    "C": (
        Verify("throughput", "vllm_diag_throughput_tokens_per_second"),
        Verify("running and waiting requests", "vllm_diag_requests"),
        Verify("CPU-starvation score and its inputs", "vllm_diag_cpu_starvation_score"),
        Verify("raw generation tokens per second", RAW.sum_rate(vllm.GENERATION_TOKENS_TOTAL, _W)),
    ),
    "D": (
        Verify("preemptions per finished request", "vllm_diag_preemptions_per_request"),
        Verify("KV usage (latest, window max and mean)", "vllm_diag_kv_cache_usage_ratio"),
        Verify("raw preemptions per second", RAW.sum_rate(vllm.NUM_PREEMPTIONS_TOTAL, _W)),
        Verify("raw requests waiting for capacity", RAW.agg("sum", vllm.NUM_REQUESTS_WAITING_BY_REASON,
                                                               'reason="capacity"')),
    ),
    "E": (
        Verify("KV usage (latest, window max and mean)", "vllm_diag_kv_cache_usage_ratio"),
        Verify("raw KV usage", generations(lambda n: RAW.agg("max", n(vllm.KV_CACHE_USAGE_PERC)),
                                           vllm.KV_CACHE_USAGE_PERC)),
        Verify("raw preemptions per second (still rare for E)", RAW.sum_rate(vllm.NUM_PREEMPTIONS_TOTAL, _W)),
    ),
    "F": (
        Verify("prefix-cache hit ratio", "vllm_diag_prefix_cache_hit_ratio"),
        Verify("raw hit ratio", generations(
            lambda n: RAW.ratio(n(vllm.PREFIX_CACHE_HITS_TOTAL), n(vllm.PREFIX_CACHE_QUERIES_TOTAL), _W),
            vllm.PREFIX_CACHE_HITS_TOTAL, vllm.PREFIX_CACHE_QUERIES_TOTAL)),
        Verify("raw mean prompt length (tokens)", RAW.mean(vllm.REQUEST_PROMPT_TOKENS, _W)),
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


def cpu_evidence(o: Options = DEFAULT_OPTIONS) -> str:
    """Host-side CPU evidence (run-queue wait, CFS throttling, PSI), each above the floor of the score's
    input: the level measured on a calm host, where the score starts to rise."""
    t = o.thresholds
    parts = [(sig, t[key]) for sig, key in (("run_queue_wait_share", "cpu_wait_share_floor"),
                                             ("cfs_throttled_share", "cpu_throttled_floor"),
                                             ("psi_some_share", "cpu_psi_floor"))]
    inner = "\n  or\n".join(f'  avg_over_time(vllm_diag_cpu_signal{{signal="{sig}"}}[{smoothing(o)}]) > {fmt(v)}'
                            for sig, v in parts)
    return f"max by ({', '.join((*IDENTITY, 'model_name'))}) (\n{inner}\n)"


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


# ---------------------------------------------------------------------------------------------
# Service-level objectives: error-budget burn per model, the page (exporter.render.slo)
# ---------------------------------------------------------------------------------------------

# The symptom classes whose causes can explain a burn of each objective (the catalog's EXPLAINED_BY, which
# the diagnosis reads too); the page names the cause active on most of the model's replicas (smoothed like
# the symptom alerts) -- A0/B0, layer `unknown`, where the sidecars name the effect without a known cause --
# or `unknown` when no sidecar names one.
EXPLAINS: Mapping[str, str] = {objective: "|".join(classes) for objective, classes in EXPLAINED_BY.items()}
MODEL = slo.MODEL_LABELS
_MODEL_ON = f"on ({', '.join(MODEL)})"
_MODEL_OBJ_ON = f"on ({', '.join((*MODEL, 'objective'))})"


def smoothed_causes(o: Options = DEFAULT_OPTIONS, matchers: str = "") -> str:
    """Causes active for the symptom alerts' share of the smoothing range (the raw 0/1 gauge flaps)."""
    rng = duration(o.thresholds["alert_smoothing_seconds"])
    return (f"avg_over_time(vllm_diag_cause_active{{{matchers}}}[{rng}]) "
            f">= {fmt(o.thresholds['alert_symptom_active_share'])}")


def cause_of_burn(o: Options = DEFAULT_OPTIONS) -> str:
    """Per model and objective, value 1, labels cause/layer/symptom: the cause active on most replicas
    among those that explain the objective, else `unknown` (no sidecar, or no cause explains it)."""
    by = ", ".join((*MODEL, "cause", "layer", "symptom"))
    known = "\nor\n".join(
        f'label_replace(\n  topk by ({", ".join(MODEL)}) (1, count by ({by}) (\n'
        f'    {smoothed_causes(o, f"symptom=~{chr(34)}{sym}{chr(34)}")}\n'
        f'  )),\n  "objective", "{obj}", "", "")'
        for obj, sym in EXPLAINS.items())
    unknown = ('label_replace(label_replace(label_replace(\n'
               f'  count by ({", ".join((*MODEL, "objective"))}) ({slo.model_burn("5m")}),\n'
               '  "cause", "unknown", "", ""), "layer", "unknown", "", ""), "symptom", "none", "", "")')
    return f"0 * (\n{_indent(known)}\n)\nor {_MODEL_OBJ_ON}\n0 * {unknown}"


def _cause_titles() -> str:
    """A Go-template chain naming each catalog cause (Alertmanager receivers see the text)."""
    chain = "".join(f'{{{{ {"if" if i == 0 else "else if"} eq $labels.cause "{c.id}" }}}}{c.title}'
                    for i, c in enumerate(CAUSES))
    return chain + "{{ else }}no cause the sidecar can name (see the runbook){{ end }}"


# Evidence for the page text, queried at notification time for the model (Go templates).
_SEL = 'namespace=%q, model_name=%q'
_EVIDENCE = (
    '{{ if eq $labels.layer "kv_cache" }}'
    '{{ with query (printf "sum(rate(' + vllm.NUM_PREEMPTIONS_TOTAL + '{' + _SEL + '}[5m]))" $labels.namespace '
    '$labels.model_name) }}, {{ . | first | value | printf "%.2g" }} preemptions/s{{ end }}'
    '{{ with query (printf "max(vllm_diag_kv_cache_usage_ratio{' + _SEL + ', stat=\\"max\\"})" $labels.namespace '
    '$labels.model_name) }}, KV {{ . | first | value | humanizePercentage }}{{ end }}'
    '{{ else if eq $labels.layer "cpu" }}'
    '{{ with query (printf "max(vllm_diag_cpu_starvation_score{' + _SEL + '})" $labels.namespace '
    '$labels.model_name) }}, CPU-starvation score {{ . | first | value | printf "%.2f" }}{{ end }}'
    # No known cause: requests waiting for something other than capacity are the first thing to look at.
    '{{ else if eq $labels.layer "unknown" }}'
    '{{ with query (printf "sum(' + vllm.NUM_REQUESTS_WAITING_BY_REASON + '{' + _SEL + ', reason=\\"deferred\\"}) > 0" '
    '$labels.namespace $labels.model_name) }}, {{ . | first | value | printf "%.0f" }} requests waiting deferred '
    '(LoRA slot, KV transfer){{ end }}'
    '{{ end }}'
)


def burn_alert_expr(condition: str, o: Options, *, level: str) -> str:
    t = o.thresholds
    events = slo.model_events("1h") if level == "model" else slo.pod_events("1h")
    gated = (f"(\n{_indent(condition)}\n)\nand\n{events} * 3600 >= {fmt(t['slo_min_requests'])}")
    if level == "pod":
        # Only while the model as a whole does not page: then the page says it all.
        replicas = f"count by ({', '.join((*MODEL, 'objective'))}) ({slo.pod_burn('1h')}) > 1"
        return (f"(\n{_indent(gated)}\n)\nand {_MODEL_OBJ_ON}\n{replicas}\n"
                f"unless {_MODEL_OBJ_ON}\n(\n{_indent(slo.page_condition())}\n)")
    return (f"(\n{_indent(gated)}\n)\n+ {_MODEL_OBJ_ON} group_left (cause, layer, symptom)\n"
            f"(\n{_indent(cause_of_burn(o))}\n)")


def slo_verify(level: str = "model") -> tuple[Verify, ...]:
    burn_rec = slo.model_burn if level == "model" else slo.pod_burn
    pod = ', pod="$pod"' if level == "pod" else ""
    scope = '{objective="$objective", namespace="$namespace", model_name="$model_name"' + pod + '}'
    return (
        Verify("burn rates of the paging windows (14.4 over 1h and 5m, or 6 over 6h and 30m, page)",
               f"{burn_rec('1h')}{scope} or {burn_rec('5m')}{scope}"),
        Verify("bad events per second, per replica (which replicas burn)", f"{slo.pod_bad_events('5m')}{scope}"),
        Verify("the cause the sidecar names, per replica",
               'vllm_diag_cause_active{namespace="$namespace", model_name="$model_name"} == 1'),
        Verify("KV usage and preemptions per replica",
               'vllm_diag_kv_cache_usage_ratio{namespace="$namespace", model_name="$model_name", stat="max"}'),
        Verify("the objectives each sidecar judges its window with (threshold, target), and whether the "
               "threshold is an edge of that replica's histogram (0: the sidecar interpolates; give vLLM the "
               "edge with --custom-histogram-buckets)",
               'vllm_diag_slo_seconds or vllm_diag_slo_target_ratio or vllm_diag_slo_threshold_on_bucket_edge'),
    )


def slo_alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    """Error-budget burn per model (the page, with its cause), per replica (a warning) and slow (a ticket).

    They read vLLM's own series through the SLI recording rules, so a fleet without the sidecar gets
    the same pages (cause `unknown`)."""
    page_pairs = " or ".join(f"{fmt(a.factor)}x over {a.long_window} and {a.short_window}"
                             for a in slo.BURN_ALERTS if a.severity == "critical")
    ticket = next(a for a in slo.BURN_ALERTS if a.severity == "warning")
    title = '{{ $labels.objective | toUpper }}'
    return [
        Alert(
            name="VLLMErrorBudgetBurn", scope="model", severity="critical", symptom="", layer="", for_=FOR_BURN,
            expr=burn_alert_expr(slo.page_condition(), o, level="model"),
            summary="A model's error budget burns fast enough to exhaust it within days; users are hurt now.",
            description=(f"{title} budget burning {{{{ $value | printf \"%.1f\" }}}}x on model "
                         "{{ $labels.model_name }}{{ if $labels.namespace }} (namespace {{ $labels.namespace }})"
                         "{{ end }}; cause: " + _cause_titles() + " ({{ $labels.cause }}, layer {{ $labels.layer }}"
                         + _EVIDENCE + ")."),
            meaning=("The share of bad events of one objective across all replicas of the model (TTFT or ITL over "
                     "its threshold, or failed requests) spends the 30-day error budget at least "
                     f"{page_pairs} (the SRE workbook's multiwindow, multi-burn-rate page). The long window "
                     "proves the burn is significant, the short one that it is still going on. The `cause` label "
                     "is the cause the vllm-diag sidecars name on most replicas (symptom classes that explain "
                     "this objective): A0 or B0 (layer `unknown`) when they see the objective missed and no cause "
                     "they know explains it, `unknown` when no sidecar runs or none names a cause. One notification "
                     "per model: Alertmanager groups pages by cluster, namespace and model_name."),
            verify=slo_verify("model"),
            action="follow the cause's runbook (the `cause` and `layer` labels; for A0/B0 the symptom's runbook, "
                   "and the sidecar's evidence says what it looked at); with cause `unknown`, read the "
                   "overview dashboard's layers or run `vllm-diag diagnose --url` against a replica",
            tradeoff="depends on the cause; the immediate mitigations below buy time",
            mitigations=always(_SCALE_OUT, _SHED, _CAP_TOKENS),
        ),
        Alert(
            name="VLLMReplicaErrorBudgetBurn", scope="replica", severity="warning", symptom="", layer="unknown",
            for_=FOR_BURN,
            expr=burn_alert_expr(slo.page_condition(level="pod"), o, level="pod"),
            summary="One replica burns its error budget fast while the model as a whole does not.",
            description=(f"{title} budget of replica {{{{ $labels.pod }}}} (model {{{{ $labels.model_name }}}}) is "
                         "burning {{ $value | printf \"%.1f\" }}x; the model's other replicas keep its budget."),
            meaning=("The replica alone meets a paging burn rate, but the model (all replicas) does not: one bad "
                     "replica (a noisy node, a skewed router, KV pressure on one pod). A warning, since users "
                     "routed elsewhere are fine; the model's page fires if it spreads. Only for models with more "
                     "than one replica (with one, the model's page is the replica's)."),
            verify=slo_verify("pod"),
            action="compare this replica's diagnosis with its neighbours' (vllm_diag_layer_verdict) and drain it "
                   "if it is the node",
            tradeoff="draining moves its load onto the others",
            mitigations=always(Mitigation("remove the replica from the load balancer until it recovers",
                                          "less capacity meanwhile")),
        ),
        Alert(
            name="VLLMErrorBudgetBurnSlow", scope="model", severity="warning", symptom="", layer="", for_=FOR_BURN_SLOW,
            expr=burn_alert_expr(f"(\n{_indent(slo.burn_condition(ticket))}\n)\nunless\n(\n"
                                 f"{_indent(slo.page_condition())}\n)", o, level="model"),
            summary="A model spends its error budget faster than the period allows (a ticket, not a page).",
            description=(f"{title} budget of model {{{{ $labels.model_name }}}} has burned "
                         f"{{{{ $value | printf \"%.2f\" }}}}x over {ticket.long_window}: at this rate it runs out "
                         "before the 30 days end; cause: " + _cause_titles() + "."),
            meaning=(f"{ticket.budget_share}: the burn is {fmt(ticket.factor)}x or more over {ticket.long_window} "
                     f"and still over {ticket.short_window}. Slow enough for working hours."),
            verify=slo_verify("model"),
            action="plan capacity or the knob change the cause's runbook names",
            tradeoff="depends on the cause",
        ),
        Alert(
            name="VLLMEngineStalled", scope="replica", severity="critical", symptom="", layer="unknown",
            for_=FOR_STALLED,
            # A sleeping engine (/sleep with mode keep holds its requests) generates nothing on purpose.
            expr=(f"{RAW.agg('sum', vllm.NUM_REQUESTS_RUNNING)} > 0\n"
                  f"and\n{RAW.sum_rate(vllm.GENERATION_TOKENS_TOTAL, STALL_WINDOW)} == 0\n"
                  f"unless\n{RAW.agg('sum', vllm.ENGINE_SLEEP_STATE, AWAKE, drop=('sleep_state',))} == 0"),
            summary="A vLLM engine holds running requests but generates no token: it is hung.",
            description=("Replica {{ $labels.pod }}{{ if $labels.instance }} ({{ $labels.instance }}){{ end }} of "
                         "model {{ $labels.model_name }} has {{ $value }} running requests and generated no token "
                         f"in {STALL_WINDOW}."),
            meaning=("Requests are scheduled but no step completes: a hung collective (NCCL in TP/PP), a dead "
                     "worker process, a GPU fault. The latency SLIs are blind to it (stuck requests record no "
                     "latency), so it pages on its own, from vLLM's raw series."),
            verify=(Verify("running requests", f'{RAW.agg("sum", vllm.NUM_REQUESTS_RUNNING)}'),
                    Verify("tokens generated per second",
                           RAW.sum_rate(vllm.GENERATION_TOKENS_TOTAL, STALL_WINDOW))),
            action="restart the replica (delete the pod); collect `kubectl logs --previous`, `py-spy dump` of the "
                   "engine process and the GPU's Xid errors (`dmesg | grep -i xid`) first if you can",
            tradeoff="in-flight requests on the replica are lost either way",
            mitigations=always(Mitigation("remove the replica from the load balancer", "less capacity meanwhile")),
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Root causes (the sidecar's): warnings that name the layer; the page is the model's burn
# ---------------------------------------------------------------------------------------------


def _cpu_alert(o: Options, *, with_evidence: bool) -> Alert:
    cpu = o.thresholds["cpu_starvation_score"]
    cpu_causes = tuple(c for c in CAUSES if c.layer == "cpu")
    verify = (Verify("the score", "vllm_diag_cpu_starvation_score"),
              Verify("each input of the score (host evidence: run_queue_wait_share, cfs_throttled_share, "
                     "psi_some_share)", "vllm_diag_cpu_signal"),
              Verify("API-server CPU in cores", "vllm_diag_api_server_cpu_cores"),
              Verify("raw frontend overhead per request (e2e - queue - inference)",
                     frontend_overhead(RAW, RATE_WINDOW)))
    if with_evidence:
        expr = (f"avg_over_time(vllm_diag_cpu_starvation_score[{smoothing(o)}]) >= {fmt(cpu)}\n"
                f"and {_on('model_name')}\n"
                f"avg_over_time(vllm_diag_requests_per_second[{smoothing(o)}]) >= "
                f"{fmt(o.thresholds['traffic_min_requests_per_second'])}\n"
                f"and {_on('model_name')}\n{cpu_evidence(o)}")
        return Alert(
            name="VLLMCPUStarvation", expr=expr, severity="warning", symptom="C", layer="cpu", for_=FOR_ROOT_CAUSE,
            summary="vLLM's processes are short of CPU: the engine loop or the frontend stalls.",
            description=(f"CPU-starvation score of {{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}) "
                         f"is {{{{ $value | printf \"%.2f\" }}}} (threshold {fmt(cpu)}) with host evidence (run-queue "
                         "wait, CFS throttling or CPU PSI above their calm floors) while it serves traffic."),
            meaning=("Root cause, not a symptom: the CPU layer holds vLLM back. The score combines run-queue wait "
                     "of the vLLM threads, cgroup throttling and CPU PSI, each above the floor measured on a calm "
                     "host (vllm_diag_cpu_signal). A warning: when it hurts users, the model's error budget burns "
                     "and VLLMErrorBudgetBurn pages with cause A3/C1 (layer cpu). It inhibits the symptom alerts it "
                     "explains on the same replica."),
            causes=cpu_causes, verify=verify, mitigations=cause_mitigations(cpu_causes))
    # No CPU source on the target: the score cannot exist, but request timings can still point at the CPU.
    rng = duration(o.thresholds["alert_smoothing_seconds"])
    expr = (f'avg_over_time(vllm_diag_cause_active{{layer="cpu"}}[{rng}]) >= '
            f"{fmt(o.thresholds['alert_symptom_active_share'])}\n"
            f'unless {_on()}\nvllm_diag_input_available{{input="cpu_source"}} == 1')
    return Alert(
        name="VLLMCPUStarvationSuspected", expr=expr, severity="warning", symptom="C", layer="cpu",
        for_=FOR_SYMPTOM["warning"],  # after VLLMCPUStarvation, which inhibits it where a source reads
        summary="Request timings point at the CPU, and the sidecar has no CPU source to confirm it.",
        description=("On {{ $labels.target }} (model {{ $labels.model_name }}) the sidecar names cause "
                     "{{ $labels.cause }} (layer cpu) from request timings alone ({{ $value | humanizePercentage }} "
                     f"of {rng}): no host CPU source (run-queue, throttling, PSI) is configured or readable."),
        meaning=("The time requests spend outside the engine (tokenization, chat templates, IPC) is a large share "
                 "of their latency, which is how CPU starvation shows from vLLM's own metrics; a slow tokenizer "
                 "reads the same. Without a CPU source the sidecar cannot confirm it. Configure one on the target "
                 "(`cpu: {match: \"vllm serve\"}` with the sidecar in vLLM's PID namespace) so the CPU-starvation "
                 "score and VLLMCPUStarvation can work."),
        causes=cpu_causes, verify=verify, mitigations=cause_mitigations(cpu_causes))


def root_cause_alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    t = o.thresholds
    ppr, kv_high, rate_min = t["preemptions_per_request"], t["kv_usage_high"], t["kv_pressure_preemption_rate"]
    rng = smoothing(o)
    shortage = (f"avg_over_time(vllm_diag_preemptions_per_request[{rng}]) > {fmt(ppr)}\n"
                f"and {_on('model_name')}\n"
                f'max_over_time(vllm_diag_kv_cache_usage_ratio{{stat="max"}}[{rng}]) > {fmt(kv_high)}\n'
                f"and {_on('model_name')}\n"
                f"avg_over_time(vllm_diag_preemption_rate[{rng}]) >= {fmt(rate_min)}")
    return [
        Alert(
            name="VLLMKVCachePressure", expr=shortage, severity="warning", symptom="D", layer="kv_cache",
            for_=FOR_ROOT_CAUSE,
            summary="vLLM is short of KV cache: requests are preempted and recomputed.",
            description=(f"{{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}) preempts "
                         f"{{{{ $value | printf \"%.2f\" }}}} times per finished request "
                         f"(threshold {fmt(ppr)}) while KV usage peaked above {fmt(kv_high)}, at "
                         f"{fmt(rate_min)} preemptions/s or more: latency rises and GPU work is wasted."),
            meaning=("Root cause, not a symptom: KV cache space is the bottleneck. Preemption is frequent "
                     f"(over {fmt(ppr)} per finished request, at least {fmt(rate_min)} per second) and KV usage "
                     f"reached {fmt(kv_high)} in the same {rng}. A warning: when it hurts users the "
                     "model's error budget burns and VLLMErrorBudgetBurn pages with cause D (layer kv_cache), once "
                     "for the model however many replicas are short. The same shortage also caps concurrency "
                     f"(cause C3, {CAUSE_BY_ID['C3'].title.lower()})."),
            causes=(CAUSE_BY_ID["D"],),
            verify=SYMPTOM_VERIFY["D"],
            mitigations=cause_mitigations((CAUSE_BY_ID["D"],)),
        ),
        _cpu_alert(o, with_evidence=True),
        _cpu_alert(o, with_evidence=False),
    ]


# ---------------------------------------------------------------------------------------------
# Operations: targets, the sidecar itself, its inputs
# ---------------------------------------------------------------------------------------------


def model_targets() -> str:
    """vllm_diag_up per target with the model it served in the last hour (targets that never came up
    have none: VLLMTargetNeverUp covers them)."""
    return (f"vllm_diag_up\n* {_on()} group_left (model_name)\n"
            f"group by ({', '.join((*IDENTITY, 'model_name'))}) (last_over_time(vllm_diag_requests[1h]))")


def ops_alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    t = o.thresholds
    sidecar_up = f'up{{job="{o.sidecar_job}"}}'
    grace = duration(t["target_startup_grace_seconds"])
    stale_n = t["stale_after_intervals"]
    by_model = f"by ({', '.join(MODEL)})"
    down_verify = (Verify("scrape state", 'vllm_diag_up{target="$target"}'),
                   Verify("failed scrapes by reason", 'rate(vllm_diag_scrape_errors_total{target="$target"}[5m]) > 0'),
                   Verify("seconds since the last good scrape",
                          'time() - vllm_diag_last_success_timestamp_seconds{target="$target"}'))
    k8s_down = Mitigation("look at the pod: `kubectl -n NAMESPACE describe pod POD` (events, OOMKilled, probe "
                          "failures), `kubectl -n NAMESPACE logs POD -c vllm --previous` (the crashed container's "
                          "last words), and on GPU nodes the Xid errors (`dmesg | grep -i xid` on the node, or the "
                          "DCGM exporter's DCGM_FI_DEV_XID_ERRORS)", "none: read-only")
    return [
        Alert(
            name="VLLMTargetDown",
            expr=f"vllm_diag_up == 0\nand {_on()}\nvllm_diag_last_success_timestamp_seconds",
            severity="info", symptom="none", layer="unknown", for_=FOR_TARGET_DOWN,
            summary="A vLLM that was serving stopped answering its /metrics.",
            description=("vllm-diag scraped {{ $labels.target }} successfully before and now fails (vllm_diag_up "
                         "{{ $value }}); its diagnosis is suspended and the alerts it would repeat are inhibited."),
            meaning=("Context, not a page: one replica is down (a crash, an in-place container restart, a node "
                     "drain). It inhibits that replica's diagnosis alerts, which would only repeat stale evidence. "
                     "Users are protected by the model's other replicas; VLLMTargetsDown warns when more than "
                     f"{fmt(t['targets_down_share'] * 100)} % of a model's replicas are down, VLLMModelUnavailable "
                     "pages when none is up, and the error-budget page fires if the loss hurts."),
            verify=down_verify,
            action="check the vLLM process/pod (logs of the previous container, OOM kills, restarts, events)",
            tradeoff="none: restoring the engine has no downside; a restart drops in-flight requests",
            mitigations=always(k8s_down),
        ),
        Alert(
            name="VLLMTargetsDown", scope="model",
            expr=(f"count {by_model} (\n{_indent(model_targets())} == 0\n)\n/\ncount {by_model} (\n"
                  f"{_indent(model_targets())}\n)\n> {fmt(t['targets_down_share'])}"),
            severity="warning", symptom="none", layer="unknown", for_=FOR_TARGETS_DOWN,
            summary="More than a tenth of a model's vLLM replicas are down.",
            description=("{{ $value | humanizePercentage }} of the replicas of model {{ $labels.model_name }}"
                         "{{ if $labels.namespace }} (namespace {{ $labels.namespace }}){{ end }} do not answer."),
            meaning=("kube-prometheus' TargetDown convention, per model: more than "
                     f"{fmt(t['targets_down_share'] * 100)} % of the replicas a sidecar watches have failed their "
                     f"scrapes for {FOR_TARGETS_DOWN}. Capacity is lost; the error-budget page fires if users feel "
                     "it."),
            verify=(Verify("replicas up per model", f"sum {by_model} ({model_targets()})"),),
            action="find why the replicas are down (VLLMTargetDown per replica, `kubectl get pods`)",
            tradeoff="none", mitigations=always(k8s_down),
        ),
        Alert(
            name="VLLMModelUnavailable", scope="model",
            expr=f"max {by_model} (\n{_indent(model_targets())}\n) == 0",
            severity="critical", symptom="none", layer="unknown", for_=FOR_MODEL_DOWN,
            summary="No replica of a model answers: the model is not served.",
            description=("None of the replicas of model {{ $labels.model_name }}{{ if $labels.namespace }} "
                         "(namespace {{ $labels.namespace }}){{ end }} has answered for "
                         f"{FOR_MODEL_DOWN} (replicas up: {{{{ $value }}}})."),
            meaning=("Every replica that served the model in the last hour now fails its scrapes: requests to "
                     "this model fail. A rolling restart never takes every replica down at once, so it does not "
                     "fire; a model load that never finishes is VLLMTargetNeverUp."),
            verify=(Verify("replicas up", f"{model_targets()}"),),
            action="check the pods (events, previous logs, OOMKilled, GPU Xid) and roll back a failed rollout",
            tradeoff="none",
            mitigations=always(k8s_down, Mitigation("roll back the rollout (`kubectl rollout undo`) if it began with "
                                                    "one", "back to the previous version")),
        ),
        Alert(
            name="VLLMTargetNeverUp",
            expr=f"vllm_diag_up == 0\nunless {_on()}\nvllm_diag_last_success_timestamp_seconds",
            severity="warning", symptom="none", layer="unknown", for_=grace,
            summary="A vLLM target has not come up within the startup grace.",
            description=("vllm-diag has not scraped {{ $labels.target }} once since it started, for longer than "
                         f"the {grace} startup grace (vllm_diag_up {{{{ $value }}}}): the model load hangs, crashes "
                         "or the URL is wrong."),
            meaning=("The sidecar (or its pod) started and the target has never answered since. Model loads take "
                     f"minutes, so this waits `target_startup_grace_seconds` ({grace}, the deployment's "
                     "startupProbe budget): a rollout never alerts while replicas load. A warning: during a "
                     "rolling update the old replicas still serve; when none does, VLLMModelUnavailable pages."),
            verify=down_verify,
            action="check the vLLM container's logs (download, OOM at load, CUDA errors) and the target URL",
            tradeoff="none",
            mitigations=always(k8s_down, Mitigation("roll back the rollout (`kubectl rollout undo`) if the new "
                                                    "version does not load", "back to the previous version")),
        ),
        Alert(
            name="VLLMDiagSidecarDown", scope="namespace",
            expr=(f"{sidecar_up} == 0\nor\n(\n  count by (namespace) ({vllm.NUM_REQUESTS_RUNNING})\n"
                  f"  unless on (namespace)\n  count by (namespace) ({sidecar_up} == 1)\n)"),
            severity="warning", symptom="none", layer="unknown", for_=FOR_OPERATIONS,
            summary="A vllm-diag sidecar cannot be scraped, or a namespace serves vLLM with none up.",
            description=("{{ if $labels.instance }}The vllm-diag sidecar {{ $labels.instance }} "
                         "(job {{ $labels.job }}) is down"
                         "{{ else }}Namespace {{ $labels.namespace }} serves vLLM but no vllm-diag sidecar is "
                         "up there ({{ $value }} vLLM series){{ end }}: the diagnosis (and the causes on pages) is "
                         "blind."),
            meaning=(f"Either an instance of Prometheus' job `{o.sidecar_job}` (set with `vllm-diag render rules "
                     "--sidecar-job NAME`) is down, or a namespace where Prometheus scrapes vLLM itself has no "
                     "sidecar up. Compared with vLLM's own series, not with `absent()`: a namespace scaled to zero "
                     "has no vLLM either and stays quiet, and one namespace's sidecars never hide another's. "
                     "Serving may be fine; the error-budget pages still fire, with cause `unknown`."),
            verify=(Verify("sidecar scrape state", sidecar_up),
                    Verify("namespaces serving vLLM", f"count by (namespace) ({vllm.NUM_REQUESTS_RUNNING})")),
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
        Alert(
            name="VLLMDiagInputMissing",
            expr=f"vllm_diag_input_available == 0\nand {_on()}\nvllm_diag_up == 1",
            severity="warning", symptom="none", layer="unknown", for_=FOR_INPUT_MISSING,
            summary="An input a vllm-diag alert needs is missing: that alert cannot fire.",
            description=("{{ $labels.target }} answers, but input `{{ $labels.input }}` has been missing "
                         f"(available: {{{{ $value }}}}) for {FOR_INPUT_MISSING}: the alerts that read it are blind."),
            meaning=("vllm_diag_input_available lists every input a cause alert needs (KV usage, preemptions, the "
                     "TTFT and ITL histograms, finished requests, the host CPU source). It goes to 0 after a vLLM "
                     "upgrade renamed a metric, with `--disable-log-stats`, or when the CPU source became "
                     "unreadable (a PID namespace or cgroup change)."),
            verify=(Verify("inputs per target", 'vllm_diag_input_available{target="$target"}'),),
            action="restore the input: check vLLM's flags (`--disable-log-stats`), its version against the "
                   "sidecar's, and the target's `cpu:` source",
            tradeoff="none",
        ),
        Alert(
            name="VLLMDiagSourceErrors",
            expr=f"sum without (reason) (increase(vllm_diag_source_errors_total[{ERRORS_WINDOW}])) > 0",
            severity="warning", symptom="none", layer="unknown", for_=FOR_OPERATIONS,
            summary="A vllm-diag side input keeps failing.",
            description=("Source `{{ $labels.source }}` of {{ $labels.target }} failed {{ $value | printf \"%.0f\" }} "
                         f"times in {ERRORS_WINDOW}."),
            meaning=("A side input of the diagnosis (host CPU, DCGM, engine facts, recording) fails again and "
                     "again; the evidence it feeds is missing from the diagnosis meanwhile."),
            verify=(Verify("failures by source and reason", 'increase(vllm_diag_source_errors_total[15m]) > 0'),),
            action="read the sidecar's log lines for that source", tradeoff="none",
        ),
        Alert(
            name="VLLMDiagRuleErrors",
            expr=f"sum without (cause) (increase(vllm_diag_rule_errors_total[{ERRORS_WINDOW}])) > 0",
            severity="warning", symptom="none", layer="unknown", for_=FOR_OPERATIONS,
            summary="A vllm-diag diagnosis rule keeps raising: its cause can never be named.",
            description=("Diagnosis rules of {{ $labels.target }} failed {{ $value | printf \"%.0f\" }} times in "
                         f"{ERRORS_WINDOW}."),
            meaning="A bug or an unexpected input in a rule: the rule abstains while it raises.",
            verify=(Verify("failures by rule", 'increase(vllm_diag_rule_errors_total[15m]) > 0'),),
            action="report it with the sidecar's logs and a capture (`record_dir`)", tradeoff="none",
        ),
    ]


def alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    """Every alert, runbook links added (the one post-processing step)."""
    return add_runbook_links([a for _, _, build in ALERT_GROUPS for a in build(o)])


# Alertmanager inhibition: a root cause silences the symptom alerts it explains on the same replica
# (INHIBIT_EQUAL); a model's page silences its own replica-level and slow burns (MODEL_EQUAL).
_ALERT_OF = {s.id: s.alert for s in SYMPTOMS}
INHIBITIONS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("VLLMKVCachePressure", tuple(_ALERT_OF[s] for s in "ACDEF"), INHIBIT_EQUAL),
    ("VLLMCPUStarvation", (*(_ALERT_OF[s] for s in "ABC"), "VLLMCPUStarvationSuspected"), INHIBIT_EQUAL),
    ("VLLMTargetDown", (*(_ALERT_OF[s.id] for s in SYMPTOMS), "VLLMKVCachePressure", "VLLMCPUStarvation",
                        "VLLMCPUStarvationSuspected", "VLLMDiagnosisStale", "VLLMDiagInputMissing"), INHIBIT_EQUAL),
    ("VLLMErrorBudgetBurn", ("VLLMReplicaErrorBudgetBurn", "VLLMErrorBudgetBurnSlow"), MODEL_EQUAL),
    ("VLLMModelUnavailable", ("VLLMTargetsDown", "VLLMErrorBudgetBurn", "VLLMReplicaErrorBudgetBurn",
                              "VLLMEngineStalled"), MODEL_EQUAL),
)

# ---------------------------------------------------------------------------------------------
# Post-processing: runbook links (kubernetes-mixin's add-runbook-links, in one place)
# ---------------------------------------------------------------------------------------------


def runbook_file(alert_name: str) -> str:
    return f"{RUNBOOK_DIR}/{alert_name.lower()}.md"


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
        # Empty symptom/layer: the series carries them (a burn page's cause), a static label would hide it.
        "labels": {"severity": o.severity(a.severity), **{k: v for k, v in (("symptom", a.symptom),
                                                                             ("layer", a.layer)) if v},
                   **a.extra_labels},
        "annotations": {"summary": a.summary, "description": a.description, "action": action,
                        "tradeoff": tradeoff, **a.annotations},
    }


# (file, group name, builder): the sidecar's alerts, and the raw-series alerts for fleets without it.
ALERT_GROUPS: tuple[tuple[str, str, Callable[[Options], list[Alert]]], ...] = (
    (ALERTS_FILE, "vllm-diag.symptoms", lambda o: [symptom_alert(s, o) for s in SYMPTOMS]),
    (ALERTS_FILE, "vllm-diag.root-causes", root_cause_alerts),
    (ALERTS_FILE, "vllm-diag.operations", ops_alerts),
    (RAW_ALERTS_FILE, "vllm-diag.slo", slo_alerts),
)
RECORDING_GROUPS = ("vllm-diag.recording", "vllm-diag.slo-recording")
# Records before the alerts that read them. Prometheus runs groups concurrently, so in production an
# alert may see a record one evaluation late; promtool orders groups only when told (otherwise at
# random per run), and its tests name this order to be deterministic.
GROUP_EVAL_ORDER: tuple[str, ...] = (*RECORDING_GROUPS, *(name for _, name, _ in ALERT_GROUPS))


def rule_groups(o: Options = DEFAULT_OPTIONS) -> dict[str, list[dict[str, Any]]]:
    """File -> rule groups, as plain data (what the template writes, and what tests read)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path, name, build in ALERT_GROUPS:
        out.setdefault(path, []).append(
            {"name": name, "rules": [alert_rule(a, o) for a in add_runbook_links(build(o))]})
    out[RECORDING_FILE] = [
        {"name": RECORDING_GROUPS[0], "rules": [_record(r) for r in recording_rules()]},
        {"name": RECORDING_GROUPS[1], "rules": [_record(r) for r in sli_recording_rules(o)]},
    ]
    return out


def _record(r: Recording) -> dict[str, Any]:
    return {"record": r.record, "expr": r.expr, "help": r.help, **({"labels": dict(r.labels)} if r.labels else {})}


def render_files(o: Options = DEFAULT_OPTIONS) -> dict[str, str]:
    template = environment().get_template("rules.yml.j2")
    return {path: template.render(groups=groups) for path, groups in rule_groups(o).items()}


def render_alertmanager(o: Options = DEFAULT_OPTIONS) -> dict[str, str]:
    """The plain Alertmanager example and the Prometheus Operator's AlertmanagerConfig, from one set of
    routes and inhibitions."""
    values = dict(
        inhibitions=[{"source": src, "targets": "|".join(targets), "equal": list(equal)}
                     for src, targets, equal in INHIBITIONS],
        group_by=list(GROUP_BY), page_group_by=list(PAGE_GROUP_BY),
        severities={s: o.severity(s) for s in SEVERITIES},
    )
    env = environment()
    return {ALERTMANAGER_FILE: env.get_template("alertmanager.yml.j2").render(**values),
            ALERTMANAGER_CONFIG_FILE: env.get_template("alertmanagerconfig.yaml.j2").render(**values)}


def all_expressions(o: Options = DEFAULT_OPTIONS) -> list[str]:
    """Every PromQL expression in the rendered rules (alerts and recording rules)."""
    return [rule["expr"] for groups in rule_groups(o).values() for g in groups for rule in g["rules"]]


def recording_names() -> frozenset[str]:
    return frozenset(r.record for r in (*recording_rules(), *sli_recording_rules()))
