"""Verdict timelines: runs, incidents with their numbers, the text strip and the inline SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from exporter.publish.timeline import NO_DATA, StepVerdict, incidents, segments, strip, svg

T0 = 1_796_007_600.0  # 2026-11-30T03:00:00Z


def step(minute: int, verdict: str, symptoms: tuple[str, ...] = (), **signals: float) -> StepVerdict:
    return StepVerdict(T0 + 60 * minute, "ok" if verdict != NO_DATA else NO_DATA, verdict,
                       0.9 if verdict not in ("none", NO_DATA) else 0.0, symptoms, symptoms, dict(signals))


def storm() -> list[StepVerdict]:
    steps = [step(0, "none"), step(1, "none")]
    steps += [step(m, "kv_cache", ("D",), preemption_rate=1.0 + m / 10, kv_cache_usage_max=0.97) for m in range(2, 18)]
    steps += [step(18, "none"), step(19, NO_DATA)]
    return steps


def test_runs_cover_the_span_without_gaps() -> None:
    runs = segments(storm(), 60)
    assert [(r["verdict"], r["steps"]) for r in runs] == [("none", 2), ("kv_cache", 16), ("none", 1), (NO_DATA, 1)]
    assert runs[0]["from"] == T0 and runs[-1]["to"] == T0 + 20 * 60
    assert all(a["to"] == b["from"] for a, b in zip(runs, runs[1:], strict=False))


def test_incident_line_names_span_target_layer_and_numbers() -> None:
    (incident,) = incidents("vllm-3", storm(), 60)
    assert incident["summary"].startswith("03:02:00-03:17:00 vllm-3: kv_cache, D: ")
    assert "preemptions/s at KV 97%" in incident["summary"]
    assert incident["symptoms"] == ["D"] and incident["from"] == T0 + 120 and incident["to"] == T0 + 18 * 60


def test_an_objective_missed_with_no_known_cause_is_an_incident_no_diagnosis_yet_is_not() -> None:
    missed = [step(m, "unknown", ("A",), ttft_p95_seconds=7.7) for m in range(1, 4)]
    (incident,) = incidents("vllm-4", [step(0, "none"), *missed, step(4, "none")], 60)
    assert incident["summary"].startswith("03:01:00-03:03:00 vllm-4: unknown, A: TTFT p95 7.7")
    starting = StepVerdict(T0, "insufficient_evidence", "unknown", 0.0, (), ())
    assert incidents("vllm-5", [starting, step(1, "none")], 60) == []


def test_no_incident_when_healthy() -> None:
    assert incidents("vllm-0", [step(0, "none"), step(1, "none")], 60) == []


def test_strip_one_character_per_step() -> None:
    (line,) = strip(storm())
    assert line == "03:00:00 .." + "K" * 16 + "._"


def test_svg_is_standalone_markup_with_tooltips() -> None:
    markup = svg(segments(storm(), 60))
    root = ET.fromstring(markup)
    assert root.tag.endswith("svg") and "script" not in markup
    titles = [el.text for el in root.iter() if el.tag.endswith("title")]
    assert "03:02:00-03:18:00 kv_cache [D]" in titles
    widths = [float(el.get("width", 0)) for el in root.iter() if el.tag.endswith("rect")]
    assert abs(sum(widths) - 640) < 1
