"""The engine's own witnesses on a real vLLM (CPU build): block lifetimes and reuse gaps, steps against the token
budget, and compute-bound long prompts (issue 50).

Each workload starts its own engine (the harness's RealVLLM), drives a short closed-loop load, captures /metrics
every ``INTERVAL_S`` in the sidecar's capture format and judges the captures as one window; ``--save`` writes
them gzip'd under tests/fixtures/vllm-0.32-witnesses/<workload>/ with a vllm-diag.yaml (the engine facts and
objectives), so ``vllm-diag diagnose DIR`` and the witness tests replay the same data.

    .venv/bin/python -m lab.engine_witnesses kv-thrash kv-template --save
    .venv/bin/python -m lab.engine_witnesses --list
    .venv/bin/python -m lab.engine_witnesses --table     # docs/data/witnesses.json from the captures

The compute-heavier model is tests/realvllm/make_model.py ``--wide`` (VLLM_DIAG_WIDE_MODEL_DIR, made on first
use). Minutes, not tens of minutes: every workload runs ~45-60 s of load after a ~30 s start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from exporter.cli import main as cli_main
from lab.captures import capture_every
from tests.realvllm.engine import (
    REPO,
    RealVLLM,
    RequestResult,
    make_text,
    one_request,
    tokens_per_word,
    vllm_venv,
)

INTERVAL_S = 2.0
FIXTURES = REPO / "tests" / "fixtures" / "vllm-0.32-witnesses"
KV_SAMPLE = ["--kv-cache-metrics", "--kv-cache-metrics-sample", "1.0"]
MIB = 1024 * 1024


def wide_model_dir() -> Path:
    return Path(os.environ.get("VLLM_DIAG_WIDE_MODEL_DIR") or Path.home() / ".cache/vllm-diag/wide-model")


def ensure_wide_model() -> Path:
    out = wide_model_dir()
    if not (out / "model.safetensors").is_file():
        subprocess.run([str(vllm_venv() / "bin" / "python"), str(REPO / "tests/realvllm/make_model.py"), str(out),
                        "--wide"], check=True)
    return out


PromptFn = Callable[[int, random.Random, float], str]


@dataclass(frozen=True)
class Workload:
    """One engine and one closed-loop load on it."""

    about: str
    prompt: PromptFn  # (request number, rng, tokens per word) -> prompt text
    clients: int
    max_tokens: int
    seconds: float
    slo: dict[str, float]
    wide: bool = True
    engine: dict[str, Any] = field(default_factory=dict)  # RealVLLM keyword arguments


def _unique(tokens: int) -> PromptFn:
    return lambda i, rng, ratio: make_text(tokens, rng, ratio)


# K documents of DOC tokens; each request one of them, chosen at random, and a short question of its own.
DOCS, DOC_TOKENS = 32, 448
_DOC_TEXT = [make_text(DOC_TOKENS, random.Random(1000 + k)) for k in range(DOCS)]


def _documents(i: int, rng: random.Random, ratio: float) -> str:
    return _DOC_TEXT[rng.randrange(DOCS)] + make_text(16, rng, ratio)


# A template whose head is stable (two blocks), then a field that changes on every request (a timestamp, a
# request id), then the same long body: the body never repeats as a prefix.
_HEAD, _BODY = make_text(64, random.Random(7)), make_text(384, random.Random(8))


def _changing_template(i: int, rng: random.Random, ratio: float) -> str:
    return _HEAD + f" {time.time_ns()} {i}" + _BODY + make_text(16, rng, ratio)


COMPUTE_SLO = {"ttft_p95_seconds": 0.5, "itl_p95_seconds": 0.1}
KV_ENGINE = {"kv_cache_memory_bytes": 3 * MIB, "max_num_batched_tokens": 512, "max_num_seqs": 8,
             "extra_args": KV_SAMPLE}

WORKLOADS: dict[str, Workload] = {
    "long-512": Workload("8 clients, ~900-token unique prompts, budget 512", _unique(900), 8, 48, 60, COMPUTE_SLO,
                         engine={"max_num_batched_tokens": 512, "kv_cache_memory_bytes": 16 * MIB}),
    "long-128": Workload("8 clients, ~900-token unique prompts, budget 128", _unique(900), 8, 48, 60, COMPUTE_SLO,
                         engine={"max_num_batched_tokens": 128, "kv_cache_memory_bytes": 16 * MIB}),
    "long-uniform": Workload("12 clients, ~900-token unique prompts, 8 output tokens each, budget 512: prefill in "
                             "every step", _unique(900), 12, 8, 60, COMPUTE_SLO,
                             engine={"max_num_batched_tokens": 512, "kv_cache_memory_bytes": 16 * MIB}),
    "healthy": Workload("2 clients, ~100-token prompts, budget 512", _unique(100), 2, 48, 45, COMPUTE_SLO,
                        engine={"max_num_batched_tokens": 512, "kv_cache_memory_bytes": 16 * MIB}),
    "queue-small-steps": Workload("8 clients on 2 sequences, ~40-token prompts, budget 512", _unique(40), 8, 48,
                                  45, COMPUTE_SLO,
                                  engine={"max_num_batched_tokens": 512, "max_num_seqs": 2,
                                          "kv_cache_memory_bytes": 16 * MIB}),
    "kv-thrash": Workload(f"4 clients, one of {DOCS} {DOC_TOKENS}-token documents at random (a working set of "
                          f"{DOCS * DOC_TOKENS} tokens over a 3072-token pool) + 16 own tokens", _documents, 4, 16,
                          60, COMPUTE_SLO, engine=KV_ENGINE),
    "kv-template": Workload("4 clients, a 64-token stable head, a changing field, the same 384-token body + 16 own "
                            "tokens (never repeats past the head)", _changing_template, 4, 16, 60, COMPUTE_SLO,
                            engine=KV_ENGINE),
}


async def _client(base_url: str, w: Workload, seed: int, stop_at: float, counter: list[int],
                  results: list[RequestResult]) -> None:
    rng = random.Random(seed)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        ratio = await tokens_per_word(base_url, session)
        while time.monotonic() < stop_at:
            counter[0] += 1
            results.append(await one_request(session, base_url, w.prompt(counter[0], rng, ratio), w.max_tokens))


async def _drive(engine: RealVLLM, w: Workload, out: Path, name: str) -> list[RequestResult]:
    stop = asyncio.Event()
    capture = asyncio.create_task(capture_every(engine.metrics_url, out, stop, name, INTERVAL_S))
    await asyncio.sleep(INTERVAL_S)  # one idle scrape first: the window starts before the load
    results: list[RequestResult] = []
    counter = [0]
    stop_at = time.monotonic() + w.seconds
    await asyncio.gather(*(_client(engine.base_url, w, 100 + c, stop_at, counter, results)
                           for c in range(w.clients)))
    stop.set()
    await capture
    return results


def run(name: str, save: bool, out: Path | None = None) -> dict[str, Any]:
    w = WORKLOADS[name]
    model = ensure_wide_model() if w.wide else None
    raw = Path(tempfile.mkdtemp(prefix=f"witness-{name}-"))
    with RealVLLM(model=model, **w.engine) as engine:
        t0 = time.monotonic()
        results = asyncio.run(_drive(engine, w, raw, name))
        elapsed = time.monotonic() - t0
        facts = engine.engine_facts()
    dest = (out or FIXTURES) / name if save or out else raw / "fixture"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for path in sorted(raw.glob(f"{name}-*.txt")):
        with gzip.open(dest / (path.name + ".gz"), "wt", compresslevel=9) as fh:
            fh.write(trimmed(path.read_text()))
    (dest / "vllm-diag.yaml").write_text(json.dumps({
        "slo": w.slo, "targets": [{"name": name, "url": "http://127.0.0.1:1/metrics", "engine": facts}]},
        indent=2) + "\n")
    doc = diagnose(dest)
    shutil.rmtree(raw, ignore_errors=True)
    ok = [r for r in results if r.ok]
    ttfts = sorted(r.ttft_s for r in ok if r.ttft_s is not None)
    sig = doc.get("signals", {})
    return {"workload": name, "about": w.about, "requests": len(results), "ok": len(ok), "seconds": round(elapsed),
            "client_ttft_p95": round(ttfts[int(0.95 * (len(ttfts) - 1))], 3) if ttfts else None,
            "verdict": doc.get("verdict", {}).get("layer"),
            "causes": [(c["id"], c["strength"], c["informational"], c["evidence"]) for s in doc.get("symptoms", [])
                       for c in s["causes"]],
            "signals": {k: sig.get(k) for k in sig if any(word in k for word in (
                "ttft", "itl", "prefill", "queue", "prompt", "step", "prefix", "kv_cache_usage", "preempt",
                "block", "budget", "render"))}}


def diagnose(folder: Path) -> dict[str, Any]:
    """``vllm-diag diagnose FOLDER --format json``, in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if cli_main(["diagnose", str(folder), "--format", "json"]) != 0:
            raise RuntimeError(f"vllm-diag diagnose {folder} failed")
    doc: dict[str, Any] = json.loads(out.getvalue())["targets"][0]
    return doc


TABLE_FILE = REPO / "docs" / "data" / "witnesses.json"
# What a cause's evidence says when a witness took part in it (exporter/diagnosis/witnesses.py's wording).
WITNESS_WORDS = ("sampled KV blocks evicted", "prefills completed above max_num_batched_tokens",
                 "of the steps carry a prefill chunk", "the budget never bound", "the steps are compute",
                 "the block witness")


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def witness_text(doc: dict[str, Any], budget: int | None) -> str:
    """The witnesses' numbers over the judged window, from the signals the sidecar publishes."""
    sig, parts = doc["signals"], []
    if sig.get("kv_block_evictions"):
        gaps = sig.get("kv_block_reuse_gaps_per_eviction") or 0
        life, hit = sig.get("kv_block_hit_life_share") or 0, sig.get("prefix_cache_hit_ratio") or 0
        parts.append(f"{sig['kv_block_evictions']:.0f} sampled evictions, lifetime "
                     f"{_ms(sig.get('kv_block_lifetime_mean_seconds'))}, idle "
                     f"{_ms(sig.get('kv_block_idle_mean_seconds'))}: {100 * life:.0f} % of their lives before a hit, "
                     f"against a {100 * hit:.0f} % hit ratio; "
                     + (f"{gaps:.2f} reuse gaps per evicted block" if gaps else "no reuse gap"))
    carried, p99 = sig.get("prefill_tokens_per_step"), sig.get("tokens_per_step_p99")
    if carried is not None and budget:
        parts.append(f"{carried:.0f} prompt tokens per average step ({100 * carried / budget:.0f} % of the budget "
                     f"{budget}), largest steps (p99) {p99:.0f} tokens")
    return "; ".join(parts) or "—"


def row(name: str, folder: Path) -> str:
    """One line of the table: the workload judged from its captures by ``vllm-diag diagnose``."""
    doc = diagnose(folder)
    facts = json.loads((folder / "vllm-diag.yaml").read_text())["targets"][0]["engine"]
    sig = doc["signals"]
    causes = [c for s in doc.get("symptoms", []) for c in s["causes"]]
    counting = [f"{c['id']} ({c['layer']})" for c in causes if not c["informational"]]
    info = [c["id"] for c in causes if c["informational"]]
    quoted = [c["id"] for c in causes if any(w in e for e in c["evidence"] for w in WITNESS_WORDS)]
    verdict = doc["verdict"]["layer"] + (": " + ", ".join(counting) if counting else "")
    if info:
        verdict += f" (information: {', '.join(info)})"
    return (f"| {name} | {WORKLOADS[name].about} | {_ms(sig.get('ttft_p95_seconds'))} | "
            f"{_ms(sig.get('itl_p95_seconds'))} | {witness_text(doc, facts.get('max_num_batched_tokens'))} | "
            f"{verdict} | {', '.join(quoted) or '—'} |")


def table(root: Path) -> dict[str, Any]:
    """docs/data/witnesses.json: every workload captured under ``root``, judged now."""
    names = [n for n in WORKLOADS if (root / n / "vllm-diag.yaml").is_file()]
    lines = ["| workload | load | TTFT p95 | ITL p95 | witnesses over the window | verdict: causes (layer) | "
             "causes quoting a witness |", "|---|---|---|---|---|---|---|", *(row(n, root / n) for n in names)]
    return {"lines": lines, "source": "python -m lab.engine_witnesses --table (the captures in "
                                      f"{root.relative_to(REPO) if root.is_relative_to(REPO) else root}, vLLM "
                                      "0.32.0 CPU build, the --wide model), judged by vllm-diag diagnose DIR"}


def trimmed(text: str) -> str:
    """A capture without what nothing reads (python_* families, the *_created twins): a smaller fixture."""
    keep = []
    for line in text.splitlines():
        parts = line.split()
        name = parts[2] if line.startswith("# ") and len(parts) > 2 else line.split("{")[0].split(" ")[0]
        if name.startswith("python_") or name.endswith("_created"):
            continue
        keep.append(line)
    return "\n".join(keep) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.engine_witnesses", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*")
    parser.add_argument("--save", action="store_true", help=f"write the captures under {FIXTURES}")
    parser.add_argument("--out", type=Path, help="write the captures under OUT/<workload>/ instead (a fresh run to "
                        "compare with the fixtures)")
    parser.add_argument("--table", action="store_true", help=f"judge the captures under {FIXTURES} (or --out) "
                        f"and write {TABLE_FILE.relative_to(REPO)}; then `vllm-diag render docs`")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.table and not args.workloads:
        TABLE_FILE.write_text(json.dumps(table(args.out or FIXTURES), indent=1, ensure_ascii=False) + "\n",
                              encoding="utf-8")
        return 0
    if args.list or not args.workloads:
        for name, w in WORKLOADS.items():
            print(f"{name}: {w.about}")
        return 0
    unknown = [n for n in args.workloads if n not in WORKLOADS]
    if unknown:
        print(f"unknown workload(s): {', '.join(unknown)}; --list names them", file=sys.stderr)
        return 2
    for name in args.workloads:
        print(json.dumps(run(name, args.save, args.out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
