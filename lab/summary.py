"""The results summaries the user docs' tables are rendered from: ``docs/data/accuracy.json`` and
``docs/data/advisor-pairs.json``, computed from ``lab/results``.

The product never reads the lab: ``vllm-diag render all`` formats these committed summaries into
docs/accuracy.md and docs/advisor.md (``exporter/render/reports.py``), and ``render all --check`` fails when
a table differs from its summary; lab/tests/unit/test_summary.py fails when a summary differs from the results.

Every held-out set ever scored is pooled, each at the commit it was first scored at (``ACCURACY_ROUNDS``,
``ADVISOR_HALVES``), misses included: a set scored again later (a baseline, a re-run on spent seeds) is in
sample for what changed in between, so it is not a second set. A new round adds its line here::

    .venv/bin/python -m lab.summary            # print the summaries
    .venv/bin/python -m lab.summary --write    # write docs/data/accuracy.json and docs/data/advisor-pairs.json
    .venv/bin/vllm-diag render docs            # then the tables in docs/accuracy.md and docs/advisor.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from exporter.config import load_settings
from exporter.simulator import SCENARIOS
from lab.accuracy import healthy_like
from lab.accuracy import passes as cell_passes
from lab.advisor_pairs import wilson
from lab.common import read_json
from lab.transitions import BY_NAME, meets_target

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "lab" / "results"
DATA = REPO / "docs" / "data"
ACCURACY_FILE = DATA / "accuracy.json"
ADVISOR_PAIRS_FILE = DATA / "advisor-pairs.json"

# Each held-out round of the diagnosis benchmarks: its seeds and the commit that scored them once, oldest first.
ACCURACY_ROUNDS: tuple[tuple[str, str], ...] = (
    ("5-9", "3a85670"), ("10-14", "94dce2b"), ("15-19", "ee5532d"), ("20-24", "526683a"), ("25-29", "53ca1db"),
    ("30-34", "5185771"), ("35-39", "42fe8c5"), ("40-44", "e55156f"), ("45-49", "eeb6681"), ("50-54", "bf6ecfd"),
    ("55-59", "02980b8"), ("60-64", "e41f5b2"), ("65-69", "329da85"), ("70-74", "db84633"), ("75-79", "e9f1e58"),
    ("80-84", "d5d722a"), ("85-89", "061ee7c"), ("90-94", "02a5d23"),
)
# Each validation half of the advisor's real before/after pairs: its split, the commit that scored it once
# and the scoring's output (the table, then its totals as JSON), oldest first.
ADVISOR_HALVES: tuple[tuple[str, str, str], ...] = (
    ("validation-1", "b7af419", "advisor-pairs-b7af419-validation.txt"),
    ("validation-2", "da55001", "advisor-pairs-da55001-validation-r2.txt"),
    ("validation-3", "8d00712", "advisor-pairs-8d00712-validation-r3.txt"),
    ("validation-4", "c046e2f", "advisor-pairs-c046e2f-validation-r4.txt"),
    ("validation-5", "74e2ea9", "advisor-pairs-74e2ea9-validation-r5.txt"),
    ("validation-6", "bdce395", "advisor-pairs-bdce395-validation-r6.txt"),
    ("validation-7", "9f50abd", "advisor-pairs-9f50abd-validation-r7.txt"),
    ("validation", "717f398", "advisor-pairs-717f398-validation-r8.txt"),
    ("validation-9", "332a70e", "advisor-pairs-332a70e-validation-9.txt"),
    ("validation-10", "65cd99b", "advisor-pairs-65cd99b-validation-10.txt"),
    ("validation-11", "5823e35", "advisor-pairs-5823e35-validation-11.txt"),
    ("validation-12", "f7b91a5", "advisor-pairs-f7b91a5-validation-12.txt"),
    ("validation-13", "252d425", "advisor-pairs-252d425-validation-13.txt"),
    ("validation-14", "8c1939b", "advisor-pairs-8c1939b-validation-14.txt"),
    ("validation-15", "eb12242", "advisor-pairs-eb12242-validation-15.txt"),
    ("validation-16", "66adf53", "advisor-pairs-66adf53-validation-16.txt"),
    ("validation-17", "642f85f", "advisor-pairs-642f85f-validation-17.txt"),
    ("validation-18", "9c80fdb", "advisor-pairs-9c80fdb-validation-18.txt"),
    ("validation-19", "4992288", "advisor-pairs-4992288-validation-19.txt"),
    ("validation-20", "124361c", "advisor-pairs-124361c-validation-20.txt"),
    ("validation-21", "62f56c1", "advisor-pairs-62f56c1-validation-21.txt"),
    ("validation-22", "2306d85", "advisor-pairs-2306d85-validation-22.txt"),
    ("validation-23", "d4d74e4", "advisor-pairs-d4d74e4-validation-23.txt"),
    ("validation-24", "804ac46", "advisor-pairs-804ac46-validation-24.txt"),
    ("validation-25", "05b6f38", "advisor-pairs-05b6f38-validation-25.txt"),
    ("validation-26", "4ede9b0", "advisor-pairs-4ede9b0-validation-26.txt"),
    ("validation-27", "780f5de", "advisor-pairs-780f5de-validation-27.txt"),
    ("validation-28", "69bdb7a", "advisor-pairs-69bdb7a-validation-28.txt"),
    ("validation-29", "dc2c740", "advisor-pairs-dc2c740-validation-29.txt"),
    ("validation-30", "11204cf", "advisor-pairs-11204cf-validation-30.txt"),
    ("validation-31", "85d0406", "advisor-pairs-85d0406-validation-31.txt"),
    ("validation-32", "e542584", "advisor-pairs-e542584-validation-32.txt"),
    ("validation-33", "b30ca52", "advisor-pairs-b30ca52-validation-33.txt"),
    ("validation-34", "eb70d0b", "advisor-pairs-eb70d0b-validation-34.txt"),
    ("validation-35", "090febf", "advisor-pairs-090febf-validation-35.txt"),
    ("validation-36", "47aae25", "advisor-pairs-47aae25-validation-36.txt"),
    ("validation-37", "ca79207", "advisor-pairs-ca79207-validation-37.txt"),
    ("validation-38", "86bbf07", "advisor-pairs-86bbf07-validation-38.txt"),
    ("validation-39", "9de6367", "advisor-pairs-9de6367-validation-39.txt"),
)
PREDICTORS = ("advisor", "unchanged", "queue")
METRICS = ("ttft_p95_seconds", "itl_p95_seconds", "preemption_rate")


def _share(hits: int, n: int) -> dict[str, Any]:
    low, high = wilson(hits, n)
    return {"hits": hits, "n": n, "wilson95": [round(low, 4), round(high, 4)]}


def _accuracy_cells(commit: str, seeds: set[int]) -> dict[int, dict[str, Any]]:
    """The steady-state results of ``commit`` by seed (one file per seed, or one file keyed by seed)."""
    by_seed: dict[int, dict[str, Any]] = {}
    for path in sorted(RESULTS.glob(f"accuracy-{commit}-*.json.gz")):
        data = read_json(path)
        match = re.search(r"seed(\d+)\.json", path.name)
        by_seed.update({int(match[1]): data} if match else {int(k): v for k, v in data.items()})
    return {seed: cells for seed, cells in by_seed.items() if seed in seeds}


def accuracy() -> dict[str, Any]:
    window = load_settings(overrides={}).window_seconds
    rounds = []
    for seeds, commit in ACCURACY_ROUNDS:
        first, last = map(int, seeds.split("-"))
        wanted = set(range(first, last + 1))
        by_seed = _accuracy_cells(commit, wanted)
        if set(by_seed) != wanted:
            raise ValueError(f"seeds {seeds} at {commit}: results for {sorted(by_seed)} only")
        cells = [(name, cell) for result in by_seed.values() for name, columns in result.items()
                 for cell in columns.values()]
        healthy = [cell for name, cell in cells if healthy_like(SCENARIOS[name])]
        runs = read_json(RESULTS / f"transitions-{commit}-seeds{seeds}.json.gz")
        scored = [(name, run) for name, by_run in runs.items() for run in by_run.values()]
        rounds.append({
            "seeds": seeds, "commit": commit, "scenarios": len({name for name, _ in cells}),
            "cells": len(cells), "cells_met": sum(cell_passes(SCENARIOS[name], cell) for name, cell in cells),
            "healthy_cells": len(healthy), "healthy_false": sum(cell["false_share"] > 0 for cell in healthy),
            "transitions": len(runs), "runs": len(scored),
            "runs_met": sum(meets_target(name, run, window) for name, run in scored if name in BY_NAME),
        })
    total = {key: sum(r[key] for r in rounds) for key in ("cells", "cells_met", "healthy_cells", "healthy_false",
                                                            "runs", "runs_met")}
    return {"generated_by": "python -m lab.summary --write", "window_seconds": window, "rounds": rounds,
            "pooled": {**total, "cells_share": _share(total["cells_met"], total["cells"]),
                       "runs_share": _share(total["runs_met"], total["runs"])}}



def advisor_pairs() -> dict[str, Any]:
    from lab import advisor_record

    halves = []
    for split, commit, name in ADVISOR_HALVES:
        totals = advisor_record.half_totals(RESULTS / name)
        halves.append({"split": split, "commit": commit, "file": f"lab/results/{name}",
                       "pairs": totals["advisor"]["cells"] // len(METRICS),
                       **{p: {k: totals[p][k] for k in ("direction", "moved", "within", "cells")} for p in PREDICTORS},
                       "covered": totals["coverage"]["covered"], "coverage_cells": totals["coverage"]["cells"],
                       "errors": {p: {m: [totals[p]["per_metric"][m]["mean_abs_log_error"],
                                          totals[p]["per_metric"][m]["cells"]] for m in METRICS}
                                  for p in PREDICTORS}})
    pooled: dict[str, Any] = {"pairs": sum(h["pairs"] for h in halves)}
    for p in PREDICTORS:
        sums = {k: sum(h[p][k] for h in halves) for k in ("direction", "moved", "within", "cells")}
        # The mean absolute log error over every cell of every half (each half's mean weighted by its cells).
        errors = {m: round(sum(h["errors"][p][m][0] * h["errors"][p][m][1] for h in halves)
                           / sum(h["errors"][p][m][1] for h in halves), 4) for m in METRICS}
        pooled[p] = {**sums, "mean_abs_log_error": errors}
    pooled["covered"] = sum(h["covered"] for h in halves)
    pooled["coverage_cells"] = sum(h["coverage_cells"] for h in halves)
    pooled["coverage_share"] = _share(pooled["covered"], pooled["coverage_cells"])
    for h in halves:
        h["errors"] = {p: {m: round(v[0], 4) for m, v in by_metric.items()} for p, by_metric in h["errors"].items()}
    # Cell by cell: coverage on the cells that moved, each physics and workload family held out, each knob's moves.
    record = advisor_record.record((split, name) for split, _, name in ADVISOR_HALVES)
    return {"generated_by": "python -m lab.summary --write", "halves": halves, "pooled": pooled, "record": record}


def dump(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=1, sort_keys=True) + "\n"


def summaries() -> dict[Path, str]:
    return {ACCURACY_FILE: dump(accuracy()), ADVISOR_PAIRS_FILE: dump(advisor_pairs())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.summary", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the summaries under docs/data/")
    args = parser.parse_args(argv)
    for path, text in summaries().items():
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
        else:
            print(f"# {path.relative_to(REPO)}\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
