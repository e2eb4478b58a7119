"""Crafted windows for the rule tests: a healthy engine, and per cause a window where it fires and a near
miss where it does not."""

from __future__ import annotations

from exporter.catalog.thresholds import Thresholds
from exporter.config import EngineFacts, Slo
from exporter.diagnosis.engine import evaluate_rules
from exporter.diagnosis.rules import RULES, Context
from exporter.signals import CacheFacts, Signals
from exporter.window import HistogramDelta
from tests.helpers import signals_with

T = Thresholds()
SLO = Slo()  # TTFT within 2.5 s and ITL within 0.1 s, each for 99 % of events
TTFT_BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, float("inf"))
ITL_BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, float("inf"))


def hist(bounds: tuple[float, ...], per_bucket: list[float]) -> HistogramDelta:
    """A window histogram from the events of each bucket (not cumulative)."""
    cumulative, total = [], 0.0
    for count in per_bucket:
        total += count
        cumulative.append(total)
    return HistogramDelta(bounds, tuple(cumulative), 0.0, total)

FACTS = EngineFacts(max_num_batched_tokens=2048, max_num_seqs=64, tensor_parallel_size=1, pipeline_parallel_size=1)

# A comfortable engine: latency well inside the SLO, KV half used, no queue, nothing preempted.
HEALTHY = signals_with(Signals(window_seconds=60, scrapes=13),
    requests_finished=600, requests_per_second=10, first_tokens=600,
    prompt_tokens_per_second=5000, generation_tokens_per_second=2000, prompt_length_mean=500,
    prompt_length_p95=900, generation_length_mean=200, prefill_token_share=0.5, engine_steps_per_second=40,
    tokens_per_step=150, preemptions=0, preemption_rate=0, preemptions_per_request=0, kv_cache_usage=0.5,
    kv_cache_usage_max=0.6, kv_cache_usage_mean=0.5, kv_full_fraction=0.0, prefix_cache_queried_tokens=300000,
    prefix_cache_hit_ratio=0.6, running=20, running_mean=20, running_max=24, waiting=0, waiting_mean=0,
    waiting_max=0, waiting_fraction=0, queued_fraction=0, waiting_capacity=0, waiting_deferred=0,
    tokens_per_step_p99=900, engine_busy_fraction=0.5, itl_tail_ratio=2.0,
    ttft_quantiles={0.5: 0.2, 0.95: 0.5, 0.99: 0.8}, itl_quantiles={0.5: 0.02, 0.95: 0.03, 0.99: 0.04},
    ttft_histogram=hist(TTFT_BOUNDS, [100, 250, 220, 30, 0, 0, 0, 0]),
    itl_histogram=hist(ITL_BOUNDS, [2000, 8000, 1990, 10, 0, 0, 0]),
    e2e_quantiles={0.5: 4, 0.95: 6, 0.99: 8}, ttft_mean=0.25, itl_mean=0.02, e2e_mean=4.2, queue_mean=0.01,
    prefill_mean=0.2, decode_mean=3.9, inference_mean=4.1, ttft_frontend_mean=0.04, e2e_frontend_mean=0.09,
    ttft_queue_share=0.04, ttft_prefill_share=0.8, ttft_frontend_share=0.16, e2e_frontend_share=0.02,
    latency_observations=600, cpu_inputs={"run_queue_wait_share": 0.05}, cpu_starvation_score=0.0,
    cache=CacheFacts(block_size=16, num_gpu_blocks=10000, gpu_memory_utilization=0.9, enable_prefix_caching=True),
)

# 40 % of first tokens over 2.5 s: a burn of 40x the 1 % budget.
SLOW_TTFT = dict(ttft_quantiles={0.5: 2.0, 0.95: 4.0, 0.99: 5.0}, ttft_mean=2.5,
                 ttft_histogram=hist(TTFT_BOUNDS, [0, 0, 60, 120, 180, 200, 40, 0]))
STUTTER = dict(itl_quantiles={0.5: 0.03, 0.95: 0.25, 0.99: 0.4}, itl_tail_ratio=0.4 / 0.03,
               itl_histogram=hist(ITL_BOUNDS, [1000, 5000, 4000, 900, 600, 400, 100]))
UNIFORM_SLOW_ITL = dict(itl_quantiles={0.5: 0.15, 0.95: 0.2, 0.99: 0.25}, itl_tail_ratio=0.25 / 0.15,
                        itl_histogram=hist(ITL_BOUNDS, [0, 0, 0, 1000, 10000, 1000, 0]))
KV_FULL = dict(kv_cache_usage_mean=0.95, kv_cache_usage_max=1.0, kv_full_fraction=0.9)
QUEUE = dict(waiting_fraction=0.9, queued_fraction=0.9, waiting_mean=12, waiting_max=30)
STORM = dict(preemptions=40, preemptions_per_request=0.3, preemption_rate=0.7, **KV_FULL)
H100 = {"gpu": "H100", "model_weight_bytes": 16e9}
# Speculative decoding on: 1000 drafts of 3 tokens in the window (acceptance set per case).
SPEC = dict(spec_decode_enabled=True, spec_decode_drafts=1000, spec_decode_draft_tokens=3000,
            spec_decode_accepted_tokens=150, spec_decode_mean_accepted_length=1.15, tokens_per_output_event=1.15)
# A decode instance of a disaggregated pair: a KV consumer whose prompts arrive by NIXL transfer.
PD_DECODE = dict(kv_transfer_enabled=True, kv_consumer=True, kv_transferred_prompt_share=0.98, kv_transfers=600,
                 kv_transfer_time_mean_seconds=0.4, kv_transfer_time_p95_seconds=0.9, kv_transfer_bytes_mean=2e8,
                 kv_transfer_failures=0, kv_transfer_failure_share=0.0, kv_deferred_wait_mean_seconds=1.6,
                 kv_deferred_ttft_share=0.64, waiting_deferred=16, deferred_fraction=1.0, queue_mean=1.7,
                 ttft_queue_share=0.68, ttft_prefill_share=0.1, prefix_cache_hit_ratio=0.0,
                 external_prefix_cache_hit_ratio=0.98, external_prefix_cache_queried_tokens=900000)
PD_FAILING = dict(PD_DECODE, kv_deferred_wait_mean_seconds=0.01, kv_deferred_ttft_share=0.05, kv_transfer_failures=30,
                  kv_transfer_failure_share=30 / 630, requests_errored=30)
# KV offload on: the CPU tier served most of what the GPU prefix cache missed.
OFFLOAD = dict(kv_transfer_enabled=True, kv_consumer=True, external_prefix_cache_queried_tokens=250000,
               external_prefix_cache_hit_ratio=0.9, kv_offload_load_bytes=9e10, kv_offload_load_seconds=4.5,
               kv_offload_load_bytes_per_second=2e10, kv_transferred_prompt_share=0.75)
# Decode on a slow kernel path: busy engine, small batch, ~6 % of the H100's HBM bandwidth used.
SLOW_KERNELS = dict(UNIFORM_SLOW_ITL, running_mean=5, engine_busy_fraction=0.97, read_bytes_per_gpu_per_second=2e11)

# LoRA on, one slot, first tokens waiting deferred in the queue while KV has room (adapters seen set per case).
LORA_SLOTS = dict(lora_enabled=True, lora_max_adapters=1, lora_running_adapters=1, lora_waiting_adapters=0,
                  ttft_queue_share=0.85, ttft_prefill_share=0.1, waiting_fraction=0.6, queued_fraction=0.0,
                  waiting_deferred=2, deferred_fraction=0.6)
# Two data-parallel engines with enough traffic each to compare (outlier and ratios set per case).
DP_TWO = dict(engines=2.0, engine_signals={
    "0": {"first_tokens": 300, "load_mean": 5.0, "ttft_mean": 0.2, "itl_mean": 0.02},
    "1": {"first_tokens": 300, "load_mean": 15.0, "ttft_mean": 0.9, "itl_mean": 0.16}})

# cause -> (fires: signal overrides, facts overrides), (near miss: the same but one thing short).
# A near miss may still be shown as information; it never counts as a symptom.
CASES: dict[str, tuple[tuple[dict, dict], tuple[dict, dict]]] = {
    "A1": (({**SLOW_TTFT, "prompt_length_mean": 6000, "ttft_prefill_share": 0.85, "ttft_queue_share": 0.05}, {}),
           ({**SLOW_TTFT, "prompt_length_mean": 600, "ttft_prefill_share": 0.85, "ttft_queue_share": 0.05}, {})),
    "A2": (({**SLOW_TTFT, "ttft_queue_share": 0.7, **QUEUE}, {}),
           ({**SLOW_TTFT, "ttft_queue_share": 0.7, **QUEUE, **KV_FULL}, {})),
    "A3": (({**SLOW_TTFT, "cpu_starvation_score": 0.8}, {}),
           ({**SLOW_TTFT, "cpu_starvation_score": 0.45, "ttft_frontend_share": 0.2}, {})),
    "A4": (({**SLOW_TTFT, "prompt_length_mean": 12000}, {}),
           ({**SLOW_TTFT, "prompt_length_mean": 6000}, {})),
    "A5": (({**SLOW_TTFT, "prefix_cache_hit_ratio": 0.05}, {}),
           ({**SLOW_TTFT, "prefix_cache_hit_ratio": 0.35}, {})),
    "B1": (({**STUTTER, "prefill_token_share": 0.6}, {}),
           ({**STUTTER, "prefill_token_share": 0.2}, {})),
    "B2": (({**STUTTER, "tokens_per_step_p99": 12000}, {"max_num_batched_tokens": 16384}),
           ({**STUTTER, "tokens_per_step_p99": 1500}, {"max_num_batched_tokens": 16384})),
    "B3": (({**UNIFORM_SLOW_ITL, "running_mean": 60}, {}),
           ({**UNIFORM_SLOW_ITL, "running_mean": 30}, {})),
    "B4": (({**SLOW_KERNELS}, H100),
           ({**SLOW_KERNELS, "read_bytes_per_gpu_per_second": 2.5e12}, H100)),
    "B5": (({**UNIFORM_SLOW_ITL, **SPEC, "spec_decode_acceptance_rate": 0.05}, {}),
           ({**UNIFORM_SLOW_ITL, **SPEC, "spec_decode_acceptance_rate": 0.35}, {})),
    "A7": (({**SLOW_TTFT, **PD_DECODE}, {"kv_role": "kv_consumer", "kv_connector": "NixlConnector"}),
           ({**SLOW_TTFT, **PD_DECODE, "kv_deferred_ttft_share": 0.2}, {"kv_role": "kv_consumer"})),
    "A8": (({**PD_FAILING}, {"kv_role": "kv_consumer", "kv_load_failure_policy": "fail"}),
           ({**PD_FAILING, "kv_transfer_failures": 3, "kv_transfer_failure_share": 3 / 603}, {})),
    "C1": (({**SLOW_TTFT, "cpu_starvation_score": 0.7, "cpu_inputs": {"run_queue_wait_share": 0.6}}, {}),
           ({"cpu_starvation_score": 0.7, "cpu_inputs": {"run_queue_wait_share": 0.6}}, {})),
    "C2": (({"running_mean": 0.8, "running_max": 2}, {}),
           ({"running_mean": 0.8, "running_max": 2, "waiting_max": 1, "waiting_fraction": 0.1}, {})),
    "C3": (({**QUEUE, "running_mean": 30, **KV_FULL}, {}),
           ({**QUEUE, "running_mean": 30}, {})),
    "D": (({**STORM}, {}),
          ({**STORM, "preemptions_per_request": 0.05}, {})),
    "E": (({**KV_FULL, **QUEUE, "preemptions": 2, "preemptions_per_request": 0.004}, {}),
          ({**KV_FULL, "preemptions": 2, "preemptions_per_request": 0.004}, {})),
    # F: the pool ran out at times, short of full (near miss: it never did, so the prompts are F1's)
    "F": (({**SLOW_TTFT, "prefix_cache_hit_ratio": 0.1, "ttft_prefill_share": 0.85, "kv_full_fraction": 0.2}, {}),
          ({**SLOW_TTFT, "prefix_cache_hit_ratio": 0.1, "ttft_prefill_share": 0.85}, {})),
    "F1": (({**SLOW_TTFT, "prefix_cache_hit_ratio": 0.1, "ttft_prefill_share": 0.85}, {}),
           ({"prefix_cache_hit_ratio": 0.1}, {})),
    "F6": (({**SLOW_TTFT, "prefix_cache_hit_ratio": 0.1, **KV_FULL}, {}),
           ({**SLOW_TTFT, "prefix_cache_hit_ratio": 0.1}, {})),
    "G": (({**UNIFORM_SLOW_ITL, "kv_cache_usage_mean": 0.2}, {"tensor_parallel_size": 4, **H100}),
          ({**UNIFORM_SLOW_ITL, "kv_cache_usage_mean": 0.2}, {"tensor_parallel_size": 4, "gpu": "H100",
                                                               "model_weight_bytes": 140e9})),
    # issue 29: LoRA adapter slots (near miss: the adapters fit their slots), a slow data-parallel engine
    # (near miss: its latency and load within 2x of its sibling's)
    "A6": (({**SLOW_TTFT, **LORA_SLOTS, "lora_adapters_seen": 2}, {}),
           ({**SLOW_TTFT, **LORA_SLOTS, "lora_adapters_seen": 1}, {})),
    "G2": (({**UNIFORM_SLOW_ITL, **DP_TWO, "engine_outlier": "1", "engine_load_ratio": 3.0,
             "engine_latency_ratio": 8.0}, {}),
           ({**UNIFORM_SLOW_ITL, **DP_TWO, "engine_outlier": "1", "engine_load_ratio": 1.2,
             "engine_latency_ratio": 1.5}, {})),
}
# Two LoRA adapters on --max-loras 1: first tokens wait in the queue for an adapter slot, which vLLM
# counts as waiting `deferred`, never for capacity, so no queue rule fires.
LORA_WAIT = dict(SLOW_TTFT, ttft_queue_share=0.85, ttft_prefill_share=0.1, waiting_fraction=0.6, queued_fraction=0.0,
                 waiting_mean=1.5, waiting_max=3, waiting_capacity=0, waiting_deferred=2, deferred_fraction=0.6)
# ITL uniformly slow on a small batch while nothing known explains it, and no GPU data for B4.
SLOW_STREAM = dict(UNIFORM_SLOW_ITL, running_mean=5)
INFORMATIONAL_ONLY = {"C2"}  # causes that never count as a symptom

RULE_BY_ID = dict(RULES)


def rule_context(signals: dict, facts: dict) -> Context:
    return Context(signals_with(HEALTHY, **signals), FACTS.model_copy(update=facts), T, SLO)


def rule_findings(signals: dict, facts: dict | None = None) -> dict:
    return evaluate_rules(rule_context(signals, facts or {}))[0]
