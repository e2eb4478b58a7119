"""The decode weight where the prior's does not fit a real window (issue 49).

``v9-wkvp-s16-1`` is a capture of the wide-MLP engine (compute-bound: a decoding sequence costs about a prefill
token or less) under KV pressure, from a spent validation half. At the prior weight (4) the window's ITL and
prefill means leave no fixed part, and the fit that pinned it at its floor reproduced neither the throughput
nor TTFT p95, so the advisor refused it, then searched a weight that did. The window's means bound the weight
first now (``bounded``: the prior below the ceiling they set); the weight they give must reproduce the window,
and say where it came from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.advisor_cases import advise
from lab.pair_archive import run_folders

CAPTURES = Path(__file__).resolve().parents[2] / "data" / "advisor-pairs"

pytestmark = pytest.mark.slow  # a few calibrations on a real window: ~10 s


def test_a_compute_bound_window_the_prior_does_not_fit_gets_a_weight_under_the_ceiling_that_reproduces_it() -> None:
    with run_folders(CAPTURES, ["v9-wkvp-s16-1"]) as (base,):
        target = advise(base, "max_num_seqs=6")
    calibration = target["calibration"]
    assert target.get("advice"), f"refused: {target.get('reason')}"
    assert calibration["step_evidence"]["decode_token_weight_used_from"] == "bounded"
    weight = calibration["step_cost"]["decode_token_weight"]
    assert weight < 4, f"a compute-bound engine's decode is cheap against its prefill, got weight {weight}"
    errors = calibration["errors"]
    assert abs(errors["generation_tokens_per_second"]) < 0.5 and abs(errors["ttft_p95_seconds"]) < 0.5
