"""Disaggregated prefill/decode on a real vLLM (CPU build): a producer and a consumer of KV on one machine.

The CPU build has no NIXL and refuses native CPU KV offloading, but runs vLLM's ExampleConnector, which
moves KV through a shared folder: a ``kv_producer`` engine saves every prompt's KV there, a ``kv_consumer``
engine loads it instead of computing the prompt. The two engines run one after the other (the machine is
small; the folder keeps the KV between them), each with ``--kv-transfer-config``:

1. producer: the prompts, one output token each (what a P/D proxy sends a prefill instance);
2. consumer: the same prompts with full outputs (the decode instance): the prompt's KV arrives from the folder.

Each engine's final ``/metrics`` is kept in the sidecar's capture format and read with the sidecar's own
signals: which families the engine registered (``vllm:num_requests_kv_fetch_by_stage`` only on a consumer),
the connector's prefix-cache counters, the prompt tokens by source, the deferred waits, and the role the
sidecar infers. ``/metrics`` is also captured every second while each engine serves, and those captures are
diagnosed as one window at the shipped defaults (the first-token objective of ``lab.features``): a
healthy pair is ``none`` on both sides. Prints one table row per engine; docs/disaggregation.md keeps the
reference run.

    .venv/bin/python -m lab.disaggregation            # ~3 minutes: two engine starts
    .venv/bin/python -m lab.disaggregation --from DIR  # re-read the captures of a run

Not a test: it needs two engine starts of its own, beyond the real-vLLM suite's time budget.
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

from exporter.catalog import metrics as vllm
from exporter.parse import parse
from exporter.record import CAPTURE_HEADER
from exporter.snapshot import Snapshot, label_value
from lab.captures import capture_every, judge_captures
from lab.features import TTFT_THRESHOLD_S
from tests.realvllm.engine import (
    RealVLLM,
    fetch_metrics_async,
    make_text,
    one_request,
    tokens_per_word,
)

CONNECTOR = "ExampleConnector"
ROLES: dict[str, int] = {"kv_producer": 1, "kv_consumer": 48}  # role -> max_tokens per request
PROMPTS = 240  # enough for a window of scrapes on each side (tens of seconds of serving)
PROMPT_TOKENS = 256
CONCURRENCY = 4
INTERVAL_S = 1.0


def transfer_config(role: str, storage: Path) -> str:
    return json.dumps({"kv_connector": CONNECTOR, "kv_role": role,
                       "kv_connector_extra_config": {"shared_storage_path": str(storage)}})


async def _serve(engine: RealVLLM, max_tokens: int, captures: Path, role: str) -> dict[str, Any]:
    """The same PROMPTS prompts (one seed for both roles), CONCURRENCY at a time; ``/metrics`` captured
    into ``captures`` every INTERVAL_S meanwhile."""
    base_url = engine.base_url
    stop = asyncio.Event()
    scraper = asyncio.create_task(capture_every(engine.metrics_url, captures, stop, role, INTERVAL_S))
    done = failed = 0
    connector = aiohttp.TCPConnector(limit=CONCURRENCY + 2, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as session:
        ratio = await tokens_per_word(base_url, session)
        rng = random.Random("pd-prompts")
        prompts = [make_text(PROMPT_TOKENS, rng, ratio) for _ in range(PROMPTS)]
        queue = list(prompts)

        async def worker() -> None:
            nonlocal done, failed
            while queue:
                res = await one_request(session, base_url, queue.pop(0), max_tokens)
                done += res.ok
                failed += not res.ok

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        text = await fetch_metrics_async(f"{base_url}/metrics", session)
    stop.set()
    return {"completed": done, "failed": failed, "metrics": text, "captures": await scraper}


def capture(out: Path) -> None:
    """Run the producer, then the consumer, over one shared KV folder; keep each one's final /metrics."""
    storage = out / "kv-storage"
    storage.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Any] = {}
    for role, max_tokens in ROLES.items():
        extra = ["--kv-transfer-config", transfer_config(role, storage)]
        started = time.monotonic()
        try:
            with RealVLLM(extra_args=extra, max_num_batched_tokens=512, max_num_seqs=8,
                          kv_cache_memory_bytes=8 * 1024 * 1024,
                          startup_timeout_s=900.0) as engine:
                result = asyncio.run(_serve(engine, max_tokens, out / f"captures-{role}", role))
                header = f"{CAPTURE_HEADER} target={role} scraped_at={time.time()!r}\n"
                (out / f"{role}.txt").write_text(header + result.pop("metrics"))
                runs[role] = {"command": engine.command(), "startup_s": engine.startup_s, **result}
        except Exception as exc:  # noqa: BLE001 - the table records that the role did not run, and why
            runs[role] = {"error": f"{type(exc).__name__}: {exc}"[-1500:]}
        runs[role]["wall_s"] = round(time.monotonic() - started, 1)
        print(f"{role}: {runs[role]}", file=sys.stderr)
    (out / "engines.json").write_text(json.dumps(runs, indent=1))


def _family_total(snapshot: Snapshot, name: str, label: str | None = None, value: str | None = None) -> float | None:
    series = snapshot.scalars.get(name)
    if series is None:
        return None
    return sum(v for labels, v in series.items() if label is None or label_value(labels, label) == value)


def judge(role: str, captures: Path) -> dict[str, Any]:
    """The serving window's diagnosis at the shipped defaults: verdict, causes, the role the sidecar read."""
    if not any(captures.glob(f"{role}-*.txt")):
        return {"verdict": None, "causes": [], "sidecar_role": None}
    state = judge_captures(captures, role, INTERVAL_S, {"ttft": {"threshold_seconds": TTFT_THRESHOLD_S,
                                                                 "target": 0.95}})
    causes = [f"{c.id}{' (info)' if c.informational else ''}" for symptom in state.diagnosis.symptoms
              for c in symptom.causes]
    transfer = state.signals.kv_transfer if state.signals is not None else None
    role_read = None if transfer is None else "consumer" if transfer.consumer else "not a consumer"
    return {"verdict": state.diagnosis.verdict.layer, "causes": causes, "sidecar_role": role_read}


def report(role: str, path: Path) -> dict[str, Any]:
    """What one engine's final /metrics says about the KV connector, and its serving window's diagnosis."""
    if not path.exists():
        return {"role": role, "ran": False}
    snapshot = parse(path.read_text(), 0.0)
    by_source = {src: _family_total(snapshot, vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL, "source", src)
                 for src in ("local_compute", "local_cache_hit", "external_kv_transfer")}
    prompt = sum(v for v in by_source.values() if v) or None
    return {
        "role": role, "ran": True,
        "fetch_by_stage": vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE in snapshot.scalars,
        "external_queries": _family_total(snapshot, vllm.EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL),
        "external_hits": _family_total(snapshot, vllm.EXTERNAL_PREFIX_CACHE_HITS_TOTAL),
        "by_source": by_source,
        "transferred_share": (by_source["external_kv_transfer"] or 0) / prompt if prompt else None,
        "deferred": _family_total(snapshot, vllm.NUM_REQUESTS_WAITING_BY_REASON, "reason", "deferred"),
        "nixl": any(name.startswith("vllm:nixl_") for name in snapshot.scalars) or any(
            name.startswith("vllm:nixl_") for name in snapshot.histograms),
        **judge(role, path.parent / f"captures-{role}"),
    }


def table(rows: list[dict[str, Any]], engines: dict[str, Any]) -> str:
    lines = ["| engine (kv_role) | started | requests ok | `num_requests_kv_fetch_by_stage` | external prefix "
             "cache hits / queries (tokens) | prompt tokens: computed / local hit / transferred | transferred "
             "share | deferred at the end | role read | verdict (causes) |", "|---" * 10 + "|"]
    for r in rows:
        run = engines.get(r["role"], {})
        if not r["ran"]:
            error = str(run.get("error", "?")).strip().splitlines()[-1][:200]  # the log's last line says why
            lines.append(f"| {r['role']} | no: {error} | - | - | - | - | - | - | - | - |")
            continue
        src = r["by_source"]
        share = "-" if r["transferred_share"] is None else f"{r['transferred_share']:.0%}"
        verdict = "-" if r["verdict"] is None else f"`{r['verdict']}` ({', '.join(r['causes']) or 'no cause'})"
        lines.append(
            f"| {r['role']} | yes ({run.get('startup_s') or 0:.0f} s) | {run.get('completed', '?')}/{PROMPTS} | "
            f"{'registered' if r['fetch_by_stage'] else 'absent'} | "
            f"{r['external_hits'] or 0:.0f} / {r['external_queries'] or 0:.0f} | "
            f"{src['local_compute'] or 0:.0f} / {src['local_cache_hit'] or 0:.0f} / "
            f"{src['external_kv_transfer'] or 0:.0f} | {share} | {r['deferred'] or 0:.0f} | "
            f"{r['sidecar_role'] or '-'} | {verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.disaggregation", description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="re-read the captures of an earlier run")
    parser.add_argument("--out", type=Path, help="where the captures go (default: a new temporary folder)")
    args = parser.parse_args(argv)
    out = args.source or args.out or Path(tempfile.mkdtemp(prefix="disaggregation-"))
    if args.source is None:
        capture(out)
    engines = json.loads((out / "engines.json").read_text()) if (out / "engines.json").exists() else {}
    print(f"captures: {out}\n")
    print(table([report(role, out / f"{role}.txt") for role in ROLES], engines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
