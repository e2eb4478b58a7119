"""The accuracy reports' tables (exporter/render/reports.py): formatted from the summaries committed under
docs/data/, between their markers, and checked by `render all --check` like every generated file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from exporter.render import reports
from exporter.render.cli import main as render_main

REPO = Path(__file__).resolve().parents[2]


def _tree(tmp_path: Path) -> Path:
    """A copy of the report pages and their summaries, nothing else of the repository."""
    for page, tables in reports.REPORTS.items():
        for rel in (page, *(source for _, source, _ in tables)):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / rel, tmp_path / rel)
    return tmp_path


def test_the_committed_pages_carry_their_summaries_tables() -> None:
    assert reports.render_files(REPO) == {page: (REPO / page).read_text(encoding="utf-8") for page in reports.REPORTS}


def test_a_changed_summary_changes_the_table_and_the_check_names_the_page(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path)
    summary = root / "docs/data/accuracy.json"
    data = json.loads(summary.read_text())
    data["rounds"][0]["cells_met"] -= 1
    summary.write_text(json.dumps(data))
    page = reports.render_files(root)["docs/accuracy.md"]
    first = data["rounds"][0]
    assert f"| {first['seeds']} | {first['commit']} | {first['scenarios']} | {first['cells_met']}/{first['cells']} " \
           in page
    assert render_main(["render", "docs", "--check", "--root", str(root)]) == 1
    assert "docs/accuracy.md: differs from the generated output" in capsys.readouterr().err


def test_a_page_without_its_markers_is_refused_with_the_page_named(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    page = root / "docs/advisor.md"
    page.write_text(page.read_text().replace("<!-- advisor-pairs:end -->", ""))
    with pytest.raises(reports.ReportError, match="docs/advisor.md: needs one `<!-- advisor-pairs:begin -->`"):
        reports.render_files(root)


def test_a_tree_without_the_reports_gets_none(tmp_path: Path) -> None:
    assert reports.render_files(tmp_path) == {}


def test_the_pooled_row_sums_every_round() -> None:
    data = {"window_seconds": 180, "rounds": [
        {"seeds": "5-9", "commit": "a", "scenarios": 2, "cells": 8, "cells_met": 7, "healthy_cells": 4,
         "healthy_false": 1, "runs": 6, "runs_met": 5},
        {"seeds": "10-14", "commit": "b", "scenarios": 2, "cells": 8, "cells_met": 8, "healthy_cells": 4,
         "healthy_false": 0, "runs": 6, "runs_met": 6}],
        "pooled": {"cells": 16, "cells_met": 15, "healthy_cells": 8, "healthy_false": 1, "runs": 12, "runs_met": 11,
                   "cells_share": {"hits": 15, "n": 16, "wilson95": [0.7, 0.99]},
                   "runs_share": {"hits": 11, "n": 12, "wilson95": [0.6, 0.98]}}}
    table = reports.accuracy_rounds(data)
    assert "| **all 2 rounds** |  |  | **15/16 (93.8 %)** | **1/8** | **11/12 (91.7 %)** |" in table
    assert table[-1].startswith("Pooled over every held-out round, misses included: steady state 15/16 (93.8 %)")


def test_the_scaling_table_lists_every_seed_and_names_each_missed_point() -> None:
    burn = {"cpu": 15, "burst": 5, "template": 16, "transfer": 15, "other": 3}
    policy = {"burn_minutes": 54, "burn_by_episode": burn, "replica_hours": 8.591, "added_in_non_capacity": 0,
              "direction_changes": 3, "max_changes_per_10min": 1, "peak_replicas": 6}
    run = {"seed": 2, "split": "validation", "commit": "abc1234", "better": "kv",
           "checks": {"replica_hours": True, "burn_minutes": False, "added": True, "flapping": True},
           "policies": {"queue": policy, "kv": policy, "diagnosis": policy}}
    table = reports.scaling_seeds({"command": "python -m lab.scaling --seed N --write",
                                   "runs": [run, {**run, "seed": 0, "split": "tuning",
                                                  "checks": dict.fromkeys(run["checks"], True)}]})
    assert "| 2 (validation) | abc1234 | (c) the diagnosis | 54 (15 / 5 / 16 / 15 / 3) | 8.59 | 0 | 3 (1) | 6 |" \
        in table
    assert table[0].startswith("| seed | scored at | policy | minutes of objective burn (cpu / burst / template / "
                               "transfer / other) |")
    assert "| 2 (validation) | kv | held | **missed** | held | held |" in table
    assert table[-1] == ("Every seed scored, misses included (validation: all four points held on 0 of 1; tuning: "
                         "all four points held on 1 of 1): `python -m lab.scaling --seed N --write`.")
    assert reports.scaling_seeds({"command": "c", "runs": []}) == ["No seed scored yet."]
