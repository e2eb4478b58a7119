"""Scenarios for the engine's own witnesses (docs/method.md): vLLM run with ``--kv-cache-metrics``, whose
block residency tells a pool too small for the working set (F6) from prompts that never come back (F1); a
compute-bound GPU whose prompts, under the long-prompt mark, the step witness names as the first tokens' cost
(A1); decode steps that all carry a prefill chunk, uniformly slow gaps without a stutter, which the step
witness names as the budget's (B1); vLLM 0.34's render duration beside a frontend that costs the first tokens
(A3). The step witness (``vllm:iteration_tokens_total``) is on every scenario, as on every vLLM:
small-token-budget and queue-backlog read it too."""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from exporter.simulator.engine import EngineConfig, GpuSpec
from exporter.simulator.scenarios.faults import _CPU_STARVED, _HEALTHY, _TEMPLATE
from exporter.simulator.scenarios.model import Expected, Scenario, chat, lognormal, single
from exporter.simulator.workload import PrefixSpec

# vLLM's default --kv-cache-metrics-sample: one block in a hundred is followed from allocation to eviction.
KV_METRICS_SAMPLE: Final = 0.01

# An NVIDIA L4 (24 GB, 300 GB/s, 121 TFLOP/s dense bf16, PCIe): Llama-3.1-8B fits, and a step is matrix work, a
# prefill chunk of 512 tokens costing several decode steps' time.
L4: Final = GpuSpec(
    name="L4", model_name="NVIDIA L4", memory_bytes=24e9, hbm_bandwidth=300e9, peak_flops=121e12,
    link_bandwidth=32e9, allreduce_latency_s=30e-6, nvlink=False, idle_power_w=16.0, max_power_w=72.0,
    sm_clock_mhz=2040, mem_clock_mhz=6251,
)

_WORKING_SET = Scenario(
    name="kv-working-set",
    description=(
        "Question answering over 128 documents of ~2000 tokens, each asked about at random, on an engine run with "
        "--kv-cache-metrics: the documents together need more blocks than the pool has, so the LRU evicts a "
        "document shortly before it is asked about again. Few requests run at once and KV usage looks low; "
        "the block witness shows the evicted blocks had been reused while they lived (F6, not F1)."
    ),
    knobs="num_gpu_blocks 4000 (64k tokens); 128 documents x 2000 tokens, uniform; 3 req/s, ~40 output; "
    "--kv-cache-metrics-sample 0.01",
    engine=EngineConfig(num_gpu_blocks_override=4000, max_model_len=8192, kv_cache_metrics_sample=KV_METRICS_SAMPLE),
    workload=single(chat(3.0, prompt=lognormal(60, 0.4, 8, 400), output=lognormal(40, 0.4, 4, 200),
                         prefix=PrefixSpec(groups=128, shared_len=2000), max_tokens=256)),
    expected=Expected(verdict="kv_cache", symptoms=("F",), causes=("F6",), also_possible=("A", "A5", "A1")),
    case="F6 (block witness)",
    slo={"ttft": {"threshold_seconds": 0.1, "target": 0.95}, "itl": {"threshold_seconds": 0.1, "target": 0.95}},
)

_TEMPLATE_WITNESSED = replace(
    _TEMPLATE,
    name="template-witnessed",
    description=(
        "template-instability on an engine run with --kv-cache-metrics: a request id 24 tokens into the shared "
        "system prompt. The hits land on the first block, which stays cached; the evicted blocks were never "
        "reused while they lived, so a larger pool would keep nothing the prompts reuse (F1: fix the template)."
    ),
    knobs=_TEMPLATE.knobs + "; --kv-cache-metrics-sample 0.01",
    engine=replace(_TEMPLATE.engine, kv_cache_metrics_sample=KV_METRICS_SAMPLE),
    case="F1 (block witness)",
)

_COMPUTE_PROMPTS = Scenario(
    name="compute-bound-prompts",
    description=(
        "Llama-3.1-8B on an L4, where a step is matrix work: ~850-token prompts, none shared, at a token budget "
        "of 512. Each prompt's prefill takes two steps of the budget and most of the first token's time, with "
        "no queue of its own; the prompts are under the long-prompt mark, so the step witness (prefills the "
        "budget chunks) is what names their prefill (A1, not A0). The steps that carry a chunk hold every "
        "stream (B1, the stronger finding: a lower budget)."
    ),
    knobs="GPU L4; max_num_batched_tokens 512, max_num_seqs 16; 1 req/s, ~850-token unique prompts, ~48 output",
    engine=EngineConfig(gpu=L4, max_model_len=4096, max_num_batched_tokens=512, max_num_seqs=16),
    workload=single(chat(1.0, prompt=lognormal(850, 0.08, 640, 1000), output=lognormal(48, 0.2, 16, 96),
                         prefix=PrefixSpec(), max_tokens=128)),
    expected=Expected(verdict="scheduler", symptoms=("A", "B"), causes=("A1", "B1"), also_possible=("C2",)),
    case="A1 (step witness)",
    slo={"ttft": {"threshold_seconds": 1.0, "target": 0.95}, "itl": {"threshold_seconds": 0.1, "target": 0.95}},
)

_PREFILL_EVERY_STEP = Scenario(
    name="prefill-every-step",
    description=(
        "Llama-3.1-8B on an L4 answering questions about ~1500-token documents in a few dozen streamed tokens, "
        "none shared, at a token budget of 512: every document takes three steps of the budget, and prefill "
        "arrives fast enough that most steps carry a chunk. The token gaps are uniformly slow (each gap is a "
        "step that computes a chunk), with no stutter for the ratios to see: the step witness (prompt tokens "
        "per step against the budget) names the budget (B1, not B0). The first tokens wait for the budget "
        "too (A2)."
    ),
    knobs="GPU L4; max_num_batched_tokens 512, max_num_seqs 64; 1.2 req/s, ~1500-token unique prompts, "
    "~24 output",
    engine=EngineConfig(gpu=L4, max_model_len=8192, max_num_batched_tokens=512, max_num_seqs=64),
    workload=single(chat(1.2, prompt=lognormal(1500, 0.08, 1125, 1875), output=lognormal(24, 0.2, 4, 72),
                         prefix=PrefixSpec(), max_tokens=96)),
    expected=Expected(verdict="scheduler", symptoms=("B",), causes=("B1",), also_possible=("A", "A2", "A4")),
    case="B1 (step witness)",
    # A reader of the stream: tokens every 100 ms; the first one within 5 s.
    slo={"ttft": {"threshold_seconds": 5.0, "target": 0.95}, "itl": {"threshold_seconds": 0.1, "target": 0.95}},
)

_HEALTHY_WITNESSED = replace(
    _HEALTHY,
    name="healthy-witnessed",
    description=(
        "healthy on vLLM 0.34 with --kv-cache-metrics: block residency, step sizes and render times are all "
        "exported, and none of them raises anything on a deployment that meets its objectives."
    ),
    knobs=_HEALTHY.knobs + "; vLLM 0.34; --kv-cache-metrics-sample 0.01",
    engine=replace(_HEALTHY.engine, vllm_version="0.34.0", kv_cache_metrics_sample=KV_METRICS_SAMPLE),
    case="healthy (witnesses)",
)

_RENDER = replace(
    _CPU_STARVED,
    name="cpu-starved-0.34",
    description=(
        "cpu-starved on vLLM 0.34, whose API server exports the time it spends rendering each request (chat "
        "template, tokenisation): the render duration quotes the frontend's share of the first tokens (A3)."
    ),
    knobs=_CPU_STARVED.knobs + "; vLLM 0.34",
    engine=replace(_CPU_STARVED.engine, vllm_version="0.34.0"),
)

WITNESSES: tuple[Scenario, ...] = (_WORKING_SET, _TEMPLATE_WITNESSED, _COMPUTE_PROMPTS, _PREFILL_EVERY_STEP, _RENDER,
                                   _HEALTHY_WITNESSED)
