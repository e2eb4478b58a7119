"""Every cause: a crafted window where it fires, and a near miss where it does not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.catalog.symptoms import CAUSES
from exporter.catalog.thresholds import Thresholds
from exporter.config import EngineFacts, Slo
from exporter.diagnosis.engine import VerdictTracker, diagnose, layer_scores
from exporter.diagnosis.rules import RULES, Context
from exporter.signals import CacheFacts, Signals

T = Thresholds()
SLO = Slo(ttft_p95_seconds=2.0, itl_p95_seconds=0.1)
FACTS = EngineFacts(max_num_batched_tokens=2048, max_num_seqs=64, tensor_parallel_size=1, pipeline_parallel_size=1)

# A comfortable engine: latency well inside the SLO, KV half used, no queue, nothing preempted.
HEALTHY = Signals(
    window_seconds=60, scrapes=13, requests_finished=600, requests_per_second=10, first_tokens=600,
    prompt_tokens_per_second=5000, generation_tokens_per_second=2000, prompt_length_mean=500,
    prompt_length_p95=900, generation_length_mean=200, prefill_token_share=0.5, engine_steps_per_second=40,
    tokens_per_step=150, preemptions=0, preemption_rate=0, preemptions_per_request=0, kv_cache_usage=0.5,
    kv_cache_usage_max=0.6, kv_cache_usage_mean=0.5, kv_full_fraction=0.0, prefix_cache_queried_tokens=300000,
    prefix_cache_hit_ratio=0.6, running=20, running_mean=20, running_max=24, waiting=0, waiting_mean=0,
    waiting_max=0, waiting_fraction=0, waiting_capacity=0, waiting_deferred=0,
    ttft_quantiles={0.5: 0.2, 0.95: 0.5, 0.99: 0.8}, itl_quantiles={0.5: 0.02, 0.95: 0.03, 0.99: 0.04},
    e2e_quantiles={0.5: 4, 0.95: 6, 0.99: 8}, ttft_mean=0.25, itl_mean=0.02, e2e_mean=4.2, queue_mean=0.01,
    prefill_mean=0.2, decode_mean=3.9, inference_mean=4.1, ttft_frontend_mean=0.04, e2e_frontend_mean=0.09,
    ttft_queue_share=0.04, ttft_prefill_share=0.8, ttft_frontend_share=0.16, e2e_frontend_share=0.02,
    latency_observations=600, cpu_inputs={"run_queue_wait_share": 0.05}, cpu_starvation_score=0.0,
    cache=CacheFacts(block_size=16, num_gpu_blocks=10000, gpu_memory_utilization=0.9, enable_prefix_caching=True),
)

SLOW_TTFT = dict(ttft_quantiles={0.5: 2.0, 0.95: 4.0, 0.99: 5.0}, ttft_mean=2.5)
STUTTER = dict(itl_quantiles={0.5: 0.03, 0.95: 0.25, 0.99: 0.4})
UNIFORM_SLOW_ITL = dict(itl_quantiles={0.5: 0.15, 0.95: 0.2, 0.99: 0.25})
KV_FULL = dict(kv_cache_usage_mean=0.95, kv_cache_usage_max=1.0, kv_full_fraction=0.9)

# cause -> (fires: signal overrides, facts overrides), (near miss: the same but one thing short)
CASES: dict[str, tuple[tuple[dict, dict], tuple[dict, dict]]] = {
    "A1": (({**SLOW_TTFT, "prompt_length_mean": 6000, "ttft_prefill_share": 0.85, "ttft_queue_share": 0.05}, {}),
           ({**SLOW_TTFT, "prompt_length_mean": 600, "ttft_prefill_share": 0.85, "ttft_queue_share": 0.05}, {})),
    "A2": (({**SLOW_TTFT, "ttft_queue_share": 0.7, "waiting_fraction": 0.9, "waiting_mean": 12}, {}),
           ({**SLOW_TTFT, "ttft_queue_share": 0.7, "waiting_fraction": 0.9, "waiting_mean": 12, **KV_FULL}, {})),
    "A3": (({**SLOW_TTFT, "cpu_starvation_score": 0.8}, {}),
           ({**SLOW_TTFT, "cpu_starvation_score": 0.45, "ttft_frontend_share": 0.2}, {})),
    "A4": (({**SLOW_TTFT, "prompt_length_mean": 12000}, {}),
           ({**SLOW_TTFT, "prompt_length_mean": 6000}, {})),
    "A5": (({**SLOW_TTFT, "prefix_cache_hit_ratio": 0.05}, {}),
           ({**SLOW_TTFT, "prefix_cache_hit_ratio": 0.35}, {})),
    "B1": (({**STUTTER, "prefill_token_share": 0.6}, {}),
           ({**STUTTER, "prefill_token_share": 0.2}, {})),
    "B2": (({**STUTTER}, {"max_num_batched_tokens": 16384}),
           ({**STUTTER}, {"max_num_batched_tokens": 512})),
    "B3": (({**UNIFORM_SLOW_ITL, "running_mean": 60}, {}),
           ({**UNIFORM_SLOW_ITL, "running_mean": 30}, {})),
    "C1": (({"cpu_starvation_score": 0.7, "cpu_inputs": {"run_queue_wait_share": 0.45}}, {}),
           ({"cpu_starvation_score": 0.4, "cpu_inputs": {"run_queue_wait_share": 0.3}}, {})),
    "C2": (({"running_mean": 0.8, "running_max": 2}, {}),
           ({"running_mean": 0.8, "running_max": 2, "waiting_max": 1, "waiting_fraction": 0.1}, {})),
    "C3": (({"waiting_fraction": 0.8, "waiting_max": 30, "running_mean": 30, **KV_FULL}, {}),
           ({"waiting_fraction": 0.8, "waiting_max": 30, "running_mean": 30}, {})),
    "D": (({"preemptions": 40, "preemptions_per_request": 0.3, "preemption_rate": 0.7, **KV_FULL}, {}),
          ({"preemptions": 40, "preemptions_per_request": 0.05, "preemption_rate": 0.7, **KV_FULL}, {})),
    "E": (({"preemptions": 1, "preemptions_per_request": 0.002, "kv_cache_usage_mean": 0.96,
            "kv_cache_usage_max": 1.0}, {}),
          ({"preemptions": 1, "preemptions_per_request": 0.002, "kv_cache_usage_mean": 0.85,
            "kv_cache_usage_max": 1.0}, {})),
    "F": (({"prefix_cache_hit_ratio": 0.02}, {}),
          ({"prefix_cache_hit_ratio": 0.02, "prompt_length_mean": 40}, {})),
    "F6": (({"prefix_cache_hit_ratio": 0.1, **KV_FULL}, {}),
           ({"prefix_cache_hit_ratio": 0.1}, {})),
    "G": (({**UNIFORM_SLOW_ITL, "kv_cache_usage_mean": 0.2}, {"tensor_parallel_size": 4}),
          ({**UNIFORM_SLOW_ITL, "kv_cache_usage_mean": 0.2}, {"tensor_parallel_size": 1})),
}

RULE_BY_ID = dict(RULES)


def _ctx(signals: dict, facts: dict) -> Context:
    return Context(replace(HEALTHY, **signals), FACTS.model_copy(update=facts), T, SLO)


def test_every_cause_has_a_rule_and_a_case():
    assert [c.id for c in CAUSES] == [cid for cid, _ in RULES]
    assert set(CASES) == set(RULE_BY_ID)


def test_healthy_window_fires_nothing():
    ctx = _ctx({}, {})
    fired = [cid for cid, rule in RULES if rule(ctx).status == "fired"]
    assert fired == []


@pytest.mark.parametrize("cause", list(CASES))
def test_cause_fires_with_numbers(cause):
    (signals, facts), _ = CASES[cause]
    finding = RULE_BY_ID[cause](_ctx(signals, facts))
    assert finding.status == "fired", finding
    assert 0 < finding.strength <= 1
    assert finding.evidence and any(ch.isdigit() for line in finding.evidence for ch in line)


@pytest.mark.parametrize("cause", list(CASES))
def test_cause_near_miss_does_not_fire(cause):
    _, (signals, facts) = CASES[cause]
    finding = RULE_BY_ID[cause](_ctx(signals, facts))
    assert finding.status != "fired", finding


@pytest.mark.parametrize("cause, fact", [("A4", "max_num_batched_tokens"), ("B2", "max_num_batched_tokens"),
                                         ("G", "tensor_parallel_size")])
def test_rules_needing_unexported_facts_abstain_and_say_so(cause, fact):
    (signals, _), _ = CASES[cause]
    ctx = Context(replace(HEALTHY, **signals), EngineFacts(), T, SLO)
    finding = RULE_BY_ID[cause](ctx)
    assert finding.status == "abstain" and any(fact in m for m in finding.missing)


def test_kv_pressure_gives_kv_cache_verdict_and_not_scheduler():
    ctx = _ctx({**SLOW_TTFT, "ttft_queue_share": 0.8, "waiting_fraction": 0.9, "waiting_max": 30,
                "preemptions": 50, "preemptions_per_request": 0.5, **KV_FULL}, {})
    result = diagnose(ctx, VerdictTracker(), now=0.0)
    assert result.verdict.layer == "kv_cache"
    active = {c.id for c in result.active_causes}
    assert "D" in active and "A2" not in active


def test_verdict_hysteresis_holds_and_switches_only_after_hold():
    tracker = VerdictTracker()
    base = {layer: 0.0 for layer in ("request", "scheduler", "kv_cache", "gpu_compute", "cpu", "distributed")}
    assert tracker.update({**base, "kv_cache": 0.8}, T, 0).layer == "kv_cache"
    # dips into the band: holds
    assert tracker.update({**base, "kv_cache": 0.4}, T, 1).layer == "kv_cache"
    # a rival that does not beat it clearly: holds
    assert tracker.update({**base, "kv_cache": 0.45, "cpu": 0.55}, T, 2).layer == "kv_cache"
    # released below the exit score: 'none' must win twice in a row
    assert tracker.update(base, T, 3).layer == "kv_cache"
    assert tracker.update(base, T, 4).layer == "none"


def test_informational_causes_never_make_the_verdict_alone():
    findings = {cid: RULE_BY_ID[cid](_ctx({"prefix_cache_hit_ratio": 0.0}, {})) for cid in RULE_BY_ID}
    assert findings["F"].status == "fired"
    assert max(layer_scores(findings).values()) < T.verdict_enter_score
