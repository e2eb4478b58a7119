"""Arbitrary bytes never raise out of the pipeline: they parse, or they are a counted parse error."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.config import load_settings
from exporter.parse import ParseError, parse
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult

LINE_PARTS = st.sampled_from([
    "vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket", "vllm:num_preemptions_total",
    "vllm:cache_config_info", "process_start_time_seconds", "{", "}", '"', "\\", "le=", '"+Inf"', "engine=",
    '"0"', ",", " ", "\t", "#", "# EOF", "\n", "1", "-2.5e3", "NaN", "+Inf", "x", "=", "\r",
])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINE_PARTS, max_size=40).map("".join))
def test_parse_raises_only_parse_errors(text):
    try:
        parse(text, 0.0)
    except ParseError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_pipeline_survives_arbitrary_bytes(body):
    settings_ = load_settings(overrides={"targets": [{"name": "t", "url": "http://127.0.0.1:1/metrics"}]})
    pipeline = TargetPipeline(settings_.targets[0], settings_)
    for i in range(3):
        state = pipeline.ingest(ScrapeResult(started_at=float(i), duration=0.0, body=body))
        assert state.status in ("ok", "insufficient_evidence", "down")
        assert state.diagnosis.verdict.layer in ("unknown", "none") or state.status == "ok"
