"""The small HTML page at ``/``: jinja2 with autoescaping, no external assets, self-refreshing.

Worst target first, each with its verdict (coloured by the severity behind it), since when,
the last scrape, a pending note while hysteresis holds the verdict, the evidence, runbook
links and a legend. Numbers go through ``exporter.numbers``, as in the text report.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from exporter import numbers
from exporter.catalog.symptoms import (
    EFFECT_WITHOUT_CAUSE,
    LAYERS,
    RUNBOOK_BASE_URL,
    SYMPTOMS,
    UNKNOWN_NOT_JUDGED,
    UNKNOWN_UNEXPLAINED,
)
from exporter.catalog.symptoms import runbook_url as alert_runbook_url
from exporter.publish import timeline
from exporter.publish.document import (
    SLEEPING,
    informational,
    pending,
    severity,
    verdict_meaning,
    verdict_severity,
    worst_first,
)
from exporter.publish.text import KEY_SIGNALS, abstentions, fact_value, missing_inputs, objective_state, objective_title

if TYPE_CHECKING:
    from jinja2 import Environment

# What each layer means, for the legend (docs/method.md, "The six layers").
LAYER_HELP: dict[str, str] = {
    "request": "the traffic itself: prompt and output lengths, arrival pattern, shared prefixes",
    "scheduler": "token-budget allocation: max_num_batched_tokens, max_num_seqs, the waiting queue",
    "kv_cache": "KV-cache space and reuse: preemption, headroom, prefix-cache hits",
    "gpu_compute": "kernels and execution path on the GPU",
    "cpu": "pre/post-processing and the engine loop: tokenisation, detokenisation, CPU starvation",
    "distributed": "multi-GPU parallelism: tensor/pipeline all-reduce and bubbles",
}
VERDICT_HELP: dict[str, str] = {
    "none": "healthy: no layer holds performance back (informational findings may still show)",
    "unknown": (f"either {UNKNOWN_UNEXPLAINED} (the symptom shown names the effect and what was looked "
                f"at: cause {' or '.join(EFFECT_WITHOUT_CAUSE.values())}, layer unknown), or {UNKNOWN_NOT_JUDGED} "
                "(the window holds too little data, or the target cannot be read)"),
}
SEVERITY_HELP: dict[str, str] = {
    "critical": ("act now: an objective burns its error budget at the paging rate while this symptom is "
                 "active (the model's error-budget alert pages)"),
    "warning": "work queue (the alert opens a ticket)",
    "info": "context only: never the verdict, never an alert",
    "down": "the target cannot be scraped",
    "unknown": "still gathering evidence",
    "ok": "healthy",
}


def runbook_url(symptom_id: str, base_url: str | None = None) -> str | None:
    """The runbook of a symptom's alert: ``<base>/<alertname lowercased>.md``, as the alert rules link it."""
    alert = next((s.alert for s in SYMPTOMS if s.id == symptom_id), None)
    if alert is None:
        return None
    return alert_runbook_url(alert, RUNBOOK_BASE_URL if base_url is None else base_url)


@lru_cache(maxsize=1)
def _environment() -> Environment:
    # jinja2 is loaded with the first page: a sidecar nobody opens in a browser does not hold it (2 MB).
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("exporter", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        number=numbers.number, percent=numbers.percent, seconds=numbers.seconds, score=numbers.score,
        timestamp=numbers.timestamp, iso=numbers.iso, by_unit=numbers.by_unit, size=numbers.size,
    )
    env.globals.update(
        abstentions=abstentions, severity=severity, verdict_severity=verdict_severity, pending=pending,
        verdict_meaning=verdict_meaning,
        informational=informational, ago=numbers.ago, objective_title=objective_title,
        objective_state=objective_state, missing_inputs=missing_inputs,
    )
    env.filters["fact"] = fact_value
    return env


def render(document: dict[str, Any], refresh_seconds: int = 5, runbook_base_url: str | None = None,
           timelines: Mapping[str, str] | None = None) -> str:
    """``timelines``: target -> inline SVG of its verdict timeline (exporter.publish.timeline.svg)."""
    template = _environment().get_template("index.html.j2")
    targets = worst_first(document["targets"])
    counts: dict[str, int] = {}
    for target in targets:
        counts[severity(target)] = counts.get(severity(target), 0) + 1
    return template.render(
        doc=document, targets=targets, counts=counts, refresh=refresh_seconds, key_signals=KEY_SIGNALS,
        runbook=lambda symptom_id: runbook_url(symptom_id, runbook_base_url),
        layers=LAYERS, layer_help=LAYER_HELP, verdict_help=VERDICT_HELP, severity_help=SEVERITY_HELP,
        symptoms=SYMPTOMS, timelines=dict(timelines or {}), timeline_colours=timeline.COLOURS, sleeping=SLEEPING,
    )
