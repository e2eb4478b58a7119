"""The advisor's track record on a real engine: the sidecar watches a real vLLM (CPU build) under a steady
closed load, the advisor calibrates a symptomatic window, the engine is restarted with one flag changed under
the same load, and once a whole window after the change is in, ``vllm_diag_advice_error_ratio`` must appear
on the sidecar's /metrics with the error of the advisor's what-if for that move against what the new engine
measured (issue 49).

    .venv/bin/python -m lab.advisor_track_live [--write lab/results/advisor-track-live.json]

The sidecar is the real app (tests/realvllm/sidecar.py) with its own facts discovery: ``max_num_seqs`` is not
configured, so the sidecar reads it from the engine's command line, before and after the restart, as it would
beside a pod. Two engine starts and two 30 s windows: about four minutes on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from exporter.advisor.track import error_ratio
from exporter.catalog.thresholds import Thresholds
from tests.realvllm.engine import RealVLLM, free_port, make_text, one_request, tokens_per_word
from tests.realvllm.sidecar import RunningSidecar, sidecar_settings

KV_BYTES = 3 * 1024 * 1024  # 96 blocks of 32 tokens: twelve 500-token requests do not fit, so they preempt
BEFORE, AFTER = 16, 6  # max_num_seqs
WINDOW_S = 30.0
CLIENTS = 12
METRIC = "vllm_diag_advice_error_ratio"
LABELS = {"ttft_p95": "ttft_p95_seconds", "itl_p95": "itl_p95_seconds", "preemptions_per_s": "preemption_rate"}


async def _load(base: list[str], stop: asyncio.Event, counts: dict[str, int]) -> None:
    """Closed-loop clients (prompts 150-250 tokens, outputs 260-340) against whichever engine is up;
    a request that fails while the engine restarts is retried after a pause."""
    async def client(seed: int) -> None:
        rng = random.Random(seed)
        ratio = None
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            while not stop.is_set():
                try:
                    ratio = ratio or await tokens_per_word(base[0], session)
                except (aiohttp.ClientError, OSError, ValueError):
                    await asyncio.sleep(1.0)
                    continue
                result = await one_request(session, base[0], make_text(rng.randint(150, 250), rng, ratio),
                                           rng.choice((260, 280, 300, 320, 340)))
                counts["ok" if result.ok else "failed"] += 1
                if not result.ok:
                    await asyncio.sleep(1.0)

    await asyncio.gather(*(client(i) for i in range(CLIENTS)))


async def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(1.0)
    raise TimeoutError(f"no {what} within {timeout:.0f} s")


async def run(record_dir: Path) -> dict[str, Any]:
    port = free_port()
    timings: dict[str, float] = {}
    counts = {"ok": 0, "failed": 0}
    stop = asyncio.Event()
    t0 = time.monotonic()
    first = RealVLLM(port=port, max_num_seqs=BEFORE, max_num_batched_tokens=1024, kv_cache_memory_bytes=KV_BYTES,
                     startup_timeout_s=600).start()
    timings["start before"] = time.monotonic() - t0
    facts = {k: v for k, v in first.engine_facts().items() if k != "max_num_seqs"}  # read from the command line
    settings = sidecar_settings(first, window=WINDOW_S, interval=2.0, record_dir=str(record_dir),
                                engine={**facts, "kv_cache_memory_bytes": KV_BYTES})
    base = [first.base_url]
    load = asyncio.create_task(_load(base, stop, counts))
    second: RealVLLM | None = None
    try:
        async with RunningSidecar(settings) as sidecar:
            async def kept() -> Any:
                doc = await sidecar.doc()
                return (doc.get("advice_track") or {}).get("kept_window_end") and doc
            t1 = time.monotonic()
            before = await _wait(kept, 300, "calibrated window kept by the advisor")
            timings["until the advisor kept a window"] = time.monotonic() - t1
            t2 = time.monotonic()
            # In threads: the sidecar polls on this event loop, and sees the engine go and come back.
            await asyncio.to_thread(first.stop)
            second = RealVLLM(port=port, max_num_seqs=AFTER, max_num_batched_tokens=1024,
                              kv_cache_memory_bytes=KV_BYTES, startup_timeout_s=600)
            await asyncio.to_thread(second.start)
            timings["restart with the new flag"] = time.monotonic() - t2

            async def published() -> Any:
                samples = await sidecar.samples()
                found = {dict(labels).get("metric"): value for (name, labels), value in samples.items()
                         if name == METRIC and dict(labels).get("knob") == "max_num_seqs"}
                return found or None
            t3 = time.monotonic()
            errors = await _wait(published, 400, METRIC)
            timings["until the error was published"] = time.monotonic() - t3
            doc = await sidecar.doc()
    finally:
        stop.set()
        for engine in (first, second):
            if engine is not None:
                engine.stop()
        await asyncio.wait_for(load, 150)
    history = doc["advice_track"]["history"]
    return {"before": BEFORE, "after": AFTER, "window_seconds": WINDOW_S, "requests": counts,
            "advice_before": [{k: a.get(k) for k in ("knob", "current", "proposed", "predicted")}
                              for a in before.get("advice") or []],
            "observed_before": before.get("observed"), "comparison": history[-1], "published": errors,
            "seconds": {k: round(v, 1) for k, v in timings.items()}}


def checks(result: dict[str, Any]) -> list[str]:
    """What must hold; each failure in words (empty: all hold)."""
    problems = []
    comparison, published = result["comparison"], result["published"]
    if (comparison["knob"], comparison["current"], comparison["proposed"]) != ("max_num_seqs", BEFORE, AFTER):
        problems.append(f"the comparison is of {comparison['knob']} {comparison['current']} -> "
                        f"{comparison['proposed']}, not max_num_seqs {BEFORE} -> {AFTER}")
    pad = Thresholds().advice_preemption_floor
    for label, key in LABELS.items():
        predicted, measured = comparison["predicted"].get(key), comparison["measured"].get(key)
        expected = error_ratio(predicted, measured, pad if key == "preemption_rate" else 0.0)
        value = published.get(label)
        if expected is None or value is None or not math.isfinite(value) or abs(value - expected) > 1e-3:
            problems.append(f"{label}: published {value}, the measured error is {expected} "
                            f"(predicted {predicted}, measured {measured})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.advisor_track_live", description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="FILE", help="save the result as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="advisor-track-") as tmp:
        result = asyncio.run(run(Path(tmp)))
    result["problems"] = checks(result)
    text = json.dumps(result, indent=1, sort_keys=True) + "\n"
    print(text)
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
