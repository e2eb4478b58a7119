"""The kept run of the track record on a real engine (lab/advisor_track_live.py): the sidecar published
vllm_diag_advice_error_ratio for max_num_seqs 16 -> 6 with the error of its kept prediction against what the
restarted engine measured."""

from __future__ import annotations

import json
from pathlib import Path

from lab.advisor_track_live import AFTER, BEFORE, LABELS, checks

KEPT = Path(__file__).resolve().parents[2] / "results" / "advisor-track-live.json"


def test_the_kept_run_published_the_measured_error_for_the_move_it_saw() -> None:
    result = json.loads(KEPT.read_text(encoding="utf-8"))
    assert checks(result) == [] and result["problems"] == []
    comparison = result["comparison"]
    assert (comparison["current"], comparison["proposed"]) == (BEFORE, AFTER)
    assert set(result["published"]) == set(LABELS)
    assert comparison["after_window_end"] - comparison["before_window_end"] >= result["window_seconds"]


def test_a_published_number_that_is_not_the_measured_error_is_caught() -> None:
    result = json.loads(KEPT.read_text(encoding="utf-8"))
    result["published"]["ttft_p95"] += 0.05
    assert [p for p in checks(result) if p.startswith("ttft_p95")]
    result["published"].pop("itl_p95")
    assert [p for p in checks(result) if p.startswith("itl_p95")]
