"""The scenario suite: every simulated scenario, replayed through the diagnosis at the shipped
defaults (window, no DCGM, the CPU source the shipped deployments configure), gives the verdict
layer, symptoms and causes documented in docs/scenarios.md.

Scrapes are 15 s apart and each scenario runs 7 minutes (the state after its last scrape is judged:
a full window past the first four minutes) to keep the suite fast; ``python -m lab.accuracy``
scores every evaluation at 5, 15 and 30 s and with DCGM.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.config import load_settings
from exporter.pipeline import TargetPipeline, replay
from exporter.simulator import SCENARIOS, Scenario, write_captures
from exporter.simulator.hostcpu import simulated_host_inputs
from exporter.state import TargetState
from tests.judged import judge_captured
from tests.scenario_captures import capture_files, shared_captures

pytestmark = pytest.mark.slow  # every scenario judged over minutes of simulated traffic

DURATION, INTERVAL = 420.0, 15.0


# A scenario's judgement is a pure function of these arguments: tests that read the same one share it.
_JUDGED: dict[tuple[str, int | None, bool], TargetState] = {}


def diagnose_scenario(name: str, factory: pytest.TempPathFactory, seed: int | None = None,
                      dcgm: bool = False) -> TargetState:
    """The scenario's captures (simulated once per session: tests/scenario_captures.py) judged at the
    shipped defaults, once per process."""
    key = (name, seed, dcgm)
    if key not in _JUDGED:
        folder = shared_captures(factory, name, DURATION, INTERVAL, seed)
        _JUDGED[key] = judge_captured(name, capture_files(folder), INTERVAL, seed,
                                      folder / "dcgm" if dcgm else None)[0]
    return _JUDGED[key]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_gives_its_documented_diagnosis(name, tmp_path_factory):
    expected = SCENARIOS[name].expected
    state = diagnose_scenario(name, tmp_path_factory)
    assert state.status == SCENARIOS[name].expected_state
    symptoms = {s.id for s in state.diagnosis.active_symptoms}
    causes = {c.id for c in state.diagnosis.active_causes if not c.informational}
    detail = (state.diagnosis.verdict, state.diagnosis.layer_scores, sorted(causes))
    assert state.diagnosis.verdict.layer == expected.verdict, detail
    assert set(expected.symptoms) <= symptoms, detail
    assert set(expected.causes) <= causes, detail
    unexpected = causes - set(expected.causes) - set(expected.also_possible)
    assert not unexpected, detail


@pytest.mark.parametrize("name", ["healthy", "low-traffic", "rag-shared-prefix", "saturated-within-slo",
                                  "dp-restart", "sparse-traffic", "lora-healthy", "dp-healthy", "sleeping",
                                  "healthy-witnessed"])
def test_healthy_like_scenarios_are_none_with_no_symptom(name, tmp_path_factory):
    state = diagnose_scenario(name, tmp_path_factory)
    assert state.diagnosis.verdict.layer == "none"
    assert state.diagnosis.active_symptoms == ()


def test_preemption_storm_names_kv_cache_and_not_the_budget(tmp_path_factory):
    state = diagnose_scenario("preemption-storm", tmp_path_factory)
    assert state.diagnosis.verdict.layer == "kv_cache"
    assert "B" not in {s.id for s in state.diagnosis.active_symptoms}
    b1 = state.signals is not None and state.signals.latency.quantile("itl", 0.95)
    assert b1 and b1 > 0.02  # the stream does miss its objective: B is explained, not absent


def test_lora_adapters_waiting_for_a_slot_name_the_slot_and_raise_max_loras(tmp_path_factory):
    """Two adapters on --max-loras 1: the first-token objective is missed while nothing waits for
    capacity; lora_requests_info names two adapters in flight for one slot, so the cause is A6."""
    state = diagnose_scenario("lora-slots", tmp_path_factory)
    assert state.diagnosis.verdict.layer == "scheduler"
    assert state.objectives["ttft"].met is False
    (a6,) = [c for c in state.diagnosis.active_causes if not c.informational]
    assert (a6.id, a6.layer) == ("A6", "scheduler")
    assert any("2 adapters had requests in flight" in e and "1 adapter slot" in e for e in a6.evidence), a6.evidence
    assert a6.actions[0].action == "raise max_loras from 1 to 2"
    assert state.signals is not None and state.signals.lora.max_adapters == 1


def test_one_slow_data_parallel_engine_is_named_not_the_merged_stutter(tmp_path_factory):
    """Engine 1 of two runs at a fraction of its GPU's bandwidth: G2 names it; the merged gaps' tail is the
    mixture's, so no scheduling cause (B1) claims it."""
    state = diagnose_scenario("dp-slow-engine", tmp_path_factory)
    assert state.diagnosis.verdict.layer == "distributed"
    causes = {c.id: c for c in state.diagnosis.active_causes if not c.informational}
    assert "G2" in causes and "B1" not in causes, sorted(causes)
    assert state.signals is not None and state.signals.engines.outlier == "1"
    assert any(e.startswith("engine 1:") for e in causes["G2"].evidence), causes["G2"].evidence


def test_a_sleeping_engine_reads_sleeping_with_no_symptom(tmp_path_factory):
    state = diagnose_scenario("sleeping", tmp_path_factory)
    assert state.status == "sleeping"
    assert state.diagnosis.verdict.layer == "none" and state.diagnosis.symptoms == ()
    assert state.signals is not None and state.signals.engines.sleep_state == "weights_offloaded"


def test_compute_bound_names_gpu_compute_with_and_without_dcgm(tmp_path_factory):
    for dcgm in (False, True):
        state = diagnose_scenario("compute-bound", tmp_path_factory, dcgm=dcgm)
        assert state.diagnosis.verdict.layer == "gpu_compute"
        assert "B4" in {c.id for c in state.diagnosis.active_causes}


def test_one_restarting_data_parallel_engine_leaves_no_spike(tmp_path_factory):
    state = diagnose_scenario("dp-restart", tmp_path_factory)
    assert state.health.restarts_total >= 1
    signals = state.signals
    assert signals is not None and signals.traffic.generation_tokens_per_second is not None
    # Two engines at 3 req/s x ~250 tokens: hundreds of tokens/s, never a lifetime total.
    assert 500 < signals.traffic.generation_tokens_per_second < 5000


def _evidence(state: TargetState, cause: str) -> tuple[str, ...]:
    (found,) = [c for c in state.diagnosis.active_causes if c.id == cause]
    return found.evidence


def test_block_witness_tells_a_pool_too_small_from_prompts_that_never_come_back(tmp_path_factory):
    """With --kv-cache-metrics, the evicted blocks' residency names the miss: in kv-working-set they had been
    reused while they lived (F6, the pool's, though running requests hold few blocks and KV usage looks low); in
    template-witnessed nothing evicted had been reused (F1, the workload's). The lifetimes are quoted in the
    evidence."""
    pool = diagnose_scenario("kv-working-set", tmp_path_factory)
    causes = {c.id for c in pool.diagnosis.active_causes if not c.informational}
    assert "F6" in causes and not {"F", "F1"} & causes, sorted(causes)
    assert pool.signals is not None and (pool.signals.kv.usage_max or 0) < 0.5  # not what KV usage would say
    evidence = _evidence(pool, "F6")
    assert any(e.startswith("evicted blocks had been reused while they lived") for e in evidence), evidence
    assert any("sampled KV blocks evicted in the window: lifetime mean" in e for e in evidence), evidence
    template = diagnose_scenario("template-witnessed", tmp_path_factory)
    causes = {c.id for c in template.diagnosis.active_causes if not c.informational}
    assert "F1" in causes and not {"F", "F6"} & causes, sorted(causes)
    assert template.diagnosis.verdict.layer == "request"
    assert any(e.startswith("no evicted block was reused while it lived") for e in _evidence(template, "F1"))
    witnesses = (pool.signals.witnesses, template.signals and template.signals.witnesses)
    assert witnesses[0].block_hit_life_share is not None and witnesses[1]
    assert witnesses[0].block_hit_life_share > 10 * (witnesses[1].block_hit_life_share or 0.0)


def _judged_without(scenario: Scenario, out: Path, drop_fact: str | None = None) -> set[str]:
    """``scenario`` captured and judged at the shipped defaults, optionally without one engine fact: the active
    causes (not informational)."""
    files = write_captures(scenario, out, DURATION, INTERVAL)
    facts = {k: v for k, v in scenario.engine_facts().items() if k != drop_fact}
    target = {"name": scenario.name, "url": "http://127.0.0.1:8000/metrics", "scrape_interval": INTERVAL,
              "timeout": 3.0, "engine": facts, **({"slo": scenario.slo} if scenario.slo else {})}
    settings = load_settings(overrides={"targets": [target]})
    host = simulated_host_inputs(scenario.build())
    state = replay(files, TargetPipeline(settings.targets[0], settings, host_probe=lambda now: host), INTERVAL)
    return {c.id for c in state.diagnosis.active_causes if not c.informational}


def test_the_witnesses_are_what_names_the_cause(tmp_path):
    """Without its input the witness changes nothing, and the rules alone misread both scenarios: kv-working-set
    without --kv-cache-metrics reads F1 (KV never ran out, so the misses look like a template's), and
    compute-bound-prompts without the token budget fact leaves the slow first tokens unexplained (A0)."""
    working_set = SCENARIOS["kv-working-set"]
    plain = replace(working_set, engine=replace(working_set.engine, kv_cache_metrics_sample=0.0))
    causes = _judged_without(plain, tmp_path / "pool")
    assert "F1" in causes and "F6" not in causes, sorted(causes)
    causes = _judged_without(SCENARIOS["compute-bound-prompts"], tmp_path / "steps", "max_num_batched_tokens")
    assert "A0" in causes and "A1" not in causes, sorted(causes)


def test_steps_at_the_budget_are_in_the_budget_findings_evidence(tmp_path_factory):
    """small-token-budget: every prompt completes above the 256-token budget (chunked), and A4 says so."""
    state = diagnose_scenario("small-token-budget", tmp_path_factory)
    assert any("prefills completed above max_num_batched_tokens 256" in e for e in _evidence(state, "A4"))


def test_a_queue_with_small_steps_does_not_name_the_budget(tmp_path_factory):
    """queue-backlog: requests wait for max_num_seqs while the largest steps stay far below the budget: A2's
    evidence says the budget never bound, and its raise is withheld."""
    state = diagnose_scenario("queue-backlog", tmp_path_factory)
    (a2,) = [c for c in state.diagnosis.active_causes if c.id == "A2"]
    assert any("the budget never bound" in e for e in a2.evidence), a2.evidence
    assert not any("max_num_batched_tokens" in a.action for a in a2.actions), [a.action for a in a2.actions]
    assert "A4" not in {c.id for c in state.diagnosis.active_causes}


def test_compute_bound_prompts_under_the_long_mark_name_their_prefill(tmp_path_factory):
    """compute-bound-prompts: ~850-token prompts (under the long-prompt mark) on an L4 at a 512 budget miss the
    first-token objective with prefill most of TTFT: the step witness names A1, never A0."""
    state = diagnose_scenario("compute-bound-prompts", tmp_path_factory)
    causes = {c.id for c in state.diagnosis.active_causes}
    assert "A1" in causes and "A0" not in causes and "B0" not in causes, sorted(causes)
    assert any("the steps are compute" in e for e in _evidence(state, "A1"))


def test_render_time_joins_the_frontend_share(tmp_path_factory):
    """cpu-starved-0.34: vLLM 0.34's render duration is quoted in A3's evidence."""
    state = diagnose_scenario("cpu-starved-0.34", tmp_path_factory)
    assert any(e.startswith("rendering (chat template, tokenisation) takes") for e in _evidence(state, "A3"))


def test_docs_profile_table_lists_every_scenario_with_its_expected_verdict():
    """docs/scenarios.md's generated table (lab.profile) is current: every scenario, and the
    verdict the sidecar gave there is the one the scenario expects."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "scenarios.md").read_text()
    table = doc.split("<!-- profile-table:begin -->", 1)[1].split("<!-- profile-table:end -->", 1)[0]
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| `")]
    verdicts = {row[1].strip().strip("`"): row[-2].strip().strip("`") for row in rows}
    assert verdicts == {name: s.expected.verdict for name, s in SCENARIOS.items()}, \
        "rerun `python -m lab.profile --write`"
