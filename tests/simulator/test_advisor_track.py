"""The advisor's track record through the sidecar's own path, on the simulator: the advisor calibrates a
symptomatic window, the engine's token budget is then raised (``Engine.reconfigure``, the new value
discovered as vLLM's command line would give it), and once a whole window after the change is in, the
error of the advisor's what-if for that move is published as ``vllm_diag_advice_error_ratio``."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.advisor.track import TrackRecord, file_path
from exporter.advisor.worker import AdvisorWorker
from exporter.config import Advisor, load_settings
from exporter.facts.base import CMDLINE
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.publish.document import build
from exporter.publish.exported import BY_NAME, PREFIX
from exporter.simulator.exposition import render_vllm
from exporter.simulator.scenarios import SCENARIOS

pytestmark = pytest.mark.slow  # one calibration, one candidate and one what-if on a 90 s window: ~6 s

START = 1_800_000_000.0
INTERVAL = 15.0


def _pipeline(record_dir: Path) -> TargetPipeline:
    scenario = SCENARIOS["small-token-budget"]
    facts = {k: v for k, v in scenario.engine_facts().items() if k != "max_num_batched_tokens"}
    settings = load_settings(overrides={"window_seconds": 90.0, "targets": [
        {"name": "budget", "url": "http://127.0.0.1:8000/metrics", "scrape_interval": INTERVAL, "engine": facts,
         "record_dir": str(record_dir)}]})
    pipeline = TargetPipeline(settings.targets[0], settings)
    pipeline.observe_facts(CMDLINE, {"max_num_batched_tokens": scenario.engine.max_num_batched_tokens})
    return pipeline


def test_a_real_knob_change_publishes_the_advisors_error(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    engine = SCENARIOS["small-token-budget"].build()
    worker = AdvisorWorker(Advisor(interval=60))  # a CPU budget of 0.6 s: one candidate besides the calibration

    def scrape(t: float) -> None:
        engine.advance_to(t)
        pipeline.ingest(ScrapeResult(started_at=START + t, duration=0.0,
                                     body=render_vllm(engine, start_unix=START).encode()))

    async def run() -> None:
        t = 0.0
        for _ in range(8):  # a whole 90 s window, before the change
            t += INTERVAL
            scrape(t)
        assert pipeline.state.diagnosis.active_symptoms
        await worker.run([pipeline])
        record = worker.tracks["budget"]
        assert record.summary is not None, pipeline.advice
        assert record.summary.knobs["max_num_batched_tokens"] == 256
        # the KV cache keeps its size (on a GPU the budget also moves it: that would be a move of both knobs)
        engine.reconfigure(replace(engine.cfg, max_num_batched_tokens=2048,
                                   num_gpu_blocks_override=engine.num_gpu_blocks))
        pipeline.observe_facts(CMDLINE, {"max_num_batched_tokens": 2048})
        for _ in range(10):
            t += INTERVAL
            scrape(t)
            await worker.track(pipeline)
            if record.history:
                break

    try:
        asyncio.run(run())
    finally:
        worker.close()
    record = worker.tracks["budget"]
    assert len(record.history) == 1, record.report()
    comparison = record.history[0]
    assert (comparison.knob, comparison.current, comparison.proposed) == ("max_num_batched_tokens", 256, 2048)
    # measured on a window that starts after the change was seen, not before
    assert comparison.after_window_end - comparison.before_window_end >= 90.0
    state = pipeline.evaluate(pipeline.state.evaluated_at)
    samples = list(BY_NAME[PREFIX + "advice_error_ratio"].source([state], None))  # type: ignore[arg-type]
    by_metric = {labels[2]: value for labels, value in samples}
    assert {labels[1] for labels, _ in samples} == {"max_num_batched_tokens"}
    assert set(by_metric) >= {"ttft_p95", "itl_p95"} and all(math.isfinite(v) for v in by_metric.values())
    history = build([state])["targets"][0]["advice_track"]["history"]
    assert history[0]["error_ratio"]["ttft_p95"] == pytest.approx(by_metric["ttft_p95"], abs=1e-4)
    # the comparison reached the disk: a sidecar restarted now still publishes it
    again = TrackRecord.load(file_path(tmp_path, "budget"))
    assert [c.knob for c in again.history] == ["max_num_batched_tokens"]
