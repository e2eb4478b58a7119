"""``python -m lab.scaling [--duration S] [--seed N] [--workers N] [--write]``: the fleet experiment's table.

Runs the experiment (lab/scaling/fleet.py) under the three policies, a process each, and prints one
Markdown table, then what the sidecars said during each episode and the acceptance checks. About 10 minutes
on two busy cores for the default 3 simulated hours. ``--write`` records the seed's scores in
docs/data/scaling.json, from which ``vllm-diag render docs`` formats the table in docs/deployment.md#autoscaling:
a validation seed (lab/scaling/seeds.py) once, at a committed tree; a tuning seed replaces its last score.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from lab.scaling.fleet import KV_TARGET, QUEUE_TARGET, Experiment, Score, run
from lab.scaling.seeds import TUNING, VALIDATION

REPO = Path(__file__).resolve().parents[2]
SUMMARY = REPO / "docs" / "data" / "scaling.json"
COMMAND = "python -m lab.scaling --seed N --write"

POLICIES = ("queue", "kv", "diagnosis")
LABEL = {"queue": f"(a) queue depth, {QUEUE_TARGET:g} waiting per replica",
         "kv": f"(b) KV usage, {KV_TARGET:g} per replica",
         "diagnosis": "(c) vllm_diag_desired_replicas, 1 per replica"}


def _run(args: tuple[str, Experiment]) -> Score:
    return run(*args)


def score_dict(s: Score, x: Experiment) -> dict[str, object]:
    return {"burn_minutes": s.burn_minutes, "burn_by_episode": s.burn_by_episode(x),
            "replica_hours": round(s.replica_hours, 3),
            "added_in_non_capacity": s.added_in_non_capacity, "direction_changes": s.direction_changes,
            "max_changes_per_10min": s.max_changes_per_10min, "peak_replicas": s.peak_replicas,
            "burning": s.burning, "verdicts": s.verdicts}


def checks(scores: dict[str, Score]) -> tuple[str, dict[str, bool]]:
    """The better baseline (fewer burn minutes, then fewer replica-hours) and the four acceptance points."""
    better = min(("queue", "kv"), key=lambda p: (scores[p].burn_minutes, scores[p].replica_hours))
    ours, b = scores["diagnosis"], scores[better]
    return better, {"replica_hours": ours.replica_hours <= b.replica_hours,
                    "burn_minutes": ours.burn_minutes <= b.burn_minutes,
                    "added": ours.added_in_non_capacity == 0, "flapping": ours.max_changes_per_10min <= 1}


def _commit() -> str:
    """HEAD's short hash; refused while the product or the experiment has uncommitted changes."""
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "exporter", "lab/scaling"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.strip()
    if dirty:
        raise SystemExit(f"--write needs a committed tree; uncommitted:\n{dirty}")
    return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()


def write(x: Experiment, commit: str, scores: dict[str, Score]) -> None:
    """Record one seed's scores in the summary the docs' table is rendered from."""
    seed = x.seed
    split = "validation" if seed in VALIDATION else "tuning" if seed in TUNING else None
    if split is None:
        raise SystemExit(f"seed {seed} is in neither lab/scaling/seeds.py's TUNING nor its VALIDATION: list it first")
    # seeds run side by side write one file
    with open(Path(tempfile.gettempdir()) / "vllm-diag-scaling.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _record(SUMMARY, x, split, commit, scores)


def _record(path: Path, x: Experiment, split: str, commit: str, scores: dict[str, Score]) -> None:
    seed = x.seed
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"runs": []}
    if split == "validation" and any(r["seed"] == seed for r in data["runs"]):
        raise SystemExit(f"validation seed {seed} is spent (scored once already): add fresh seeds to seeds.py")
    better, held = checks(scores)
    runs = [r for r in data["runs"] if r["seed"] != seed]
    runs.append({"seed": seed, "split": split, "commit": commit, "better": better, "checks": held,
                 "policies": {p: {k: v for k, v in score_dict(s, x).items() if k not in ("burning", "verdicts")}
                              for p, s in scores.items()}})
    order = {"validation": 0, "tuning": 1}
    runs.sort(key=lambda r: (order[r["split"]], r["seed"]))
    path.write_text(json.dumps({"command": COMMAND, "runs": runs}, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.scaling")
    parser.add_argument("--duration", type=float, default=Experiment().duration_s, help="simulated seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--only", choices=POLICIES, action="append",
                        help="run only this policy (repeatable; the acceptance checks need all three)")
    parser.add_argument("--write", action="store_true", help=f"record the scores in {SUMMARY.relative_to(REPO)}")
    parser.add_argument("--save", metavar="FILE", help="write each policy's score (JSON) to FILE")
    parser.add_argument("--trace", metavar="FILE", help="write each policy's sync trace (JSON) to FILE")
    args = parser.parse_args(argv)
    if args.write and args.only:
        parser.error("--write records all three policies: leave out --only")
    commit = _commit() if args.write else ""
    x = replace(Experiment(), duration_s=args.duration, seed=args.seed)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        policies = tuple(args.only or POLICIES)
        scores = dict(zip(policies, pool.map(_run, [(p, x) for p in policies]), strict=True))
    if args.trace:
        Path(args.trace).write_text(json.dumps({p: {"trace": s.trace, "burning": s.burning, "timeline": s.timeline}
                                                for p, s in scores.items()}), encoding="utf-8")
    if args.save:
        Path(args.save).write_text(json.dumps({p: score_dict(s, x) for p, s in scores.items()}), encoding="utf-8")
    print(f"seed {x.seed}, {x.duration_s / 3600:g} simulated hours, traffic {x.trough_rps:g}-{x.peak_rps:g} req/s "
          f"(+{x.burst_rps:g} in the burst)\n")
    print("| policy | minutes of objective burn (" + " / ".join([*(e.kind for e in x.episodes), "other"]) +
          ") | replica-hours | replicas added in CPU / template / transfer "
          "episodes | direction changes (most in 10 min) | peak replicas |")
    print("|---|---|---|---|---|---|")
    for policy, s in scores.items():
        print(f"| {LABEL[policy]} | {s.burn_minutes} ({' / '.join(map(str, s.burn_by_episode(x).values()))}) | "
              f"{s.replica_hours:.2f} | {s.added_in_non_capacity} | "
              f"{s.direction_changes} ({s.max_changes_per_10min}) | {s.peak_replicas} |")
    if set(scores) != set(POLICIES):
        return 0
    ours = scores["diagnosis"]
    print("\nthe sidecars' reason during each episode (evaluations):")
    for kind, counts in ours.verdicts.items():
        print(f"  {kind}: " + ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda c: -c[1])))
    print("\nreplica counts: " + "; ".join(
        f"{p}: " + " ".join(f"{t / 60:.0f}m:{n}" for t, n in s.timeline) for p, s in scores.items()))
    better, held = checks(scores)
    b = scores[better]
    texts = {
        "replica_hours": f"replica-hours <= {better}'s ({ours.replica_hours:.2f} <= {b.replica_hours:.2f})",
        "burn_minutes": f"burn minutes <= {better}'s ({ours.burn_minutes} <= {b.burn_minutes})",
        "added": f"0 replicas added in non-capacity episodes ({ours.added_in_non_capacity})",
        "flapping": f"<= 1 direction change per 10 minutes (most in any 10 minutes: {ours.max_changes_per_10min})",
    }
    if args.write:
        write(x, commit, scores)
    print()
    for key, ok in held.items():
        print(f"{'PASS' if ok else 'FAIL'} {texts[key]}")
    return 0 if all(held.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
