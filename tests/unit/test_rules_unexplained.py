"""An effect no known cause explains: A0 and B0, and the verdict `unknown` (never `none`)."""

from __future__ import annotations

import pytest

from exporter.catalog.symptoms import (
    CAUSE_BY_ID,
    EFFECT_WITHOUT_CAUSE,
    EXPLAINED_BY,
    UNKNOWN_NOT_JUDGED,
    UNKNOWN_UNEXPLAINED,
)
from exporter.diagnosis.engine import VerdictTracker, diagnose
from exporter.diagnosis.rules import EXPLAINING_RULES
from tests.unit.rule_cases import (
    CASES,
    LORA_WAIT,
    QUEUE,
    SLOW_STREAM,
    rule_context,
    rule_findings,
)

UNEXPLAINED_BY_ID = {cid: rule for cid, rule in EXPLAINING_RULES}


def test_a_first_token_miss_no_cause_explains_is_a0_with_what_was_looked_at():
    findings = rule_findings(LORA_WAIT)
    a0 = findings["A0"]
    assert a0.status == "fired" and not a0.informational and 0 < a0.strength <= 1, a0
    text = " | ".join(a0.evidence)
    assert "TTFT: 40.0 % of 600 first tokens over 2.5 s" in text  # the objective's numbers
    assert "clear: A1, A2" in text and "C3" in text and "D" in text  # the explaining causes that cleared
    assert "queue is 85% of mean TTFT" in text and "deferred in 60% of scrapes" in text
    assert findings["B0"].status == "clear"  # ITL meets its objective


def test_a0_names_the_causes_that_could_not_be_judged_and_what_they_lack():
    blind = {**LORA_WAIT, "cpu_starvation_score": None, "cpu_inputs": {}}
    a0 = rule_findings(blind, {"max_num_batched_tokens": None})["A0"]
    assert a0.status == "fired"
    looked = next(e for e in a0.evidence if e.startswith("not judged: "))
    assert "A3 (needs CPU source" in looked and "A4 (needs engine.max_num_batched_tokens" in looked


def test_an_inter_token_miss_no_cause_explains_is_b0():
    findings = rule_findings(SLOW_STREAM)
    b0 = findings["B0"]
    assert b0.status == "fired", b0
    assert any(e.startswith("ITL: ") for e in b0.evidence)
    assert any("B4 (needs DCGM GPU utilisation" in e for e in b0.evidence)  # what would have judged it
    assert findings["A0"].status == "clear"


@pytest.mark.parametrize("objective", sorted(EFFECT_WITHOUT_CAUSE))
@pytest.mark.parametrize("cause", list(CASES))
def test_an_effect_without_cause_never_fires_next_to_a_cause_that_explains_it(objective, cause):
    """Every crafted window, where its cause fires and its near miss: A0/B0 and an explaining cause
    of their objective never fire together; with the objective missed, the A0/B0 evidence names it."""
    unexplained = EFFECT_WITHOUT_CAUSE[objective]
    for signals, facts in CASES[cause]:
        findings = rule_findings(signals, facts)
        explaining = [cid for cid, f in findings.items() if f.status == "fired" and not f.informational
                      and cid != unexplained and CAUSE_BY_ID[cid].symptom in EXPLAINED_BY[objective]]
        finding = findings[unexplained]
        if explaining:
            assert finding.status != "fired", (explaining, finding)
            if finding.evidence[0].startswith("explained by"):
                assert all(cid in finding.evidence[0] for cid in explaining), (explaining, finding)


@pytest.mark.parametrize("signals", [{}, {k: v for k, v in LORA_WAIT.items() if not k.startswith("ttft")},
                                     {"running_mean": 5, "itl_tail_ratio": 1.2}, {"cpu_starvation_score": 0.9}],
                         ids=["healthy", "deferred-waits-within-objective", "small-batch", "starved-cpu"])
def test_an_effect_without_cause_never_fires_while_its_objective_is_met(signals):
    findings = rule_findings(signals)
    for cid in EFFECT_WITHOUT_CAUSE.values():
        assert findings[cid].status == "clear", (cid, findings[cid])


def test_an_effect_without_cause_abstains_when_the_objective_cannot_be_judged():
    few = rule_findings({**LORA_WAIT, "first_tokens": 3})
    assert few["A0"].status == "abstain" and few["A0"].missing
    no_histograms = rule_findings({"ttft_histogram": None, "itl_histogram": None})
    assert {no_histograms[cid].status for cid in EFFECT_WITHOUT_CAUSE.values()} == {"abstain"}


def test_an_unexplained_miss_is_the_verdict_unknown_never_none():
    result = diagnose(rule_context(LORA_WAIT, {}), VerdictTracker(), 0.0)
    assert result.verdict.layer == "unknown" and result.verdict.meaning == UNKNOWN_UNEXPLAINED
    assert [(s.id, [(c.id, c.layer) for c in s.causes]) for s in result.active_symptoms] == [("A", [("A0", "unknown")])]
    assert all(score == 0.0 for score in result.layer_scores.values())  # `unknown` is no layer to score


def test_unknown_moves_to_the_layer_of_a_cause_that_explains_it_and_back_to_none_under_the_hold():
    tracker = VerdictTracker()
    assert diagnose(rule_context(LORA_WAIT, {}), tracker, 0).verdict.layer == "unknown"
    # The queue turns out to be capacity after all (A2): the scheduler takes over after the hold.
    explained = rule_context({**LORA_WAIT, **QUEUE}, {})
    first = diagnose(explained, tracker, 1)
    assert "A0" not in {c.id for c in first.active_causes} and "A2" in {c.id for c in first.active_causes}
    assert first.verdict.layer == "unknown" and first.verdict.pending == "scheduler"
    assert first.verdict.meaning == UNKNOWN_UNEXPLAINED  # held: still the unexplained miss it was
    assert diagnose(explained, tracker, 2).verdict.layer == "scheduler"
    # Back within the objective: `none`, again only after the hold.
    assert diagnose(rule_context({}, {}), tracker, 3).verdict.layer == "scheduler"
    assert diagnose(rule_context({}, {}), tracker, 4).verdict.layer == "none"


def test_none_and_unknown_do_not_flap_on_a_single_evaluation():
    tracker = VerdictTracker()
    healthy, missed = rule_context({}, {}), rule_context(LORA_WAIT, {})
    assert diagnose(healthy, tracker, 0).verdict.layer == "none"
    once = diagnose(missed, tracker, 1).verdict
    assert once.layer == "none" and once.pending == "unknown" and once.pending_evaluations == 1
    assert diagnose(healthy, tracker, 2).verdict.layer == "none"  # one evaluation was a blip
    diagnose(missed, tracker, 3)
    settled = diagnose(missed, tracker, 4).verdict
    assert settled.layer == "unknown" and settled.since == 4 and settled.meaning == UNKNOWN_UNEXPLAINED
    assert diagnose(healthy, tracker, 5).verdict.layer == "unknown"


def test_no_diagnosis_yet_and_an_unexplained_miss_say_different_things():
    tracker = VerdictTracker()
    assert tracker.reset(0).meaning == UNKNOWN_NOT_JUDGED
    diagnose(rule_context(LORA_WAIT, {}), tracker, 1)  # the first verdict after a reset needs no hold
    assert tracker.reset(2).meaning == UNKNOWN_NOT_JUDGED  # a target we cannot read: no diagnosis again
    assert diagnose(rule_context({}, {}), VerdictTracker(), 3).verdict.meaning is None  # `none` needs no words
