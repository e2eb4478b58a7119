"""The one serialised form of the published state (SPEC JSON); JSON, HTML and text read it.

The JSON keeps targets in configuration order; the human-facing outputs show the worst target
first (``worst_first``), ranked by ``severity``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

from exporter import __version__
from exporter.catalog.symptoms import UNKNOWN_NOT_JUDGED, UNKNOWN_UNEXPLAINED
from exporter.catalog.thresholds import DEFAULTS
from exporter.state import TargetState


def _finite(value: Any) -> Any:
    """JSON has no NaN/Inf: a non-finite number is unknown, and unknown is null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


finite = _finite  # other documents (the timelines of diagnose --prometheus) follow the same rule


def build(states: Iterable[TargetState], now: float | None = None) -> dict[str, Any]:
    return {
        "generated_at": time.time() if now is None else now,
        "version": __version__,
        "targets": [_finite(state.to_dict()) for state in states],
    }


# Worst first: a critical symptom, then a target we cannot read, then warning-level work, then
# a target still gathering evidence, then informational findings, then healthy targets.
# What the state `sleeping` means, in the words the text and the page use.
SLEEPING = ("vLLM's engines are asleep (engine_sleep_state, after /sleep): no latency rule judges it, "
            "nothing pages; the diagnosis starts afresh when it wakes")
SEVERITY_RANK: dict[str, int] = {"critical": 0, "down": 1, "warning": 2, "unknown": 3, "info": 4, "ok": 5}


def informational(symptom: dict[str, Any]) -> bool:
    """Context, not a problem: never the verdict, never red (a flag on newer documents, else severity)."""
    flag = symptom.get("informational")
    return bool(flag) if flag is not None else symptom.get("severity") == "info"


def burning(target: dict[str, Any]) -> bool:
    """An objective of the window burns its error budget at the paging rate (burn_rate_full, the SRE
    workbook's 14.4x): users are hurt now, as the model's error-budget page would say."""
    full = DEFAULTS["burn_rate_full"]
    return any((o.get("burn_rate") or 0.0) >= full for o in (target.get("objectives") or {}).values())


def severity(target: dict[str, Any]) -> str:
    """The target's worst state: critical, down, warning, unknown, info or ok. A symptom is critical
    while an objective burns at the paging rate, as the alerts page on the burn, not on the symptom."""
    if target.get("state") == "down":
        return "down"
    found = {s.get("severity", "warning") for s in target.get("symptoms", []) if not informational(s)}
    if found and burning(target):
        return "critical"
    for level in ("critical", "warning"):
        if level in found:
            return level
    if found:  # a severity this page does not know yet: show it as work to do, not as healthy
        return "warning"
    if target.get("state") == "insufficient_evidence":
        return "unknown"
    return "info" if target.get("symptoms") else "ok"


def unexplained(target: dict[str, Any]) -> bool:
    """The verdict is `unknown` because an objective is missed that no known cause explains (older
    documents, without ``verdict.meaning``, only ever meant "no diagnosis yet")."""
    verdict = target["verdict"]
    return verdict["layer"] == "unknown" and verdict.get("meaning") == UNKNOWN_UNEXPLAINED


def verdict_meaning(target: dict[str, Any]) -> str | None:
    """The words for an `unknown` verdict (None for a layer or `none`)."""
    if target["verdict"]["layer"] != "unknown":
        return None
    return UNKNOWN_UNEXPLAINED if unexplained(target) else UNKNOWN_NOT_JUDGED


def verdict_severity(target: dict[str, Any]) -> str:
    """The severity behind the verdict layer: the worst symptom with a cause in that layer (for an
    unexplained miss, the symptom whose cause has layer `unknown`)."""
    layer = target["verdict"]["layer"]
    if layer == "unknown" and not unexplained(target):
        return "down" if target.get("state") == "down" else "unknown"
    if layer == "none":
        return "ok"
    behind = [s for s in target.get("symptoms", []) if any(c.get("layer") == layer for c in s.get("causes", []))]
    levels = {"info" if informational(s) else s.get("severity", "warning") for s in behind}
    if levels - {"info"} and burning(target):
        return "critical"
    for level in ("critical", "warning", "info"):
        if level in levels:
            return level
    return "warning"


def worst_first(targets: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Targets ordered for a reader: worst severity, then highest verdict score, then name."""
    return sorted(targets, key=lambda t: (SEVERITY_RANK.get(severity(t), 2), -(t["verdict"].get("score") or 0.0),
                                          t["target"]))


def pending(target: dict[str, Any]) -> dict[str, Any] | None:
    """The layer the active symptoms point at while the verdict (held by hysteresis) says another.

    Newer documents say so themselves (``verdict.pending`` or ``pending``: a layer, or a mapping
    with ``layer`` and maybe ``score``, ``count``, ``needed``); older ones are read from the
    symptoms: the best-scoring layer with an active, non-informational cause.
    """
    verdict, scores = target["verdict"], target.get("layer_scores", {})
    for holder in (verdict, target):
        if "pending" in holder:
            return _explicit_pending(holder["pending"], scores)
    if target.get("state") != "ok":
        return None
    layers = {c["layer"] for s in target.get("symptoms", []) if not informational(s) for c in s.get("causes", [])}
    if not layers:
        return None
    challenger = max(sorted(layers), key=lambda layer: scores.get(layer, 0.0))
    held = verdict["layer"]
    if challenger == held or scores.get(challenger, 0.0) <= scores.get(held, 0.0):
        return None
    return {"layer": challenger, "score": scores.get(challenger), "count": None, "needed": None,
            "symptoms": [s["id"] for s in target["symptoms"] if not informational(s)
                         and any(c["layer"] == challenger for c in s["causes"])]}


def _explicit_pending(value: Any, scores: dict[str, float]) -> dict[str, Any] | None:
    if not value:
        return None
    if isinstance(value, str):
        return {"layer": value, "score": scores.get(value), "count": None, "needed": None, "symptoms": []}
    if isinstance(value, dict) and value.get("layer"):
        layer = value["layer"]
        return {"layer": layer, "score": value.get("score", scores.get(layer)),
                "count": value.get("count", value.get("evaluations")),
                "needed": value.get("needed", value.get("required")),
                "symptoms": list(value.get("symptoms", []))}
    return None
