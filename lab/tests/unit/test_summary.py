"""The results summaries the user docs' tables are rendered from (docs/data/) are what lab/results say, and
pool every held-out round at its first scoring (lab/summary.py)."""

from __future__ import annotations

import json

from lab import summary
from lab.advisor_pairs import load_manifest
from lab.pair_archive import is_captured


def test_the_committed_summaries_are_what_the_results_say() -> None:
    for path, text in summary.summaries().items():
        assert path.read_text(encoding="utf-8") == text, f"rerun `python -m lab.summary --write` ({path.name})"


def test_every_held_out_round_is_pooled_misses_included() -> None:
    data = json.loads(summary.dump(summary.accuracy()))
    rounds = data["rounds"]
    seeds = [tuple(map(int, r["seeds"].split("-"))) for r in rounds]
    # consecutive five-seed rounds from 5 on: none left out of the pool
    assert seeds[0][0] == 5 and all(b - a == 4 for a, b in seeds)
    assert all(seeds[i + 1][0] == seeds[i][1] + 1 for i in range(len(seeds) - 1))
    assert data["pooled"]["cells"] == sum(r["cells"] for r in rounds)
    assert data["pooled"]["cells_met"] < data["pooled"]["cells"]  # the misses are in it
    assert data["pooled"]["runs_met"] == sum(r["runs_met"] for r in rounds)


def test_every_validation_half_is_pooled_once() -> None:
    captures, pairs = load_manifest(summary.REPO / "lab/data/advisor-pairs/manifest.yaml")
    # every captured half (a half fixed ahead of its capture has no run on disk yet, and no score)
    halves = {p.split for p in pairs if p.split.startswith("validation") and is_captured(captures, p.after)}
    data = summary.advisor_pairs()
    splits = [h["split"] for h in data["halves"]]
    assert sorted(splits) == sorted(halves)  # each half once, none left out
    assert data["pooled"]["pairs"] == sum(h["pairs"] for h in data["halves"]) == len(
        [p for p in pairs if p.split in halves])


def test_the_witness_table_is_what_the_real_captures_say() -> None:
    """docs/data/witnesses.json (the real-vLLM table in docs/accuracy.md) is every captured workload judged now."""
    from lab import engine_witnesses

    committed = json.loads(engine_witnesses.TABLE_FILE.read_text(encoding="utf-8"))
    fresh = engine_witnesses.table(engine_witnesses.FIXTURES)
    assert committed == fresh, "rerun `python -m lab.engine_witnesses --table`"


def test_the_product_validates_exactly_the_moves_the_pooled_record_does() -> None:
    from exporter.advisor.candidates import VALIDATED
    from lab import advisor_record

    record = summary.advisor_pairs()["record"]
    assert VALIDATED == {(k["knob"], k["direction"]) for k in record["knobs"] if k["validated"]}
    for k in record["knobs"]:
        if k["validated"]:
            assert k["pairs"] >= advisor_record.VALIDATED_PAIRS and len(k["physics"]) >= 2
            assert 0 < k["moved"] == k["right"]


def test_the_record_reads_every_half_cell_by_cell_as_its_totals_say() -> None:
    from lab import advisor_record

    data = summary.advisor_pairs()
    pooled, record = data["pooled"], data["record"]["pooled"]
    assert record["cells"] == pooled["advisor"]["cells"] and record["moved"] == pooled["advisor"]["moved"]
    # The baselines are recounted from printed values (lab/advisor_record.py): validation-37's one preemption rate
    # printed at the floor counts within for both that the half's unrounded scoring did not.
    rounded_at_the_floor = {"advisor": 0, "unchanged": 1, "queue": 1}
    for p in ("advisor", "unchanged", "queue"):
        assert record[p]["within"] == pooled[p]["within"] + rounded_at_the_floor[p]
    assert record["advisor"]["direction"] == pooled["advisor"]["direction"]
    # every family row is a part of the pooled cells, and the parts add up
    for key in ("physics", "workload"):
        assert sum(s["cells"] for s in data["record"][key].values()) == record["cells"]
    assert record["covered_moved"] <= record["moved"] and advisor_record.FAMILY_FLOOR == 0.7
