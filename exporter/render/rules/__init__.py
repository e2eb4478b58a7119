"""Prometheus alerting and recording rules, and the Alertmanager example, from the catalog.

One module per family, kubernetes-mixin style, behind one set of selectors and options
(``_config``): ``recording`` (the core signals, SLIs, burn rates, the model inventory),
``slo_pages`` (error-budget pages and tickets, low-traffic pages, the replica outlier), ``symptoms``
(symptom classes and root causes, the sidecar's), ``faults`` (corrupted answers, failing KV transfers:
faults no objective sees), ``ops`` (targets, models that vanish, the sidecar and its inputs);
``alert`` holds what an alert is. This module assembles them: the runbook-link post-processing step,
the inhibitions, rendering. docs/alerting.md explains the choices and holds the measured alert matrix.
Every number in an expression comes from ``exporter.catalog.thresholds`` or ``exporter.config`` (the
test suite fails on any other comparison literal).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import jinja2

from exporter.catalog.symptoms import RUNBOOK_BASE_URL, SYMPTOMS, runbook_url
from exporter.render.rules._config import *  # noqa: F403 - the package's public settings
from exporter.render.rules._config import (
    ALERTMANAGER_CONFIG_FILE,
    ALERTMANAGER_FILE,
    ALERTS_FILE,
    DEFAULT_OPTIONS,
    GROUP_BY,
    INHIBIT_EQUAL,
    MODEL_EQUAL,
    PAGE_GROUP_BY,
    RAW_ALERTS_FILE,
    RECORDING_FILE,
    RUNBOOK_DIR,
    SEVERITIES,
    Options,
)
from exporter.render.rules.alert import *  # noqa: F403
from exporter.render.rules.alert import Alert
from exporter.render.rules.faults import *  # noqa: F403
from exporter.render.rules.faults import fault_alerts
from exporter.render.rules.ops import *  # noqa: F403
from exporter.render.rules.ops import availability_alerts, inventory_recording_rules, ops_alerts
from exporter.render.rules.recording import *  # noqa: F403
from exporter.render.rules.recording import Recording, recording_rules, sli_recording_rules
from exporter.render.rules.slo_pages import *  # noqa: F403
from exporter.render.rules.slo_pages import cause_recording_rules, slo_alerts
from exporter.render.rules.symptoms import *  # noqa: F403
from exporter.render.rules.symptoms import root_cause_alerts, symptom_alert
from exporter.render.slo import *  # noqa: F403 - callers read rules.OBJECTIVES, rules.pod_events, ...

# ---------------------------------------------------------------------------------------------
# Assembly
# ---------------------------------------------------------------------------------------------

def alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    """Every alert, runbook links added (the one post-processing step)."""
    return add_runbook_links([a for _, _, build in ALERT_GROUPS for a in build(o)], o.runbook_base_url)


# Alertmanager inhibition: a root cause silences the symptom alerts it explains on the same replica
# (INHIBIT_EQUAL); a model's page silences its own replica-level and slow burns (MODEL_EQUAL).
_ALERT_OF = {s.id: s.alert for s in SYMPTOMS}
INHIBITIONS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("VLLMKVCachePressure", tuple(_ALERT_OF[s] for s in "ACDEF"), INHIBIT_EQUAL),
    ("VLLMCPUStarvation", (*(_ALERT_OF[s] for s in "ABC"), "VLLMCPUStarvationSuspected"), INHIBIT_EQUAL),
    ("VLLMTargetDown", (*(_ALERT_OF[s.id] for s in SYMPTOMS), "VLLMKVCachePressure", "VLLMCPUStarvation",
                        "VLLMCPUStarvationSuspected", "VLLMDiagnosisStale", "VLLMDiagInputMissing"), INHIBIT_EQUAL),
    # Not the replica outlier: it names the pod to drain while the model pages.
    ("VLLMErrorBudgetBurn", ("VLLMErrorBudgetBurnSlow",), MODEL_EQUAL),
    ("VLLMModelUnavailable", ("VLLMTargetsDown", "VLLMErrorBudgetBurn", "VLLMLowTrafficBurn",
                              "VLLMReplicaErrorBudgetBurn", "VLLMEngineStalled"), MODEL_EQUAL),
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

TEMPLATES = Path(__file__).parent.parent / "templates"


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


def alert_rules(a: Alert, o: Options = DEFAULT_OPTIONS) -> list[dict[str, Any]]:
    """The alert's rules: one, or one per tier (its labels added, `severity` and `for` overridden)."""
    base = alert_rule(a, o)
    out = []
    for labels, expr in a.tiers or (({}, a.expr),):
        extra = dict(labels)
        severity, for_ = extra.pop("severity", a.severity), extra.pop("for", base["for"])
        out.append({**base, "expr": expr, "for": for_,
                    "labels": {**base["labels"], "severity": o.severity(severity), **extra}})
    return out


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
    (RAW_ALERTS_FILE, "vllm-diag.availability", availability_alerts),
    (RAW_ALERTS_FILE, "vllm-diag.faults", fault_alerts),
)
RECORDING_GROUPS = ("vllm-diag.recording", "vllm-diag.slo-recording", "vllm-diag.slo-cause", "vllm-diag.inventory")
# Records before the alerts that read them. Prometheus runs groups concurrently, so in production an
# alert may see a record one evaluation late; promtool orders groups only when told (otherwise at
# random per run), and its tests name this order to be deterministic.
GROUP_EVAL_ORDER: tuple[str, ...] = (*RECORDING_GROUPS, *(name for _, name, _ in ALERT_GROUPS))


def rule_groups(o: Options = DEFAULT_OPTIONS) -> dict[str, list[dict[str, Any]]]:
    """File -> rule groups, as plain data (what the template writes, and what tests read)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path, name, build in ALERT_GROUPS:
        out.setdefault(path, []).append(
            {"name": name, "rules": [r for a in add_runbook_links(build(o), o.runbook_base_url)
                                     for r in alert_rules(a, o)]})
    out[RECORDING_FILE] = [
        {"name": RECORDING_GROUPS[0], "rules": [_record(r) for r in recording_rules()]},
        {"name": RECORDING_GROUPS[1], "rules": [_record(r) for r in sli_recording_rules(o)]},
        {"name": RECORDING_GROUPS[2], "rules": [_record(r) for r in cause_recording_rules(o)]},
        {"name": RECORDING_GROUPS[3], "rules": [_record(r) for r in inventory_recording_rules(o)]},
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
    return frozenset(r.record for r in (*recording_rules(), *sli_recording_rules(), *cause_recording_rules(),
                                        *inventory_recording_rules()))
