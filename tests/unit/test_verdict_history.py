"""The page's bounded verdict history keeps runs, and gives the runs ``segments`` gives for its steps."""

from __future__ import annotations

import random
from dataclasses import replace

from exporter.publish.timeline import StepVerdict, VerdictHistory, no_data, segments
from exporter.state import CauseResult, ScrapeHealth, SymptomResult, TargetState, Verdict, unknown_diagnosis


def _state(at: float, layer: str, symptoms: tuple[tuple[str, tuple[str, ...]], ...], down: bool = False) -> TargetState:
    found = tuple(SymptomResult(symptom, symptom, "page", tuple(
        CauseResult(cause, symptom, layer, cause, 0.5, (), ()) for cause in causes)) for symptom, causes in symptoms)
    diagnosis = replace(unknown_diagnosis(at), verdict=Verdict(layer, 0.5, at), symptoms=found)
    return TargetState(target="t", url="u", status="down" if down else "ok", window_seconds=180.0, evaluated_at=at,
                       health=ScrapeHealth(), diagnosis=diagnosis)


def test_runs_are_the_segments_of_the_kept_steps_through_eviction():
    rng = random.Random(7)
    kinds = [("none", ()), ("kv_cache", (("A", ("F6",)),)), ("kv_cache", (("A", ("F1",)),)),
             ("scheduler", (("A", ("A2",)), ("B", ("B1",))))]
    history, kept = VerdictHistory(capacity=25), []
    at = 1.7e9
    for _ in range(120):
        at += rng.choice([5.0, 5.0, 5.0, 4.9, 15.0])
        layer, symptoms = rng.choice(kinds) if rng.random() < 0.3 or not kept else (kept[-1].verdict, None)
        if symptoms is None:  # mostly the same verdict as before: long runs, some with changed causes
            layer, symptoms = rng.choice([k for k in kinds if k[0] == layer] or kinds)
        down = rng.random() < 0.05
        state = _state(at, layer, symptoms, down)
        history.record(state)
        history.record(replace(state, evaluated_at=at - 1))  # not after the newest: ignored
        kept = (kept + [no_data(at) if down else StepVerdict.of(state, detail=False)])[-25:]
        spacing = (kept[-1].at - kept[0].at) / (len(kept) - 1) if len(kept) > 1 else 0.0
        assert history.runs() == segments(kept, spacing)
    assert sum(run["steps"] for run in history.runs()) == 25
    assert VerdictHistory().runs() == []
