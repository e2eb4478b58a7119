"""The scoring machinery of the real before/after pairs (lab/advisor_pairs.py): manifest, interval,
acceptance cells, baselines and coverage, on numbers (the captures are scored by the benchmark command)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.advisor_cases import observed
from lab.advisor_pairs import (
    SPLITS,
    Cell,
    Pair,
    _off_core,
    close,
    load_manifest,
    noise_sigma,
    plan,
    queue_baseline,
    summary,
    wilson,
)

REPO = Path(__file__).resolve().parents[3]


def numbered_halves(first: int) -> list[str]:
    """The registered ``validation-N`` halves from N = ``first`` on (each new half joins them through SPLITS)."""
    return [s for s in SPLITS if s.startswith("validation-") and int(s.split("-")[1]) >= first]


def _pair(knob: str = "max_num_batched_tokens", before: float = 32, after: float = 1024) -> Pair:
    return Pair("p", "long-prompts-queue", knob, before, after, ("a", "b"), "c", "validation")


def test_the_committed_manifest_loads_and_its_smoke_pair_is_in_neither_half() -> None:
    captures, pairs = load_manifest(REPO / "lab/data/advisor-pairs/manifest.yaml")
    assert captures == REPO / "lab/data/advisor-pairs"
    smoke = [p for p in pairs if p.split == "smoke"]
    assert smoke and smoke[0].what_if == "max_num_batched_tokens=1024" and len(smoke[0].base) == 2


def test_a_bad_manifest_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("pairs:\n- {id: x, workload: light, knob: max_num_seqs, from: 16, to: 8, base: [a], after: b,"
                    " split: validation}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="two captures"):
        load_manifest(path)
    path.write_text(path.read_text().replace("base: [a]", "base: [a, a2]").replace("validation", "test"))
    with pytest.raises(ValueError, match="split"):
        load_manifest(path)


def test_wilson_interval() -> None:
    low, high = wilson(8, 10)
    assert (low, high) == pytest.approx((0.490, 0.943), abs=0.002)  # 8/10: 49-94 %
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(10, 10)[1] == 1.0 and wilson(10, 10)[0] > 0.69


def test_noise_from_two_runs() -> None:
    assert noise_sigma(1.0, 1.0, 0.0) == 0.0
    assert noise_sigma(1.0, math.e, 0.0) == pytest.approx(1 / math.sqrt(2))
    assert noise_sigma(None, 1.0, 0.0) == 0.0


def test_acceptance_cells() -> None:
    assert close(1.3, 1.0, 2.0, "ttft_p95_seconds") and not close(1.4, 1.0, 2.0, "ttft_p95_seconds")
    assert not close(None, 1.0, 2.0, "ttft_p95_seconds")  # a refusal is a miss
    # a measured 0 after a non-zero base: at most 10 % of the base
    assert close(0.2, 0.0, 3.0, "preemption_rate") and not close(0.5, 0.0, 3.0, "preemption_rate")
    cell = Cell("p", "ttft_p95_seconds", 1.0, 0.5, 0.05, {"advisor": 0.6, "unchanged": 1.0, "queue": None}, (0.4, 0.8))
    assert cell.moved and cell.direction("advisor") and not cell.direction("unchanged")
    assert not cell.direction("queue") and cell.covered and cell.within("advisor")
    noisy = Cell("p", "ttft_p95_seconds", 1.0, 0.7, 0.3, {"advisor": 0.6}, None)
    assert not noisy.moved  # -30 %, but within twice the run-to-run noise


def test_summary_counts_per_predictor_and_coverage() -> None:
    cells = [Cell("p", "ttft_p95_seconds", 1.0, 0.5, 0.0, {"advisor": 0.6, "unchanged": 1.0, "queue": 0.3},
                  (0.55, 0.7)),
             Cell("p", "itl_p95_seconds", 0.02, 0.021, 0.0, {"advisor": None, "unchanged": 0.02, "queue": 0.02},
                  None, "refused"),
             Cell("p", "preemption_rate", 0.0, 0.0, 0.0, {"advisor": 0.0, "unchanged": 0.0, "queue": 0.0},
                  (0.0, 0.1))]
    totals = summary(cells)
    assert totals["advisor"]["direction"] == 1 and totals["advisor"]["moved"] == 1
    assert totals["advisor"]["within"] == 2 and totals["unchanged"]["within"] == 2
    assert totals["queue"]["per_metric"]["ttft_p95_seconds"]["within"] == 0  # 0.3 against 0.5: -40 %
    assert totals["coverage"]["covered"] == 1 and totals["coverage"]["cells"] == 3


def test_queue_baseline_moves_only_the_service_time() -> None:
    window = {"observed": {"ttft_p95_seconds": 2.0, "itl_p95_seconds": 0.02, "preemption_rate": 0.0},
              "requests_per_second": 1.0, "prefill_mean": 0.5, "prompt_mean": 860.0, "seconds": 60.0}
    up = queue_baseline(window, _pair())  # 27 chunks -> 1: a much shorter service, an emptier queue
    assert up["ttft_p95_seconds"] is not None and up["ttft_p95_seconds"] < 0.2
    assert up["itl_p95_seconds"] == 0.02 and up["preemption_rate"] == 0.0
    seqs = queue_baseline(window, _pair("max_num_seqs", 16, 8))
    assert seqs["ttft_p95_seconds"] == pytest.approx(2.0)
    down = queue_baseline({**window, "prefill_mean": 0.05}, _pair(before=1024, after=32))
    assert down["ttft_p95_seconds"] is None  # saturated: 1 req/s of 1.35 s services, a refusal


def test_a_base_on_two_engine_starts_puts_its_second_run_on_a_start_of_its_own() -> None:
    from lab.advisor_pairs import plan

    one = Pair("one", "light", "max_num_seqs", 16, 8, ("l1", "l2"), "l8", "dev")
    two = Pair("two", "mixed", "max_num_seqs", 16, 8, ("m1", "m2"), "m8", "validation", base_starts=2)
    specs = plan([one, two])
    assert specs["l1"].start == specs["l2"].start == specs["l8"].start == 0
    assert specs["m1"].start == specs["m8"].start == 0 and specs["m2"].start == 1
    assert specs["m1"].flags == specs["m2"].flags and (specs["m1"].seed, specs["m2"].seed) == (0, 1)
    # every first start comes before any second one, so the base's runs are engine starts apart
    assert sorted({(s.start, s.flags) for s in specs.values()})[-1][0] == 1


def test_fresh_starts_give_every_capture_an_engine_start_of_its_own() -> None:
    common = Pair("common", "light", "max_num_seqs", 16, 8, ("a1", "a2"), "a8", "dev", base_starts=2)
    fresh = Pair("fresh", "mixed", "max_num_seqs", 16, 8, ("b1", "b2"), "b8", "validation", base_starts=2,
                 fresh_starts=True)
    other = Pair("other", "kv-pressure", "max_num_seqs", 16, 8, ("c1", "c2"), "c8", "dev", base_starts=2)
    specs = plan([common, fresh, other])
    # a1 and c1 have equal flags and share a start; b1 has the same flags and a start of its own
    assert specs["a1"].engine_start == specs["c1"].engine_start != specs["b1"].engine_start
    assert len({specs[n].engine_start for n in ("b1", "b2", "b8")}) == 3
    assert specs["b1"].flags == specs["a1"].flags


def test_the_committed_manifest_has_a_validation_half_on_fresh_engine_starts() -> None:
    _, pairs = load_manifest(REPO / "lab/data/advisor-pairs/manifest.yaml")
    validation = [p for p in pairs if p.split == "validation"]
    assert len(validation) >= 8 and len({p.workload for p in validation}) >= 5
    assert all(p.base_starts == 2 and p.fresh_starts for p in validation)
    # the spent halves keep their labels
    spent = {p.split for p in pairs} - {"dev", "validation", "smoke", *numbered_halves(9)}
    assert spent == {"validation-1", "validation-2", "validation-3", "validation-4", "validation-5",
                     "validation-6", "validation-7"}


def test_issue_49s_half_holds_two_physics_and_every_knob_both_ways() -> None:
    _, pairs = load_manifest(REPO / "lab/data/advisor-pairs/manifest.yaml")
    half = [p for p in pairs if p.split == "validation-9"]
    assert {p.physics for p in half} == {"wide-mlp", "tiny"} and len({p.workload for p in half}) >= 3
    for knob in {p.knob for p in half}:
        moves = {(p.physics, p.after_value > p.before) for p in half if p.knob == knob}
        assert {way for _, way in moves} == {True, False}, knob
    assert all(p.scrape_interval == 4.0 for p in half)


@pytest.mark.parametrize(("split", "workloads"), [("validation-11", 5), ("validation-12", 4)])
def test_rounds_11_and_12_hold_three_physics_and_each_knob_both_ways(split: str, workloads: int) -> None:
    _, pairs = load_manifest(REPO / "lab/data/advisor-pairs/manifest.yaml")
    half = [p for p in pairs if p.split == split]
    assert {p.physics for p in half} == {"wide-mlp", "tiny", "padded-vocab"}
    assert len({p.workload for p in half}) >= workloads
    for knob in {p.knob for p in half}:
        assert {p.after_value > p.before for p in half if p.knob == knob} == {True, False}, knob
    # each A -> B has its B -> A on the same four captures
    moves = {(p.before, p.after_value, p.workload) for p in half}
    assert moves == {(after, before, workload) for before, after, workload in moves}


@pytest.mark.parametrize("split", numbered_halves(13))
def test_rounds_from_13_on_hold_four_physics_each_knob_both_ways_on_a_worker_core_of_its_own(split: str) -> None:
    _, pairs = load_manifest(REPO / "lab/data/advisor-pairs/manifest.yaml")
    half = [p for p in pairs if p.split == split]
    assert {p.physics for p in half} == {"wide-mlp", "tiny", "padded-vocab", "cpu-quota"}
    assert all(p.engine["worker_core"] == 1 for p in half)
    moves = {(p.before, p.after_value, p.workload) for p in half}
    assert moves == {(after, before, workload) for before, after, workload in moves}


def test_the_harness_keeps_itself_and_what_it_starts_off_the_workers_core() -> None:
    before = os.sched_getaffinity(0)
    core = max(before)
    if len(before) < 2:
        with pytest.raises(RuntimeError, match="cannot keep the worker's core"), _off_core(core):
            pass
        return
    with _off_core(core):
        assert os.sched_getaffinity(0) == before - {core}
        child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                               capture_output=True, text=True, check=True)
        assert core not in json.loads(child.stdout)
    assert os.sched_getaffinity(0) == before


def test_harness_conditions_keep_their_captures_on_engines_of_their_own() -> None:
    # A pair's engine conditions (a CPU quota on the worker, a padded vocabulary) are part of the flags that
    # group captures on one engine start: a quota'd capture never runs on a plain engine with the same vLLM flags.
    plain = _pair()
    slowed = Pair("q", "long-prompts-queue", "max_num_batched_tokens", 32, 1024, ("d", "e"), "f", "validation",
                  {"worker_cpus": 0.3})
    padded = Pair("r", "long-prompts-queue", "max_num_batched_tokens", 32, 1024, ("g", "h"), "i", "validation",
                  {"padded_vocab": 524288})
    specs = plan([plain, slowed, padded])
    starts = {name: spec.flags for name, spec in specs.items()}
    assert len({starts["a"], starts["d"], starts["g"]}) == 3
    assert ("worker_cpus", 0.3) in starts["d"] and ("padded_vocab", 524288) in starts["g"]
    assert dict(starts["f"])["max_num_batched_tokens"] == 1024 and ("worker_cpus", 0.3) in starts["f"]


def test_a_packed_capture_folder_reads_as_the_folder_it_was(tmp_path: Path) -> None:
    import shutil

    from lab.pair_archive import archive_path, pack_and_remove, run_folders

    captures = REPO / "lab/data/advisor-pairs"
    with run_folders(captures, ["v10-wout-kv6-1"]) as (source,):
        folder = tmp_path / source.name
        shutil.copytree(source, folder)
        expected = observed(source)
        facts = (source / "vllm-diag.yaml").read_bytes()
    archive = pack_and_remove(folder)
    assert archive == archive_path(tmp_path, "v10-wout-kv6-1") and not folder.exists()
    assert archive.read_bytes() == archive_path(captures, "v10-wout-kv6-1").read_bytes()  # byte-reproducible
    with run_folders(tmp_path, ["v10-wout-kv6-1"]) as (unpacked,):
        assert observed(unpacked) == expected
        assert (unpacked / "vllm-diag.yaml").read_bytes() == facts  # the engine facts
