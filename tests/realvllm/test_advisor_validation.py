"""Acceptance of the what-if advisor (issue 16) on a real vLLM: four before/after changes.

A4 (raise max_num_batched_tokens), B (lower it under long-prompt stutter), D (fewer sequences under
preemption) and a max_tokens cap: the prediction made from the "before" window alone must get the
direction right for every metric that moved by more than 15 % and TTFT p95, ITL p95 and
preemptions/s within +/-35 % of the real "after" run. Three engine starts, six 50-second runs:
about 8 minutes on 2 cores (advisor_validation.py says how it is built; docs/advisor.md has the
table, made by ``python tests/realvllm/advisor_validation.py --write docs/advisor.md``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .advisor_validation import CASES, Score, collect, score, table
from .conftest import _require_real_vllm

pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _require_real_vllm()
    out = tmp_path_factory.mktemp("advisor-runs")
    t0 = time.monotonic()
    timings = collect(out, tmp_path_factory.mktemp("advisor-logs"))
    print(f"advisor validation runs: {time.monotonic() - t0:.0f} s ({timings})")
    return out


@pytest.fixture(scope="module")
def scores(runs: Path) -> dict[str, Score]:
    results = {case.name: score(case, runs) for case in CASES}
    print(table(list(results.values())))
    return results


@pytest.mark.parametrize("case", CASES, ids=[c.cause for c in CASES])
def test_prediction_matches_the_real_change(case, scores: dict[str, Score]) -> None:  # type: ignore[no-untyped-def]
    result = scores[case.name]
    assert not result.reason, f"{case.name}: no prediction: {result.reason}"
    wrong_way = [k for k, ok in result.direction_ok.items() if ok is False]
    off = [k for k, ok in result.magnitude_ok.items() if not ok]
    assert not wrong_way and not off, (
        f"{case.name} ({case.what_if}): direction wrong for {wrong_way}, magnitude off for {off}\n"
        f"before {result.before}\npredicted {result.predicted}\nafter {result.actual}")
