"""``python -m lab.transitions_live``: none -> cause -> none on the real vLLM CPU build.

The simulated matrix (``lab.transitions``) is checked here on a real engine, at the settings a
new user gets: the shipped window and scrape interval, no configuration but the target's URL and a
host CPU source (the engine's PID), no objectives (the defaults). One engine with the harness's flags
(tests/realvllm: a tiny model, a 3 MB KV cache, max_num_seqs 16) serves every run; a light open load
(``--load``, by default Poisson arrivals at 1 request/s: requests sometimes overlap, as users' do) runs
throughout, and each run is quiet, cause, quiet for ``--phase-seconds`` each:

* ``cpu``: busy loops beside the engine (``--loops``, 4 by default) during the middle phase;
* ``cpu-quota``: the engine's processes held to ``--quota`` CPUs (0.2 by default) by a CFS quota during
  the middle phase, as a container CPU limit throttles it (needs the cgroup-v1 cpu controller);
* ``kv``: the ``pressure`` load on top of the light one (24 streams > max_num_seqs 16, ~600 KV tokens
  each > the cache): the engine preempts.

Per run, from the sidecar's own evaluations (one per scrape), the numbers of the simulated matrix:
``name`` (seconds from the cause's start to the first verdict naming its layer), ``other`` (evaluations
naming another layer, ``unknown`` included) and ``release`` (seconds from the cause's end until every
later verdict is ``none`` or the cause's layer marked recovering). CPU starvation is measured against
the machine: run it on a host with nothing else busy, or the neighbours' load is part of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

from exporter.config import Settings, load_settings
from lab.common import write_json
from lab.transitions import Evaluation, passes, score


def live_settings(metrics_url: str, pid: int, window: float | None, interval: float | None) -> Settings:
    """The shipped settings, with the target's URL and its host CPU source only (``window`` and
    ``interval`` scale a smoke run down)."""
    target: dict[str, Any] = {"name": "real-vllm", "url": metrics_url, "cpu": {"pid": pid}}
    overrides: dict[str, Any] = {"listen": "127.0.0.1:1", "targets": [target]}
    if interval is not None:
        target["scrape_interval"] = interval
        target["timeout"] = min(3.0, interval)
    if window is not None:
        overrides["window_seconds"] = window
    return load_settings(overrides=overrides)


def _seconds(value: float | None, never: str) -> str:
    return never if value is None else f"{value:.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.transitions_live",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--cause", action="append", choices=("cpu", "cpu-quota", "kv"),
                        help="only these causes (default: cpu and kv)")
    parser.add_argument("--runs", type=int, default=2, help="runs per cause (default 2)")
    parser.add_argument("--phase-seconds", type=float, default=150.0,
                        help="length of each of the quiet, cause and quiet phases (default 150)")
    parser.add_argument("--loops", type=int, default=4, help="busy loops beside the engine for the cpu cause")
    parser.add_argument("--quota", type=float, default=0.2,
                        help="CPUs the engine is held to for the cpu-quota cause (default 0.2; needs cgroup v1 cpu)")
    parser.add_argument("--load", default="open-light",
                        help="the load throughout, a preset of tests/realvllm/harness.py's PHASES (default "
                             "open-light: Poisson arrivals at 1 request/s; light: one closed stream)")
    parser.add_argument("--window", type=float, help="scale down: another window_seconds than the shipped one")
    parser.add_argument("--scrape-interval", type=float, help="scale down: another scrape interval")
    parser.add_argument("--json", type=Path, help="also write every run's evaluations here")
    args = parser.parse_args(argv)
    # A 1 s smoke run on a busy host skips scrapes the scheduler cannot start on time: said once per skip, noise here.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    # The harness lives with the real-vLLM tests (one engine and load generator for both).
    from tests.realvllm.harness import RealVLLM, unavailable_reason, vllm_available
    from tests.realvllm.loads import watch_transition

    if not vllm_available():
        print(f"lab.transitions_live: {unavailable_reason()}", file=sys.stderr)
        return 2
    causes = args.cause or ["cpu", "kv"]
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    with RealVLLM(startup_timeout_s=900.0) as vllm:
        settings = live_settings(vllm.metrics_url, vllm.pid, args.window, args.scrape_interval)
        window, interval = settings.window_seconds, settings.targets[0].scrape_interval
        print(f"real vLLM (started in {vllm.startup_s or 0:.0f} s), sidecar window {window:.0f} s, scrapes every "
              f"{interval:g} s; quiet {args.phase_seconds:.0f} s, cause {args.phase_seconds:.0f} s, "
              f"quiet {args.phase_seconds:.0f} s; load {args.load} throughout\n", flush=True)
        print("| cause | layer | run | name (s) | other | release (s) | evaluations | during the cause: evaluations "
              "with a missed objective | CPU score, max | ITL p99, max | |")
        print("|---" * 11 + "|", flush=True)
        for cause in causes:
            for run in range(1, args.runs + 1):
                seen = asyncio.run(watch_transition(vllm, settings, cause, args.phase_seconds, args.loops,
                                                    args.load, args.quota))
                evaluations = [Evaluation(e.t, e.layer, e.recovering) for e in seen.evaluations]
                result = score(evaluations, seen.layer, seen.start, seen.end)
                ok = passes(result, window)
                other = f"{result['other']}" + (f" ({', '.join(result['other_layers'])})"
                                                if result["other_layers"] else "")
                during = [e for e in seen.evaluations if seen.start <= e.t <= seen.end]
                missed = sum(1 for e in during if e.missed)
                scores = [e.cpu_score for e in during if e.cpu_score is not None]
                itls = [e.itl_p99 for e in during if e.itl_p99 is not None]
                peak_score = f"{max(scores):.2f}" if scores else "-"
                peak_itl = f"{max(itls) * 1000:.0f} ms" if itls else "-"
                print(f"| {cause} | {seen.layer} | {run} | {_seconds(result['name_s'], 'never')} | {other} | "
                      f"{_seconds(result['release_s'], 'not released')} | {len(evaluations)} | "
                      f"{missed}/{len(during)} | {peak_score} | {peak_itl} | {'' if ok else '**MISS**'} |", flush=True)
                rows.append({"cause": cause, "run": run, "start": seen.start, "end": seen.end, **result,
                             "passes": ok, "evaluations": [(e.t, e.layer, e.recovering, e.cpu_score, e.missed,
                                                            e.itl_p99) for e in seen.evaluations]})
    met = sum(r["passes"] for r in rows)
    print(f"\n{met}/{len(rows)} runs meet the target (other <= 1, named within 60 s, released within "
          f"{window:.0f} s) ({time.monotonic() - started:.0f} s)")
    for r in rows:
        changes = [(t, layer + ("~" if rec else "")) for i, (t, layer, rec, *_) in enumerate(r["evaluations"])
                   if i == 0 or r["evaluations"][i - 1][1:3] != (layer, rec)]
        print(f"  {r['cause']} run {r['run']} (cause {r['start']:.0f}-{r['end']:.0f} s): "
              + " ".join(f"{t:.0f}:{v}" for t, v in changes))
    if args.json:
        write_json(args.json, {"window": window, "interval": interval, "runs": rows})
    return 0
