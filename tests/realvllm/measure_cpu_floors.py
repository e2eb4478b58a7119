"""Measure the CPU-source readings of a calm real vLLM, to set cpu_psi_floor and cpu_throttled_floor.

    .venv/bin/python -m tests.realvllm.measure_cpu_floors --runs 3 --seconds 20 --quota 2 --quota 1

Starts one real vLLM, moves it into cgroups of its own (cgroup-v2 for PSI, a v1 CFS quota for
throttling; see starve.own_cgroups) and, per run and quota, reads the sidecar's own HostProbe
over an idle span and over a span of the "steady" load. Prints one JSON line per span.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from exporter.hostcpu.probe import HostProbe
from exporter.hostcpu.processes import descendants

from .harness import RealVLLM, run_phase
from .starve import own_cgroups


def _span(probe: HostProbe, seconds: float, load_url: str | None) -> dict[str, float | None]:
    probe(time.monotonic())
    t0 = time.monotonic()
    if load_url is None:
        time.sleep(seconds)
    else:
        asyncio.run(run_phase(load_url, "steady", duration_s=seconds))
    inputs = probe(time.monotonic())
    cores = None
    if inputs.cpu_wait_share is not None:
        run_ns = probe._delta("schedstat", "run_ns")  # noqa: SLF001 - a measurement script
        cores = None if run_ns is None else run_ns / 1e9 / (time.monotonic() - t0)
    return {"psi_some_share": inputs.cpu_psi_share, "cfs_throttled_share": inputs.cpu_throttled_share,
            "run_queue_wait_share": inputs.cpu_wait_share, "cpu_cores_used": cores, "sources": list(inputs.sources)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--quota", type=float, action="append", help="CFS quota in CPUs (repeatable)")
    args = parser.parse_args()
    with RealVLLM() as vllm:
        for run in range(args.runs):
            for cpus in args.quota or [2.0]:
                with own_cgroups(vllm.pids(), cpus):
                    # A fresh probe per span, spanning exactly it (the sidecar's window would).
                    for label, url in (("idle", None), ("steady", vllm.base_url)):
                        probe = HostProbe(lambda: descendants(vllm.pid), span_seconds=args.seconds + 60)
                        row = _span(probe, args.seconds, url)
                        print(json.dumps({"run": run, "quota_cpus": cpus, "phase": label, **row}), flush=True)


if __name__ == "__main__":
    main()
