"""The simulator over real HTTP on 127.0.0.1 (aiohttp's test server), with a fake clock.

The clock is a plain counter the test moves forward, so simulated time advances without any
wall-clock sleep; the background advance task is disabled except where its start-up and
clean-up are the point.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from exporter.simulator import SCENARIOS
from exporter.simulator.exposition import CONTENT_TYPE
from exporter.simulator.server import build_app


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def _client(app: web.Application) -> TestClient:
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


@pytest.fixture
async def single(clock: FakeClock) -> AsyncIterator[TestClient]:
    client = await _client(build_app("kv-pressure", clock=clock, background_interval_s=None))
    yield client
    await client.close()


def _monotonic_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample that must never decrease: counters and histogram/summary series."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        if family.type not in ("counter", "histogram", "summary"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_metrics_endpoint_serves_vllm_exposition(single: TestClient, clock: FakeClock) -> None:
    clock.now += 30.0
    resp = await single.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == CONTENT_TYPE
    text = await resp.text()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"vllm:num_preemptions", "vllm:kv_cache_usage_perc", "process_cpu_seconds", "http_requests"} <= names


async def test_counters_are_monotonic_across_scrapes(single: TestClient, clock: FakeClock) -> None:
    previous: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    generated = []
    for _ in range(8):
        clock.now += 15.0
        text = await (await single.get("/metrics")).text()
        current = _monotonic_samples(text)
        for key, value in previous.items():
            assert current.get(key, value) >= value, key
        previous = current
        key = ("vllm:generation_tokens_total", (("engine", "0"), ("model_name", "meta-llama/Llama-3.1-8B-Instruct")))
        generated.append(current[key])
    assert generated[-1] > generated[0] > 0
    preemptions = [v for (name, _), v in previous.items() if name == "vllm:num_preemptions_total"]
    assert preemptions and preemptions[0] > 0  # kv-pressure preempts within two minutes


async def test_scrape_does_not_move_time_by_itself(single: TestClient, clock: FakeClock) -> None:
    clock.now += 20.0
    first = await (await single.get("/metrics")).text()
    second = await (await single.get("/metrics")).text()
    assert _monotonic_samples(first) == _monotonic_samples(second)


async def test_dcgm_health_and_models(single: TestClient, clock: FakeClock) -> None:
    clock.now += 5.0
    resp = await single.get("/dcgm/metrics")
    assert resp.status == 200
    families = {f.name: f for f in text_string_to_metric_families(await resp.text())}
    assert len(families["DCGM_FI_DEV_GPU_UTIL"].samples) == 1
    assert (await single.get("/health")).status == 200
    models = await (await single.get("/v1/models")).json()
    assert models["data"][0]["max_model_len"] == 32768
    assert await (await single.get("/version")).json() == {"version": "0.32.0"}


async def test_v1_models_has_vllm_032_shape(single: TestClient) -> None:
    # vllm/entrypoints/serve/engine/protocol.py (0.32): ModelList of ModelCard with one ModelPermission.
    models = await (await single.get("/v1/models")).json()
    assert models["object"] == "list"
    [card] = models["data"]
    assert set(card) == {"id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"}
    assert card["object"] == "model" and card["owned_by"] == "vllm" and card["parent"] is None
    [permission] = card["permission"]
    assert permission["object"] == "model_permission" and permission["id"].startswith("modelperm-")
    assert set(permission) == {"id", "object", "created", "allow_create_engine", "allow_sampling", "allow_logprobs",
                               "allow_search_indices", "allow_view", "allow_fine_tuning", "organization", "group",
                               "is_blocking"}


async def test_speed_up_and_index(clock: FakeClock) -> None:
    client = await _client(build_app("healthy", clock=clock, speed=10.0, background_interval_s=None))
    try:
        clock.now += 3.0
        index = await (await client.get("/")).json()
        [row] = index["scenarios"]
        assert row["name"] == "healthy"
        assert row["simulated_seconds"] == pytest.approx(30.0)
        assert row["expected"]["verdict"] == "none"
        assert row["engine_facts"] == {
            "max_num_batched_tokens": 8192, "max_num_seqs": 256, "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1, "gpu": "H100", "cpu_cores": 16, "model_weight_bytes": 16.06e9,
        }
        assert row["metrics_path"] == "/metrics"
    finally:
        await client.close()


async def test_several_scenarios_in_one_app(clock: FakeClock) -> None:
    client = await _client(build_app(["healthy", "tp-overhead", "healthy-witnessed"], clock=clock,
                                     background_interval_s=None))
    try:
        clock.now += 10.0
        for name in ("healthy", "tp-overhead", "healthy-witnessed"):
            assert (await client.get(f"/scenarios/{name}/metrics")).status == 200
            # Each scenario is a vLLM behind its own path prefix: its API answers under it.
            models = await (await client.get(f"/scenarios/{name}/v1/models")).json()
            assert models["data"][0]["id"] == SCENARIOS[name].engine.model_name
            assert (await client.get(f"/scenarios/{name}/version")).status == 200
        assert (await client.get("/scenarios/nope/version")).status == 404
        # Each answers its engine's release: 0.34 for the scenario that serves it.
        assert await (await client.get("/scenarios/healthy-witnessed/version")).json() == {"version": "0.34.0"}
        assert await (await client.get("/scenarios/healthy/version")).json() == {"version": "0.32.0"}
        assert (await client.get("/v1/models")).status == 404  # ambiguous with several scenarios
        dcgm = await (await client.get("/scenarios/tp-overhead/dcgm/metrics")).text()
        util = {f.name: f for f in text_string_to_metric_families(dcgm)}["DCGM_FI_DEV_GPU_UTIL"]
        assert len(util.samples) == 4  # one series per TP rank
        assert (await client.get("/scenarios/nope/metrics")).status == 404
        assert (await client.get("/metrics")).status == 404  # ambiguous with several scenarios
        index = await (await client.get("/")).json()
        assert [r["metrics_path"] for r in index["scenarios"]] == [
            "/scenarios/healthy/metrics", "/scenarios/tp-overhead/metrics", "/scenarios/healthy-witnessed/metrics"
        ]
    finally:
        await client.close()


async def test_background_task_starts_and_stops(clock: FakeClock) -> None:
    client = await _client(build_app("sparse-traffic", clock=clock, background_interval_s=3600.0))
    try:
        clock.now += 60.0
        assert (await client.get("/metrics")).status == 200
    finally:
        await client.close()  # cancels the background task without errors


def test_rejects_bad_arguments() -> None:
    with pytest.raises(KeyError):
        build_app("no-such-scenario")
    with pytest.raises(ValueError):
        build_app(["healthy", "healthy"])
    with pytest.raises(ValueError):
        build_app("healthy", speed=0)
