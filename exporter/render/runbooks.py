"""Runbooks (``docs/runbooks/<alertname-lowercase>.md``), generated from the alert catalog.

One page per alert, so ``runbook_url`` always resolves: what the alert means, its expression,
how to verify it (PromQL against vllm_diag_* and the raw vLLM series), the likely causes with
their layers, and every catalog action with its gain and cost. Generated, never hand-edited, so
the text cannot drift from the thresholds and actions the sidecar uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from exporter.catalog.flags import versions_of
from exporter.publish.exported import exported
from exporter.render import rules

# A selector of a sidecar (vllm_diag_*) or raw vLLM (vllm:*) series, with its optional matchers.
_SELECTOR = re.compile(r"\b(vllm_diag_[a-z0-9_]+|vllm:[a-z0-9_:]+)(\{([^}]*)\})?")
# Which alert labels scope a runbook query: the replica the alert names, or the whole model.
_SCOPES: Mapping[str, Mapping[str, Mapping[str, str]]] = {
    "target": {"diag": {"namespace": "$namespace", "target": "$target"},
               "raw": {"namespace": "$namespace", "pod": "$target"}},
    "model": {"diag": {"namespace": "$namespace", "model_name": "$model_name"},
              "raw": {"namespace": "$namespace", "model_name": "$model_name"}},
    "replica": {"diag": {"namespace": "$namespace", "target": "$pod"},
                "raw": {"namespace": "$namespace", "pod": "$pod"}},
    "namespace": {"diag": {"namespace": "$namespace"}, "raw": {"namespace": "$namespace"}},
}


def _labels_of(name: str) -> frozenset[str] | None:
    """The labels a sidecar family carries (the exported catalog, plus the scrape's own); None for vLLM's."""
    if not name.startswith("vllm_diag_"):
        return None
    try:
        found = exported(name)
    except KeyError:
        return None
    return frozenset((*found.labels, "namespace", "pod", "instance", "job"))


def scoped(expr: str, scope: str) -> str:
    """``expr`` with every vllm_diag_* and vllm:* selector restricted to the alert's labels
    (`$target` etc., to be replaced by the values in the notification). Matchers already there win;
    a label the family does not carry (vllm_diag_up has no model_name) is not added: it would match
    nothing."""
    labels = _SCOPES[scope]

    def add(m: re.Match[str]) -> str:
        name, inner = m.group(1), m.group(3) or ""
        wanted = labels["diag" if name.startswith("vllm_diag_") else "raw"]
        carried = _labels_of(name)
        if carried is not None:
            wanted = {k: v for k, v in wanted.items() if k in carried}
        have = {part.split("=")[0].strip().rstrip("=~!") for part in inner.split(",") if part.strip()}
        extra = [f'{k}="{v}"' for k, v in wanted.items() if k not in have]
        return f"{name}{{{', '.join(p for p in (inner.strip(), *extra) if p)}}}"

    return _SELECTOR.sub(add, expr)


def _page(alert: rules.Alert, inhibits: tuple[str, ...], inhibited_by: tuple[str, ...],
          o: rules.Options) -> dict[str, Any]:
    action, tradeoff = alert.actions_text()
    verify = [(v.what, scoped(v.expr, alert.scope)) for v in alert.verify]
    equal = next((eq for src, _, eq in rules.INHIBITIONS if src == alert.name), ())
    return {
        "alert": alert, "rule": rules.alert_rule(alert, o), "inhibits": inhibits, "inhibited_by": inhibited_by,
        "action": action, "tradeoff": tradeoff, "verify": verify, "scope": alert.scope,
        "inhibit_equal": ", ".join(equal),
        "scope_vars": sorted({v for kind in _SCOPES[alert.scope].values() for v in kind.values()}),
        "versions": lambda action: versions_of(action.action, action.knob) or "any",
    }


def render_files(o: rules.Options = rules.DEFAULT_OPTIONS) -> dict[str, str]:
    template = rules.environment().get_template("runbook.md.j2")
    out: dict[str, str] = {}
    for alert in rules.alerts(o):
        inhibits = next((targets for src, targets, _ in rules.INHIBITIONS if src == alert.name), ())
        inhibited_by = tuple(src for src, targets, _ in rules.INHIBITIONS if alert.name in targets)
        out[rules.runbook_file(alert.name)] = template.render(**_page(alert, inhibits, inhibited_by, o))
    out[f"{rules.RUNBOOK_DIR}/README.md"] = rules.environment().get_template("runbooks-index.md.j2").render(
        alerts=[rules.alert_rule(a, o) for a in rules.alerts(o)],
        files={a.name: rules.runbook_file(a.name).rsplit("/", 1)[1] for a in rules.alerts(o)},
        fors={a.name: for_text(a, o) for a in rules.alerts(o)},
    )
    return out


def for_text(alert: rules.Alert, o: rules.Options = rules.DEFAULT_OPTIONS) -> str:
    """The alert's `for:`, per rule where it has several (its tiers: `long`/`short` and severity)."""
    found = rules.alert_rules(alert, o)
    if len(found) == 1:
        return f"`{found[0]['for']}`"
    parts = []
    for r in found:
        pair = "/".join(r["labels"][k] for k in ("long", "short") if k in r["labels"])
        parts.append(f"`{r['for']}` ({pair} {r['labels']['severity']})")
    return ", ".join(parts)


def verify_expressions() -> list[str]:
    """Every PromQL query the runbooks print (the catalog lint checks them too)."""
    return [scoped(v.expr, a.scope) for a in rules.alerts() for v in a.verify]
