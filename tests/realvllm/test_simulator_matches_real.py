"""Simulator vs the real thing: every scenario's exposition has the families, label names and
bucket boundaries of a capture taken now from the harness's real vLLM 0.32."""

from __future__ import annotations

import asyncio

import pytest

from exporter.catalog import metrics as vllm
from exporter.simulator import SCENARIOS
from exporter.simulator.buckets import request_token_buckets
from tests.simulator.test_format import (
    CONNECTOR_PREFIXES,
    REQUEST_TOKEN_FAMILIES,
    Exposition,
    parse,
    scenario_text,
    without_prefixes,
)

from .harness import RealVLLM, run_phase

pytestmark = pytest.mark.realvllm


@pytest.fixture(scope="module")
def live_capture(real_vllm: RealVLLM):
    # A little traffic first, so the HTTP families have their children as in any serving vLLM.
    asyncio.run(run_phase(real_vllm.base_url, "steady", requests=4))
    return parse(real_vllm.fetch_metrics())


SPECULATIVE_PREFIX = "vllm:spec_decode_"
# Families the harness's engine (0.32, no --kv-cache-metrics) does not register: KV block residency,
# compared with a real --kv-cache-metrics capture in tests/simulator/test_format.py, and 0.34's render time.
FLAG_FAMILIES = (vllm.KV_BLOCK_LIFETIME_SECONDS, vllm.KV_BLOCK_IDLE_BEFORE_EVICT_SECONDS,
                 vllm.KV_BLOCK_REUSE_GAP_SECONDS, vllm.REQUEST_RENDER_DURATION_SECONDS)


def _without_speculation(sim: Exposition) -> Exposition:
    """The harness's engine runs without --speculative-config, --enable-lora, a KV connector or
    --kv-cache-metrics, and is 0.32: compare the rest. The spec-decode and LoRA families are compared
    with real speculative and LoRA captures in tests/simulator/test_format.py; the connector families
    come from vLLM's source (the CPU build registers none of them)."""
    return without_prefixes(sim, (SPECULATIVE_PREFIX, vllm.LORA_REQUESTS_INFO, *CONNECTOR_PREFIXES,
                                  *FLAG_FAMILIES))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_exposition_matches_a_live_vllm_capture(name, live_capture):
    sim = _without_speculation(parse(scenario_text(name)))
    assert [n for n, _ in sim.types] == [n for n, _ in live_capture.types]
    assert dict(sim.types) == dict(live_capture.types)
    assert sim.label_names == live_capture.label_names
    assert set(sim.les) == set(live_capture.les)
    token_les = [str(b) for b in request_token_buckets(SCENARIOS[name].engine.max_model_len)] + ["+Inf"]
    for family, les in live_capture.les.items():
        assert sim.les[family] == (token_les if family in REQUEST_TOKEN_FAMILIES else les), family
