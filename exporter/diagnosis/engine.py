"""Evaluate every rule, combine active causes into symptoms and layer scores, and keep a
verdict that does not flap (enter/exit band plus a hold count)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from exporter.catalog.symptoms import CAUSE_BY_ID, LAYERS, SYMPTOMS
from exporter.catalog.thresholds import Thresholds
from exporter.diagnosis.rules import RULES, Context, Finding
from exporter.state import CauseResult, Diagnosis, SymptomResult, Verdict

log = logging.getLogger(__name__)


def evaluate_rules(ctx: Context) -> tuple[dict[str, Finding], tuple[str, ...]]:
    """Run every rule; a rule that raises is logged, reported and treated as abstaining."""
    findings: dict[str, Finding] = {}
    errors: list[str] = []
    for cause_id, rule in RULES:
        try:
            findings[cause_id] = rule(ctx)
        except Exception as exc:  # one broken rule must never blank the diagnosis
            log.exception("rule %s failed", cause_id)
            errors.append(f"{cause_id}: {type(exc).__name__}: {exc}")
            findings[cause_id] = Finding("abstain", missing=("rule error",))
    return findings, tuple(errors)


def layer_scores(findings: dict[str, Finding]) -> dict[str, float]:
    """Noisy-OR of the strengths of the active causes in each layer."""
    remaining = {layer: 1.0 for layer in LAYERS}
    for cause_id, finding in findings.items():
        if finding.status == "fired":
            remaining[CAUSE_BY_ID[cause_id].layer] *= 1.0 - finding.strength
    return {layer: 1.0 - remaining[layer] for layer in LAYERS}


def symptoms_from(findings: dict[str, Finding]) -> tuple[SymptomResult, ...]:
    out = []
    for symptom in SYMPTOMS:
        causes = tuple(
            CauseResult(cid, symptom.id, CAUSE_BY_ID[cid].layer, CAUSE_BY_ID[cid].title, f.strength, f.evidence,
                        CAUSE_BY_ID[cid].actions)
            for cid, f in findings.items()
            if f.status == "fired" and CAUSE_BY_ID[cid].symptom == symptom.id
        )
        if causes:
            out.append(SymptomResult(symptom.id, symptom.title, symptom.severity,
                                     tuple(sorted(causes, key=lambda c: -c.strength))))
    return tuple(out)


@dataclass
class VerdictTracker:
    """Hysteresis for one target's verdict.

    A layer becomes the verdict when it scores at least ``verdict_enter_score`` and wins
    ``verdict_hold_evaluations`` evaluations in a row; the current layer holds while it stays
    above ``verdict_exit_score`` unless another layer clearly beats it.
    """

    layer: str = "unknown"
    since: float = 0.0
    _pending: str | None = None
    _pending_count: int = 0

    def reset(self, now: float) -> Verdict:
        if self.layer != "unknown":
            self.layer, self.since = "unknown", now
        self._pending, self._pending_count = None, 0
        return Verdict("unknown", 0.0, self.since)

    def update(self, scores: dict[str, float], thresholds: Thresholds, now: float) -> Verdict:
        best = max(LAYERS, key=lambda layer: (scores[layer], -LAYERS.index(layer)))
        desired = best if scores[best] >= thresholds.verdict_enter_score else "none"
        current_score = scores.get(self.layer, 0.0)
        if self.layer in LAYERS and current_score >= thresholds.verdict_exit_score:
            # Inside the band the current layer holds, unless another layer beats it clearly.
            if desired == "none" or scores[desired] < current_score + (
                    thresholds.verdict_enter_score - thresholds.verdict_exit_score):
                desired = self.layer
        if desired == self.layer:
            self._pending, self._pending_count = None, 0
        elif self.layer == "unknown":
            self.layer, self.since = desired, now  # the first verdict needs no hold
            self._pending, self._pending_count = None, 0
        else:
            self._pending_count = self._pending_count + 1 if desired == self._pending else 1
            self._pending = desired
            if self._pending_count >= thresholds.verdict_hold_evaluations:
                self.layer, self.since = desired, now
                self._pending, self._pending_count = None, 0
        return Verdict(self.layer, scores.get(self.layer, 0.0), self.since)


def diagnose(ctx: Context, tracker: VerdictTracker, now: float) -> Diagnosis:
    findings, errors = evaluate_rules(ctx)
    scores = layer_scores(findings)
    verdict = tracker.update(scores, ctx.thresholds, now)
    abstained = {cid: f.missing for cid, f in findings.items() if f.status == "abstain"}
    return Diagnosis(verdict, scores, symptoms_from(findings), abstained, errors)
