"""``python -m lab.scaling [--duration S] [--seed N] [--workers N]``: the fleet experiment's table.

Runs the experiment (lab/scaling/fleet.py) under the three policies, a process each, and prints one
Markdown table (the one in docs/deployment.md#autoscaling), then what the sidecars said during each episode
and the acceptance checks. About 10 minutes on two busy cores for the default 3 simulated hours.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from lab.scaling.fleet import KV_TARGET, QUEUE_TARGET, Experiment, Score, run

POLICIES = ("queue", "kv", "diagnosis")
LABEL = {"queue": f"(a) queue depth, {QUEUE_TARGET:g} waiting per replica",
         "kv": f"(b) KV usage, {KV_TARGET:g} per replica",
         "diagnosis": "(c) vllm_diag_desired_replicas, 1 per replica"}


def _run(args: tuple[str, Experiment]) -> Score:
    return run(*args)


def score_dict(s: Score) -> dict[str, object]:
    return {"burn_minutes": s.burn_minutes, "replica_hours": round(s.replica_hours, 3),
            "added_in_non_capacity": s.added_in_non_capacity, "direction_changes": s.direction_changes,
            "max_changes_per_10min": s.max_changes_per_10min, "peak_replicas": s.peak_replicas,
            "burning": s.burning, "verdicts": s.verdicts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.scaling")
    parser.add_argument("--duration", type=float, default=Experiment().duration_s, help="simulated seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--only", choices=POLICIES, action="append",
                        help="run only this policy (repeatable; the acceptance checks need all three)")
    parser.add_argument("--save", metavar="FILE", help="write each policy's score (JSON) to FILE")
    parser.add_argument("--trace", metavar="FILE", help="write each policy's sync trace (JSON) to FILE")
    args = parser.parse_args(argv)
    x = replace(Experiment(), duration_s=args.duration, seed=args.seed)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        policies = tuple(args.only or POLICIES)
        scores = dict(zip(policies, pool.map(_run, [(p, x) for p in policies]), strict=True))
    if args.trace:
        Path(args.trace).write_text(json.dumps({p: {"trace": s.trace, "burning": s.burning, "timeline": s.timeline}
                                                for p, s in scores.items()}), encoding="utf-8")
    if args.save:
        Path(args.save).write_text(json.dumps({p: score_dict(s) for p, s in scores.items()}), encoding="utf-8")
    print(f"seed {x.seed}, {x.duration_s / 3600:g} simulated hours, traffic {x.trough_rps:g}-{x.peak_rps:g} req/s "
          f"(+{x.burst_rps:g} in the burst)\n")
    print("| policy | minutes of objective burn | replica-hours | replicas added in CPU / template / transfer "
          "episodes | direction changes (most in 10 min) | peak replicas |")
    print("|---|---|---|---|---|---|")
    for policy, s in scores.items():
        print(f"| {LABEL[policy]} | {s.burn_minutes} | {s.replica_hours:.2f} | {s.added_in_non_capacity} | "
              f"{s.direction_changes} ({s.max_changes_per_10min}) | {s.peak_replicas} |")
    if set(scores) != set(POLICIES):
        return 0
    ours = scores["diagnosis"]
    print("\nthe sidecars' reason during each episode (evaluations):")
    for kind, counts in ours.verdicts.items():
        print(f"  {kind}: " + ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda c: -c[1])))
    print("\nreplica counts: " + "; ".join(
        f"{p}: " + " ".join(f"{t / 60:.0f}m:{n}" for t, n in s.timeline) for p, s in scores.items()))
    # Acceptance: the better baseline is the one that burns fewer minutes (fewer replica-hours on a tie).
    better = min(("queue", "kv"), key=lambda p: (scores[p].burn_minutes, scores[p].replica_hours))
    b = scores[better]
    checks = {
        f"replica-hours <= {better}'s ({ours.replica_hours:.2f} <= {b.replica_hours:.2f})":
            ours.replica_hours <= b.replica_hours,
        f"burn minutes <= {better}'s ({ours.burn_minutes} <= {b.burn_minutes})": ours.burn_minutes <= b.burn_minutes,
        f"0 replicas added in non-capacity episodes ({ours.added_in_non_capacity})": ours.added_in_non_capacity == 0,
        f"<= 1 direction change per 10 minutes (most in any 10 minutes: {ours.max_changes_per_10min})":
            ours.max_changes_per_10min <= 1,
    }
    print()
    for text, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'} {text}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
