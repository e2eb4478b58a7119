"""The engine's own witnesses on real vLLM 0.32 captures (CPU build; tests/fixtures/vllm-0.32-witnesses, made by
``python -m lab.engine_witnesses NAME --save``): each folder is one short load judged as one window by
``vllm-diag diagnose DIR``, with the engine facts and objectives of its vllm-diag.yaml."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import shutil
from pathlib import Path
from typing import Any

from exporter.cli import main

WITNESSES = Path(__file__).parents[1] / "fixtures" / "vllm-0.32-witnesses"


@functools.cache
def _judged(name: str) -> dict[str, Any]:
    """``vllm-diag diagnose DIR --format json`` of one fixture folder, in this process (once per folder)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["diagnose", str(WITNESSES / name), "--format", "json"]) == 0
    doc: dict[str, Any] = json.loads(out.getvalue())["targets"][0]
    return doc


def _causes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for s in doc["symptoms"] for c in s["causes"]}


def _counting(doc: dict[str, Any]) -> set[str]:
    return {cid for cid, c in _causes(doc).items() if not c["informational"]}


def test_block_witness_tells_a_working_set_larger_than_the_pool_from_a_changing_template() -> None:
    thrash, template = _judged("kv-thrash"), _judged("kv-template")
    # Both hurt: an objective is missed with the prefix cache low (the thrash's first tokens stayed just within
    # theirs in this capture, its token gaps did not: the prefill of the evicted documents holds the steps).
    for doc in (thrash, template):
        assert not (doc["objectives"]["ttft"]["met"] and doc["objectives"]["itl"]["met"])
        assert doc["signals"]["prefix_cache_hit_ratio"] < 0.3
        assert doc["signals"]["kv_block_evictions"] >= 20
    # The pool evicted blocks prompts had reused: F6 (KV layer), quoting lifetimes and reuse gaps.
    evicted = _causes(thrash)
    assert "F6" in evicted and not {"F", "F1"} & set(evicted) and evicted["F6"]["layer"] == "kv_cache"
    # The hits land on blocks the pool later evicts (11 % of their lives before a hit, against a 19 % hit ratio).
    assert thrash["signals"]["kv_block_hit_life_share"] >= 0.25 * thrash["signals"]["prefix_cache_hit_ratio"] > 0
    text = " ".join(evicted["F6"]["evidence"])
    assert "sampled KV blocks evicted" in text and "reuse gaps per evicted block" in text
    # The template changes before the shared part: no evicted block was ever reused (F1, the workload's: fix
    # the template).
    never = _causes(template)
    assert "F1" in never and not {"F", "F6"} & set(never) and never["F1"]["layer"] == "request"
    # The hits land on the stable head, which stays: the evicted blocks never had one.
    assert template["signals"]["kv_block_hit_life_share"] < 0.01 < template["signals"]["prefix_cache_hit_ratio"]
    text = " ".join(never["F1"]["evidence"])
    assert "no evicted block was reused while it lived" in text and "lifetime mean" in text


def test_long_prompts_on_a_compute_bound_engine_read_a_named_cause() -> None:
    for name in ("long-512", "long-128"):
        doc = _judged(name)
        assert doc["objectives"]["ttft"]["met"] is False, name
        assert doc["verdict"]["layer"] in ("request", "scheduler"), (name, doc["verdict"])
        counting = _counting(doc)
        assert not counting & {"A0", "B0"}, (name, counting)
        assert counting & {"A1", "A4"}, (name, counting)


def test_steps_at_the_budget_show_in_the_evidence_of_the_cause_that_names_it() -> None:
    doc = _judged("long-128")
    named = _causes(doc)
    budget_cause = next(cid for cid in ("A4", "A1") if cid in named)
    assert "completed above max_num_batched_tokens 128" in " ".join(named[budget_cause]["evidence"])
    # At 512 the budget binds too (900-token prompts): A1 and B1 both quote the prefills it chunked.
    named = _causes(_judged("long-512"))
    for cid in ("A1", "B1"):
        assert "prefills completed above max_num_batched_tokens 512" in " ".join(named[cid]["evidence"]), cid


def test_steps_carrying_the_budget_corroborate_b1_and_point_a_queue_at_the_budget() -> None:
    # 12 clients, 900-token prompts, 8 outputs each at budget 512: a prefill chunk in every step.
    doc = _judged("long-uniform")
    named = _causes(doc)
    assert doc["signals"]["prefill_tokens_per_step"] >= 0.5 * 512
    assert "B1" in named and "B0" not in named
    assert "of the budget" in named["B1"]["evidence"][-1]
    assert "requests wait for the token budget, not for the concurrency cap" in " ".join(named["A2"]["evidence"])
    assert "max_num_seqs" not in " ".join(a["action"] for a in named["A2"]["actions"])


def test_a_queue_with_steps_far_below_the_budget_does_not_name_the_budget() -> None:
    doc = _judged("queue-small-steps")
    named = _causes(doc)
    assert "A2" in named and not {"A4", "B2"} & set(named)
    assert "the budget never bound" in " ".join(named["A2"]["evidence"])
    actions = " ".join(a["action"] for a in named["A2"]["actions"])
    assert "max_num_seqs" in actions and "max_num_batched_tokens" not in actions


def test_a_healthy_load_on_the_compute_heavier_model_stays_none() -> None:
    doc = _judged("healthy")
    assert doc["objectives"]["ttft"]["met"] is True and doc["objectives"]["itl"]["met"] is True
    assert doc["verdict"]["layer"] == "none" and _counting(doc) == set()


def test_the_step_witness_alone_names_b1_on_the_real_engine(tmp_path: Path) -> None:
    """long-uniform's gaps stutter (p99/p50 about 7) on the CPU build, so the stutter rule names B1 there first.
    With a tail mark no window reaches, that rule stays quiet and the step witness alone names the budget:
    at least 95 % of the steps carried a prefill chunk."""
    folder = tmp_path / "long-uniform"
    shutil.copytree(WITNESSES / "long-uniform", folder)
    config = json.loads((folder / "vllm-diag.yaml").read_text())
    (folder / "vllm-diag.yaml").write_text(json.dumps({**config, "thresholds": {"itl_tail_ratio": 100}}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["diagnose", str(folder), "--format", "json"]) == 0
    named = _causes(json.loads(out.getvalue())["targets"][0])
    assert "B1" in named and "B0" not in named
    text = " ".join(named["B1"]["evidence"])
    assert "of the steps carry a prefill chunk" in text and "most steps are fast" not in text
