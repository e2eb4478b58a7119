"""The what-if advisor on the simulator: its prediction against the simulator's own answer, the CLI,
and the sidecar worker. The simulated scenario is the truth here (the real engine's: the benchmark
`python -m lab.advisor` and its kept run in tests/integration/test_advisor_kept_run.py)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from exporter.advisor.worker import AdvisorWorker
from exporter.cli import _diagnosed, build_parser, main
from exporter.simulator import SCENARIOS, write_captures
from tests.helpers import scenario_with_engine

pytestmark = pytest.mark.slow  # a few simulated minutes and the advisor's seeds: ~20 s


def _advise(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    assert main(["advise", *argv, "--format", "json"]) == 0
    return dict(json.loads(capsys.readouterr().out)["targets"][0])


@pytest.fixture(scope="module")
def small_budget(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Before: the A4 scenario (budget 256); after: the same traffic and seed with budget 2048."""
    scenario = SCENARIOS["small-token-budget"]
    before, after = tmp_path_factory.mktemp("before"), tmp_path_factory.mktemp("after")
    write_captures(scenario, before, 180, 15)
    write_captures(scenario_with_engine(scenario, max_num_batched_tokens=2048), after, 180, 15)
    return before, after


def test_prediction_follows_the_simulated_change(small_budget: tuple[Path, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    before, after = small_budget
    target = _advise(capsys, str(before), "--what-if", "max_num_batched_tokens=2048")
    truth = _advise(capsys, str(after))["observed"]
    assert not target.get("reason"), target.get("reason")
    item = target["advice"][0]
    assert (item["knob"], item["current"], item["proposed"]) == ("max_num_batched_tokens", 256, 2048)
    observed, predicted = target["observed"], item["predicted"]
    # The simulator's answer: a budget that holds whole prompts cuts TTFT and costs ITL (compute-bound
    # 2048-token steps). The advisor must agree on both directions, and on the ITL it predicts.
    assert truth["ttft_p95_seconds"] < observed["ttft_p95_seconds"]
    assert predicted["ttft_p95_seconds"] < observed["ttft_p95_seconds"]
    assert truth["itl_p95_seconds"] > 2 * observed["itl_p95_seconds"]
    assert predicted["itl_p95_seconds"] > 2 * observed["itl_p95_seconds"]
    assert predicted["itl_p95_seconds"] == pytest.approx(truth["itl_p95_seconds"], rel=0.35)
    assert any(line.startswith("ITL p95") for line in item["worse"])
    low, high = item["interval"]["ttft_p95_seconds"]
    assert low <= predicted["ttft_p95_seconds"] <= high
    errors = target["calibration"]["errors"]
    assert abs(errors["itl_p95_seconds"]) <= 0.35 and abs(errors["ttft_p95_seconds"]) <= 0.35
    # 2048-token steps where the window's held 256: the prediction says its step cost is extrapolated.
    assert item["caveat"].startswith("extrapolated: prefill steps of up to 2048 tokens"), item["caveat"]


def test_a_much_smaller_chunk_is_flagged_and_other_knobs_are_not(small_budget: tuple[Path, Path],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    target = _advise(capsys, str(small_budget[0]), "--what-if", "max_num_batched_tokens=64",
                     "--what-if", "max_num_seqs=8")
    by_knob = {item["knob"]: item for item in target["advice"]}
    assert by_knob["max_num_batched_tokens"]["caveat"].startswith("extrapolated: prefill chunks of 64 tokens")
    assert by_knob["max_num_seqs"]["caveat"] is None


def test_derived_candidates_without_questions(small_budget: tuple[Path, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    target = _advise(capsys, str(small_budget[0]))
    knobs = [item["knob"] for item in target["advice"]]
    assert "max_num_batched_tokens" in knobs
    scores = [item["score"] for item in target["advice"]]
    assert scores == sorted(scores, reverse=True)  # best first
    raise_budget = next(i for i in target["advice"] if i["knob"] == "max_num_batched_tokens"
                        and i["proposed"] > i["current"])
    assert raise_budget["why"].startswith("A4 active")


def test_bad_question_is_one_line(small_budget: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advise", str(small_budget[0]), "--what-if", "max_num_partial_prefills=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vllm-diag: --what-if max_num_partial_prefills=2:")


def test_too_little_evidence_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_captures(SCENARIOS["long-prompts"], tmp_path, 45, 15)
    target = _advise(capsys, str(tmp_path))
    assert target["advice"] == []
    assert "advice_min_requests" in target["reason"]
    assert set(target["observed"]) == {"ttft_p95_seconds", "itl_p95_seconds", "preemption_rate",
                                       "generation_tokens_per_second"}


def test_worker_publishes_off_the_poll_loop(small_budget: tuple[Path, Path]) -> None:
    pipeline = _diagnosed(build_parser().parse_args(["advise", str(small_budget[0])]))
    worker = AdvisorWorker()
    try:
        spent = time.process_time()
        asyncio.run(worker.run([pipeline]))
        spent = time.process_time() - spent
    finally:
        worker.close()
    assert pipeline.advice is not None and pipeline.advice.recommendations
    # The calibration's CPU time was spent by the worker process, not by the sidecar's (and its lock).
    assert pipeline.advice.calibration is not None and pipeline.advice.calibration.cpu_seconds is not None
    advised = pipeline.advice.calibration.cpu_seconds
    assert advised > 0.5 and spent < advised / 2, (spent, advised)
    state = pipeline.evaluate(pipeline.state.evaluated_at)  # the next evaluation carries it
    doc = state.to_dict()
    assert doc["advice"] and doc["observed"]["ttft_p95_seconds"] > 0
    assert doc["calibration"]["cpu_seconds"] <= pipeline.thresholds.advice_cpu_seconds + 10


def test_a_profile_supplies_the_split_the_window_does_not(small_budget: tuple[Path, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    before, _ = small_budget
    plain = _advise(capsys, str(before), "--what-if", "max_num_seqs=8")["calibration"]
    evidence = plain["step_evidence"]
    assert evidence["decode_token_weight_used_from"] in ("window", "prior")
    # The fixture's steps vary too little to split the cost (the usual window): the profile is what fills it.
    assert not evidence["identified"], "this window identifies the split itself: pick one that does not"
    assert plain["step_cost"]["decode_token_weight"] == 4 and plain["step_cost"]["decode_token_weight_log_sigma"] == 0.6
    # Nor its curvature: said so, with the reason, and carried by the interval over its whole range.
    curved = plain["step_curvature"]
    assert not curved["identified"] and curved["reason"] and curved["interval_from"] == "the whole range"
    assert plain["step_cost"]["curvature"] == curved["curvature_used"] == 0
    profile = tmp_path / "engine.profile.json"
    profile.write_text(json.dumps({"format": 1, "evidence": {
        "identified": True, "intervals": 40, "token_gaps": 9000, "seconds_per_step": 0.02, "fixed_seconds": 0.01,
        "per_prefill_token_seconds": 1e-5, "per_decode_seconds": 9e-5, "decode_token_weight": 9.0,
        "decode_token_weight_log_sigma": 0.1}}), encoding="utf-8")
    used = _advise(capsys, str(before), "--what-if", "max_num_seqs=8", "--profile", str(profile))["calibration"]
    assert used["step_evidence"]["decode_token_weight_used_from"] == "profile"
    assert used["step_cost"]["decode_token_weight"] == 9.0 and used["step_cost"]["decode_token_weight_log_sigma"] == 0.1
    (tmp_path / "bad.json").write_text("{}", encoding="utf-8")
    assert main(["advise", str(before), "--profile", str(tmp_path / "bad.json")]) == 2
    assert "not a vllm-diag profile" in capsys.readouterr().err
