"""Prometheus alerting and recording rules, and the Alertmanager example, from the catalog.

Reads top-down: settings, recording rules, alerts (symptom classes, root causes, operations),
the runbook-link post-processing step, rendering. Every number in an expression comes from
``exporter.catalog.thresholds`` or ``exporter.config`` (the test suite fails on any other
comparison literal); ``for:`` durations and the rate window are declared once below with the
reason for their value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import jinja2

from exporter.catalog.symptoms import CAUSE_BY_ID, CAUSES, SYMPTOMS, Cause, Symptom
from exporter.catalog.thresholds import DEFAULTS
from exporter.config import Settings, Slo
from exporter.render import PromQL, fmt

# ---------------------------------------------------------------------------------------------
# Settings (declared once; each says what it controls)
# ---------------------------------------------------------------------------------------------

ALERTS_FILE = "alert_rules/vllm-diag-alerts.yml"
RECORDING_FILE = "alert_rules/vllm-diag-recording.yml"
ALERTMANAGER_FILE = "deploy/alertmanager/alertmanager.yml"

# Where runbook_url points: <base>/<alertname lowercased>.md. Change it when the docs are served
# elsewhere (a fork, an internal wiki mirror); the file names under docs/runbooks/ stay the same.
RUNBOOK_BASE_URL = "https://github.com/vllm-diag/vllm-diag/blob/main/docs/runbooks"
RUNBOOK_DIR = "docs/runbooks"

# Rate window of the recording rules: 5m spans >= 4 scrapes at Prometheus' common 15-60 s
# intervals, so rate() survives one missed scrape. It is part of the rule names (`:rate5m`).
RATE_WINDOW = "5m"

# `for:` by severity. The sidecar already smooths over its window (default 60 s) and holds its
# verdict with hysteresis, so `for` only has to outlast a few windows: pages must be sustained but
# prompt, tickets and info can wait longer to stay quiet on short bursts.
FOR_BY_SEVERITY: Mapping[str, str] = {"page": "6m", "ticket": "10m", "info": "15m"}
# Root-cause alerts fire before the symptom alerts they inhibit (their `for` is shorter than any
# symptom page), and keep firing through a short dip so the symptoms they explain stay inhibited.
FOR_ROOT_CAUSE = "5m"
KEEP_FIRING_ROOT_CAUSE = "5m"
# Root-cause conditions read the sidecar's gauges smoothed over this range: preemptions come in
# bursts and the per-window ratio dips between them, which would reset `for` again and again.
SMOOTHING_RANGE = "5m"
# A vLLM that does not answer breaks serving: page sooner than a diagnosis does.
FOR_TARGET_DOWN = "3m"

# Prometheus job(s) that scrape the sidecar itself. A regex, so `vllm-diag`,
# `monitoring/vllm-diag` (ServiceMonitor naming) and `vllm-diag-sidecar` all match.
SIDECAR_JOB_REGEX = ".*vllm-diag.*"

# A diagnosis older than one whole window means the sidecar's polling/evaluation loop is wedged
# (it evaluates on every scrape, failed ones included). The window is the config default.
STALE_AFTER_SECONDS: float = Settings.model_fields["window_seconds"].default

SLO = Slo()
# vllm_diag_ttft_seconds exposes these quantiles (exporter.signals.QUANTILES); the tail alert reads p99.
TAIL_QUANTILE = "0.99"

T = DEFAULTS  # catalog threshold defaults by key

# ---------------------------------------------------------------------------------------------
# Recording rules (for users without the sidecar: the core signals straight from vLLM)
# ---------------------------------------------------------------------------------------------

RAW = PromQL()


@dataclass(frozen=True, slots=True)
class Recording:
    record: str
    expr: str
    help: str  # rendered as a comment above the rule and used in the runbooks/dashboards


def frontend_overhead(q: PromQL, window: str) -> str:
    """mean(e2e) - mean(queue) - mean(inference): per-request time outside the engine (same population)."""
    return "\n-\n".join(f"({q.mean(h, window)})" for h in (
        "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds"))


def recording_rules() -> list[Recording]:
    w = RATE_WINDOW
    finished = RAW.sum_rate("vllm:request_success_total", w, drop=("finished_reason",))
    return [
        Recording(f"model:vllm_preemptions:rate{w}", RAW.sum_rate("vllm:num_preemptions_total", w),
                  "Preemptions per second."),
        Recording(f"model:vllm_requests_finished:rate{w}", finished,
                  "Finished requests per second, all finished_reason values (client aborts are not counted by vLLM)."),
        Recording(f"model:vllm_preemptions_per_request:ratio_rate{w}",
                  RAW.divide(RAW.sum_rate("vllm:num_preemptions_total", w), finished),
                  "Preemptions per finished request (symptom D reads this)."),
        Recording(f"model:vllm_prefix_cache_hit:ratio_rate{w}",
                  RAW.ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", w),
                  "Prefix-cache hit efficiency: cached / queried prompt tokens (symptom F)."),
        Recording("model:vllm_kv_cache_usage:max", RAW.agg("max", "vllm:kv_cache_usage_perc"),
                  "Highest KV cache usage (0..1) across the model's engines and replicas."),
        Recording(f"model:vllm_ttft_seconds:p95_rate{w}",
                  RAW.quantile(0.95, "vllm:time_to_first_token_seconds", w), "TTFT p95 (the SLO quantile)."),
        Recording(f"model:vllm_ttft_seconds:p99_rate{w}",
                  RAW.quantile(0.99, "vllm:time_to_first_token_seconds", w), "TTFT p99 (tail latency)."),
        Recording(f"model:vllm_itl_seconds:p95_rate{w}",
                  RAW.quantile(0.95, "vllm:inter_token_latency_seconds", w), "Inter-token latency p95 (the SLO quantile)."),
        Recording(f"model:vllm_requests_waiting:deriv{w}",
                  f"sum {RAW._without()} (deriv(vllm:num_requests_waiting[{w}]))",
                  "Queue growth: waiting requests added per second (positive = the queue builds up)."),
        Recording(f"model:vllm_frontend_overhead_seconds:mean_rate{w}",
                  frontend_overhead(RAW, w),
                  "Mean time per request outside the engine: e2e - queue - inference (tokenization, templates, "
                  "IPC, output handling; the CPU path)."),
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

    @property
    def duration(self) -> str:
        return self.for_ or FOR_BY_SEVERITY[self.severity]

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


def _primary_layer(causes: Sequence[Cause]) -> str:
    """The layer most of a symptom's causes sit in (first in catalog order on a tie)."""
    counts: dict[str, int] = {}
    for c in causes:
        counts[c.layer] = counts.get(c.layer, 0) + 1
    return max(counts, key=lambda layer: (counts[layer], -list(counts).index(layer)))


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


def symptom_alert(s: Symptom) -> Alert:
    causes = _causes_of(s.id)
    layers = ", ".join(dict.fromkeys(f"{c.id} {c.layer}" for c in causes))
    return Alert(
        name=s.alert,
        expr=f'vllm_diag_symptom_active{{symptom="{s.id}"}} == 1',
        severity=s.severity,
        symptom=s.id,
        layer=_primary_layer(causes),
        summary=f"vLLM symptom {s.id}: {s.title}.",
        description=(f"Symptom {s.id} ({s.title}) has been active on {{{{ $labels.target }}}} "
                     f"(model {{{{ $labels.model_name }}}}, value {{{{ $value }}}}). Possible causes: {layers}; "
                     f"vllm_diag_cause_active{{symptom=\"{s.id}\"}} names the active one."),
        meaning=(f"The sidecar's diagnosis reports symptom class {s.id}, \"{s.title}\", for longer than "
                 f"{FOR_BY_SEVERITY[s.severity]}. The layer label is the layer most of its causes sit in; "
                 f"the active cause decides the real layer."),
        causes=causes,
        verify=(Verify("active causes and their layers", f'vllm_diag_cause_active{{symptom="{s.id}"}} == 1'),
                *SYMPTOM_VERIFY[s.id]),
    )


def root_cause_alerts() -> list[Alert]:
    ppr, kv_high, cpu = T["preemptions_per_request"], T["kv_usage_high"], T["cpu_starvation_score"]
    cpu_causes = tuple(c for c in CAUSES if c.layer == "cpu")
    return [
        Alert(
            name="VLLMKVCachePressure",
            expr=(f"avg_over_time(vllm_diag_preemptions_per_request[{SMOOTHING_RANGE}]) > {fmt(ppr)}\n"
                  "and on (target, model_name)\n"
                  f'max_over_time(vllm_diag_kv_cache_usage_ratio{{stat="max"}}[{SMOOTHING_RANGE}]) > {fmt(kv_high)}'),
            severity="page", symptom="D", layer="kv_cache",
            for_=FOR_ROOT_CAUSE, keep_firing_for=KEEP_FIRING_ROOT_CAUSE,
            summary="vLLM is short of KV cache: requests are preempted and recomputed.",
            description=(f"{{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}) preempts "
                         f"{{{{ $value | printf \"%.2f\" }}}} times per finished request (threshold {fmt(ppr)}) while KV "
                         f"usage peaked above {fmt(kv_high)} in the window: latency rises and GPU work is wasted."),
            meaning=("Root cause, not a symptom: KV cache space is the bottleneck. Preemption is frequent "
                     f"(over {fmt(ppr)} per finished request) and KV usage reached {fmt(kv_high)} in the same "
                     "window. The same shortage also caps concurrency (cause C3, "
                     f"{CAUSE_BY_ID['C3'].title.lower()})."),
            causes=(CAUSE_BY_ID["D"],),
            verify=SYMPTOM_VERIFY["D"],
        ),
        Alert(
            name="VLLMCPUStarvation",
            expr=f"avg_over_time(vllm_diag_cpu_starvation_score[{SMOOTHING_RANGE}]) >= {fmt(cpu)}",
            severity="page", symptom="C", layer="cpu",
            for_=FOR_ROOT_CAUSE, keep_firing_for=KEEP_FIRING_ROOT_CAUSE,
            summary="vLLM's processes are short of CPU: the engine loop or the frontend stalls.",
            description=(f"CPU-starvation score of {{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}) "
                         f"is {{{{ $value | printf \"%.2f\" }}}} (threshold {fmt(cpu)}): run-queue wait, CFS throttling "
                         "or CPU pressure keep the engine from feeding the accelerator."),
            meaning=("Root cause, not a symptom: the CPU layer holds vLLM back. The score combines run-queue wait "
                     "of the vLLM threads, cgroup throttling, CPU PSI and API-server CPU, whichever are available "
                     f"(see vllm_diag_cpu_signal); at {fmt(cpu)} the CPU layer is blamed."),
            causes=cpu_causes,
            verify=(Verify("the score", "vllm_diag_cpu_starvation_score"),
                    Verify("each input of the score", "vllm_diag_cpu_signal"),
                    Verify("API-server CPU in cores", "vllm_diag_api_server_cpu_cores"),
                    Verify("raw frontend overhead per request (e2e - queue - inference)",
                           frontend_overhead(RAW, RATE_WINDOW))),
        ),
    ]


def ops_alerts() -> list[Alert]:
    ttft_slo = SLO.ttft_p95_seconds
    sidecar_up = f'up{{job=~"{SIDECAR_JOB_REGEX}"}}'
    return [
        Alert(
            name="VLLMTailLatencyHigh",
            expr=f'vllm_diag_ttft_seconds{{quantile="{TAIL_QUANTILE}"}} > {fmt(ttft_slo)}',
            severity="ticket", symptom="none", layer="unknown",
            summary="vLLM time-to-first-token p99 is above the TTFT SLO.",
            description=(f"TTFT p{fmt(float(TAIL_QUANTILE) * 100)} of {{{{ $labels.target }}}} (model "
                         f"{{{{ $labels.model_name }}}}) is {{{{ $value | humanizeDuration }}}}, above the "
                         f"{fmt(ttft_slo)}s TTFT SLO (p95 target)."),
            meaning=(f"The slowest 1% of first tokens take longer than the TTFT SLO ({fmt(ttft_slo)} s at p95, "
                     "exporter.config.Slo). This is an outcome, not a layer: the symptom and root-cause alerts "
                     "(or vllm_diag_layer_verdict) say where it comes from. Tail latency with frequent "
                     "preemption is usually KV pressure (worked case 4 of the method)."),
            verify=(Verify("TTFT quantiles over the sidecar window", "vllm_diag_ttft_seconds"),
                    Verify("raw TTFT p99", RAW.quantile(0.99, "vllm:time_to_first_token_seconds", RATE_WINDOW)),
                    Verify("current verdict layer", "vllm_diag_layer_verdict == 1"),
                    Verify("active symptoms", "vllm_diag_symptom_active == 1")),
            action="follow the active symptom or root-cause alert's runbook (vllm_diag_layer_verdict names the layer)",
            tradeoff="depends on the cause; every knob trades TTFT against ITL, throughput or memory",
        ),
        Alert(
            name="VLLMTargetDown",
            expr="vllm_diag_up == 0",
            severity="page", symptom="none", layer="unknown", for_=FOR_TARGET_DOWN,
            summary="The sidecar cannot scrape a vLLM /metrics endpoint.",
            description=("vllm-diag has failed to scrape {{ $labels.target }}; "
                         "vllm_diag_up is {{ $value }}. The engine is down, hung or unreachable, and its "
                         "diagnosis is suspended."),
            meaning=("The last scrapes of the vLLM target failed (timeout, HTTP error, connection refused, "
                     "unparsable or too large). Serving is probably broken, and the alerts it inhibits would only "
                     "repeat stale evidence."),
            verify=(Verify("scrape state", "vllm_diag_up"),
                    Verify("failed scrapes by reason", "rate(vllm_diag_scrape_errors_total[5m]) > 0"),
                    Verify("seconds since the last good scrape",
                           "time() - vllm_diag_last_success_timestamp_seconds")),
            action="check the vLLM process/pod (logs, OOM kills, restarts) and that the target URL is reachable "
                   "from the sidecar",
            tradeoff="none: restoring the engine has no downside; a restart drops in-flight requests",
        ),
        Alert(
            name="VLLMDiagSidecarDown",
            expr=f"{sidecar_up} == 0\nor\nabsent({sidecar_up})",
            severity="ticket", symptom="none", layer="unknown",
            summary="Prometheus cannot scrape the vllm-diag sidecar.",
            # No `target` label here: the sidecar watches all targets; absent() carries no labels at all.
            description=("{{ if $labels.instance }}The vllm-diag sidecar {{ $labels.instance }} (job {{ $labels.job }}) "
                         "is down{{ else }}No vllm-diag sidecar is among Prometheus' targets{{ end }} "
                         "(value {{ $value }}): no diagnosis alert can fire while it is gone."),
            meaning=("Prometheus has no healthy scrape of the sidecar: either a sidecar instance is scraped and "
                     "down (`up == 0`, one alert per instance), or no job matching "
                     f"`{SIDECAR_JOB_REGEX}` exists at all (`absent(...)`: discovery lost it, or the scrape config "
                     "is missing). The second form catches what `up == 0` cannot: a sidecar that vanished. "
                     "Serving may be fine; the diagnosis alerts are blind."),
            verify=(Verify("sidecar scrape state", sidecar_up),),
            action="check the sidecar container (logs, restarts) and the Prometheus scrape config / ServiceMonitor",
            tradeoff="none",
        ),
        Alert(
            name="VLLMDiagnosisStale",
            expr=f"time() - vllm_diag_last_evaluation_timestamp_seconds > {fmt(STALE_AFTER_SECONDS)}",
            severity="ticket", symptom="none", layer="unknown",
            summary="The vllm-diag diagnosis has stopped updating.",
            description=("The diagnosis of {{ $labels.target }} (model {{ $labels.model_name }}) was last "
                         "evaluated {{ $value | humanizeDuration }} ago (limit "
                         f"{fmt(STALE_AFTER_SECONDS)}s, one window): the published verdict is stale."),
            meaning=("The sidecar evaluates each target on every scrape, failed ones included, so an evaluation "
                     f"older than one window ({fmt(STALE_AFTER_SECONDS)} s, the default window_seconds) means its "
                     "polling loop is wedged while its HTTP endpoint still answers."),
            verify=(Verify("seconds since the last evaluation", "time() - vllm_diag_last_evaluation_timestamp_seconds"),
                    Verify("scrape duration", "vllm_diag_scrape_duration_seconds")),
            action="restart the sidecar and report the hang with its logs",
            tradeoff="none: a restart empties the window, so the diagnosis reads insufficient_evidence for one window",
        ),
    ]


def alerts() -> list[Alert]:
    """Every alert, runbook links added (the one post-processing step)."""
    return add_runbook_links([a for _, build in ALERT_GROUPS for a in build()])


# Alertmanager inhibition: a root cause silences the symptom alerts it explains on the same target.
_ALERT_OF = {s.id: s.alert for s in SYMPTOMS}
INHIBITIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("VLLMKVCachePressure", tuple(_ALERT_OF[s] for s in "ACDEF")),
    ("VLLMCPUStarvation", tuple(_ALERT_OF[s] for s in "ABC")),
    ("VLLMTargetDown", (*(_ALERT_OF[s.id] for s in SYMPTOMS), "VLLMKVCachePressure", "VLLMCPUStarvation")),
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


def alert_rule(a: Alert) -> dict[str, Any]:
    action, tradeoff = a.actions_text()
    return {
        "alert": a.name, "expr": a.expr, "for": a.duration,
        **({"keep_firing_for": a.keep_firing_for} if a.keep_firing_for else {}),
        "labels": {"severity": a.severity, "symptom": a.symptom, "layer": a.layer},
        "annotations": {"summary": a.summary, "description": a.description, "action": action,
                        "tradeoff": tradeoff, **a.annotations},
    }


ALERT_GROUPS: tuple[tuple[str, Callable[[], list[Alert]]], ...] = (
    ("vllm-diag.symptoms", lambda: [symptom_alert(s) for s in SYMPTOMS]),
    ("vllm-diag.root-causes", root_cause_alerts),
    ("vllm-diag.operations", ops_alerts),
)


def rule_groups() -> dict[str, list[dict[str, Any]]]:
    """File -> rule groups, as plain data (what the template writes, and what tests read)."""
    return {
        ALERTS_FILE: [{"name": name, "rules": [alert_rule(a) for a in add_runbook_links(build())]}
                      for name, build in ALERT_GROUPS],
        RECORDING_FILE: [
            {"name": "vllm-diag.recording", "rules": [{"record": r.record, "expr": r.expr, "help": r.help}
                                                      for r in recording_rules()]},
        ],
    }


def render_files() -> dict[str, str]:
    template = environment().get_template("rules.yml.j2")
    return {path: template.render(groups=groups) for path, groups in rule_groups().items()}


def render_alertmanager() -> dict[str, str]:
    template = environment().get_template("alertmanager.yml.j2")
    return {ALERTMANAGER_FILE: template.render(
        inhibitions=[{"source": src, "targets": "|".join(targets)} for src, targets in INHIBITIONS],
        group_by=["alertname", "target", "model_name"],
    )}


def all_expressions() -> list[str]:
    """Every PromQL expression in the rendered rules (alerts and recording rules)."""
    return [rule["expr"] for groups in rule_groups().values() for g in groups for rule in g["rules"]]


def recording_names() -> frozenset[str]:
    return frozenset(r.record for r in recording_rules())
