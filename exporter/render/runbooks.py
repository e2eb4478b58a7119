"""Runbooks (``docs/runbooks/<alertname-lowercase>.md``), generated from the alert catalog.

One page per alert, so ``runbook_url`` always resolves: what the alert means, its expression,
how to verify it (PromQL against vllm_diag_* and the raw vLLM series), the likely causes with
their layers, and every catalog action with its gain and cost. Generated, never hand-edited, so
the text cannot drift from the thresholds and actions the sidecar uses.
"""

from __future__ import annotations

from typing import Any

from exporter.render import rules


def _page(alert: rules.Alert, inhibits: tuple[str, ...], inhibited_by: tuple[str, ...],
          o: rules.Options) -> dict[str, Any]:
    action, tradeoff = alert.actions_text()
    return {
        "alert": alert, "rule": rules.alert_rule(alert, o), "inhibits": inhibits, "inhibited_by": inhibited_by,
        "action": action, "tradeoff": tradeoff,
    }


def render_files(o: rules.Options = rules.DEFAULT_OPTIONS) -> dict[str, str]:
    template = rules.environment().get_template("runbook.md.j2")
    out: dict[str, str] = {}
    for alert in rules.alerts(o):
        inhibits = next((targets for src, targets in rules.INHIBITIONS if src == alert.name), ())
        inhibited_by = tuple(src for src, targets in rules.INHIBITIONS if alert.name in targets)
        out[rules.runbook_file(alert.name)] = template.render(**_page(alert, inhibits, inhibited_by, o))
    out[f"{rules.RUNBOOK_DIR}/README.md"] = rules.environment().get_template("runbooks-index.md.j2").render(
        alerts=[rules.alert_rule(a, o) for a in rules.alerts(o)],
        files={a.name: rules.runbook_file(a.name).rsplit("/", 1)[1] for a in rules.alerts(o)},
    )
    return out


def verify_expressions() -> list[str]:
    """Every PromQL query the runbooks print (the catalog lint checks them too)."""
    return [v.expr for a in rules.alerts() for v in a.verify]
