"""Operations: the vLLM targets, the sidecar itself, its inputs."""

from __future__ import annotations

from exporter.catalog import metrics as vllm
from exporter.render import slo
from exporter.render.promql import fmt
from exporter.render.rules._config import (
    DEFAULT_OPTIONS,
    ERRORS_WINDOW,
    FOR_INPUT_MISSING,
    FOR_MODEL_DOWN,
    FOR_OPERATIONS,
    FOR_TARGET_DOWN,
    FOR_TARGETS_DOWN,
    IDENTITY,
    INVENTORY_WINDOW,
    MODEL,
    Options,
    _indent,
    _on,
    duration,
)
from exporter.render.rules.alert import Alert, Mitigation, Verify, always
from exporter.render.rules.recording import Recording

# ---------------------------------------------------------------------------------------------
# Operations: targets, the sidecar itself, its inputs
# ---------------------------------------------------------------------------------------------


K8S_DOWN = Mitigation("look at the pod: `kubectl -n NAMESPACE describe pod POD` (events, OOMKilled, probe "
                     "failures), `kubectl -n NAMESPACE logs POD -c vllm --previous` (the crashed container's "
                     "last words), and on GPU nodes the Xid errors (`dmesg | grep -i xid` on the node, or the "
                     "DCGM exporter's DCGM_FI_DEV_XID_ERRORS)", "none: read-only")


def model_targets() -> str:
    """vllm_diag_up per target with the model it served in the last hour (targets that never came up
    have none: VLLMTargetNeverUp covers them)."""
    return (f"vllm_diag_up\n* {_on()} group_left (model_name)\n"
            f"group by ({', '.join((*IDENTITY, 'model_name'))}) (last_over_time(vllm_diag_requests[1h]))")


# ---------------------------------------------------------------------------------------------
# The model inventory: absence is an event
# ---------------------------------------------------------------------------------------------

READY_RECORD = "namespace_model:vllm_replicas_ready:count"
INVENTORY_RECORD = f"namespace_model:vllm_replicas_ready:max{INVENTORY_WINDOW}"


def ready_replicas() -> str:
    """Replicas of each model that answer now: vLLM's own series (present only while Prometheus scrapes
    them) or a sidecar whose target is up; the larger count where both are scraped."""
    model = ", ".join(MODEL)
    raw = f"group by ({model}, pod, instance) ({vllm.NUM_REQUESTS_RUNNING})"
    sidecar = (f"group by ({', '.join((*MODEL, *IDENTITY))}) (vllm_diag_requests)\n"
               f"and {_on()}\nvllm_diag_up == 1")
    return (f"max by ({model}) (\n  label_replace(count by ({model}) (\n{_indent(raw, '    ')}\n  ), "
            f'"source", "vllm", "", "")\n  or\n  label_replace(count by ({model}) (\n{_indent(sidecar, "    ")}\n'
            f'  ), "source", "vllm-diag", "", "")\n)')


def inventory_recording_rules(o: Options = DEFAULT_OPTIONS) -> list[Recording]:
    return [
        Recording(READY_RECORD, ready_replicas(),
                  "Replicas of the model that answer now (vLLM's series scraped, or a sidecar's target up); "
                  "absent when none does."),
        Recording(INVENTORY_RECORD, f"max_over_time({READY_RECORD}[{INVENTORY_WINDOW}])",
                  f"The inventory: every model that served in the last {INVENTORY_WINDOW}, with the most replicas "
                  "it had; a model here and absent from the ready count has vanished."),
    ]


def availability_alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    """A model that served and now has no ready replica pages, held by the inventory (not by the
    sidecar's last hour of signals, which a down target stops publishing)."""
    where = "{{ $labels.model_name }}{{ if $labels.namespace }} (namespace {{ $labels.namespace }}){{ end }}"
    sel = '{namespace="$namespace", model_name="$model_name"}'
    return [Alert(
        name="VLLMModelUnavailable", scope="model",
        expr=f"{INVENTORY_RECORD}\nunless on ({', '.join(MODEL)})\n{READY_RECORD}",
        severity="critical", symptom="none", layer="unknown", for_=FOR_MODEL_DOWN,
        summary="No replica of a model answers: the model is not served.",
        description=(f"Model {where} served with up to {{{{ $value }}}} replicas in the last {INVENTORY_WINDOW} and "
                     f"none has answered for {FOR_MODEL_DOWN}: its pods are gone or down."),
        meaning=("The rules keep an inventory of every model seen in the last "
                 f"{INVENTORY_WINDOW} (`{INVENTORY_RECORD}`), so absence is an event: when no replica of a model in "
                 f"it answers (vLLM's series gone, or every sidecar target down) for {FOR_MODEL_DOWN}, requests "
                 "to the model fail and this pages, per model, until a replica serves again. Deleted pods (a bad "
                 "rollout of a `Recreate` Deployment, a scale to zero, an evicted node) and pods down in place "
                 "page alike. A rolling restart never takes every replica away at once, so it does not fire; a "
                 "model that was never seen (a first load) is VLLMTargetNeverUp's. To retire a model on purpose, "
                 f"silence `model_name=\"NAME\"` (and its namespace) for {INVENTORY_WINDOW}, until the inventory "
                 "forgets it."),
        verify=(Verify("replicas that answer now (empty: none)", f"{READY_RECORD}{sel}"),
                Verify(f"replicas seen in the last {INVENTORY_WINDOW}", f"{INVENTORY_RECORD}{sel}")),
        action="check the pods (`kubectl get pods`, events, previous logs, OOMKilled, GPU Xid) and roll back a "
               "failed rollout; if the model was retired on purpose, silence it",
        tradeoff="none",
        mitigations=always(K8S_DOWN, Mitigation("roll back the rollout (`kubectl rollout undo`) if it began with "
                                                "one", "back to the previous version")),
    )]


# ---------------------------------------------------------------------------------------------
# Operations: targets, the sidecar itself, its inputs
# ---------------------------------------------------------------------------------------------


def input_missing() -> str:
    """Inputs a page needs, missing: the sidecar's list and, from vLLM's own series (so also without a
    sidecar), a latency objective with events but no bad-events series (its threshold is not an edge of
    the replica's histogram), or a replica serving vLLM with no events for an objective (renamed)."""
    up = f"and {_on()}\nvllm_diag_up == 1"
    pods = ", ".join((*IDENTITY, "model_name"))
    serving = f"group by ({pods}) ({vllm.NUM_REQUESTS_RUNNING})"
    latency = "|".join(slo.HISTOGRAM)
    # Not the sidecar's vllm_diag_slo_threshold_on_bucket_edge: it judges speculative decoding per token,
    # where thresholds are off the scaled edges by design; vLLM's own series say what the page can count.
    parts = [f"vllm_diag_input_available == 0\n{up}",
             f'label_replace(\n  {slo.pod_events("1h")}{{objective=~"{latency}"}}\n  unless on ({pods}, objective)\n  '
             f'{slo.pod_bad_events("1h")},\n  "input", "${{1}}_bucket_edge", "objective", "(.+)")']
    parts += [f'label_replace(\n  {serving}\n  unless on ({pods})\n  {slo.pod_events("1h")}{{objective="{obj}"}},\n'
              f'  "input", "{obj}_events", "", "")' for obj in slo.OBJECTIVES]
    return "\nor\n".join(f"(\n{_indent(p)}\n)" for p in parts)


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
    # The raw-only profile (a fleet scraped without sidecars) has no sidecar to miss.
    sidecar_down = [
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
    ] if o.sidecars else []
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
            mitigations=always(K8S_DOWN),
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
            tradeoff="none", mitigations=always(K8S_DOWN),
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
            mitigations=always(K8S_DOWN, Mitigation("roll back the rollout (`kubectl rollout undo`) if the new "
                                                    "version does not load", "back to the previous version")),
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
            expr=input_missing(),
            severity="warning", symptom="none", layer="unknown", for_=FOR_INPUT_MISSING,
            summary="An input a vllm-diag alert needs is missing: that alert cannot fire.",
            description=("{{ $labels.target }} answers, but input `{{ $labels.input }}` has been missing "
                         f"(available: {{{{ $value }}}}) for {FOR_INPUT_MISSING}: the alerts that read it are blind."),
            meaning=("vllm_diag_input_available lists every input a cause alert needs (KV usage, preemptions, the "
                     "TTFT and ITL histograms, finished requests, the host CPU source). It goes to 0 after a vLLM "
                     "upgrade renamed a metric, with `--disable-log-stats`, or when the CPU source became "
                     "unreadable (a PID namespace or cgroup change). The rules watch the pages' own inputs too, "
                     "with or without a sidecar: an objective's threshold that is not an edge of the replica's "
                     "histogram (input `<objective>_bucket_edge`: the bad-events series vanishes and the page "
                     "with it), and a replica that serves vLLM but has no histogram or finished-requests series "
                     "under any name the rules know (input `<objective>_events`: renamed or missing)."),
            verify=(Verify("inputs per target", 'vllm_diag_input_available{target="$target"}'),
                    Verify("SLI events and bad events per replica (an objective with events and no bad-events "
                           "series: its threshold is off the histogram's edges)",
                           f"{slo.pod_events('1h')} or {slo.pod_bad_events('1h')}")),
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
    ] + sidecar_down


