"""The results summaries the user docs' tables are rendered from (docs/data/) are what lab/results say, and
pool every held-out round at its first scoring (lab/summary.py)."""

from __future__ import annotations

import json
from pathlib import Path

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
    for p in ("advisor", "unchanged", "queue"):
        assert record[p]["within"] == pooled[p]["within"]
    assert record["advisor"]["direction"] == pooled["advisor"]["direction"]
    # every family row is a part of the pooled cells, and the parts add up
    for key in ("physics", "workload"):
        assert sum(s["cells"] for s in data["record"][key].values()) == record["cells"]
    assert record["covered_moved"] <= record["moved"] and advisor_record.FAMILY_FLOOR == 0.7


def test_a_recount_off_its_totals_is_settled_only_by_cells_the_rounding_decides(tmp_path: Path) -> None:
    import pytest

    from lab import advisor_record

    lines = ["| p | preempt/s | 0.00 (+/-0%) | 0.06 [0.00-0.40] | 0.00 | 0.00 | 0.05 | yes | yes | yes |",
             "| p | TTFT p95 | 100.0 ms (+/-1%) | 50.0 ms [40.0 ms-60.0 ms] | 100.0 ms | 100.0 ms | 50.0 ms | "
             "yes | yes | yes |"]
    manifest = load_manifest(summary.REPO / "lab/data/advisor-pairs/manifest.yaml")[1]
    pair = {"p": manifest[0]}

    def half(preempt_within: int, ttft_within: int) -> list[advisor_record.Cell]:
        per_metric = {"preemption_rate": {"within": preempt_within}, "ttft_p95_seconds": {"within": ttft_within},
                      "itl_p95_seconds": {"within": 0}}
        totals = {p: {"per_metric": per_metric} for p in ("unchanged", "queue")}
        path = tmp_path / "half.txt"
        path.write_text("\n".join(lines) + "\n" + json.dumps(totals) + "\n", encoding="utf-8")
        return advisor_record.read_half("validation-x", path, pair)

    # 0.05 printed at the floor: within as printed, not within just above it; the half's totals say which
    assert [c.close("unchanged") for c in half(1, 0)] == [True, False]
    assert [c.close("unchanged") for c in half(0, 0)] == [False, False]
    # a TTFT 100 ms off a 50 ms after is no rounding's doing: the recount is not that half
    with pytest.raises(ValueError, match="decided by rounding"):
        half(1, 1)
