"""The two meanings of the verdict `unknown` read apart in every output: "objective missed, no known
cause explains it" (A0/B0 active) and "no diagnosis yet" (a window still filling, a target down)."""

from __future__ import annotations

from exporter.catalog.symptoms import UNKNOWN_NOT_JUDGED, UNKNOWN_UNEXPLAINED
from exporter.diagnosis.engine import VerdictTracker, diagnose
from exporter.publish import document, html, text
from exporter.state import ScrapeHealth, TargetState, unknown_diagnosis
from tests.unit.rule_cases import LORA_WAIT
from tests.unit.rule_cases import rule_context as _ctx


def _state(name: str, status: str, diagnosis) -> TargetState:
    return TargetState(target=name, url="http://x/metrics", status=status, window_seconds=180, evaluated_at=10.0,
                       health=ScrapeHealth(up=status != "down"), diagnosis=diagnosis)


def _document() -> dict:
    missed = _state("lora", "ok", diagnose(_ctx(LORA_WAIT, {}), VerdictTracker(), 5.0))
    starting = _state("starting", "insufficient_evidence", unknown_diagnosis(5.0))
    return document.build([missed, starting], now=10.0)


def test_the_json_says_which_unknown_it_is():
    missed, starting = _document()["targets"]
    assert missed["verdict"]["layer"] == starting["verdict"]["layer"] == "unknown"
    assert missed["verdict"]["meaning"] == UNKNOWN_UNEXPLAINED
    assert starting["verdict"]["meaning"] == UNKNOWN_NOT_JUDGED
    a0 = missed["symptoms"][0]["causes"][0]
    assert (missed["symptoms"][0]["id"], a0["id"], a0["layer"]) == ("A", "A0", "unknown")
    # The unexplained miss is work to do (its symptom's severity), not "still gathering evidence".
    assert document.verdict_severity(missed) == "warning"
    assert document.verdict_severity(starting) == "unknown"


def test_the_text_report_says_which_unknown_it_is():
    report = text.render(_document())
    assert f"verdict: unknown ({UNKNOWN_UNEXPLAINED})" in report
    assert f"verdict: unknown ({UNKNOWN_NOT_JUDGED})" in report
    assert "A0 - First tokens miss their objective; no known cause explains it [layer unknown" in report


def test_the_page_says_which_unknown_it_is():
    page = html.render(_document())
    assert f'data-verdict="unknown" data-severity="warning" data-meaning="{UNKNOWN_UNEXPLAINED}"' in page
    assert f'data-meaning="{UNKNOWN_NOT_JUDGED}"' in page
    legend = page.split('id="legend"', 1)[1]
    assert UNKNOWN_UNEXPLAINED in legend and UNKNOWN_NOT_JUDGED in legend


def test_an_older_document_without_meaning_reads_as_no_diagnosis_yet():
    old = {"target": "t", "state": "ok", "verdict": {"layer": "unknown", "score": 0.0, "since": 1.0},
           "layer_scores": {}, "symptoms": []}
    assert document.verdict_meaning(old) == UNKNOWN_NOT_JUDGED
