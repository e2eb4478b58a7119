"""Readable report for ``vllm-diag diagnose --format text``: verdict first, then evidence, then actions."""

from __future__ import annotations

from typing import Any

from exporter import numbers
from exporter.publish.document import SLEEPING, pending, verdict_meaning, worst_first

# (signal key, label, unit for exporter.numbers.by_unit)
KEY_SIGNALS: tuple[tuple[str, str, str], ...] = (
    ("ttft_p95_seconds", "TTFT p95", "s"),
    ("itl_p95_seconds", "ITL p95", "s"),
    ("e2e_p95_seconds", "e2e p95", "s"),
    ("queue_mean", "mean queue time", "s"),
    ("prefill_mean", "mean prefill time", "s"),
    ("ttft_frontend_mean", "mean frontend time", "s"),
    ("preemption_rate", "preemptions", "/s"),
    ("preemptions_per_request", "preemptions per request", ""),
    ("kv_cache_usage_max", "KV usage max", "%"),
    ("kv_cache_usage_mean", "KV usage mean", "%"),
    ("prefix_cache_hit_ratio", "prefix hit ratio", "%"),
    ("running_mean", "running (mean)", ""),
    ("waiting_mean", "waiting (mean)", ""),
    ("requests_per_second", "requests", "/s"),
    ("generation_tokens_per_second", "generated tokens", "/s"),
    ("cpu_starvation_score", "CPU-starvation score", "score"),
)


OBJECTIVE_TITLES: dict[str, tuple[str, str]] = {"ttft": ("TTFT", "first tokens"), "itl": ("ITL", "token gaps")}


def objective_title(name: str, objective: dict[str, Any]) -> str:
    """'TTFT within 2.5 s for 99 %' (an objective of the JSON ``objectives``)."""
    title = OBJECTIVE_TITLES.get(name, (name, ""))[0]
    within = numbers.seconds(objective["threshold_seconds"])
    return f"{title} within {within} for {numbers.percent(objective['target'])}"


def objective_state(name: str, objective: dict[str, Any]) -> str:
    """How the window fares: 'met: 0.4% of 412 first tokens over (burn 0.4x)', or why it is not judged."""
    events = OBJECTIVE_TITLES.get(name, ("", "events"))[1]
    if objective.get("bad_share") is None or objective.get("burn_rate") is None:
        text = "not judged: no events in the window"
    else:
        verdict = {True: "met", False: "missed", None: "not judged (too few events)"}[objective.get("met")]
        text = (f"{verdict}: {numbers.percent(objective['bad_share'])} of {numbers.number(objective['events'])} "
                f"{events} over (burn {numbers.number(objective['burn_rate'])}x)")
    if objective.get("threshold_on_bucket_edge") is False:
        lower, upper = objective.get("nearest_bucket_edges") or (None, None)
        text += (f"; the threshold is not a bucket edge (nearest {numbers.seconds(lower)} and "
                 f"{numbers.seconds(upper)}): the share is interpolated inside the bucket")
    return text


def missing_inputs(target: dict[str, Any]) -> list[str]:
    """The paging alert rules' inputs the target does not provide (JSON ``inputs``)."""
    return [name for name, available in (target.get("inputs") or {}).items() if not available]


def fact_value(value: Any) -> str:
    """An engine fact as written on a vLLM command line."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.6g}"
    if isinstance(value, dict):  # a combined what-if: knob -> value
        return ", ".join(f"{k}={fact_value(v)}" for k, v in value.items())
    return str(value)


def abstentions(target: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """What the abstaining rules lacked, each with the causes it would unlock (most useful first)."""
    by_need: dict[str, list[str]] = {}
    for cause, needs in target.get("abstained", {}).items():
        for need in needs:
            by_need.setdefault(need, []).append(cause)
    return sorted(by_need.items(), key=lambda item: (-len(item[1]), item[0]))


def render(document: dict[str, Any]) -> str:
    lines: list[str] = []
    for target in worst_first(document["targets"]):
        verdict = target["verdict"]
        head = f"{target['target']}"
        if target["model_name"]:
            head += f" (model {target['model_name']})"
        lines.append(head)
        lines.append("=" * len(head))
        if target["state"] != "ok":
            reason = (target["scrape"]["last_error"] if target["state"] == "down" else SLEEPING
                      if target["state"] == "sleeping" else "window too short to diagnose")
            lines.append(f"state: {target['state']} ({reason})")
        meaning = verdict_meaning(target)
        lines.append(f"verdict: {verdict['layer']} ({meaning})" if meaning is not None else
                     f"verdict: {verdict['layer']} (score {numbers.score(verdict['score'])})")
        if verdict.get("recovering"):
            since = verdict.get("recovering_since")
            ended = f" (last acting at {numbers.timestamp(since)})" if since is not None else ""
            lines.append(f"recovering: the cause has ended{ended}; its effect is still in the window, "
                         "so the layer is kept until the window no longer holds it")
        challenger = pending(target)
        if challenger is not None:
            lines.append(f"pending: {challenger['layer']} (score {numbers.score(challenger['score'])}) is not the "
                         "verdict yet: hysteresis holds the verdict until it leads for long enough")
        scores = ", ".join(f"{k} {numbers.score(v)}" for k, v in target["layer_scores"].items())
        lines.append(f"layer scores: {scores}")
        if not target["symptoms"] and target["state"] == "ok":
            lines.append("no symptom active")
        for symptom in target["symptoms"]:
            lines.append("")
            note = ": information only, never the verdict or an alert" if symptom.get("informational") else ""
            lines.append(f"[{symptom['id']}] {symptom['title']} ({symptom['severity']}{note})")
            for cause in symptom["causes"]:
                strength = numbers.score(cause["strength"])
                lines.append(f"  {cause['id']} - {cause['title']} [layer {cause['layer']}, strength {strength}]")
                for line in cause["evidence"]:
                    lines.append(f"    evidence: {line}")
                for action in cause["actions"]:
                    lines.append(f"    action: {action['action']}")
                    lines.append(f"      gain: {action['gain']}; cost: {action['cost']}")
        signals = target["signals"]
        if signals:
            lines.append("")
            lines.append(f"signals over {numbers.seconds(signals.get('window_seconds', 0))} "
                         f"({signals.get('scrapes', 0)} scrapes):")
            for key, label, unit in KEY_SIGNALS:
                if signals.get(key) is not None:
                    lines.append(f"  {label}: {numbers.by_unit(signals[key], unit)}")
        if target.get("objectives"):
            lines.append("")
            lines.append("objectives over the window:")
            for name, objective in target["objectives"].items():
                lines.append(f"  {objective_title(name, objective)}: {objective_state(name, objective)}")
        if missing_inputs(target):
            lines.append(f"inputs the alert rules need but do not get: {', '.join(missing_inputs(target))}")
        if target.get("engine"):
            lines.append("")
            lines.append("engine facts:")
            for name, fact in target["engine"].items():
                lines.append(f"  {name}: {fact_value(fact['value'])} ({fact['source']})")
        if "advice" in target:
            lines.extend(advice_lines(target))
        if target["missing"]:
            lines.append(f"missing: {', '.join(target['missing'])}")
        if target["state"] == "ok":
            for need, causes in abstentions(target):
                lines.append(f"not judged ({', '.join(causes)}): needs {need}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


ADVICE_METRICS: tuple[tuple[str, str, str], ...] = (
    ("ttft_p95_seconds", "TTFT p95", "s"), ("itl_p95_seconds", "ITL p95", "s"),
    ("preemption_rate", "preemptions", "/s"), ("generation_tokens_per_second", "generated tokens", "/s"),
)


def advice_lines(target: dict[str, Any]) -> list[str]:
    """The what-if advisor's answer (``vllm-diag advise``): observed, then each change, best first."""
    lines = ["", "what if (predicted from this window):"]
    calibration = target.get("calibration") or {}
    if calibration.get("arrivals"):
        lines.append(f"  traffic: {calibration['arrivals']}")
    observed = target.get("observed") or {}
    lines.append("  now: " + ", ".join(f"{label} {numbers.by_unit(observed.get(key), unit)}"
                                       for key, label, unit in ADVICE_METRICS))
    if not target["advice"]:
        lines.append(f"  no prediction: {target.get('reason') or 'nothing to evaluate'}")
    for item in target["advice"]:
        current = "unset" if item["current"] is None else fact_value(item["current"])
        unvalidated = "" if item.get("validated", True) else " [not validated by the real-engine record]"
        lines.append(f"  {item['knob']} {current} -> {fact_value(item['proposed'])}{unvalidated}: {item['why']}")
        cost = item.get("cost")
        if cost:
            more = cost["accelerators"]
            hardware = f"{more:g}x the accelerators" if more != 1 else "no more accelerators"
            lines.append(f"    cost: {hardware}; {cost['what']}")
        if item.get("caveat"):
            lines.append(f"    {item['caveat']}")
        parts = []
        for key, label, unit in ADVICE_METRICS:
            interval = item["interval"].get(key)
            span = (f" ({numbers.by_unit(interval[0], unit)}-{numbers.by_unit(interval[1], unit)})"
                    if interval else "")
            parts.append(f"{label} {numbers.by_unit(item['predicted'].get(key), unit)}{span}")
        lines.append("    predicted: " + ", ".join(parts))
        if item["worse"]:
            lines.append("    worse: " + "; ".join(item["worse"]))
    return lines
