"""Every cause: a crafted window where it fires, and a near miss where it does not."""

from __future__ import annotations

import inspect

import pytest

from exporter.catalog.symptoms import (
    CAUSES,
    EFFECT_WITHOUT_CAUSE,
)
from exporter.catalog.thresholds import STRENGTHS, Thresholds, strength_ceiling
from exporter.config import ConfigError, EngineFacts, load_settings
from exporter.diagnosis.engine import VerdictTracker, diagnose, evaluate_rules, layer_scores
from exporter.diagnosis.rules import EXPLAINING_RULES, RULES, Context
from exporter.diagnosis.rules import prefix as prefix_rules
from tests.helpers import signals_with
from tests.unit.rule_cases import (
    CASES,
    FACTS,
    H100,
    HEALTHY,
    INFORMATIONAL_ONLY,
    ITL_BOUNDS,
    KV_FULL,
    LORA_SLOTS,
    OFFLOAD,
    PD_DECODE,
    PD_FAILING,
    QUEUE,
    RULE_BY_ID,
    SLO,
    SLOW_KERNELS,
    SLOW_TTFT,
    SPEC,
    STORM,
    STUTTER,
    TTFT_BOUNDS,
    UNIFORM_SLOW_ITL,
    T,
    hist,
    rule_context,
    rule_findings,
)


def test_every_cause_has_a_rule_and_a_case():
    second = [cid for cid, _ in EXPLAINING_RULES]
    assert [c.id for c in CAUSES if c.id not in second] == [cid for cid, _ in RULES]
    assert sorted(second) == sorted(EFFECT_WITHOUT_CAUSE.values())
    assert set(CASES) == set(RULE_BY_ID)


def test_healthy_window_fires_nothing():
    ctx = rule_context({}, {})
    findings, errors = evaluate_rules(ctx)
    assert [cid for cid, f in findings.items() if f.status == "fired"] == [] and errors == {}
    result = diagnose(ctx, VerdictTracker(), 0.0)
    assert result.verdict.layer == "none" and result.symptoms == ()


@pytest.mark.parametrize("cause", list(CASES))
def test_cause_fires_with_numbers(cause):
    (signals, facts), _ = CASES[cause]
    finding = RULE_BY_ID[cause](rule_context(signals, facts))
    assert finding.status == "fired", finding
    assert finding.informational == (cause in INFORMATIONAL_ONLY), finding
    assert 0 < finding.strength <= 1
    assert finding.evidence and any(ch.isdigit() for line in finding.evidence for ch in line)


@pytest.mark.parametrize("cause", list(CASES))
def test_cause_near_miss_does_not_fire(cause):
    _, (signals, facts) = CASES[cause]
    finding = RULE_BY_ID[cause](rule_context(signals, facts))
    assert finding.status != "fired" or finding.informational, finding


@pytest.mark.parametrize("cause, fact", [("A4", "max_num_batched_tokens"), ("B2", "max_num_batched_tokens"),
                                         ("G", "tensor_parallel_size")])
def test_rules_needing_unexported_facts_abstain_and_say_so(cause, fact):
    (signals, _), _ = CASES[cause]
    ctx = Context(signals_with(HEALTHY, **signals), EngineFacts(), T, SLO)
    finding = RULE_BY_ID[cause](ctx)
    assert finding.status == "abstain" and any(fact in m for m in finding.missing)


def test_kv_pressure_gives_kv_cache_verdict_and_not_scheduler():
    ctx = rule_context({**SLOW_TTFT, "ttft_queue_share": 0.8, **QUEUE, "preemptions": 50,
                        "preemptions_per_request": 0.5, **KV_FULL}, {})
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
    # a rival below the bar to enter: holds
    assert tracker.update({**base, "kv_cache": 0.45, "cpu": 0.48}, T, 2).layer == "kv_cache"
    # released below the exit score: 'none' must win twice in a row, and says it is pending
    first = tracker.update(base, T, 3)
    assert first.layer == "kv_cache" and first.pending == "none" and first.pending_evaluations == 1
    assert tracker.update(base, T, 4).layer == "none"


# -- the defects of issue 11, each pinned ------------------------------------------------------
LAYER_NAMES = ("request", "scheduler", "kv_cache", "gpu_compute", "cpu", "distributed")


def test_a_saturated_layer_is_replaced_by_a_stronger_challenger():
    """No lock-in: kv_cache at 0.99 takes over from scheduler at 0.95 after the hold."""
    tracker = VerdictTracker()
    base = dict.fromkeys(LAYER_NAMES, 0.0)
    assert tracker.update({**base, "scheduler": 0.95}, T, 0).layer == "scheduler"
    challenged = {**base, "scheduler": 0.95, "kv_cache": 0.99}
    assert tracker.update(challenged, T, 1).pending == "kv_cache"
    assert tracker.update(challenged, T, 2).layer == "kv_cache"


def test_alternating_rivals_do_not_flap():
    tracker = VerdictTracker()
    base = dict.fromkeys(LAYER_NAMES, 0.0)
    tracker.update({**base, "scheduler": 0.8}, T, 0)
    for i in range(1, 9):
        layer = tracker.update({**base, "scheduler": 0.8, "kv_cache": 0.85 if i % 2 else 0.7}, T, i).layer
        assert layer == "scheduler"


def test_correlated_causes_do_not_saturate_the_layer_score():
    ctx = rule_context({**SLOW_TTFT, "ttft_queue_share": 0.7, **QUEUE, "prompt_length_mean": 12000, **STUTTER,
                "prefill_token_share": 0.6, "tokens_per_step_p99": 1900}, {})
    findings = {cid: rule(ctx) for cid, rule in RULES}
    fired = [f.strength for cid, f in findings.items() if cid in ("A2", "A4", "B1", "B2") and f.status == "fired"]
    assert len(fired) >= 3
    assert layer_scores(findings)["scheduler"] == pytest.approx(max(fired))


def test_informational_findings_never_make_the_verdict_even_with_a_low_bar():
    low_bar = Thresholds.of({"verdict_enter_score": 0.46, "verdict_exit_score": 0.3})
    signals = signals_with(HEALTHY, running_mean=0.8, running_max=2, prefix_cache_hit_ratio=0.0)
    ctx = Context(signals, FACTS, low_bar, SLO)
    result = diagnose(ctx, VerdictTracker(), now=0.0)
    assert {c.id for c in result.active_causes} >= {"C2", "F"}
    assert all(c.informational for c in result.active_causes)
    assert result.active_symptoms == () and result.verdict.layer == "none"


@pytest.mark.parametrize("overrides", [{"verdict_exit_score": 0.5}, {"verdict_exit_score": 0.6},
                                       {"info_strength": 0.5}, {"cpu_psi_floor": 0.7}])
def test_thresholds_reject_a_band_that_is_not_a_band(overrides):
    with pytest.raises(ValueError):
        Thresholds.of(overrides)


def test_every_cause_that_can_be_the_verdict_has_its_strength_settings():
    """The strengths are settings (thresholds.py), and the table the verdict bar is checked against names each
    cause that can become the verdict (not the informational C2, not A0/B0 whose layer is unknown)."""
    assert set(STRENGTHS) == {c.id for c in CAUSES if c.layer != "unknown"} - INFORMATIONAL_ONLY


@pytest.mark.parametrize("cause", sorted(STRENGTHS))
def test_a_causes_strength_settings_are_the_ones_its_rule_reads(cause):
    """The table is true to the code: each setting it sums is read by the cause's rule module (A5, F and F6 read
    the prefix cache's, in prefix.py)."""
    source = inspect.getsource(inspect.getmodule(RULE_BY_ID[cause])) + inspect.getsource(prefix_rules)
    for keys in STRENGTHS[cause]:
        for key in keys:
            assert f"t.{key}" in source, (cause, key)


def test_raising_the_verdict_bar_never_silently_strands_a_cause():
    """B3 fires at one strength (0.55): a verdict_enter_score of 0.6 would leave it unable to ever become the
    verdict. The configuration says so and what to change; raised together with b3_strength, every cause can
    reach the bar again, and B3's case becomes the verdict."""
    with pytest.raises(ConfigError) as refused:
        load_settings(overrides={"thresholds": {"verdict_enter_score": 0.6}})
    message = str(refused.value)
    assert "B3 could never become the verdict" in message and "b3_strength" in message
    assert [c for c in STRENGTHS if f"cause {c} can make" in message] == ["B3"]  # the only one
    raised = load_settings(overrides={"thresholds": {"verdict_enter_score": 0.6, "b3_strength": 0.6}})
    bar = raised.resolved_thresholds()
    assert all(strength_ceiling(cause, bar.as_dict())[0] >= 0.6 for cause in STRENGTHS)
    (signals, facts), _ = CASES["B3"]
    ctx = Context(signals_with(HEALTHY, **signals), FACTS.model_copy(update=facts), bar, SLO)
    result = diagnose(ctx, VerdictTracker(), 0.0)
    assert result.verdict.layer == "scheduler" and result.verdict.score >= 0.6
    # At the default bar (0.5) every floor already reaches it: any cause that fires with an effect can win.
    assert all(T.as_dict()[keys[0]] >= T.verdict_enter_score for paths in STRENGTHS.values() for keys in paths)


def test_light_healthy_traffic_is_capacity_information_not_symptom_c():
    finding = RULE_BY_ID["C2"](rule_context({"running_mean": 0.8, "running_max": 2, "requests_per_second": 0.5}, {}))
    assert finding.status == "fired" and finding.informational


def test_rag_workload_within_slo_is_information_not_f():
    """A short shared system prompt with unique documents: ~20 % hits is all there is to reuse."""
    ctx = rule_context({"prefix_cache_hit_ratio": 0.2, "prompt_length_mean": 700}, {})
    assert RULE_BY_ID["F"](ctx).informational
    assert diagnose(ctx, VerdictTracker(), 0.0).verdict.layer == "none"


def test_preemption_storm_explains_the_stutter_so_b_stays_quiet():
    ctx = rule_context({**STORM, **STUTTER, "prefill_token_share": 0.6, "tokens_per_step_p99": 1900}, {})
    for cause in ("B1", "B2", "B3", "B4"):
        finding = RULE_BY_ID[cause](ctx)
        assert finding.status == "clear" and "preemption" in " ".join(finding.evidence), (cause, finding)
    assert diagnose(ctx, VerdictTracker(), 0.0).verdict.layer == "kv_cache"


# Prompts that share a prefix the cache keeps evicting: a few hits, KV at its high mark in some scrapes, a
# preemption or two, and steps held by the prefill of what the cache dropped; first tokens within objective.
EVICTED_STUTTER = dict(STUTTER, prefill_token_share=0.8, prefix_cache_hit_ratio=0.2, prompt_length_mean=3200,
                       kv_full_fraction=0.15, kv_cache_usage_max=1.0, preemptions=3, preemptions_per_request=0.01)


def test_stutter_from_the_prefill_of_evicted_prefixes_is_the_caches():
    ctx = rule_context(EVICTED_STUTTER, {})
    for cause in ("B1", "B2"):
        finding = RULE_BY_ID[cause](ctx)
        assert finding.status == "clear" and "see F" in finding.evidence[0], (cause, finding)
    f = RULE_BY_ID["F"](ctx)
    assert f.status == "fired" and not f.informational and any("pool ran out" in line for line in f.evidence), f
    findings, _ = evaluate_rules(ctx)
    assert findings["B0"].status == "clear" and "F" in findings["B0"].evidence[0]  # the miss has its cause
    assert diagnose(ctx, VerdictTracker(), 0.0).verdict.layer == "kv_cache"


def test_first_tokens_that_wait_behind_the_prefill_of_evicted_prefixes_are_the_caches_not_long_prompts():
    """~3k-token prompts, most of them a shared prefix the cache evicts: the first tokens miss their objective,
    prefill is a quarter of TTFT and the wait behind it most of the rest (no queue of its own). A5 reads
    prefill alone and stays clear; F claims the first tokens, and A1 (long prompts, intrinsic) defers to it."""
    ctx = rule_context({**EVICTED_STUTTER, **SLOW_TTFT, "ttft_prefill_share": 0.27, "ttft_queue_share": 0.66,
                "long_prompts": 400, "long_prompt_age_seconds": 0, "long_prompt_interval_seconds": 0.4}, {})
    findings, _ = evaluate_rules(ctx)
    assert findings["F"].status == "fired" and not findings["F"].informational
    assert findings["A1"].status == "clear" and "(F)" in findings["A1"].evidence[0], findings["A1"]
    assert diagnose(ctx, VerdictTracker(), 0.0).verdict.layer == "kv_cache"


def test_stutter_from_unique_documents_stays_the_schedulers():
    """The same low hit ratio with a pool that never ran out: the prompts do not share, their prefill is their own."""
    ctx = rule_context({**EVICTED_STUTTER, "kv_full_fraction": 0.0, "kv_cache_usage_max": 0.6, "preemptions": 0,
                "preemptions_per_request": 0.0}, {})
    assert RULE_BY_ID["B1"](ctx).status == "fired"
    assert RULE_BY_ID["F"](ctx).informational
    assert diagnose(ctx, VerdictTracker(), 0.0).verdict.layer == "scheduler"


def test_cpu_starvation_explains_the_stutter_so_b_stays_quiet():
    ctx = rule_context({**STUTTER, "prefill_token_share": 0.6, "cpu_starvation_score": 0.9}, {})
    assert RULE_BY_ID["B1"](ctx).status == "clear"
    # ... and the CPU cause it defers to explains the missed ITL objective: no effect without a cause.
    findings = evaluate_rules(ctx)[0]
    assert findings["C1"].status == "fired" and findings["B0"].status == "clear"
    assert "C1" in findings["B0"].evidence[0]


def test_b2_needs_big_steps_not_a_static_budget_ratio():
    """budget / mean prompt >= 2 holds for nearly every chat workload; it is not evidence alone."""
    ctx = rule_context({**STUTTER, "tokens_per_step_p99": 600}, {"max_num_batched_tokens": 8192})
    assert RULE_BY_ID["B2"](ctx).status == "clear"


def test_one_diagnosis_never_advises_both_directions_of_a_knob():
    # Overload: the queue wants a bigger budget (A2), the stutter wants a smaller one (B1).
    ctx = rule_context({**SLOW_TTFT, "ttft_queue_share": 0.7, **QUEUE, **STUTTER, "prefill_token_share": 0.6}, {})
    result = diagnose(ctx, VerdictTracker(), 0.0)
    assert {"A2", "B1"} <= {c.id for c in result.active_causes}
    moves = {(a.knob, a.direction) for c in result.active_causes for a in c.actions if a.knob}
    for knob in {k for k, _ in moves}:
        assert len({d for k, d in moves if k == knob}) == 1, moves
    notes = [e for c in result.active_causes for e in c.evidence if e.startswith("not advised here")]
    assert notes


def test_knob_actions_state_the_current_and_the_proposed_value():
    ctx = rule_context({**STUTTER, "prefill_token_share": 0.6, "tokens_per_step_p99": 1900},
                       {"max_num_batched_tokens": 2048})
    result = diagnose(ctx, VerdictTracker(), 0.0)
    texts = [a.action for c in result.active_causes for a in c.actions if a.knob == "max_num_batched_tokens"]
    assert texts and all("from 2048 to 1024" in t for t in texts)


def test_saturation_within_objectives_is_not_e():
    """V1 keeps KV near full by design: mean 0.95 with every SLO met and nothing waiting is efficient."""
    finding = RULE_BY_ID["E"](rule_context({**KV_FULL}, {}))
    assert finding.status == "fired" and finding.informational


def test_queue_rules_count_only_capacity_waiting_not_deferred():
    """Requests deferred for a LoRA slot or a KV transfer do not make A2/C3."""
    ctx = rule_context({**SLOW_TTFT, "ttft_queue_share": 0.7, "waiting_fraction": 0.9, "queued_fraction": 0.0,
                "waiting_deferred": 12, **KV_FULL}, {})
    assert RULE_BY_ID["A2"](ctx).status == "clear"
    assert RULE_BY_ID["C3"](ctx).status == "clear"


def test_a6_takes_a_sparse_deferred_wait_when_no_scrape_saw_a_wait_for_capacity():
    """Seven 30 s scrapes, one of them holding a deferred request: under the deferred share, yet the only wait
    any scrape saw, so the queue time is the adapters'. A wait for capacity seen beside it keeps A6 clear."""
    sparse = {**SLOW_TTFT, **LORA_SLOTS, "lora_adapters_seen": 2, "deferred_fraction": 1 / 7}
    finding = RULE_BY_ID["A6"](rule_context(sparse, {}))
    assert finding.status == "fired", finding
    assert any("deferred (not for capacity) in 14% of scrapes" in e and "for capacity in none" in e
               for e in finding.evidence)
    assert RULE_BY_ID["A6"](rule_context({**sparse, "queued_fraction": 1 / 7}, {})).status == "clear"
    assert RULE_BY_ID["A6"](rule_context({**sparse, "deferred_fraction": 0.0}, {})).status == "clear"


def test_cpu_rules_without_a_cpu_source_abstain_and_name_it():
    ctx = rule_context({**SLOW_TTFT, "cpu_starvation_score": None, "cpu_inputs": {}, "ttft_frontend_mean": 0.0}, {})
    for cause in ("A3", "C1"):
        finding = RULE_BY_ID[cause](ctx)
        assert finding.status == "abstain" and any("CPU source" in m for m in finding.missing)


def test_the_wait_for_a_long_step_under_way_is_not_frontend_time():
    """vLLM stamps QUEUED between steps: half of a long prefill step shows up as time outside the engine.

    The same 1 s "outside the engine" of a 2.5 s TTFT blames the frontend when the steps are short,
    and does not when the window's steps make an arrival wait 0.9 s of it for the step under way.
    """
    outside = {**SLOW_TTFT, "cpu_starvation_score": None, "cpu_inputs": {}, "ttft_frontend_mean": 1.0,
               "e2e_frontend_mean": 1.0}
    short_steps = RULE_BY_ID["A3"](rule_context({**outside, "step_wait_mean": 0.01}, {}))
    assert short_steps.status == "fired"
    assert any("net of 10 ms waiting for the step under way" in e for e in short_steps.evidence)
    long_steps = RULE_BY_ID["A3"](rule_context({**outside, "step_wait_mean": 0.9}, {}))
    assert long_steps.status != "fired"


def test_gpu_compute_is_reachable():
    ctx = rule_context({**SLOW_KERNELS}, H100)
    result = diagnose(ctx, VerdictTracker(), 0.0)
    assert result.verdict.layer == "gpu_compute"


def test_a_rule_that_raises_is_reported_not_swallowed(monkeypatch):
    import exporter.diagnosis.engine as engine

    def broken(ctx):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(engine, "RULES", (*RULES[:-1], ("G", broken)))
    result = diagnose(rule_context({}, {}), VerdictTracker(), 0.0)
    assert result.rule_errors == {"G": "ZeroDivisionError: boom"}
    assert result.abstained["G"] == ("rule error",)


def test_rejected_drafts_within_the_itl_objective_are_information_only():
    finding = RULE_BY_ID["B5"](rule_context({**SPEC, "spec_decode_acceptance_rate": 0.05}, {}))
    assert finding.status == "fired" and finding.informational
    assert any("draft acceptance 5%" in e for e in finding.evidence)
    ctx = rule_context({**SPEC, "spec_decode_acceptance_rate": 0.05}, {})
    assert diagnose(ctx, VerdictTracker(), 0.0).verdict.layer == "none"


def test_rejected_drafts_explain_a_missed_itl_objective_and_name_the_drafter():
    ctx = rule_context({**UNIFORM_SLOW_ITL, **SPEC, "spec_decode_acceptance_rate": 0.05},
               {"speculative_method": "ngram", "num_speculative_tokens": 3})
    finding = RULE_BY_ID["B5"](ctx)
    assert finding.status == "fired" and not finding.informational
    assert any("drafter ngram, 3 draft tokens per step" in e for e in finding.evidence)
    # judged per token: the evidence says so (tokens per output event 1.15)
    assert any("judged per token" in e for e in finding.evidence)
    assert RULE_BY_ID["B5"](rule_context({}, {})).status == "clear"  # speculation off
    few = RULE_BY_ID["B5"](rule_context({**SPEC, "spec_decode_draft_tokens": 50, "spec_decode_acceptance_rate": 0.05},
                                        {}))
    assert few.status == "abstain"


def test_a_decode_instances_wait_for_kv_is_a7_not_a_scheduler_queue():
    ctx = rule_context({**SLOW_TTFT, **PD_DECODE}, {})  # no kv_role configured: the fetch-stage gauge says consumer
    findings = rule_findings({**SLOW_TTFT, **PD_DECODE})
    assert findings["A7"].status == "fired" and findings["A2"].status == "clear"
    assert findings["A0"].status == "clear"  # explained
    evidence = " ".join(findings["A7"].evidence)
    assert "64% of mean TTFT" in evidence and "600 KV transfers of 200 MB" in evidence
    assert diagnose(ctx, VerdictTracker(), 0.0).verdict.layer == "distributed"
    # healthy decode instance: the deferred queue within objectives is no finding at all
    healthy = rule_findings({**PD_DECODE})
    assert healthy["A7"].status == "clear" and healthy["A2"].status == "clear"
    assert diagnose(rule_context({**PD_DECODE}, {}), VerdictTracker(), 0.0).verdict.layer == "none"
    # prompts that arrive by transfer are no prefix-cache miss of this instance
    assert healthy["F"].status == "clear" and "another instance" in healthy["F"].evidence[0]


def test_failing_kv_transfers_need_an_effect_to_count():
    fired = RULE_BY_ID["A8"](rule_context({**PD_FAILING}, {"kv_load_failure_policy": "fail"}))
    assert fired.status == "fired" and not fired.informational
    assert any("30 of 630 KV loads failed" in e for e in fired.evidence)
    assert any("ends its request with an error" in e for e in fired.evidence)
    quiet = RULE_BY_ID["A8"](rule_context({**PD_FAILING, "requests_errored": 0}, {}))
    assert quiet.status == "fired" and quiet.informational
    assert RULE_BY_ID["A8"](rule_context({}, {})).status == "clear"  # no connector


def test_with_offload_a_miss_is_a_copy_d_weakens_and_says_so_f_counts_the_tier():
    storm = RULE_BY_ID["D"](rule_context({**STORM}, {}))
    offloaded = RULE_BY_ID["D"](rule_context({**STORM, **OFFLOAD}, {}))
    assert offloaded.status == "fired" and offloaded.strength < storm.strength
    assert any("by a copy over PCIe, not a recompute" in e for e in offloaded.evidence)
    assert any("90.0 GB loaded back to the GPU at 20.0 GB/s" in e for e in offloaded.evidence)
    # a NIXL decode instance's connector hits are transfers, not a tier: a preemption there recomputes
    decode = RULE_BY_ID["D"](rule_context({**STORM, **PD_DECODE}, {}))
    assert decode.strength == storm.strength and not any("offload" in e for e in decode.evidence)
    # the GPU prefix cache hits 10 %, the tier serves 90 % of the rest: reuse is fine, F6 clears
    evicted = {**SLOW_TTFT, "prefix_cache_hit_ratio": 0.1, **KV_FULL}
    assert RULE_BY_ID["F6"](rule_context(evicted, {})).status == "fired"
    tiered = RULE_BY_ID["F6"](rule_context({**evicted, **OFFLOAD}, {}))
    assert tiered.status == "clear" and "with the KV offload tier" in tiered.evidence[0]


# Every gap slow on a TP engine (the median 90 % of the 0.1 s threshold, so the median alone does not miss),
# prefill steps lifting the tail just over the mark: tp-overhead's shape.
SLOW_WITH_TAIL = dict(itl_quantiles={0.5: 0.09, 0.95: 0.2, 0.99: 0.28}, itl_tail_ratio=0.28 / 0.09,
                      itl_histogram=hist(ITL_BOUNDS, [0, 0, 0, 7000, 4000, 800, 200]),
                      prefill_token_share=0.6, tokens_per_step_p99=12000, kv_cache_usage_mean=0.2)


def test_slow_median_on_a_tp_engine_is_communication_even_with_a_tail():
    ctx = rule_context(SLOW_WITH_TAIL, {"tensor_parallel_size": 4, "max_num_batched_tokens": 16384, **H100})
    assert (ctx.signals.latency.itl_tail_ratio or 0) >= T.itl_tail_ratio
    g = RULE_BY_ID["G"](ctx)
    assert g.status == "fired" and any("median token gap" in line for line in g.evidence), g
    for cause in ("B1", "B2"):
        finding = RULE_BY_ID[cause](ctx)
        assert finding.status == "clear" and "see G" in finding.evidence[0], (cause, finding)
    assert diagnose(ctx, VerdictTracker(), 0.0).verdict.layer == "distributed"


def test_a_stutter_over_fast_gaps_on_a_tp_engine_stays_the_schedulers():
    ctx = rule_context({**SLOW_WITH_TAIL, **STUTTER},
                       {"tensor_parallel_size": 4, "max_num_batched_tokens": 16384, **H100})
    assert RULE_BY_ID["G"](ctx).status == "clear"
    assert RULE_BY_ID["B1"](ctx).status == "fired"
    assert diagnose(ctx, VerdictTracker(), 0.0).verdict.layer == "scheduler"


def test_when_the_model_needs_its_gpus_the_stutter_keeps_its_own_cause():
    facts = {"tensor_parallel_size": 4, "max_num_batched_tokens": 16384, "gpu": "H100", "model_weight_bytes": 140e9}
    ctx = rule_context(SLOW_WITH_TAIL, facts)
    assert RULE_BY_ID["G"](ctx).status == "clear"
    assert RULE_BY_ID["B1"](ctx).status == "fired"


def test_a_few_long_prompts_that_each_wait_seconds_are_named_one_stray_slow_one_is_not():
    """Four 40k-token prompts in the window, two of them over the 2.5 s objective: too few first tokens for a
    share, but two slow of four is no chance against a 1 % budget (A1 names it); one slow of three abstains."""
    def sparse(slow: int, first_tokens: int) -> Context:
        buckets = [0, 0, first_tokens - slow, 0, 0, slow, 0, 0]  # 0.25-0.5 s, 2.5-5 s
        return rule_context({"prompt_length_mean": 40000, "ttft_prefill_share": 0.9, "ttft_queue_share": 0.0,
                     "first_tokens": first_tokens, "ttft_histogram": hist(TTFT_BOUNDS, buckets)}, {})

    named = RULE_BY_ID["A1"](sparse(2, 4))
    assert named.status == "fired" and any("beyond chance" in line for line in named.evidence), named
    assert RULE_BY_ID["A1"](sparse(1, 3)).status == "abstain"


def test_requests_that_wait_behind_long_prefills_are_the_long_prompts_not_a_queue():
    """Chat with a 28k-token document now and then: requests wait in every recent scrape while the long prefills
    run, and every slow first token of the window came with a long prompt's first token or just after it. The
    wait is behind those prefills (A1); A2 defers. One slow first token more, away from any long prompt, and the
    queue is a cause of its own again."""
    def window(beside: float) -> Context:
        return rule_context({"ttft_histogram": hist(TTFT_BOUNDS, [0, 80, 12, 2, 0, 6, 0, 0]), "first_tokens": 100,
                     "ttft_quantiles": {0.5: 0.3, 0.95: 2.6, 0.99: 4.0}, "ttft_mean": 0.9,
                     "ttft_queue_share": 0.4, "ttft_prefill_share": 0.35, "prompt_length_mean": 900,
                     "queued_recent_fraction": 1.0, "queued_fraction": 0.2, "waiting_fraction": 0.2,
                     "long_prompts": 3, "long_prompt_age_seconds": 5, "long_prompt_interval_seconds": 10,
                     "long_prompt_slow_first_tokens": beside}, {})

    aligned = window(6)
    assert RULE_BY_ID["A2"](aligned).status == "clear", RULE_BY_ID["A2"](aligned)
    a1 = RULE_BY_ID["A1"](aligned)
    assert a1.status == "fired" and any("came with a long prompt" in line for line in a1.evidence), a1
    assert diagnose(aligned, VerdictTracker(), 0.0).verdict.layer == "request"
    apart = window(5)
    assert RULE_BY_ID["A2"](apart).status == "fired"
    assert RULE_BY_ID["A1"](apart).status == "clear"
