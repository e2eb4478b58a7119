"""Parser: real captures, the OpenMetrics variant, old names, and bad input."""

from __future__ import annotations

import math

import pytest

from exporter.parse import ParseError, parse
from tests.conftest import read_capture


def test_real_capture_maps_to_canonical_families(fixtures_dir):
    snap = parse(read_capture(fixtures_dir, "pressure-during"), 100.0)
    assert snap.scalars["vllm:num_preemptions_total"][(("engine", "0"), ("model_name", "tiny"))] == 25.0
    assert snap.scalars["vllm:kv_cache_usage_perc"][(("engine", "0"), ("model_name", "tiny"))] == 1.0
    ttft = snap.histograms["vllm:time_to_first_token_seconds"][(("engine", "0"), ("model_name", "tiny"))]
    assert ttft.count == 114.0 and ttft.bounds[-1] == math.inf and ttft.bounds[0] == 0.001
    assert snap.info["vllm:cache_config_info"][0]["block_size"] == "32"
    assert snap.model_names() == ("tiny",)
    # *_created twins and families outside the catalog are dropped
    assert not any(name.endswith("_created") for name in snap.families())
    assert "python_gc_objects_collected_total" not in snap.families()


def test_labels_matched_by_name_not_position():
    text = (
        'vllm:num_requests_waiting_by_reason{reason="capacity",model_name="m",engine="0"} 3\n'
        'vllm:num_requests_waiting_by_reason{engine="0",reason="deferred",model_name="m"} 1\n'
    )
    snap = parse(text, 0.0)
    series = snap.scalars["vllm:num_requests_waiting_by_reason"]
    assert series[(("engine", "0"), ("model_name", "m"), ("reason", "capacity"))] == 3
    assert series[(("engine", "0"), ("model_name", "m"), ("reason", "deferred"))] == 1


def test_openmetrics_variant_with_eof_and_integers():
    text = (
        "# HELP vllm:prefix_cache_queries Prefix cache queries.\n"
        "# TYPE vllm:prefix_cache_queries counter\n"
        'vllm:prefix_cache_queries_total{model_name="m",engine="0"} 36821\n'
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        'vllm:time_to_first_token_seconds_sum{model_name="m",engine="0"} 12.5\n'
        'vllm:time_to_first_token_seconds_count{model_name="m",engine="0"} 140\n'
        'vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="0.1"} 40\n'
        'vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="+Inf"} 140\n'
        "# EOF\n"
    )
    snap = parse(text, 0.0)
    assert snap.scalars["vllm:prefix_cache_queries_total"][(("engine", "0"), ("model_name", "m"))] == 36821
    hist = snap.histograms["vllm:time_to_first_token_seconds"][(("engine", "0"), ("model_name", "m"))]
    assert hist.bounds == (0.1, math.inf) and hist.cumulative == (40, 140) and hist.sum == 12.5


def test_old_names_map_and_current_name_wins_when_both_present():
    old = 'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.4\n'
    assert parse(old, 0).scalars["vllm:kv_cache_usage_perc"][(("engine", "0"), ("model_name", "m"))] == 0.4
    both = old + 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.7\n'
    assert parse(both, 0).scalars["vllm:kv_cache_usage_perc"][(("engine", "0"), ("model_name", "m"))] == 0.7
    reverse = 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.7\n' + old
    assert parse(reverse, 0).scalars["vllm:kv_cache_usage_perc"][(("engine", "0"), ("model_name", "m"))] == 0.7


def test_escaped_label_values():
    text = 'vllm:num_requests_running{engine="0",model_name="a \\"q\\" b,c}"} 2\n'
    snap = parse(text, 0)
    assert snap.model_names() == ('a "q" b,c}',)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("this is not an exposition\n", "line 1"),
        ('vllm:num_requests_running{engine="0" 2\n', "line 1"),
        ("vllm:num_requests_running 2\nvllm:num_requests_running 3\n", "duplicate"),
        ("vllm:num_requests_running abc\n", "not a number"),
        ("vllm:num_requests_running 1\n# EOF\nvllm:num_requests_waiting 1\n", "after # EOF"),
    ],
)
def test_garbage_is_a_parse_error_with_the_line(text, fragment):
    with pytest.raises(ParseError, match=fragment):
        parse(text, 0.0)


def test_non_finite_values_are_dropped_and_counted():
    snap = parse("vllm:num_requests_running NaN\nvllm:num_requests_waiting +Inf\nvllm:num_preemptions_total 3\n", 0)
    assert "vllm:num_requests_running" not in snap.scalars
    assert snap.dropped_samples == 2
    assert snap.scalars["vllm:num_preemptions_total"][()] == 3


def test_cardinality_cap_counts_drops():
    lines = "".join(f'vllm:num_requests_running{{engine="{i}"}} 1\n' for i in range(50))
    snap = parse(lines, 0, max_series_per_family=10)
    assert len(snap.scalars["vllm:num_requests_running"]) == 10
    assert snap.dropped_samples == 40


def test_timestamps_and_exemplars_are_accepted_and_trailing_junk_is_not():
    ok = ('vllm:num_requests_running{engine="0"} 2 1700000000000\n'
          'vllm:num_preemptions_total{engine="0"} 3 # {trace_id="x"} 1\n')
    snap = parse(ok, 0)
    assert snap.scalars["vllm:num_preemptions_total"][(("engine", "0"),)] == 3
    with pytest.raises(ParseError):
        parse('vllm:num_requests_running{engine="0"} 2 junk here\n', 0)
