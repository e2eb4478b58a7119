"""The engine's own witnesses (issue 50) on crafted windows: each redirects or corroborates a finding whose effect
the rules already show, and changes nothing without its input. Real captures: tests/unit/test_witnesses_real.py."""

from __future__ import annotations

from exporter.catalog.symptoms import CAUSE_BY_ID
from exporter.diagnosis.engine import evaluate_rules
from exporter.diagnosis.rules import RULES
from exporter.diagnosis.rules.prefix import blocks_reused
from exporter.diagnosis.witnesses import corroborate
from exporter.signals.model import Witnesses
from exporter.signals.witnesses import steps_over
from tests.unit.rule_cases import (
    H100,
    ITL_BOUNDS,
    KV_FULL,
    QUEUE,
    SLOW_KERNELS,
    SLOW_TTFT,
    UNIFORM_SLOW_ITL,
    T,
    hist,
)
from tests.unit.rule_cases import (
    rule_context as _ctx,
)

STEP_BOUNDS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, float("inf"))
# Sampled evictions whose blocks had been hit (idle well under their lifetime, reuse gaps), or never hit.
REUSED = dict(kv_block_evictions=400, kv_block_lifetime_mean_seconds=4.0, kv_block_idle_mean_seconds=2.9,
              kv_block_hit_life_share=0.28, kv_block_reuse_gaps=180, kv_block_reuse_gaps_per_eviction=0.45,
              kv_block_reuse_gap_mean_seconds=0.9, kv_block_reuse_gap_p90_seconds=2.6)
NEVER = dict(kv_block_evictions=400, kv_block_lifetime_mean_seconds=3.2, kv_block_idle_mean_seconds=3.2,
             kv_block_hit_life_share=0.0, kv_block_reuse_gaps=0, kv_block_reuse_gaps_per_eviction=0.0)
F1_FIRES = {**SLOW_TTFT, "prefix_cache_hit_ratio": 0.1, "ttft_prefill_share": 0.85}  # KV never ran out
F_FIRES = {**F1_FIRES, "kv_full_fraction": 0.2}  # the pool ran out at times, short of full: the shares cannot say
F6_FIRES = {**SLOW_TTFT, "prefix_cache_hit_ratio": 0.1, **KV_FULL}
BONUS = T.witness_corroboration


def _first_pass(signals: dict, facts: dict | None = None) -> tuple[dict, dict]:
    ctx = _ctx(signals, facts or {})
    return ctx, {cid: rule(ctx) for cid, rule in RULES}  # type: ignore[return-value]


def _with_steps(per_bucket: list[float]) -> dict:
    steps = hist(STEP_BOUNDS, per_bucket)
    return {"step_histogram": steps, "engine_steps": steps.count}


def test_without_witnesses_the_findings_pass_unchanged() -> None:
    for signals in ({}, SLOW_TTFT, F_FIRES, F1_FIRES, F6_FIRES, {**SLOW_TTFT, "ttft_queue_share": 0.7, **QUEUE}):
        ctx, first = _first_pass(signals)
        assert ctx.signals.witnesses == Witnesses()
        assert corroborate(ctx, first) == first


def test_evicted_blocks_that_had_been_reused_move_f1_to_f6_with_the_numbers() -> None:
    ctx, first = _first_pass({**F1_FIRES, **REUSED})
    assert first["F1"].status == "fired" and first["F6"].status == "clear"  # KV has room: the shares say F1
    out = corroborate(ctx, first)
    assert out["F6"].status == "fired" and out["F6"].strength == first["F1"].strength + BONUS
    assert out["F1"].status == "clear" and "see F6" in out["F1"].evidence[0]
    text = " ".join(out["F6"].evidence)
    assert "lifetime mean 4.00 s" in text and "0.45 reuse gaps per evicted block" in text
    assert "working set is larger than the pool" in text
    assert "breaks early" not in text and "no sign of a pool short of room" not in text  # the shares' readings go


def test_evicted_blocks_never_reused_move_f6_to_f1_the_workloads() -> None:
    ctx, first = _first_pass({**F6_FIRES, **NEVER})
    assert first["F6"].status == "fired" and first["F1"].status == "clear"  # KV full: the shares say F6
    out = corroborate(ctx, first)
    assert out["F1"].status == "fired" and out["F6"].status == "clear" and "see F1" in out["F6"].evidence[0]
    text = " ".join(out["F1"].evidence)
    assert "no evicted block was reused while it lived" in text and "lifetime mean 3.20 s" in text
    assert "no reuse gap" in text and "fix the template" in text


def test_the_witness_names_what_the_shares_could_not_tell() -> None:
    """The pool ran out at times, short of full: the shares say F (prompts or pool); the witness says which."""
    for witness, named, layer in ((NEVER, "F1", "request"), (REUSED, "F6", "kv_cache")):
        ctx, first = _first_pass({**F_FIRES, **witness})
        assert first["F"].status == "fired" and not first["F"].informational
        assert first["F1"].status == "clear" and first["F6"].status == "clear"
        out = corroborate(ctx, first)
        assert out[named].status == "fired" and out["F"].status == "clear", named
        assert out[named].strength == first["F"].strength + BONUS
        assert not any(e.startswith("the pool ran out at times") for e in out[named].evidence)
        assert CAUSE_BY_ID[named].layer == layer


def test_the_witness_confirms_the_cause_it_agrees_with() -> None:
    ctx, first = _first_pass({**F1_FIRES, **NEVER})
    out = corroborate(ctx, first)
    assert out["F1"].status == "fired" and out["F6"] == first["F6"] and out["F"] == first["F"]
    assert out["F1"].evidence[:len(first["F1"].evidence)] == first["F1"].evidence
    assert out["F1"].strength == first["F1"].strength + BONUS
    assert "fix the template" in out["F1"].evidence[-1]


def test_too_few_sampled_evictions_say_nothing() -> None:
    ctx, first = _first_pass({**F1_FIRES, **REUSED, "kv_block_evictions": 5})
    assert blocks_reused(ctx) is None and corroborate(ctx, first) == first


def test_steps_far_below_the_budget_tell_a_queue_it_is_not_the_budget() -> None:
    queue = {**SLOW_TTFT, "ttft_queue_share": 0.7, "ttft_prefill_share": 0.1, **QUEUE, "tokens_per_step_p99": 60,
             "prompt_length_mean": 40}
    small = _with_steps([0, 300, 200, 100, 40, 0, 0, 0, 0, 0, 0])
    ctx, first = _first_pass({**queue, **small}, {"max_num_batched_tokens": 512, "max_num_seqs": 2})
    assert first["A2"].status == "fired"
    out = corroborate(ctx, first)
    assert "the budget never bound" in out["A2"].evidence[-1] and "max_num_seqs 2" in out["A2"].evidence[-1]
    assert out["A2"].strength == first["A2"].strength and out["A4"].status != "fired"
    assert out["A2"].withheld == {"max_num_batched_tokens"} and first["A2"].withheld == frozenset()


def test_prefills_completed_above_the_budget_corroborate_a4() -> None:
    # 900-token prompts at a budget of 128: 7 chunks each; their completions observed above the budget.
    chunked = _with_steps([0, 500, 0, 0, 0, 0, 0, 0, 60, 0, 0])
    ctx, first = _first_pass({**SLOW_TTFT, "prompt_length_mean": 900, "prefix_cache_hit_ratio": 0.0,
                              "tokens_per_step_p99": 1000, **chunked}, {"max_num_batched_tokens": 128})
    assert first["A4"].status == "fired"
    assert steps_over(ctx.signals.witnesses, 128) == 60
    out = corroborate(ctx, first)
    assert out["A4"].strength > first["A4"].strength
    assert "60 prefills completed above max_num_batched_tokens 128" in out["A4"].evidence[-1]


def test_render_time_names_the_frontend_when_it_takes_its_share_of_ttft() -> None:
    ctx, first = _first_pass({**SLOW_TTFT, "render_mean_seconds": 1.2, "rendered_requests": 600})
    assert first["A3"].status == "clear"  # a calm CPU, and the latency means' frontend share is small
    out = corroborate(ctx, first)
    assert out["A3"].status == "fired" and "rendering (chat template, tokenisation) takes 1.20 s" in \
        " ".join(out["A3"].evidence)
    small = _ctx({**SLOW_TTFT, "render_mean_seconds": 0.01, "rendered_requests": 600}, {})
    assert corroborate(small, {cid: rule(small) for cid, rule in RULES})["A3"].status == "clear"


def test_prefill_chunks_in_every_step_name_the_budget_for_uniformly_slow_gaps() -> None:
    every_step = {**UNIFORM_SLOW_ITL, "prefill_token_share": 0.95, "prefill_tokens_per_step": 480,
                  "generated_tokens_per_step": 8, **_with_steps([0, 0, 0, 0, 0, 0, 0, 500, 20, 0, 0])}
    findings, _ = evaluate_rules(_ctx(every_step, {"max_num_batched_tokens": 512}))
    assert findings["B1"].status == "fired" and findings["B0"].status == "clear"
    assert "at least 94% of the steps carry a prefill chunk" in " ".join(findings["B1"].evidence)
    # A quarter of a budget per step: decode steps without a chunk in between, not the budget's doing.
    sparse = {**every_step, "prefill_tokens_per_step": 120}
    findings, _ = evaluate_rules(_ctx(sparse, {"max_num_batched_tokens": 512}))
    assert findings["B1"].status != "fired" and findings["B0"].status == "fired"


def test_a_busy_gpu_whose_steps_carry_prefill_chunks_is_the_budgets_not_a_slow_kernel_path() -> None:
    """The engine steps without pause and the GPU moves few bytes while the gaps are uniformly slow: B4's slow
    path, unless the steps carry prefill chunks (the step witness), whose compute is matrix work, not bytes:
    then the budget is the lever (B1)."""
    busy = {**SLOW_KERNELS, "prefill_token_share": 0.95}
    chunked = {**busy, "prefill_tokens_per_step": 380, "generated_tokens_per_step": 8,
               **_with_steps([0, 0, 0, 0, 0, 0, 300, 0, 0, 60, 0])}
    facts = {"max_num_batched_tokens": 512, **H100}
    plain, _ = evaluate_rules(_ctx(busy, facts))
    assert plain["B4"].status == "fired" and plain["B1"].status != "fired"
    findings, _ = evaluate_rules(_ctx(chunked, facts))
    assert findings["B4"].status == "clear" and "see B1" in findings["B4"].evidence[0]
    assert findings["B1"].status == "fired" and findings["B0"].status == "clear"
    assert "at least 74% of the steps carry a prefill chunk" in " ".join(findings["B1"].evidence)


def test_the_uniform_itl_fixture_misses_its_objective() -> None:
    assert hist(ITL_BOUNDS, [0, 0, 0, 1000, 10000, 1000, 0]).share_above(0.1) > 0.5
