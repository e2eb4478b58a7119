"""Evaluate every rule, combine active causes into symptoms and layer scores, and keep a
verdict that neither flaps nor locks in.

* A layer's score is its strongest active cause. Causes of one layer are correlated (a long
  queue fires A2, A4 and B1 together), so combining them as independent evidence would
  saturate every busy layer near 1 and no other layer could ever take over.
* Informational findings are shown and never count.
* A second pass of rules reads the first pass's findings: a missed objective that no cause explains
  is named (A0, B0, layer ``unknown``), and with no layer at the entry score the verdict is then
  ``unknown`` ("objective missed, no known cause explains it"), never ``none``.
* The verdict enters at ``verdict_enter_score``, is released below ``verdict_exit_score``,
  and a layer that scores higher than the current one for ``verdict_hold_evaluations``
  evaluations in a row takes over.
* Actions that turn an engine knob state its current value and a proposed one, and one
  diagnosis never advises both directions of one knob: the stronger cause keeps its move.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from exporter.catalog.symptoms import CAUSE_BY_ID, EFFECT_WITHOUT_CAUSE, LAYERS, SYMPTOMS, Action
from exporter.catalog.thresholds import Thresholds
from exporter.diagnosis.rules import EXPLAINING_RULES, RULES, Context, Finding, unknown_fact
from exporter.diagnosis.witnesses import corroborate
from exporter.frozen import replace
from exporter.state import CauseResult, Diagnosis, SymptomResult, Verdict

log = logging.getLogger(__name__)


def evaluate_rules(ctx: Context) -> tuple[dict[str, Finding], dict[str, str]]:
    """Run every rule, then the second pass over the first's findings; a rule that raises is
    reported and treated as abstaining."""
    findings: dict[str, Finding] = {}
    errors: dict[str, str] = {}
    for cause_id, rule in RULES:
        try:
            findings[cause_id] = rule(ctx)
        except Exception as exc:  # one broken rule must never blank the diagnosis
            errors[cause_id] = f"{type(exc).__name__}: {exc}"
            findings[cause_id] = Finding("abstain", missing=("rule error",))
    try:  # issue 50: the engine's own witnesses corroborate or redirect the first pass's findings
        findings = corroborate(ctx, findings)
    except Exception as exc:  # a broken witness leaves the rules' findings as they were
        errors["witnesses"] = f"{type(exc).__name__}: {exc}"
    first = dict(findings)  # the second pass reads the first pass only, never each other
    for cause_id, explaining in EXPLAINING_RULES:
        try:
            findings[cause_id] = explaining(ctx, first)
        except Exception as exc:
            errors[cause_id] = f"{type(exc).__name__}: {exc}"
            findings[cause_id] = Finding("abstain", missing=("rule error",))
    return findings, errors


def counts(finding: Finding) -> bool:
    return finding.status == "fired" and not finding.informational


def layer_scores(findings: dict[str, Finding]) -> dict[str, float]:
    """The strongest active, non-informational cause of each layer (an effect without a known cause
    has no layer to score: it makes the verdict ``unknown`` instead, see ``unexplained``)."""
    scores = {layer: 0.0 for layer in LAYERS}
    for cause_id, finding in findings.items():
        layer = CAUSE_BY_ID[cause_id].layer
        if counts(finding) and layer in scores:
            scores[layer] = max(scores[layer], finding.strength)
    return scores


def recovering_layers(findings: dict[str, Finding]) -> set[str]:
    """Layers whose every active, counting cause has ended while its effect is still in the window."""
    by_layer: dict[str, list[bool]] = {}
    for cause_id, finding in findings.items():
        if counts(finding):
            by_layer.setdefault(CAUSE_BY_ID[cause_id].layer, []).append(finding.recovering)
    return {layer for layer, flags in by_layer.items() if all(flags)}


def unexplained(findings: dict[str, Finding]) -> bool:
    """A missed objective that no known cause explains (A0, B0) is active."""
    return any(counts(findings[cid]) for cid in EFFECT_WITHOUT_CAUSE.values() if cid in findings)


# -- knob actions ---------------------------------------------------------------------------
def knob_value(knob: str, ctx: Context) -> float | None:
    """The knob's current value where the facts or vLLM's own metrics know it."""
    facts, cache = ctx.facts, ctx.signals.cache
    values: dict[str, float | None] = {
        "max_num_batched_tokens": facts.max_num_batched_tokens,
        "max_num_seqs": facts.max_num_seqs,
        "tensor_parallel_size": facts.tensor_parallel_size,
        "pipeline_parallel_size": facts.pipeline_parallel_size,
        "gpu_memory_utilization": facts.gpu_memory_utilization or cache.gpu_memory_utilization,
        # --max-loras: configured or discovered, else the max_lora label of vLLM's lora_requests_info
        "max_loras": facts.max_loras or ctx.signals.lora.max_adapters,
    }
    return values.get(knob)


def proposed_value(knob: str, direction: str, current: float, ctx: Context) -> float | None:
    """A first step in the advised direction; None where no value would be a sensible step."""
    if knob == "gpu_memory_utilization":
        step = round(current + 0.03, 2) if direction == "raise" else round(current - 0.05, 2)
        return step if 0.1 <= step <= 0.97 and step != current else None
    if knob == "max_num_batched_tokens":
        value = current * 2 if direction == "raise" else max(current / 2, float(ctx.facts.max_num_seqs or 1))
        return value if value != current else None
    if knob == "max_num_seqs":
        running = ctx.signals.scheduler.running_mean
        if direction == "lower" and running is not None and running < current:
            value = max(1.0, float(round(running * 0.75)))
        else:
            value = current * 2 if direction == "raise" else max(1.0, current // 2)
        return value if value != current else None
    if knob == "max_loras" and direction == "raise":
        # Enough slots for every adapter the window saw in flight, at least one more than now.
        seen = ctx.signals.lora.adapters_seen or 0.0
        return max(current + 1, seen)
    if knob in ("tensor_parallel_size", "pipeline_parallel_size"):
        value = current * 2 if direction == "raise" else max(1.0, current // 2)
        return value if value != current else None
    return None


def _fmt(value: float) -> str:
    return f"{value:g}" if value < 1 else f"{value:.0f}"


def concrete(action: Action, ctx: Context) -> Action | None:
    """The action with the knob's current and proposed value; None when the move is impossible."""
    if action.knob is None or action.direction is None:
        return action
    current = knob_value(action.knob, ctx)
    if current is None:
        return replace(action, action=f"{action.action} (current value unknown: {unknown_fact(action.knob)})")
    proposed = proposed_value(action.knob, action.direction, current, ctx)
    if proposed is None:
        return None  # e.g. lowering tensor_parallel_size below 1: nothing to advise
    return replace(action, action=f"{action.direction} {action.knob} from {_fmt(current)} to {_fmt(proposed)}")


def resolve_actions(findings: dict[str, Finding],
                    ctx: Context) -> dict[str, tuple[tuple[Action, ...], tuple[str, ...]]]:
    """Per active cause: its concrete actions, and notes on the knob moves withheld for a stronger cause."""
    active = sorted((cid for cid, f in findings.items() if f.status == "fired"),
                    key=lambda cid: (findings[cid].informational, -findings[cid].strength, cid))
    owner: dict[str, tuple[str, str]] = {}  # knob -> (direction, cause that claimed it)
    out: dict[str, tuple[tuple[Action, ...], tuple[str, ...]]] = {}
    for cid in active:
        actions: list[Action] = []
        notes: list[str] = []
        for action in CAUSE_BY_ID[cid].actions:
            if action.knob is not None and action.knob in findings[cid].withheld:
                notes.append(f"not advised here: {action.direction} {action.knob}, which the engine's own "
                             "witnesses show is not the lever (see the evidence)")
                continue
            if action.knob is not None and action.direction is not None:
                claimed = owner.get(action.knob)
                if claimed is not None and claimed[0] != action.direction:
                    notes.append(f"not advised here: {action.direction} {action.knob} would work against "
                                 f"{claimed[1]}, the stronger finding, which advises to {claimed[0]} it")
                    continue
                owner.setdefault(action.knob, (action.direction, cid))
            resolved = concrete(action, ctx)
            if resolved is not None:
                actions.append(resolved)
        out[cid] = (tuple(actions), tuple(notes))
    return out


def symptoms_from(findings: dict[str, Finding], ctx: Context) -> tuple[SymptomResult, ...]:
    resolved = resolve_actions(findings, ctx)
    out = []
    for symptom in SYMPTOMS:
        causes = []
        for cid, f in findings.items():
            if f.status != "fired" or CAUSE_BY_ID[cid].symptom != symptom.id:
                continue
            actions, notes = resolved[cid]
            cause = CAUSE_BY_ID[cid]
            causes.append(CauseResult(cid, symptom.id, cause.layer, cause.title, f.strength,
                                      (*f.evidence, *notes), actions, f.informational, f.recovering))
        if causes:
            out.append(SymptomResult(symptom.id, symptom.title, symptom.severity,
                                     tuple(sorted(causes, key=lambda c: (c.informational, -c.strength)))))
    return tuple(out)


# -- verdict --------------------------------------------------------------------------------
@dataclass
class VerdictTracker:
    """Hysteresis for one target's verdict.

    A layer becomes the verdict when it scores at least ``verdict_enter_score`` and wins
    ``verdict_hold_evaluations`` evaluations in a row. The current layer is released when its
    score falls below ``verdict_exit_score``, and replaced by a layer that scores higher than it
    for ``verdict_hold_evaluations`` evaluations in a row: a verdict can always change its mind.
    Without a layer at the entry score the verdict is ``none``, or ``unknown`` while an objective is
    missed that no known cause explains; the two trade places under the same hold. Only the first
    verdict after a reset (``judged`` False: no diagnosis yet) needs no hold.

    A verdict layer whose causes have all ended while their effect is still in the window is
    *recovering*: the layer is kept (its recovering causes still score), marked so, with the last
    evaluation at which one of its causes had evidence of its own (``recovering_since``).
    """

    layer: str = "unknown"
    since: float = 0.0
    judged: bool = False  # False: `unknown` means no diagnosis yet; True: an objective missed, unexplained
    _pending: str | None = None
    _pending_count: int = 0
    _acting_at: dict[str, float] = field(default_factory=dict)  # layer -> last evaluation with a cause acting
    _recovering: bool = False  # the verdict layer was recovering at the last evaluation

    def reset(self, now: float) -> Verdict:
        if self.layer != "unknown" or self.judged:
            self.layer, self.since = "unknown", now
        self.judged = False
        self._pending, self._pending_count = None, 0
        self._acting_at.clear()
        self._recovering = False
        return Verdict("unknown", 0.0, self.since)

    def candidate(self, scores: dict[str, float], thresholds: Thresholds, unexplained: bool = False) -> str:
        best = max(LAYERS, key=lambda layer: (scores[layer], -LAYERS.index(layer)))
        if scores[best] >= thresholds.verdict_enter_score:
            entering = best
        else:
            entering = "unknown" if unexplained else "none"
        if self.layer not in LAYERS:
            return entering
        current = scores.get(self.layer, 0.0)
        if current < thresholds.verdict_exit_score:
            return entering
        if best != self.layer and scores[best] > current and scores[best] >= thresholds.verdict_enter_score:
            return best  # a stronger challenger
        return self.layer

    def update(self, scores: dict[str, float], thresholds: Thresholds, now: float,
               unexplained: bool = False, recovering: frozenset[str] = frozenset(),
               window_seconds: float = 0.0) -> Verdict:
        """``recovering``: the layers whose every active cause has ended (``recovering_layers``).
        ``window_seconds``: how long after its cause ended a recovering layer holds against an effect
        without a known cause (A0/B0: the effect is its cause's, still in the window)."""
        for layer, score in scores.items():
            if score > 0 and layer not in recovering:
                self._acting_at[layer] = now
        desired = self.candidate(scores, thresholds, unexplained)
        ended_at = self._acting_at.get(self.layer)
        if (desired == "unknown" and self._recovering and ended_at is not None
                and now - ended_at <= window_seconds):
            desired = self.layer  # the effect left in the window is the ended cause's, not an unknown one's
        if desired in recovering and self.layer in LAYERS and desired != self.layer:
            desired = self.layer  # a cause that has ended never takes the verdict from another layer
        if not self.judged:
            self.judged = True
            self.layer, self.since = desired, now  # the first verdict needs no hold
            self._pending, self._pending_count = None, 0
        elif desired == self.layer:
            self._pending, self._pending_count = None, 0
        else:
            self._pending_count = self._pending_count + 1 if desired == self._pending else 1
            self._pending = desired
            if self._pending_count >= thresholds.verdict_hold_evaluations:
                self.layer, self.since = desired, now
                self._pending, self._pending_count = None, 0
        score = scores.get(self.layer, 0.0)
        # Recovering while its ended causes still score, and while the hysteresis holds the layer on its way out.
        held = self.layer in LAYERS and ((self.layer in recovering and score > 0)
                                         or (self._recovering and score < thresholds.verdict_exit_score))
        self._recovering = held
        return Verdict(self.layer, scores.get(self.layer, 0.0), self.since, self._pending, self._pending_count,
                       unexplained=self.layer == "unknown" and self.judged, recovering=held,
                       recovering_since=self._acting_at.get(self.layer) if held else None)


def diagnose(ctx: Context, tracker: VerdictTracker, now: float) -> Diagnosis:
    findings, errors = evaluate_rules(ctx)
    scores = layer_scores(findings)
    verdict = tracker.update(scores, ctx.thresholds, now, unexplained(findings), frozenset(recovering_layers(findings)),
                             ctx.signals.window_seconds)
    abstained = {cid: f.missing for cid, f in findings.items() if f.status == "abstain"}
    return Diagnosis(verdict, scores, symptoms_from(findings, ctx), abstained, errors)
