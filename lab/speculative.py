"""Speculative decoding on a real vLLM (CPU build): a healthy run and an acceptance collapse.

One engine, started with n-gram speculative decoding (``--speculative-config``), serves two phases
of the same streaming load: temperature 0 (the random-weight tiny model repeats itself, so the n-gram
drafter's proposals are mostly accepted) and temperature 1 (sampling breaks every n-gram: the drafts
are mostly rejected). Each phase's ``/metrics`` is captured every second, in the sidecar's capture
format, and each phase is then diagnosed offline at the shipped defaults, with the ITL objective set
below the per-event gaps and above the per-token ones, where a per-event judgement would call the
healthy run a stutter (B). Prints one table row per phase; docs/speculative.md keeps the reference run.

    .venv/bin/python -m lab.speculative               # ~4 minutes: engine start + 2 phases
    .venv/bin/python -m lab.speculative --from DIR     # re-diagnose the captures of a run

Not a test: the real-vLLM suite is over its time budget, and this needs its own engine start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from exporter import objectives
from exporter.config import Objective
from exporter.signals import per_token
from exporter.state import TargetState
from lab.captures import capture_every, judge_captures
from tests.realvllm.engine import RealVLLM, make_text, one_request, tokens_per_word

NUM_SPECULATIVE_TOKENS = 3
SPECULATIVE_CONFIG = {"method": "ngram", "num_speculative_tokens": NUM_SPECULATIVE_TOKENS,
                      "prompt_lookup_min": 1, "prompt_lookup_max": 4}
PHASES: dict[str, float] = {"healthy": 0.0, "collapse": 1.0}  # phase -> sampling temperature
CONCURRENCY = 4
PROMPT_TOKENS = 64
MAX_TOKENS = 96
INTERVAL_S = 1.0
ITL_THRESHOLD_S = 0.2


async def _load(base_url: str, seconds: float, temperature: float, seed: int) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    done = failed = tokens = 0
    connector = aiohttp.TCPConnector(limit=CONCURRENCY + 2, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        ratio = await tokens_per_word(base_url, session)

        async def worker(index: int) -> None:
            nonlocal done, failed, tokens
            rng = random.Random(f"spec-{seed}-{index}")
            while time.monotonic() < deadline:
                res = await one_request(session, base_url, make_text(PROMPT_TOKENS, rng, ratio), MAX_TOKENS,
                                        temperature=temperature)
                done += res.ok
                failed += not res.ok
                tokens += res.completion_tokens

        await asyncio.gather(*(worker(i) for i in range(CONCURRENCY)))
    return {"completed": done, "failed": failed, "completion_tokens": tokens}


async def _phase(vllm: RealVLLM, name: str, temperature: float, seconds: float, out: Path) -> dict[str, Any]:
    stop = asyncio.Event()
    scraper = asyncio.create_task(capture_every(vllm.metrics_url, out / name, stop, "spec", INTERVAL_S))
    load = await _load(vllm.base_url, seconds, temperature, seed=len(name))
    stop.set()
    load["captures"] = await scraper
    return load


def capture(out: Path, seconds: float) -> dict[str, Any]:
    """Start the engine, run both phases, return what the load generator saw."""
    extra = ["--speculative-config", json.dumps(SPECULATIVE_CONFIG)]
    loads: dict[str, Any] = {}
    with RealVLLM(extra_args=extra, max_num_batched_tokens=256, max_num_seqs=8) as vllm:
        for name, temperature in PHASES.items():
            loads[name] = asyncio.run(_phase(vllm, name, temperature, seconds, out))
            print(f"{name}: {loads[name]}", file=sys.stderr)
        (out / "engine.json").write_text(json.dumps({"command": vllm.command(), "loads": loads}, indent=1))
    return loads


def diagnose(directory: Path, itl_threshold: float) -> TargetState:
    """The phase's captures judged as one window at the shipped defaults (ITL objective: ``itl_threshold``)."""
    return judge_captures(directory, "spec", INTERVAL_S, {"itl": {"threshold_seconds": itl_threshold, "target": 0.99}})


def report(name: str, state: TargetState) -> dict[str, Any]:
    """One table row: what speculation did, the ITL objective per event and per token, the verdict."""
    assert state.signals is not None
    spec, latency = state.signals.speculative, state.signals.latency
    itl = state.objectives["itl"]
    per_event = None
    if latency.itl_histogram is not None and spec.itl_scale is not None:
        raw = per_token(latency.itl_histogram, 1.0 / spec.itl_scale)  # back to vLLM's per-event gaps
        assert raw is not None
        per_event = objectives.judge("itl", itl_objective(itl), raw, 1.0)
    causes = [f"{c.id}{' (info)' if c.informational else ''}"
              for symptom in state.diagnosis.symptoms for c in symptom.causes]
    return {
        "phase": name, "acceptance": spec.acceptance_rate, "mean_accepted_length": spec.mean_accepted_length,
        "per_position": spec.acceptance_per_position, "tokens_per_event": spec.tokens_per_event,
        "event_gap_mean_s": spec.event_gap_mean, "itl_per_token_p99_s": latency.quantile("itl", 0.99),
        "itl_bad_share_per_event": per_event.bad_share if per_event is not None else itl.bad_share,
        "itl_bad_share_per_token": itl.bad_share if itl.tokens_per_event is not None else None,
        "itl_met": itl.met, "verdict": state.diagnosis.verdict.layer, "causes": causes,
    }


def itl_objective(status: objectives.ObjectiveStatus) -> Objective:
    return Objective(threshold_seconds=status.threshold_seconds, target=status.target)


def _fmt(value: Any, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def table(rows: list[dict[str, Any]], itl_threshold: float) -> str:
    """The markdown table docs/speculative.md keeps."""
    lines = [
        f"| phase | acceptance | mean accepted length | accepted per position | tokens per output event | "
        f"mean event gap | ITL share over {itl_threshold * 1000:.0f} ms, per event | per token | verdict | causes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        positions = ", ".join(f"{p:.2f}" for p in r["per_position"]) or "-"
        lines.append(
            f"| {r['phase']} | {_fmt(r['acceptance'], '{:.0%}')} | {_fmt(r['mean_accepted_length'], '{:.2f}')} | "
            f"{positions} | {_fmt(r['tokens_per_event'], '{:.2f}')} | "
            f"{_fmt(r['event_gap_mean_s'] and r['event_gap_mean_s'] * 1000, '{:.0f} ms')} | "
            f"{_fmt(r['itl_bad_share_per_event'], '{:.1%}')} | {_fmt(r['itl_bad_share_per_token'], '{:.1%}')} | "
            f"`{r['verdict']}` | {', '.join(r['causes']) or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.speculative", description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="re-diagnose the captures of an earlier run")
    parser.add_argument("--out", type=Path, help="where the captures go (default: a new temporary folder)")
    parser.add_argument("--seconds", type=float, default=75.0, help="load per phase (default 75)")
    parser.add_argument("--itl-threshold", type=float, default=ITL_THRESHOLD_S,
                        help=f"ITL objective threshold, a bucket edge of vLLM's histogram (default {ITL_THRESHOLD_S})")
    args = parser.parse_args(argv)
    out = args.source or args.out or Path(tempfile.mkdtemp(prefix="speculative-"))
    if args.source is None:
        capture(out, args.seconds)
    print(f"captures: {out}\n")
    print(table([report(name, diagnose(out / name, args.itl_threshold)) for name in PHASES], args.itl_threshold))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
