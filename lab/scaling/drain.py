"""``python -m lab.scaling.drain [--seed N] [--replicas N]``: would replicas shorten the template episode's drain?

The diagnosis policy adds no replica while the template change acts, and the queue built on the replicas
it had drains for minutes after the template is repaired. Under the diagnosis policy, this runs the
experiment three times, each with the HPA's metric raised to ``--replicas`` for one minute at a different
moment, so the HPA scales out then (and in again through its stabilisation window):

* ``none``: as shipped, no scale-out forced;
* ``fixed``: at the template episode's end, when the template is repaired (an oracle: no metric of the
  engines shows the repair yet, the prompts still served are the broken ones queued before it);
* ``cleared``: at the first sync after the episode where no serving sidecar holds for a non-capacity
  reason, the earliest moment the signal could honestly read the backlog as capacity demand.

Each prints the burn minutes (the drain's among them), replica-hours and changes of direction, as the
experiment scores them (lab/scaling/fleet.py).
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from exporter.scaling import HOLD_REASONS
from lab.scaling.fleet import Experiment, MetricOverride, Replica, run

FORCE_S = 60.0  # the metric is raised for this long: the scale-out goes through the HPA's own policies
MOMENTS = ("none", "fixed", "cleared")


def _override(moment: str, x: Experiment, replicas: int) -> MetricOverride | None:
    template = next(e for e in x.episodes if e.kind == "template")
    after = next((e.start_s for e in x.episodes if e.start_s > template.stop_s), x.duration_s)
    start: list[float] = [template.stop_s] if moment == "fixed" else []

    def metric(t: float, serving: list[Replica], value: float | None) -> float | None:
        if (moment == "cleared" and not start and template.stop_s <= t < after and serving
                and all(r.reason not in HOLD_REASONS for r in serving)):
            start.append(t)
        if value is not None and start and start[0] <= t < start[0] + FORCE_S:
            return max(value, float(replicas))
        return value

    return None if moment == "none" else metric


def _run(args: tuple[str, int, int]) -> dict[str, object]:
    moment, seed, replicas = args
    x = replace(Experiment(), seed=seed)
    s = run("diagnosis", x, override=_override(moment, x, replicas))
    template = next(e for e in x.episodes if e.kind == "template")
    after = next((e.start_s for e in x.episodes if e.start_s > template.stop_s), x.duration_s)
    drain = [m for m in s.burning if template.stop_s <= m * 60.0 < after]
    forced = next((t for (_, p), (t, n) in zip(s.timeline, s.timeline[1:]) if t >= template.stop_s and n > p), None)
    return {"moment": moment, "seed": seed, "burn_minutes": s.burn_minutes,
            "drain_minutes": len(drain), "drain_last_minute": max(drain, default=None),
            "scaled_out_at_min": None if forced is None or moment == "none" else round(forced / 60.0, 2),
            "replica_hours": round(s.replica_hours, 2), "direction_changes": s.direction_changes,
            "max_changes_per_10min": s.max_changes_per_10min}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.scaling.drain")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replicas", type=int, default=6, help="the replica count the forced scale-out asks for")
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args(argv)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(_run, [(m, args.seed, args.replicas) for m in MOMENTS]))
    print(f"| seed | scale-out to {args.replicas} | at minute | burn minutes | of them after the template episode "
          "(last) | replica-hours | direction changes (most in 10 min) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['moment']} | {r['scaled_out_at_min'] or ''} | {r['burn_minutes']} | "
              f"{r['drain_minutes']} ({r['drain_last_minute']}) | {r['replica_hours']} | "
              f"{r['direction_changes']} ({r['max_changes_per_10min']}) |")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
