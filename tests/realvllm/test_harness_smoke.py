"""Smoke test of the real-vLLM harness: each load phase moves the RAW vLLM metrics as expected.

Parses /metrics with prometheus_client's own parser, deliberately not the project's parser, so
that this test checks the harness and the server, not our code.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from . import loads
from .conftest import Engines
from .harness import PHASES, LoadSummary, RealVLLM, pid_alive, run_phase, scrape_until, start_phase
from .loads import WatchedLoad

pytestmark = pytest.mark.realvllm


def sample_sum(text: str, sample_name: str, **labels: str) -> float:
    """Sum of every sample called sample_name (over all label sets matching `labels`)."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


async def run_and_scrape(server: RealVLLM, phase: str, **kwargs: object) -> tuple[LoadSummary, str, list[str], str]:
    """(summary, metrics before, metrics scraped during, metrics after) for one phase."""
    before = await server.fetch_metrics_async()
    task = start_phase(server.base_url, phase, **kwargs)
    scrapes = await scrape_until(server.metrics_url, task, interval_s=0.5)
    summary = await task
    after = await server.fetch_metrics_async()
    return summary, before, [text for _, text in scrapes], after


def delta(before: str, after: str, name: str, **labels: str) -> float:
    return sample_sum(after, name, **labels) - sample_sum(before, name, **labels)


def test_server_facts(real_vllm: RealVLLM) -> None:
    assert real_vllm.base_url.startswith("http://127.0.0.1:")
    pids = real_vllm.pids()
    assert pids[0] == real_vllm.pid
    # API server + EngineCore (+ worker): the tree a test can starve or put in a cgroup.
    assert len(pids) >= 2, pids
    facts = real_vllm.engine_facts()
    assert facts == {
        "max_num_batched_tokens": 128,
        "max_num_seqs": 16,
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "cpu_cores": os.cpu_count(),
    }
    text = real_vllm.fetch_metrics()
    assert sample_sum(text, "vllm:cache_config_info", num_gpu_blocks="96") == 1.0


async def test_steady(real_vllm: RealVLLM) -> None:
    summary, before, _, after = await run_and_scrape(real_vllm, "steady")
    assert summary.failed == 0 and summary.completed == PHASES["steady"].requests, summary
    assert delta(before, after, "vllm:request_success_total") >= summary.completed
    assert delta(before, after, "vllm:num_preemptions_total") == 0


async def test_prefix(real_vllm: RealVLLM) -> None:
    summary, before, _, after = await run_and_scrape(real_vllm, "prefix")
    assert summary.failed == 0 and summary.completed == PHASES["prefix"].requests, summary
    hits = delta(before, after, "vllm:prefix_cache_hits_total")
    queries = delta(before, after, "vllm:prefix_cache_queries_total")
    assert queries > 0 and hits / queries >= 0.5, (hits, queries)


async def test_chunked(real_vllm: RealVLLM) -> None:
    summary, before, _, after = await run_and_scrape(real_vllm, "chunked")
    assert summary.failed == 0 and summary.completed == PHASES["chunked"].requests, summary
    # Each prompt is longer than the 128-token step budget, so it can only have been chunked.
    assert summary.max_prompt_tokens > 128 * 6, summary
    assert delta(before, after, "vllm:request_success_total") >= summary.completed
    assert delta(before, after, "vllm:prompt_tokens_total") >= summary.prompt_tokens


def test_pressure_sustained(storm_load: WatchedLoad, real_vllm: RealVLLM, tmp_path: Path) -> None:
    # The session's KV-pressure run (loads.storm_load, 35 s, shared with the diagnosis tests): vLLM's
    # own /metrics, scraped every second beside the sidecars.
    summary, before, during, after = storm_load.summary, storm_load.raw_before, storm_load.raw_during, \
        storm_load.raw_after
    assert summary.failed == 0 and summary.completed > PHASES["pressure"].concurrency, summary
    assert summary.elapsed_s >= storm_load.seconds
    assert delta(before, after, "vllm:num_preemptions_total") > 0
    assert max(sample_sum(t, "vllm:kv_cache_usage_perc") for t in during) >= 0.9
    assert max(sample_sum(t, "vllm:num_requests_waiting") for t in during) > 0
    # Gauges fall back once the load drains.
    assert sample_sum(after, "vllm:num_requests_running") == 0
    capture = real_vllm.save_capture(tmp_path / "after-pressure.txt")
    assert "vllm:num_preemptions_total" in capture.read_text()


async def test_load_is_bounded_by_timeout(real_vllm: RealVLLM) -> None:
    # A load that cannot finish in time is cut at `timeout`, not left running.
    summary = await run_phase(real_vllm.base_url, "pressure", requests=8, max_tokens=600, timeout=1.0)
    assert summary.elapsed_s < 5.0
    assert summary.completed < 8


@pytest.mark.stops_engine
def test_overrides_and_stop(real_vllm_engines: Engines) -> None:
    server = real_vllm_engines.get(**loads.SMALL_ENGINE)
    assert server.engine_facts()["max_num_seqs"] == 4
    # Twice the KV bytes -> twice the 32-token blocks.
    assert sample_sum(server.fetch_metrics(), "vllm:cache_config_info", num_gpu_blocks="192") == 1.0
    summary = asyncio.run(run_phase(server.base_url, "steady", requests=4))
    assert summary.completed == 4, summary
    tree = server.pids()
    assert len(tree) >= 2
    assert server.stop() is not None
    assert not [p for p in tree if pid_alive(p)], "processes left after stop()"
