"""The what-if advisor on a real vLLM run kept as captures: issue 16's acceptance, every case.

``lab/data/advisor-validation-run24`` holds the captures of one full run of
the live validation, ``python -m lab.advisor`` (the clean-clone CI run 24: vLLM's CPU build, the
tiny model, the six before/after runs of the four changes). A live run measures the machine as well,
whose speed moves the real "after" by up to 2x; these captures are fixed, so a change to the engine
model or the calibration that breaks a prediction on real data fails here, the same way on every
machine. The table in docs/advisor.md is this run, made by
``python -m lab.advisor --runs lab/data/advisor-validation-run24 --reuse
--write docs/advisor.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.advisor_cases import CASES, Case, Score, score

RUN = Path(__file__).resolve().parents[2] / "data" / "advisor-validation-run24"
PARAMS = [pytest.param(case, id=case.cause) for case in CASES]


@pytest.fixture(scope="module")
def scores() -> dict[str, Score]:
    return {case.name: score(case, RUN) for case in CASES}


@pytest.mark.parametrize("case", PARAMS)
def test_every_change_meets_the_acceptance(case: Case, scores: dict[str, Score]) -> None:
    result = scores[case.name]
    assert not result.reason, f"{case.name}: no prediction: {result.reason}"
    described = f"before {result.before}\npredicted {result.predicted}\nafter {result.actual}"
    assert not result.wrong_way(), f"{case.name}: direction wrong for {result.wrong_way()}: {described}"
    off = [key for key, ok in result.magnitude_ok.items() if not ok]
    assert not off, f"{case.name}: not within +/-35 % for {off}: {described}"
    # the change moved something, so the acceptance is not met by a change that changed nothing
    assert any(ok is True for ok in result.direction_ok.values()), f"{case.name}: nothing moved: {described}"
