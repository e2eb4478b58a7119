"""One number formatter for the text report and the page: readable, never exponent notation."""

from __future__ import annotations

import pytest

from exporter import numbers
from exporter.publish.document import pending, severity, worst_first


@pytest.mark.parametrize("value, text", [
    (1030.4, "1,030"), (1654.2, "1,654"), (2.834, "2.83"), (0.7151, "0.715"), (0.000123, "0.000123"),
    (0, "0"), (12_345_678.9, "12,345,679"), (None, "n/a"), (float("nan"), "n/a"), (100.0, "100"),
])
def test_number(value, text):
    assert numbers.number(value) == text


@pytest.mark.parametrize("value, text", [
    (0.0097, "9.7 ms"), (0.9595, "960 ms"), (4.834, "4.83 s"), (85.1, "1 min 25 s"), (120, "2 min"),
    (3720, "1 h 2 min"),
])
def test_seconds(value, text):
    assert numbers.seconds(value) == text


def test_percent_and_a_comparison_that_reads_unequal():
    assert numbers.percent(0.3) == "30%" and numbers.percent(0.305) == "30.5%" and numbers.percent(1.0) == "100%"
    assert numbers.compared(0.2999, 0.3) == ("29.99%", "30%")
    assert numbers.compared(0.3, 0.3) == ("30%", "30%")  # equal stays equal


def test_no_formatter_ever_uses_exponent_notation():
    for value in (1e-9, 3.3e-5, 0.5, 7.0, 1.03e3, 9.99e5, 4.2e12):
        for text in (numbers.number(value), numbers.seconds(value), numbers.percent(value),
                     numbers.by_unit(value, "/s")):
            assert "e+" not in text and "e-" not in text, (value, text)


def _target(name, state="ok", verdict="none", score=0.0, symptoms=(), scores=None):
    return {"target": name, "state": state, "verdict": {"layer": verdict, "score": score, "since": 1.0},
            "layer_scores": scores or {}, "symptoms": list(symptoms)}


def _symptom(sid, severity_, layer, strength=0.8, **extra):
    return {"id": sid, "severity": severity_, "causes": [{"id": sid, "layer": layer, "strength": strength}], **extra}


def test_worst_first_and_informational_is_not_a_problem():
    fleet = [
        _target("healthy"),
        _target("info-only", verdict="kv_cache", score=0.4, symptoms=[_symptom("F", "info", "kv_cache")]),
        _target("flag-says-info", symptoms=[_symptom("B", "warning", "scheduler", informational=True)]),
        _target("warning", verdict="scheduler", score=0.9, symptoms=[_symptom("B", "warning", "scheduler")]),
        _target("starting", state="insufficient_evidence", verdict="unknown"),
        _target("down", state="down", verdict="unknown"),
        _target("critical", verdict="kv_cache", score=0.8, symptoms=[_symptom("D", "critical", "kv_cache")]),
    ]
    assert [t["target"] for t in worst_first(fleet)] == [
        "critical", "down", "warning", "starting", "info-only", "flag-says-info", "healthy"]
    assert severity(fleet[1]) == "info" and severity(fleet[2]) == "info"


def test_pending_from_the_document_or_from_the_symptoms():
    held = _target("t", verdict="none", symptoms=[_symptom("B", "warning", "scheduler")],
                   scores={"scheduler": 0.9, "kv_cache": 0.0})
    assert pending(held)["layer"] == "scheduler" and pending(held)["symptoms"] == ["B"]
    settled = _target("t", verdict="scheduler", score=0.9, symptoms=[_symptom("B", "warning", "scheduler")],
                      scores={"scheduler": 0.9})
    assert pending(settled) is None
    info_only = _target("t", symptoms=[_symptom("F", "info", "kv_cache")], scores={"kv_cache": 0.6})
    assert pending(info_only) is None  # an informational finding never becomes the verdict: nothing pends
    # A document that states its pending challenger is believed, in either place and shape.
    told = dict(held, verdict={**held["verdict"], "pending": {"layer": "cpu", "count": 1, "needed": 2}})
    assert pending(told) == {"layer": "cpu", "score": None, "count": 1, "needed": 2, "symptoms": []}
    assert pending(dict(held, pending=None)) is None
    assert pending(dict(held, pending="kv_cache"))["layer"] == "kv_cache"
