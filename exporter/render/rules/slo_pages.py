"""Service-level objectives: error-budget burn per model (the page), per replica, slow (the ticket)."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.catalog import metrics as vllm
from exporter.catalog.symptoms import CAUSES, EXPLAINED_BY
from exporter.render import slo
from exporter.render.promql import fmt
from exporter.render.rules._config import (
    DEFAULT_OPTIONS,
    FOR_BURN,
    FOR_BURN_SLOW,
    FOR_STALLED,
    STALL_WINDOW,
    Options,
    _indent,
    duration,
)
from exporter.render.rules.alert import _CAP_TOKENS, _SCALE_OUT, _SHED, AWAKE, Alert, Mitigation, Verify, always
from exporter.render.rules.recording import RAW

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


