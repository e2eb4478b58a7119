"""The decode weight searched where the prior's calibration does not reproduce a real window (issue 49).

``v9-wkvp-s16-1`` is a capture of the wide-MLP engine (compute-bound: a prefill token costs about what a
decoding sequence does) under KV pressure, from a spent validation half. At the prior weight (4) the fit
puts the fixed part of a step at its floor and reproduces neither the throughput nor TTFT p95, so the
advisor refused it; the weight the window's own shape chooses must reproduce it, and say where it came from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.advisor_cases import advise
from lab.pair_archive import run_folders

CAPTURES = Path(__file__).resolve().parents[2] / "data" / "advisor-pairs"

pytestmark = pytest.mark.slow  # a few calibrations on a real window: ~10 s


def test_a_compute_bound_window_the_prior_does_not_reproduce_gets_the_weight_that_does() -> None:
    with run_folders(CAPTURES, ["v9-wkvp-s16-1"]) as (base,):
        target = advise(base, "max_num_seqs=6")
    calibration = target["calibration"]
    assert target.get("advice"), f"refused: {target.get('reason')}"
    assert calibration["step_evidence"]["decode_token_weight_used_from"] == "search"
    weight = calibration["step_cost"]["decode_token_weight"]
    assert weight < 4, f"a compute-bound engine's decode is cheap against its prefill, got weight {weight}"
    errors = calibration["errors"]
    assert abs(errors["generation_tokens_per_second"]) < 0.5 and abs(errors["ttft_p95_seconds"]) < 0.5
