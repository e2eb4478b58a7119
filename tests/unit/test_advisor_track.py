"""The advisor's track record: knob changes seen between windows, and the kept window on disk across a
restart of the sidecar (real files; no calibration runs here, the simulator test in
tests/simulator/test_advisor_track.py runs one)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from exporter.advisor.arrival import ArrivalModel
from exporter.advisor.calibrate import Calibration, Empirical, Fitted, Outcome
from exporter.advisor.model import Clients, OpenArrivals, StepCost
from exporter.advisor.tail import TailPlacement
from exporter.advisor.track import Summary, TrackRecord, TrackReport, error_ratio, file_path, knobs
from exporter.catalog.thresholds import Thresholds
from exporter.parse import parse
from exporter.window import Window

TH = Thresholds()
KNOBS = {"max_num_batched_tokens": 256, "max_num_seqs": 16, "num_gpu_blocks": 900, "enable_prefix_caching": True}


def _summary(started: float | None = 1000.0, window_end: float = 2000.0) -> Summary:
    cal = Calibration(
        duration_s=120.0, warmup_s=10.0,
        prompt=Empirical((300.5, 1200.25), (40.0, 10.0), (50.5, 200.0)), output=Empirical((60.0,), (50.0,), (10.0,)),
        shared_prefix_tokens=32,
        arrivals=ArrivalModel("open", OpenArrivals(2.5, 1.3, backlog=2), Clients(6, 0.25), 5.5, math.inf, 1.3),
        cost=StepCost(0.012, 3.1e-5, noise_sigma=0.2, compute_per_token_s=1e-7, decode_weight=0.5, cached_weight=0.25),
        frontend_s=0.004, block_size=16, num_gpu_blocks=900, max_num_batched_tokens=256, max_num_seqs=16,
        max_model_len=4096, enable_prefix_caching=True, kv_bytes_per_block=None, frontend_observed_s=0.005,
        tail=TailPlacement(0.55, 0.473, 0.413, "the tail's position closes 33 of the 65 tokens"))
    simulated = Outcome(0.8, 0.03, 0.0, 120.0, 0.4, 0.2)
    observed = Outcome(0.9, 0.031, 0.01, 118.0, 0.45, 0.25)
    return Summary(Fitted(cal, "open", simulated), observed, dict(KNOBS), started, window_end)


def _window(times: list[float], started: list[float]) -> Window:
    window = Window(180.0, ["vllm:request_success_total"])
    for i, (t, start) in enumerate(zip(times, started)):
        window.push(parse("# TYPE process_start_time_seconds gauge\n"
                          f"process_start_time_seconds {start}\n"
                          "# TYPE vllm:request_success_total counter\n"
                          f'vllm:request_success_total{{model_name="m",finished_reason="stop"}} {i}\n', t))
    return window


def test_no_change_no_move_and_unknown_facts_are_no_change() -> None:
    record = TrackRecord()
    assert record.see(KNOBS, 1000.0, 2100.0) is None  # nothing kept yet: nothing to compare with
    record.keep(_summary())
    assert record.see(KNOBS, 1000.0, 2100.0) is None
    assert record.see(KNOBS, 5000.0, 5100.0) is None  # a restart with the same flags changes nothing
    assert record.see({"max_num_seqs": 16}, 1000.0, 2100.0) is None  # the other facts went missing


def test_a_change_is_seen_with_its_exact_move_from_the_process_start() -> None:
    record = TrackRecord()
    record.keep(_summary())
    move = record.see({**KNOBS, "max_num_batched_tokens": 2048}, 3000.0, 3050.0)
    assert move is not None and move.since == 3000.0  # the new process started at 3000
    assert [(c.knob, c.current, c.proposed) for c in move.changes] == [("max_num_batched_tokens", 256, 2048)]
    assert move.candidate.knob == "max_num_batched_tokens"
    # the same change seen again keeps its start; a newer window from the advisor does not replace the kept one
    assert record.see({**KNOBS, "max_num_batched_tokens": 2048}, 3000.0, 3200.0) is move
    assert not record.keep(_summary(started=3000.0, window_end=3200.0))
    assert record.summary is not None and record.summary.window_end == 2000.0
    # without a start time the change holds from when it was seen; two knobs at once are one move
    record2 = TrackRecord()
    record2.keep(_summary(started=None))
    move2 = record2.see({**KNOBS, "max_num_seqs": 8, "enable_prefix_caching": False}, None, 4000.0)
    assert move2 is not None and move2.since == 4000.0
    assert move2.candidate.knob == "max_num_seqs+enable_prefix_caching"
    assert [c.proposed for c in move2.changes] == [8, 0]
    # the knobs back where they were: no change to score
    assert record2.see(KNOBS, None, 4100.0) is None and record2.move is None


def test_ready_only_for_a_whole_window_after_the_change() -> None:
    record = TrackRecord()
    record.keep(_summary())
    record.see({**KNOBS, "num_gpu_blocks": 1800}, 3000.0, 3010.0)
    # the window still holds the old process's scrapes (and the restart between them)
    mixed = _window([2900.0 + 15 * i for i in range(14)], [1000.0] * 7 + [3000.0] * 7)
    assert not record.ready(mixed, filled=True)
    after = _window([3010.0 + 15 * i for i in range(13)], [3000.0] * 13)
    assert not record.ready(after, filled=False)
    assert record.ready(after, filled=True)


def test_error_ratio_convention() -> None:
    assert error_ratio(1.5, 1.0) == pytest.approx(0.5)
    assert error_ratio(0.5, 1.0) == pytest.approx(-0.5)
    assert error_ratio(None, 1.0) is None and error_ratio(1.0, None) is None
    assert error_ratio(0.0, 0.0, pad=0.05) == 0.0 and error_ratio(0.04, 0.0, pad=0.05) == 0.0
    assert error_ratio(0.45, 0.0, pad=0.05) == pytest.approx(9.0)  # a measured 0 is finite with the pad
    assert error_ratio(0.1, 0.0) is None  # a latency measured 0: no ratio to take


def test_comparison_publishes_the_error_per_metric() -> None:
    record = TrackRecord()
    record.keep(_summary())
    record.see({**KNOBS, "max_num_batched_tokens": 2048}, 3000.0, 3050.0)
    measured = Outcome(0.2, 0.05, 0.0, 130.0)
    comparison = record.compare({"ttft_p95_seconds": 0.3, "itl_p95_seconds": 0.04, "preemption_rate": 0.0},
                                measured, 3300.0, TH)
    assert comparison.errors == pytest.approx({"ttft_p95": 0.5, "itl_p95": -0.2, "preemptions_per_s": 0.0})
    assert record.summary is None and record.move is None  # used up: the next window comes with the new knobs
    report = record.report()
    assert sorted(report.errors()) == [("max_num_batched_tokens", "itl_p95", pytest.approx(-0.2)),
                                       ("max_num_batched_tokens", "preemptions_per_s", 0.0),
                                       ("max_num_batched_tokens", "ttft_p95", pytest.approx(0.5))]
    item = report.to_dict()["advice_track"]["history"][0]
    assert (item["knob"], item["current"], item["proposed"]) == ("max_num_batched_tokens", 256, 2048)
    assert item["measured"]["ttft_p95_seconds"] == 0.2 and item["before_window_end"] == 2000.0


def test_the_kept_window_survives_a_restart_with_new_flags(tmp_path: Path) -> None:
    path = file_path(tmp_path / "record", "vllm-0")
    assert path == tmp_path / "record" / "vllm-0.advisor.json"
    before = TrackRecord.load(path)  # no file yet: empty
    assert before.summary is None and not before.history
    summary = _summary()
    before.keep(summary)
    before.save()
    assert path.is_file() and not list(path.parent.glob(".*"))  # written atomically, no temporary left
    # the sidecar restarts with the pod, the engine with a bigger budget
    after = TrackRecord.load(path)
    assert after.summary == summary  # every number of the calibration, exactly
    move = after.see(knobs({**KNOBS, "max_num_batched_tokens": 1024, "model": "x"}), 9000.0, 9020.0)
    assert move is not None and move.since == 9000.0
    after.compare({"ttft_p95_seconds": 0.5}, Outcome(0.4, 0.03, 0.0, 100.0), 9300.0, TH)
    after.save()
    again = TrackRecord.load(path)
    assert again.summary is None and [c.knob for c in again.history] == ["max_num_batched_tokens"]
    assert again.history[0].errors["ttft_p95"] == pytest.approx(0.25)


def test_a_damaged_or_foreign_file_starts_afresh(tmp_path: Path) -> None:
    path = tmp_path / "t.advisor.json"
    path.write_text("{not json", encoding="utf-8")
    assert TrackRecord.load(path).summary is None
    path.write_text(json.dumps({"format": 999, "summary": None, "history": []}), encoding="utf-8")
    assert TrackRecord.load(path).summary is None
    unwritable = TrackRecord(tmp_path / "file-not-dir" / "x.json")
    (tmp_path / "file-not-dir").write_text("", encoding="utf-8")
    unwritable.keep(_summary())
    unwritable.save()  # logged, never raised: the diagnosis goes on


def test_report_without_history_publishes_nothing() -> None:
    assert list(TrackReport().errors()) == []
    report = TrackRecord(summary=_summary()).report()
    assert report.kept_window_end == 2000.0 and list(report.errors()) == []
