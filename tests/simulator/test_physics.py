"""Acceptance 3: the model follows the physics it claims, with numbers.

Each test runs the same traffic (same seed, so the very same requests) through two
deployments that differ in one knob, and checks the direction and rough size of the effect:

* a larger token budget lowers TTFT and raises ITL;
* fewer KV blocks raise preemptions;
* breaking the shared prefix lowers the prefix-cache hit ratio;
* CPU contention means fewer engine steps per second and more time in the frontend;
* TP>1 over a slow interconnect means a longer step, most of it communication.

Plus the vLLM bookkeeping rules the metrics depend on (hits in whole blocks, capped at
num_tokens - 1; prefix-cache queries counted at first admission only; a request is QUEUED
between steps, so the wait for the step under way is TTFT but not queue time).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.simulator.engine import Engine, EngineStats, Histogram
from exporter.simulator.scenarios import SCENARIOS, Scenario
from exporter.simulator.workload import Arrivals, LengthDist, PrefixSpec, RequestClass, Workload
from tests.helpers import scenario_with_engine

pytestmark = pytest.mark.slow  # minutes of simulated traffic per test

DURATION = 600.0


def _mean(h: Histogram) -> float:
    assert h.count > 0
    return h.sum / h.count


def _run(sc: Scenario, duration: float = DURATION) -> Engine:
    engine = sc.build()
    engine.advance_to(duration)
    return engine


def _with_class(sc: Scenario, **changes: object) -> Scenario:
    first, *rest = sc.workload.classes
    return replace(sc, workload=replace(sc.workload, classes=(replace(first, **changes), *rest)))


def _frontend_mean(st: EngineStats) -> float:
    """What the sidecar computes: mean e2e - mean queue - mean inference (frontend time)."""
    return _mean(st.e2e_request_latency) - _mean(st.request_queue_time) - _mean(st.request_inference_time)


def test_larger_token_budget_lowers_ttft_and_raises_itl() -> None:
    # ~4000-token prompts at a load both budgets can carry (2 req/s).
    base = _with_class(SCENARIOS["small-token-budget"], arrivals=Arrivals("steady", rate=2.0))
    small = _run(scenario_with_engine(base, max_num_batched_tokens=256)).stats
    large = _run(scenario_with_engine(base, max_num_batched_tokens=2048)).stats
    ttft_small, ttft_large = _mean(small.time_to_first_token), _mean(large.time_to_first_token)
    itl_small, itl_large = _mean(small.inter_token_latency), _mean(large.inter_token_latency)
    numbers = f"TTFT {ttft_small:.3f}s -> {ttft_large:.3f}s, ITL {itl_small * 1e3:.1f}ms -> {itl_large * 1e3:.1f}ms"
    assert ttft_large < 0.9 * ttft_small, numbers
    assert itl_large > 1.2 * itl_small, numbers
    # The mechanism: fewer, longer steps, each carrying more prefill next to the decodes.
    assert large.steps < small.steps, numbers


def test_fewer_kv_blocks_raise_preemptions() -> None:
    sc = SCENARIOS["kv-pressure"]
    preemptions = {
        blocks: _run(scenario_with_engine(sc, num_gpu_blocks_override=blocks)).stats.num_preemptions
        for blocks in (16000, 6000, 4000)
    }
    assert preemptions[16000] == 0, preemptions
    assert preemptions[16000] < preemptions[6000] < preemptions[4000], preemptions


def test_breaking_the_shared_prefix_lowers_the_hit_ratio() -> None:
    broken = SCENARIOS["template-instability"]
    prefix = broken.workload.classes[0].prefix
    stable = _with_class(broken, prefix=replace(prefix, instability=0.0))

    def hit_ratio(sc: Scenario) -> tuple[float, float]:
        st = _run(sc, 300.0).stats
        blocks = _mean(st.request_prompt_tokens) / sc.engine.block_size
        return st.prefix_cache_hits / st.prefix_cache_queries, blocks

    (hit_broken, blocks_broken), (hit_stable, _) = hit_ratio(broken), hit_ratio(stable)
    numbers = f"hit ratio {hit_stable:.2f} (stable) -> {hit_broken:.2f} (dynamic field at token 24)"
    assert blocks_broken > 100, "prompts must span many full blocks for F to mean anything"
    assert hit_stable > 0.8 and hit_broken < 0.15, numbers


def test_cpu_contention_means_fewer_steps_and_more_frontend_time() -> None:
    base = SCENARIOS["healthy"]
    free = _run(base).stats
    starved = _run(scenario_with_engine(base, cpu_share=0.3)).stats
    steps_free, steps_starved = free.steps / DURATION, starved.steps / DURATION
    front_free, front_starved = _frontend_mean(free), _frontend_mean(starved)
    numbers = (
        f"steps/s {steps_free:.0f} -> {steps_starved:.0f}, frontend {front_free * 1e3:.1f}ms -> "
        f"{front_starved * 1e3:.1f}ms, GPU busy {free.gpu_busy_s / DURATION:.0%} -> "
        f"{starved.gpu_busy_s / DURATION:.0%}"
    )
    assert steps_starved < 0.8 * steps_free, numbers
    assert front_starved > 2 * front_free, numbers
    assert starved.gpu_busy_s < free.gpu_busy_s, numbers
    # Same traffic, same work: the starved API server cannot burn more CPU than the free one.
    assert starved.frontend_cpu_s <= free.frontend_cpu_s * 1.01, numbers


def test_tensor_parallel_over_a_slow_link_makes_steps_longer() -> None:
    sc = SCENARIOS["tp-overhead"]
    tp4 = _run(sc).stats
    tp1 = _run(scenario_with_engine(sc, tensor_parallel_size=1)).stats
    step4, step1 = tp4.step_time_s / tp4.steps, tp1.step_time_s / tp1.steps
    comm_share = tp4.comm_time_s / tp4.step_time_s
    numbers = (
        f"step {step1 * 1e3:.1f}ms (TP1) -> {step4 * 1e3:.1f}ms (TP4), comm share {comm_share:.0%}, "
        f"ITL {_mean(tp1.inter_token_latency) * 1e3:.1f}ms -> {_mean(tp4.inter_token_latency) * 1e3:.1f}ms"
    )
    assert step4 > 2 * step1, numbers
    assert comm_share > 0.5 and tp1.comm_time_s == 0.0, numbers
    assert _mean(tp4.inter_token_latency) > 2 * _mean(tp1.inter_token_latency), numbers


def test_larger_budget_leaves_fewer_kv_blocks() -> None:
    """vLLM profiles activation memory at the full budget; a bigger budget costs KV space."""
    cfg = SCENARIOS["healthy"].engine
    assert replace(cfg, max_num_batched_tokens=16384).num_gpu_blocks < cfg.num_gpu_blocks


# -- vLLM bookkeeping the metrics rely on -----------------------------------------------------


def _identical_prompts(rate: float, stop_s: float) -> Scenario:
    """Every request sends the same 64-token prompt (4 full blocks of 16)."""
    cls = RequestClass(
        name="same",
        arrivals=Arrivals("steady", rate=rate, stop_s=stop_s),
        prompt=LengthDist("fixed", 0, lo=0),
        output=LengthDist("fixed", 8),
        prefix=PrefixSpec(groups=1, shared_len=64),
    )
    return replace(SCENARIOS["healthy"], workload=Workload(classes=(cls,)))


def test_prefix_hits_are_whole_blocks_capped_below_the_prompt() -> None:
    engine = _run(_identical_prompts(rate=0.5, stop_s=120.0), 200.0)
    st = engine.stats
    n = sum(st.request_success.values())
    assert n > 10
    assert st.prefix_cache_queries == 64 * n
    # The first request computes everything; each later one hits 3 blocks (48 tokens), not
    # 4: a full hit is capped at num_tokens - 1 and hits are whole blocks.
    assert st.prefix_cache_hits == 48 * (n - 1)
    assert st.prompt_tokens_local_compute == 64 + 16 * (n - 1)


def test_queries_count_first_admissions_only_under_preemption() -> None:
    sc = _with_class(SCENARIOS["kv-pressure"], arrivals=Arrivals("steady", rate=1.0, stop_s=120.0))
    engine = _run(sc, 4000.0)  # traffic stops at 120 s; let everything drain
    st = engine.stats
    assert st.num_preemptions > 10  # requests were recomputed, some several times
    assert engine.num_running == 0 and engine.num_waiting == 0
    assert engine.kv_cache_usage == 0.0
    assert st.prefix_cache_queries == st.prompt_tokens == st.request_prompt_tokens.sum
    assert st.prompt_tokens == st.prompt_tokens_local_compute + st.prompt_tokens_local_cache_hit
    assert st.generation_tokens == st.request_generation_tokens.sum
    assert st.time_to_first_token.count == st.e2e_request_latency.count == sum(st.request_success.values())
    assert st.request_num_preemptions.sum == st.num_preemptions


def test_the_step_under_way_is_ttft_but_not_queue_time() -> None:
    # Long prompts at a big budget, lightly loaded: each step is one long prefill or a few decodes,
    # and nothing waits for a free slot or KV. vLLM's engine core takes new requests between steps
    # and stamps them QUEUED then, so a request that arrives mid-step waits for that step in TTFT
    # (what the sidecar reads as time outside the engine), with no queue time at all.
    sc = _with_class(SCENARIOS["itl-stutter"], arrivals=Arrivals("steady", rate=0.5))
    st = _run(sc, 300.0).stats
    steps = _mean(st.inter_token_latency)
    tokenize = sc.engine.costs.tokenize_base_s
    assert _mean(st.request_queue_time) < 0.05 * steps
    assert _frontend_mean(st) > tokenize + 0.25 * steps


def test_same_seed_same_run() -> None:
    a, b = _run(SCENARIOS["cache-eviction"], 120.0), _run(SCENARIOS["cache-eviction"], 120.0)
    assert (a.stats.steps, a.stats.num_preemptions, a.stats.prefix_cache_hits, a.now) == (
        b.stats.steps, b.stats.num_preemptions, b.stats.prefix_cache_hits, b.now
    )
