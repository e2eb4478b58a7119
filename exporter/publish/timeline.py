"""Verdict timelines: one :class:`StepVerdict` per evaluation, runs of equal verdicts, incidents,
and their renderings (a text strip, an inline SVG without JavaScript).

``diagnose --prometheus`` builds them from a stored span; the sidecar and ``serve --prometheus``
keep a bounded history of their own evaluations (:class:`VerdictHistory`) for the page.
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from exporter import numbers
from exporter.catalog.symptoms import LAYERS
from exporter.state import TargetState

NO_DATA = "no_data"  # verdict of a step without a sample within the staleness horizon

# The signals each step keeps (JSON keys of TargetState.to_dict()["signals"]): what the timeline,
# the incident lines and the agreement with offline captures are about.
CORE_SIGNALS: tuple[str, ...] = (
    "preemption_rate", "preemptions_per_request", "prefix_cache_hit_ratio", "kv_cache_usage", "kv_cache_usage_max",
    "kv_cache_usage_mean", "ttft_p95_seconds", "itl_p95_seconds", "e2e_p95_seconds", "requests_per_second",
    "prompt_tokens_per_second", "generation_tokens_per_second", "running_mean", "waiting_mean",
    "cpu_starvation_score",
)


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """What one evaluation step said about one target."""

    at: float
    state: str  # ok | insufficient_evidence | no_data
    verdict: str  # a layer, none, unknown or no_data
    score: float
    symptoms: tuple[str, ...]  # active, with a user-visible effect (informational findings left out)
    causes: tuple[str, ...]
    signals: dict[str, float | None] = field(default_factory=dict)
    evidence: dict[str, str] = field(default_factory=dict)  # symptom -> first evidence of its strongest cause

    @classmethod
    def of(cls, state: TargetState, detail: bool = True) -> StepVerdict:
        """The step of ``state``; without ``detail``, only verdict and symptoms (no signals, no evidence)."""
        d = state.diagnosis
        active = d.active_symptoms
        step = cls(at=state.evaluated_at, state=state.status, verdict=d.verdict.layer, score=d.verdict.score,
                   symptoms=tuple(s.id for s in active),
                   causes=tuple(c.id for s in active for c in s.causes if not c.informational))
        if not detail:  # the whole state's JSON is not built for what would be dropped
            return step
        evidence = {}
        for symptom in active:
            strongest = max(symptom.causes, key=lambda c: c.strength)
            if strongest.evidence:
                evidence[symptom.id] = strongest.evidence[0]
        signals = state.signals.to_dict() if state.signals is not None else {}  # as state.to_dict() has them
        return replace(step, signals={k: _number(signals.get(k)) for k in CORE_SIGNALS}, evidence=evidence)

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "state": self.state, "verdict": self.verdict, "score": round(self.score, 3),
                "symptoms": list(self.symptoms), "causes": list(self.causes), "signals": dict(self.signals)}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def no_data(at: float) -> StepVerdict:
    return StepVerdict(at, NO_DATA, NO_DATA, 0.0, (), ())


# -- timeline --------------------------------------------------------------------------------
def segments(steps: Sequence[StepVerdict], step: float) -> list[dict[str, Any]]:
    """Runs of steps with the same verdict and symptoms: ``{from, to, verdict, symptoms, causes, steps}``.

    ``from`` is the first step of the run and ``to`` where the next run begins (the last step
    plus ``step`` for the final run), both Unix seconds.
    """
    out: list[dict[str, Any]] = []
    for s in steps:
        if out:
            out[-1]["to"] = s.at
        if out and out[-1]["verdict"] == s.verdict and out[-1]["symptoms"] == list(s.symptoms):
            out[-1]["steps"] += 1
            continue
        out.append({"from": s.at, "to": s.at, "verdict": s.verdict, "symptoms": list(s.symptoms),
                    "causes": list(s.causes), "steps": 1})
    if out:
        out[-1]["to"] = steps[-1].at + step
    return out


def _incidental(s: StepVerdict | None) -> bool:
    """A layer as the verdict, or `unknown` on a judged step: an objective missed that no known cause
    explains (a step with no diagnosis yet is not judged: its state is not ok)."""
    return s is not None and (s.verdict in LAYERS or (s.verdict == "unknown" and s.state == "ok"))


def incidents(target: str, steps: Sequence[StepVerdict], step: float) -> list[dict[str, Any]]:
    """Runs with one layer (or an unexplained miss) as the verdict, each summed up at its worst step."""
    found: list[dict[str, Any]] = []
    run: list[StepVerdict] = []
    for s in [*steps, None]:
        if s is not None and _incidental(s) and (not run or run[-1].verdict == s.verdict):
            run.append(s)
            continue
        if run:
            found.append(_incident(target, run, step))
        run = [s] if s is not None and _incidental(s) else []
    return found


def _incident(target: str, run: Sequence[StepVerdict], step: float) -> dict[str, Any]:
    worst = max(run, key=lambda s: s.score)
    symptoms: list[str] = []
    causes: list[str] = []
    for s in run:
        symptoms += [x for x in s.symptoms if x not in symptoms]
        causes += [x for x in s.causes if x not in causes]
    start, end = run[0].at, run[-1].at
    parts = [f"{sid}: {describe(sid, worst)}" for sid in sorted(worst.symptoms)]
    summary = f"{clock(start, end)}-{clock(end, start)} {target}: {worst.verdict}"
    if parts:
        summary += ", " + "; ".join(parts)
    return {"from": start, "to": end + step, "target": target, "verdict": worst.verdict,
            "score": round(worst.score, 3), "symptoms": sorted(symptoms), "causes": causes, "peak_at": worst.at,
            "summary": summary}


def describe(symptom: str, at: StepVerdict) -> str:
    """The numbers behind a symptom at one step, in a few words."""
    sig = at.signals
    phrase: str | None = None
    if symptom == "A" and sig.get("ttft_p95_seconds") is not None:
        phrase = f"TTFT p95 {numbers.seconds(sig['ttft_p95_seconds'])}"
        if sig.get("waiting_mean"):
            phrase += f", {numbers.number(sig['waiting_mean'])} waiting"
    elif symptom == "B" and sig.get("itl_p95_seconds") is not None:
        phrase = f"ITL p95 {numbers.seconds(sig['itl_p95_seconds'])}"
    elif symptom == "C" and sig.get("generation_tokens_per_second") is not None:
        phrase = f"{numbers.number(sig['generation_tokens_per_second'])} tokens/s"
        if sig.get("waiting_mean"):
            phrase += f" with {numbers.number(sig['waiting_mean'])} waiting"
    elif symptom == "D" and sig.get("preemption_rate") is not None:
        phrase = f"{numbers.number(sig['preemption_rate'])} preemptions/s"
        if sig.get("kv_cache_usage_max") is not None:
            phrase += f" at KV {numbers.percent(sig['kv_cache_usage_max'], 0)}"
    elif symptom == "E" and sig.get("kv_cache_usage_max") is not None:
        phrase = f"KV max {numbers.percent(sig['kv_cache_usage_max'], 0)}"
    elif symptom == "F" and sig.get("prefix_cache_hit_ratio") is not None:
        phrase = f"prefix hits {numbers.percent(sig['prefix_cache_hit_ratio'], 0)}"
    return phrase or at.evidence.get(symptom, "active")


def clock(at: float, other: float) -> str:
    """UTC wall time: HH:MM:SS, with the date when the span crosses midnight."""
    same_day = time.gmtime(at)[:3] == time.gmtime(other)[:3]
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", time.gmtime(at))


# -- renderings ------------------------------------------------------------------------------
# One character per step in the text strip.
STRIP_CODES: dict[str, str] = {"request": "R", "scheduler": "S", "kv_cache": "K", "gpu_compute": "G", "cpu": "C",
                               "distributed": "D", "none": ".", "unknown": "?", NO_DATA: "_"}
# Fill colours of the SVG bars: the layer palette of the page (kv_cache red as in its legend).
COLOURS: dict[str, str] = {"request": "#8e44ad", "scheduler": "#e67e22", "kv_cache": "#c0392b",
                           "gpu_compute": "#2c3e50", "cpu": "#d35400", "distributed": "#16a085",
                           "none": "#27ae60", "unknown": "#bdc3c7", NO_DATA: "#ecf0f1"}
STRIP_WIDTH = 60  # steps per line of the text strip


def legend() -> str:
    return ", ".join(f"{code} {verdict.replace('_', ' ') if verdict != NO_DATA else 'no data'}"
                     for verdict, code in STRIP_CODES.items())


def strip(steps: Sequence[StepVerdict]) -> list[str]:
    """The text timeline: lines of up to STRIP_WIDTH steps, each headed by its first step's time."""
    lines = []
    for start in range(0, len(steps), STRIP_WIDTH):
        chunk = steps[start:start + STRIP_WIDTH]
        codes = "".join(STRIP_CODES.get(s.verdict, "?") for s in chunk)
        lines.append(f"{clock(chunk[0].at, steps[0].at)} {codes}")
    return lines


def svg(runs: Sequence[dict[str, Any]], width: int = 640, height: int = 18) -> str:
    """An inline SVG bar: one rectangle per run, coloured by verdict, a native tooltip each (no JS)."""
    if not runs:
        return ""
    start, end = runs[0]["from"], runs[-1]["to"]
    span = max(end - start, 1e-9)
    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 14}" '
             f'viewBox="0 0 {width} {height + 14}" role="img" aria-label="verdict timeline">']
    for run in runs:
        x = (run["from"] - start) / span * width
        w = max((run["to"] - run["from"]) / span * width, 0.5)
        verdict = run["verdict"]
        symptoms = ", ".join(run["symptoms"])
        tip = f"{clock(run['from'], start)}-{clock(run['to'], start)} {verdict}"
        tip += f" [{symptoms}]" if symptoms else ""
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{COLOURS.get(verdict, "#999")}">'
                     f"<title>{_escape(tip)}</title></rect>")
    parts.append(f'<text x="0" y="{height + 12}" font-size="10">{_escape(clock(start, end))}</text>')
    parts.append(f'<text x="{width}" y="{height + 12}" font-size="10" text-anchor="end">'
                 f"{_escape(clock(end, start))} UTC</text>")
    parts.append("</svg>")
    return "".join(parts)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class VerdictHistory:
    """The last ``capacity`` evaluations of one target, for the page's timeline (bounded memory).

    Kept as runs, not one object per evaluation: the times in an array and, per run of equal (verdict,
    symptoms, causes), those three and its length; about 8 bytes an evaluation where a :class:`StepVerdict`
    cost some 300 (240 of them per target). :meth:`runs` gives what :func:`segments` gives for the steps.
    """

    def __init__(self, capacity: int = 240) -> None:  # an hour at 15 s
        self.capacity = capacity
        self._at = array("d")
        self._runs: deque[list[Any]] = deque()  # [verdict, symptoms, causes, steps], oldest first

    def record(self, state: TargetState) -> None:
        if self._at and state.evaluated_at <= self._at[-1]:
            return
        symptoms: tuple[str, ...] = ()
        causes: tuple[str, ...] = ()
        if state.status == "down":
            verdict = NO_DATA
        else:  # the page draws verdicts and symptoms only: no signals or evidence kept per evaluation
            step = StepVerdict.of(state, detail=False)
            verdict, symptoms, causes = step.verdict, step.symptoms, step.causes
        if len(self._at) >= self.capacity:
            del self._at[0]
            self._runs[0][3] -= 1
            if self._runs[0][3] == 0:
                self._runs.popleft()
        self._at.append(state.evaluated_at)
        last = self._runs[-1] if self._runs else None
        if last is not None and last[0] == verdict and last[1] == symptoms and last[2] == causes:
            last[3] += 1
        else:
            self._runs.append([verdict, symptoms, causes, 1])

    def runs(self) -> list[dict[str, Any]]:
        at = self._at
        if not at:
            return []
        spacing = (at[-1] - at[0]) / (len(at) - 1) if len(at) > 1 else 0.0
        out: list[dict[str, Any]] = []
        index = 0
        for verdict, symptoms, causes, steps in self._runs:
            if out:
                out[-1]["to"] = at[index]
            if out and out[-1]["verdict"] == verdict and out[-1]["symptoms"] == list(symptoms):
                out[-1]["steps"] += steps  # the same run for the page: its causes are its first step's
            else:
                out.append({"from": at[index], "to": at[index], "verdict": verdict, "symptoms": list(symptoms),
                            "causes": list(causes), "steps": steps})
            index += steps
        out[-1]["to"] = at[-1] + spacing
        return out
