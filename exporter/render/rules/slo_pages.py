"""Service-level objectives: error-budget burn per model (pages and tickets in kube-prometheus' four
tiers), low-traffic models (their bad share), the replica outlier (a warning naming the pod).

A page's labels are fixed per (cluster, namespace, model, objective, severity, tier): the cause,
layer and symptom the sidecars name are annotations read from a recording rule (``CAUSE_RECORD``) at
notification time, so a cause that changes mid-incident updates the notification instead of
resolving one alert and opening another.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.catalog import metrics as vllm
from exporter.catalog.symptoms import CAUSES, EXPLAINED_BY, SYMPTOMS
from exporter.render import slo
from exporter.render.promql import fmt
from exporter.render.rules._config import (
    DEFAULT_OPTIONS,
    FOR_BURN,
    FOR_BURN_SLOW,
    FOR_LOW_TRAFFIC,
    FOR_STALLED,
    STALL_WINDOW,
    Options,
    _indent,
    duration,
)
from exporter.render.rules.alert import _CAP_TOKENS, _SCALE_OUT, _SHED, AWAKE, Alert, Mitigation, Verify, always
from exporter.render.rules.recording import RAW, Recording

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



# The majority cause per model and objective, with ties broken by the cause's priority (a known cause
# first, then its symptom's severity, then its id): a constant under one half added to the replica
# count, so topk picks the same cause in every run.
CAUSE_RECORD = "namespace_model:vllm_slo_cause:majority"
PRIORITY_RECORD = "vllm_slo:cause_priority:ratio"
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def cause_priority() -> dict[str, float]:
    """cause id -> a fraction in (0, 0.5): higher for the cause that wins a tie. A known cause beats an
    effect without one (A0/B0, layer `unknown`), then the more severe symptom, then the lower id."""
    severity = {s.id: s.severity for s in SYMPTOMS}
    ranked = sorted(CAUSES, key=lambda c: (c.layer == "unknown", _SEVERITY_RANK[severity[c.symptom]], c.id))
    return {c.id: round((len(ranked) - i) / (2 * (len(ranked) + 1)), 4) for i, c in enumerate(ranked)}


def cause_of_burn(o: Options = DEFAULT_OPTIONS) -> str:
    """Per model and objective, labels cause/layer/symptom: refused requests when they are most of the
    availability objective's bad events (``admission_cause``), else the cause active on most replicas among
    those that explain the objective (value: replicas, plus its tie-break), else `unknown` (value 0: no
    sidecar, or no cause explains it)."""
    by = ", ".join((*MODEL, "cause", "layer", "symptom"))
    known = "\nor\n".join(
        f'label_replace(\n  count by ({by}) (\n'
        f'    {smoothed_causes(o, f"symptom=~{chr(34)}{sym}{chr(34)}")}\n'
        f'  ),\n  "objective", "{obj}", "", "")'
        for obj, sym in EXPLAINS.items())
    unknown = ('label_replace(label_replace(label_replace(\n'
               f'  0 * count by ({", ".join((*MODEL, "objective"))}) ({slo.model_events("1h")}),\n'
               '  "cause", "unknown", "", ""), "layer", "unknown", "", ""), "symptom", "none", "", "")')
    majority = (f"topk by ({', '.join((*MODEL, 'objective'))}) (1,\n  (\n{_indent(known, '    ')}\n  )\n"
                f"  + on (cause) group_left ()\n  {PRIORITY_RECORD}\n)")
    return f"(\n{_indent(admission_cause())}\n)\nor {_MODEL_OBJ_ON}\n{majority}\nor {_MODEL_OBJ_ON}\n{unknown}"


# Requests refused at the API server's admission gate are bad availability events vLLM counts itself
# (exporter.render.slo): where they are at least half of a model's bad events over the first paging
# window, they are the cause the page names, ahead of what the sidecars see.
ADMISSION_CAUSE = "admission_control"
ADMISSION_LAYER = "scheduler"
ADMISSION_TITLE = ("admission control: the API server refuses requests at its queue limit (HTTP 503, "
                   "--max-num-queued-reqs / --max-num-queued-tokens)")


def admission_cause(window: str = slo.PAGES[0].long_window) -> str:
    """Per model, objective availability: cause `admission_control` (value: replicas refusing requests)
    where refused requests are at least half of the model's bad availability events over ``window``."""
    by = f"by ({', '.join(MODEL)})"
    refusing = (f"count {by} (\n  {_indent(slo.rejections(window), '  ').lstrip()} > 0\n)\n"
                f"and {_MODEL_ON}\n"
                f"sum {by} ({slo.rejections(window)}) * 2\n>= {_MODEL_ON}\n"
                f'sum {by} ({slo.model_bad_events(window)}{{objective="availability"}})')
    labels = (("objective", "availability"), ("cause", ADMISSION_CAUSE), ("layer", ADMISSION_LAYER),
              ("symptom", "none"))
    out = refusing
    for name, value in labels:
        out = f'label_replace(\n{_indent(out)},\n  "{name}", "{value}", "", "")'
    return out


def cause_recording_rules(o: Options = DEFAULT_OPTIONS) -> list[Recording]:
    priority = "\nor\n".join(f'label_replace(vector({fmt(v)}), "cause", "{c}", "", "")'
                             for c, v in cause_priority().items())
    return [Recording(PRIORITY_RECORD, priority,
                      "Tie-break of the majority cause: its symptom's severity, then its id (a constant under 0.5)."),
            Recording(CAUSE_RECORD, cause_of_burn(o),
                      "The cause the sidecars name on most replicas of the model, per objective (value: replicas "
                      "naming it plus its tie-break); `admission_control` (value: replicas refusing) when refused "
                      "requests are at least half of the availability objective's bad events; cause `unknown` "
                      "with value 0 when none does.")]


# Go template: $cause, $layer and $symptom of the alert's model and objective, read from CAUSE_RECORD
# (each annotation is expanded on its own, so each that needs them starts with this).
_CAUSE_QUERY = ('{{ $cause := "unknown" }}{{ $layer := "unknown" }}{{ $symptom := "none" }}'
                '{{ with query (printf "' + CAUSE_RECORD + '{cluster=%q, namespace=%q, model_name=%q, objective=%q}" '
                '$labels.cluster $labels.namespace $labels.model_name $labels.objective) }}{{ with . | first }}'
                '{{ $cause = .Labels.cause }}{{ $layer = .Labels.layer }}{{ $symptom = .Labels.symptom }}'
                '{{ end }}{{ end }}')


def _cause_titles() -> str:
    """A Go-template chain naming each catalog cause (Alertmanager receivers see the text)."""
    chain = "".join(f'{{{{ {"if" if i == 0 else "else if"} eq $cause "{c.id}" }}}}{c.title}'
                    for i, c in enumerate(CAUSES))
    chain += f'{{{{ else if eq $cause "{ADMISSION_CAUSE}" }}}}{ADMISSION_TITLE}'
    return chain + "{{ else }}no cause the sidecar can name (see the runbook){{ end }}"


def cause_annotations() -> dict[str, str]:
    """The cause, layer and symptom as annotations (never labels: the alert's identity stays put)."""
    return {"cause": _CAUSE_QUERY + "{{ $cause }}", "layer": _CAUSE_QUERY + "{{ $layer }}",
            "symptom": _CAUSE_QUERY + "{{ $symptom }}"}


# The worst replicas of the model for the page's objective (by their 1h burn), named in the page.
WORST_REPLICAS = 3
_WORST = ('{{ range query (printf "topk(' + str(WORST_REPLICAS) + ', ' + slo.pod_burn("1h")
          + '{namespace=%q, model_name=%q, objective=%q})" $labels.namespace $labels.model_name $labels.objective) }}'
          '{{ .Labels.pod }}{{ if .Labels.instance }} ({{ .Labels.instance }}){{ end }} '
          '{{ .Value | printf "%.1f" }}x; {{ end }}')


# Evidence for the page text, queried at notification time for the model (Go templates).
_SEL = 'namespace=%q, model_name=%q'
_EVIDENCE = (
    '{{ if eq $cause "' + ADMISSION_CAUSE + '" }}'
    '{{ with query (printf "sum(rate(' + vllm.ADMISSION_REJECTIONS_TOTAL + '{' + _SEL + '}[5m]))" $labels.namespace '
    '$labels.model_name) }}, {{ . | first | value | printf "%.2g" }} requests/s refused{{ end }}'
    '{{ else if eq $layer "kv_cache" }}'
    '{{ with query (printf "sum(rate(' + vllm.NUM_PREEMPTIONS_TOTAL + '{' + _SEL + '}[5m]))" $labels.namespace '
    '$labels.model_name) }}, {{ . | first | value | printf "%.2g" }} preemptions/s{{ end }}'
    '{{ with query (printf "max(vllm_diag_kv_cache_usage_ratio{' + _SEL + ', stat=\\"max\\"})" $labels.namespace '
    '$labels.model_name) }}, KV {{ . | first | value | humanizePercentage }}{{ end }}'
    '{{ else if eq $layer "cpu" }}'
    '{{ with query (printf "max(vllm_diag_cpu_starvation_score{' + _SEL + '})" $labels.namespace '
    '$labels.model_name) }}, CPU-starvation score {{ . | first | value | printf "%.2f" }}{{ end }}'
    # No known cause: requests waiting for something other than capacity are the first thing to look at.
    '{{ else if eq $layer "unknown" }}'
    '{{ with query (printf "sum(' + vllm.NUM_REQUESTS_WAITING_BY_REASON + '{' + _SEL + ', reason=\\"deferred\\"}) > 0" '
    '$labels.namespace $labels.model_name) }}, {{ . | first | value | printf "%.0f" }} requests waiting deferred '
    '(LoRA slot, KV transfer){{ end }}'
    '{{ end }}'
)




def _gated(condition: str, o: Options, *, level: str = "model") -> str:
    events = slo.model_events("1h") if level == "model" else slo.pod_events("1h")
    return f"(\n{_indent(condition)}\n)\nand\n{events} * 3600 >= {fmt(o.thresholds['slo_min_requests'])}"


def tiers(alerts: tuple[slo.BurnAlert, ...], o: Options) -> tuple[tuple[Mapping[str, str], str], ...]:
    """One rule per pair, kube-prometheus style: the `long`/`short` labels say which pair fired. A ticket
    holds only while no paging pair does (the page says it all; Alertmanager's inhibition too)."""
    def expr(a: slo.BurnAlert) -> str:
        gated = _gated(slo.burn_condition(a), o)
        if a.severity == "critical":
            return gated
        return f"(\n{_indent(gated)}\n)\nunless {_MODEL_OBJ_ON}\n(\n{_indent(slo.page_condition())}\n)"
    return tuple(({"long": a.long_window, "short": a.short_window, **({"for": a.for_} if a.for_ else {})},
                  expr(a)) for a in alerts)


def low_traffic(o: Options, window: str, min_events: float, *, unless: str = "") -> str:
    """Most of a quiet model's few events bad over ``window``, at least ``min_events`` of them, while the
    last hour holds too few events for a burn rate to page."""
    t = o.thresholds
    expr = (f"(\n{_indent(slo.bad_share(window))}\n) > {fmt(t['slo_low_traffic_bad_share'])}\n"
            f"and\n{slo.model_events(window)} * {slo.window_seconds(window)} >= {fmt(min_events)}\n"
            f"unless\n{slo.model_events('1h')} * 3600 >= {fmt(t['slo_min_requests'])}")
    return f"(\n{_indent(expr)}\n)\nunless {_MODEL_OBJ_ON}\n(\n{_indent(unless)}\n)" if unless else expr


def replica_outlier(o: Options) -> str:
    """A replica that burns at the first paging pair's rate while its bad share is far above its siblings'
    (the model's events without its own): named whatever the model does."""
    t, first = o.thresholds, slo.PAGES[0]
    on = f"on ({', '.join((*MODEL, 'objective'))}) group_right"
    siblings = (f"(\n  {slo.model_bad_events('1h')}\n  - {on}\n  {slo.pod_bad_events('1h')}\n)\n/\n(\n"
                f"  {slo.model_events('1h')}\n  - {on}\n  {slo.pod_events('1h')}\n  > 0\n)")
    return (f"(\n{_indent(slo.bad_share('1h', level='pod'))}\n)\n"
            f"> {fmt(t['replica_outlier_ratio'])} * (\n{_indent(siblings)}\n)\n"
            f"and\n(\n{_indent(_gated(slo.burn_condition(first, level='pod'), o, level='pod'))}\n)")


def slo_verify(level: str = "model") -> tuple[Verify, ...]:
    burn_rec = slo.model_burn if level == "model" else slo.pod_burn
    pod = ', pod="$pod"' if level == "pod" else ""
    scope = '{objective="$objective", namespace="$namespace", model_name="$model_name"' + pod + '}'
    return (
        Verify("burn rates of the paging windows (14.4 over 1h and 5m, or 6 over 6h and 30m, page)",
               f"{burn_rec('1h')}{scope} or {burn_rec('5m')}{scope}"),
        Verify("bad events per second, per replica (which replicas burn)", f"{slo.pod_bad_events('5m')}{scope}"),
        Verify("the cause named on the page (the majority of the replicas' sidecars)",
               f'{CAUSE_RECORD}{{objective="$objective", namespace="$namespace", model_name="$model_name"}}'),
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
    """Error-budget burn per model (the page, with its cause), low-traffic models, the replica outlier
    (a warning) and slow burns (tickets).

    They read vLLM's own series through the SLI recording rules, so a fleet without the sidecar gets
    the same pages (cause `unknown`)."""
    t = o.thresholds
    page_pairs = " or ".join(f"{fmt(a.factor)}x over {a.long_window} and {a.short_window}" for a in slo.PAGES)
    ticket_pairs = " or ".join(f"{fmt(a.factor)}x over {a.long_window} and {a.short_window}" for a in slo.TICKETS)
    title = '{{ $labels.objective | toUpper }}'
    where = "{{ $labels.model_name }}{{ if $labels.namespace }} (namespace {{ $labels.namespace }}){{ end }}"
    cause = _CAUSE_QUERY + "cause: " + _cause_titles() + " ({{ $cause }}, layer {{ $layer }}" + _EVIDENCE + ")"
    page_window, ticket_window = slo.LOW_TRAFFIC_PAGE_WINDOW, slo.LOW_TRAFFIC_TICKET_WINDOW
    share = fmt(t["slo_low_traffic_bad_share"] * 100)
    low_page = low_traffic(o, page_window, t["slo_low_traffic_min_events"])
    low_ticket = low_traffic(o, ticket_window, t["slo_low_traffic_ticket_min_events"], unless=low_page)
    return [
        Alert(
            name="VLLMErrorBudgetBurn", scope="model", severity="critical", symptom="", layer="", for_=FOR_BURN,
            expr=tiers(slo.PAGES, o)[0][1], tiers=tiers(slo.PAGES, o),
            summary="A model's error budget burns fast enough to exhaust it within days; users are hurt now.",
            description=(f"{title} budget burning {{{{ $value | printf \"%.1f\" }}}}x over "
                         f"{{{{ $labels.long }}}} on model {where}; " + cause + ". Worst replicas (1h burn): "
                         + _WORST),
            meaning=("The share of bad events of one objective across all replicas of the model (TTFT or ITL over "
                     "its threshold, or failed requests) spends the 30-day error budget at least "
                     f"{page_pairs} (the SRE workbook's multiwindow, multi-burn-rate page, one rule per pair as "
                     "kube-prometheus does: the `long` and `short` labels say which pair fired). The long window "
                     "proves the burn is significant, the short one that it is still going on. The `cause` "
                     "annotation is the cause the vllm-diag sidecars name on most replicas (symptom classes that "
                     "explain this objective; a tie goes to the more severe symptom, then the lower id): A0 or B0 "
                     "(layer `unknown`) when they see the objective missed and no cause they know explains it, "
                     "`unknown` when no sidecar runs or none names a cause. On the availability objective, "
                     f"requests refused at the API server's admission gate ({vllm.ADMISSION_REJECTIONS_TOTAL}) "
                     "count as bad events, and where they are at least half of them the cause is "
                     f"`{ADMISSION_CAUSE}` (layer `{ADMISSION_LAYER}`), sidecar or not: raise the queue limits "
                     "(--max-num-queued-reqs, --max-num-queued-tokens) only with capacity behind them, else scale "
                     "out. It is an annotation, not a label: a "
                     "cause that changes mid-incident updates the page instead of opening a second one. One "
                     "notification per model: Alertmanager groups pages by cluster, namespace and model_name. "
                     f"Models with fewer than {fmt(t['slo_min_requests'])} events an hour page through "
                     "VLLMLowTrafficBurn instead."),
            verify=slo_verify("model"),
            action="follow the cause's runbook (the `cause` and `layer` annotations; for A0/B0 the symptom's "
                   "runbook, and the sidecar's evidence says what it looked at); with cause `unknown`, read the "
                   "overview dashboard's layers or run `vllm-diag diagnose --url` against a replica",
            tradeoff="depends on the cause; the immediate mitigations below buy time",
            mitigations=always(_SCALE_OUT, _SHED, _CAP_TOKENS), annotations=cause_annotations(),
        ),
        Alert(
            name="VLLMLowTrafficBurn", scope="model", severity="critical", symptom="", layer="",
            for_=FOR_LOW_TRAFFIC, expr=low_page,
            tiers=(({"long": page_window}, low_page),
                   ({"long": ticket_window, "severity": "warning", "for": FOR_BURN_SLOW}, low_ticket)),
            summary="Most of a low-traffic model's requests miss their objective.",
            description=(f"{{{{ $value | humanizePercentage }}}} of the {title} events of model {where} over "
                         f"{{{{ $labels.long }}}} were bad; " + cause + "."),
            meaning=(f"The model serves fewer than {fmt(t['slo_min_requests'])} events an hour, too few for a burn "
                     "rate to page (a handful of events is noise), so the SRE workbook's low-traffic path applies: "
                     f"the share of bad events itself. Over {share} % of at least "
                     f"{fmt(t['slo_low_traffic_min_events'])} events in {page_window} pages (severity critical, "
                     f"`long` {page_window}); over {share} % of at least "
                     f"{fmt(t['slo_low_traffic_ticket_min_events'])} events in {ticket_window} is a ticket "
                     f"(severity warning, `long` {ticket_window}). A model with one request an hour never pages: "
                     f"it gets the ticket once {fmt(t['slo_low_traffic_ticket_min_events'])} or more of its "
                     f"requests in {ticket_window} are mostly bad."),
            verify=slo_verify("model"),
            action="follow the cause's runbook; with cause `unknown`, send a request yourself and run "
                   "`vllm-diag diagnose --url` against a replica",
            tradeoff="depends on the cause", annotations=cause_annotations(),
        ),
        Alert(
            name="VLLMReplicaErrorBudgetBurn", scope="replica", severity="warning", symptom="", layer="unknown",
            for_=FOR_BURN, expr=replica_outlier(o),
            summary="One replica burns its error budget far faster than its siblings: drain it.",
            description=(f"{title} budget of replica {{{{ $labels.pod }}}}{{{{ if $labels.instance }}}} "
                         "({{ $labels.instance }}){{ end }} (model {{ $labels.model_name }}) is burning: "
                         "{{ $value | humanizePercentage }} of its events over 1h are bad, over "
                         f"{fmt(t['replica_outlier_ratio'])}x its siblings' share."),
            meaning=(f"The replica alone meets the first paging pair ({fmt(slo.PAGES[0].factor)}x over "
                     f"{slo.PAGES[0].long_window} and {slo.PAGES[0].short_window}), and its bad share over 1h is "
                     f"more than {fmt(t['replica_outlier_ratio'])} times the share of the model's other replicas: "
                     "one bad replica (a noisy node, a skewed router, KV pressure on one pod), not the fleet. It "
                     "stays named for as long as it lasts, also while the model's page fires (the page lists the "
                     "worst replicas too). Only for models with more than one replica (with one, the model's page "
                     "is the replica's)."),
            verify=slo_verify("pod"),
            action="compare this replica's diagnosis with its neighbours' (vllm_diag_layer_verdict) and drain it "
                   "if it is the node",
            tradeoff="draining moves its load onto the others",
            mitigations=always(Mitigation("remove the replica from the load balancer until it recovers",
                                          "less capacity meanwhile")),
        ),
        Alert(
            name="VLLMErrorBudgetBurnSlow", scope="model", severity="warning", symptom="", layer="", for_=FOR_BURN_SLOW,
            expr=tiers(slo.TICKETS, o)[0][1], tiers=tiers(slo.TICKETS, o),
            summary="A model spends its error budget faster than the period allows (a ticket, not a page).",
            description=(f"{title} budget of model {where} has burned {{{{ $value | printf \"%.2f\" }}}}x over "
                         "{{ $labels.long }}: at this rate it runs out before the 30 days end; " + cause + "."),
            meaning=(f"{slo.TICKETS[0].budget_share}, or {slo.TICKETS[-1].budget_share}: the burn is "
                     f"{ticket_pairs} (the `long`/`short` labels say which). Slow enough for working hours; "
                     "while the model pages, VLLMErrorBudgetBurn inhibits it."),
            verify=slo_verify("model"),
            action="plan capacity or the knob change the cause's runbook names",
            tradeoff="depends on the cause", annotations=cause_annotations(),
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


