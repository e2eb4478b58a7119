"""LoRA adapter slots and data-parallel engines on a real vLLM (CPU build), diagnosed at the defaults.

Each run starts one engine, drives a streaming load while capturing ``/metrics`` every second in the
sidecar's capture format, and diagnoses the captures as one window at the shipped defaults (the
first-token objective set with ``--ttft-threshold``, a bucket edge of vLLM's histogram):

* ``lora``: two tiny LoRA adapters made here (PEFT layout: ``adapter_config.json`` and an
  ``adapter_model.safetensors`` written without torch), served with ``--enable-lora --max-loras 1``;
  requests alternate between the adapters, so one adapter's requests wait for the slot (cause A6).
* ``lora-fit``: the same with ``--max-loras 2``: both adapters fit one batch (no A6).
* ``dp``: ``--data-parallel-size 2``, steady load: the per-engine signals and the outlier finding (G2
  must not fire on two alike engines).

``--check`` only starts a LoRA engine, sends one request per adapter, and checks that
``vllm:lora_requests_info`` names them (the engine start: minutes on a busy machine). Sleep mode is
refused by the CPU build (``is_sleep_mode_available``: CUDA, ROCm and XPU only), so it is judged only in
the simulator.

    .venv/bin/python -m lab.features --live lora          # ~3 minutes: engine start + load
    .venv/bin/python -m lab.features --live lora-fit
    .venv/bin/python -m lab.features --live dp
    .venv/bin/python -m lab.features --check              # does a LoRA engine start and report?
    .venv/bin/python -m lab.features --from DIR --live lora   # re-diagnose a run's captures

Not a test: each run needs its own engine start, which the suite's time budget has no room for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import struct
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import aiohttp

from exporter.catalog import metrics as vllm
from exporter.parse import parse
from exporter.state import TargetState
from lab.captures import capture_every, judge_captures
from tests.realvllm.engine import (
    MODEL_NAME,
    RealVLLM,
    make_text,
    model_dir,
    one_request,
    tokens_per_word,
)

ADAPTERS = ("tenant-a", "tenant-b")
LORA_RANK = 8
TARGET_MODULES = ("q_proj", "v_proj")
INTERVAL_S = 1.0
PROMPT_TOKENS = 64
MAX_TOKENS = 96
TTFT_THRESHOLD_S = 1.0
STARTUP_TIMEOUT_S = 900.0  # a shared 2-core machine under load starts vLLM in minutes, not seconds
# Per run: the engine arguments beyond the harness's, the requests' models, the concurrent streams.
RUNS: dict[str, dict[str, Any]] = {
    "lora": {"lora": 1, "concurrency": 4},
    "lora-fit": {"lora": 2, "concurrency": 4},
    "dp": {"dp": 2, "concurrency": 4},
}


# -- adapters -------------------------------------------------------------------------------------
def _safetensors(tensors: dict[str, tuple[tuple[int, ...], array]]) -> bytes:
    """The safetensors layout: an 8-byte little-endian header length, a JSON header, the raw F32 data."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (shape, values) in tensors.items():
        size = len(values) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    body = b"".join(values.tobytes() for _, values in tensors.values())
    return struct.pack("<Q", len(raw)) + raw + body


def make_adapter(out: Path, seed: int) -> Path:
    """A rank-8 LoRA adapter on q_proj and v_proj of every layer of the tiny model (small random weights)."""
    config = json.loads((model_dir() / "config.json").read_text())
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    outputs = {"q_proj": config["num_attention_heads"] * head_dim, "v_proj": config["num_key_value_heads"] * head_dim}
    rng = random.Random(seed)
    tensors: dict[str, tuple[tuple[int, ...], array]] = {}
    for layer in range(layers):
        for module in TARGET_MODULES:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = ((LORA_RANK, hidden), array(
                "f", (rng.gauss(0, 0.02) for _ in range(LORA_RANK * hidden))))
            tensors[f"{prefix}.lora_B.weight"] = ((outputs[module], LORA_RANK), array(
                "f", (rng.gauss(0, 0.02) for _ in range(outputs[module] * LORA_RANK))))
    out.mkdir(parents=True, exist_ok=True)
    (out / "adapter_model.safetensors").write_bytes(_safetensors(tensors))
    (out / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": LORA_RANK, "lora_alpha": 2 * LORA_RANK,
        "lora_dropout": 0.0, "target_modules": list(TARGET_MODULES), "bias": "none", "fan_in_fan_out": False,
        "base_model_name_or_path": str(model_dir()), "modules_to_save": None, "use_rslora": False, "use_dora": False,
    }, indent=1))
    return out


def engine_args(run: str, workdir: Path) -> list[str]:
    spec = RUNS[run]
    if "lora" in spec:
        modules = [f"{name}={make_adapter(workdir / 'adapters' / name, i)}" for i, name in enumerate(ADAPTERS)]
        return ["--enable-lora", "--max-loras", str(spec["lora"]), "--max-lora-rank", str(LORA_RANK),
                "--lora-modules", *modules]
    return ["--data-parallel-size", str(spec["dp"])]


# -- load and captures ----------------------------------------------------------------------------
async def _load(base_url: str, seconds: float, concurrency: int, models: tuple[str, ...]) -> dict[str, Any]:
    """``concurrency`` streams for ``seconds``; stream i names ``models[i % len(models)]``."""
    deadline = time.monotonic() + seconds
    done = failed = 0
    errors: list[str] = []
    connector = aiohttp.TCPConnector(limit=concurrency + 2, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=180)) as session:
        ratio = await tokens_per_word(base_url, session)

        async def worker(index: int) -> None:
            nonlocal done, failed
            rng = random.Random(f"feature-{index}")
            while time.monotonic() < deadline:
                res = await one_request(session, base_url, make_text(PROMPT_TOKENS, rng, ratio), MAX_TOKENS,
                                        model=models[index % len(models)])
                done += res.ok
                failed += not res.ok
                if res.error and len(errors) < 3:
                    errors.append(res.error)

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return {"completed": done, "failed": failed, "errors": errors}


async def _drive(vllm: RealVLLM, run: str, seconds: float, out: Path) -> dict[str, Any]:
    stop = asyncio.Event()
    scraper = asyncio.create_task(capture_every(vllm.metrics_url, out, stop, "feature", INTERVAL_S))
    models = ADAPTERS if "lora" in RUNS[run] else (MODEL_NAME,)
    load = await _load(vllm.base_url, seconds, RUNS[run]["concurrency"], models)
    stop.set()
    load["captures"] = await scraper
    return load


def capture(run: str, out: Path, seconds: float) -> dict[str, Any]:
    """Start the engine for ``run``, drive the load, keep the captures in ``out``."""
    with RealVLLM(extra_args=engine_args(run, out), max_num_batched_tokens=256, max_num_seqs=8,
                  startup_timeout_s=STARTUP_TIMEOUT_S) as server:
        load = asyncio.run(_drive(server, run, seconds, out / "captures"))
        (out / "engine.json").write_text(json.dumps({"command": server.command(), "load": load}, indent=1))
    print(f"{run}: {load}", file=sys.stderr)
    return load


# -- diagnosis ------------------------------------------------------------------------------------
def diagnose(directory: Path, ttft_threshold: float) -> TargetState:
    """The captures judged as one window at the shipped defaults, the TTFT objective at ``ttft_threshold``."""
    return judge_captures(directory, "feature", INTERVAL_S,
                          {"ttft": {"threshold_seconds": ttft_threshold, "target": 0.95}})


def report(run: str, state: TargetState) -> dict[str, Any]:
    assert state.signals is not None
    s = state.signals
    causes = [f"{c.id}{' (info)' if c.informational else ''}" for symptom in state.diagnosis.symptoms
              for c in symptom.causes]
    return {
        "run": run, "state": state.status, "verdict": state.diagnosis.verdict.layer, "causes": causes,
        "ttft_p95_s": s.latency.quantile("ttft", 0.95), "ttft_met": state.objectives["ttft"].met,
        "deferred_fraction": s.scheduler.deferred_fraction, "lora_max": s.lora.max_adapters,
        "lora_seen": s.lora.adapters_seen, "engines": s.engines.count, "outlier": s.engines.outlier,
        "load_ratio": s.engines.load_ratio, "latency_ratio": s.engines.latency_ratio,
    }


def _fmt(value: Any, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def table(rows: list[dict[str, Any]], ttft_threshold: float) -> str:
    """The markdown table docs/features.md keeps."""
    lines = [f"| run | TTFT p95 | TTFT objective ({ttft_threshold:g} s, 95 %) | deferred waits | adapters seen / "
             "slots | engines | outlier (load, latency ratio) | verdict | causes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        outlier = (f"{r['outlier']} ({r['load_ratio']:.2f}x, {r['latency_ratio']:.2f}x)"
                   if r["outlier"] is not None and r["load_ratio"] is not None and r["latency_ratio"] is not None
                   else "-")
        lines.append(
            f"| {r['run']} | {_fmt(r['ttft_p95_s'], '{:.2f} s')} | {'met' if r['ttft_met'] else 'missed'} | "
            f"{_fmt(r['deferred_fraction'], '{:.0%}')} | {_fmt(r['lora_seen'], '{:.0f}')} / "
            f"{_fmt(r['lora_max'], '{:.0f}')} | {_fmt(r['engines'], '{:.0f}')} | {outlier} | `{r['verdict']}` | "
            f"{', '.join(r['causes']) or '-'} |")
    return "\n".join(lines)


def check(out: Path) -> int:
    """Start a LoRA engine, one request per adapter, and read lora_requests_info back."""
    async def requests(base_url: str) -> list[str]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            results = [await one_request(session, base_url, "hello " * 8, 8, model=name) for name in ADAPTERS]
        return [r.error or "ok" for r in results]

    with RealVLLM(extra_args=engine_args("lora", out), startup_timeout_s=STARTUP_TIMEOUT_S) as server:
        answers = asyncio.run(requests(server.base_url))
        text = server.fetch_metrics()
        (out / "snapshot-lora.txt").write_text(text)  # kept: a real exposition with the LoRA family
        snapshot = parse(text, time.time())
    series = snapshot.scalars.get(vllm.LORA_REQUESTS_INFO, {})
    names = sorted({dict(labels).get("running_lora_adapters", "") for labels in series})
    print(f"startup {server.startup_s:.0f} s; requests per adapter: {answers}; "
          f"{vllm.LORA_REQUESTS_INFO} series running_lora_adapters: {names}")
    return 0 if all(a == "ok" for a in answers) and series else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.features", description=__doc__.split("\n")[0])
    parser.add_argument("--live", choices=sorted(RUNS), action="append", help="run this feature (repeatable)")
    parser.add_argument("--check", action="store_true", help="only check that a LoRA engine starts and reports")
    parser.add_argument("--from", dest="source", type=Path, help="re-diagnose the captures of an earlier run")
    parser.add_argument("--out", type=Path, help="where the adapters and captures go (default: a temporary folder)")
    parser.add_argument("--seconds", type=float, default=90.0, help="load per run (default 90)")
    parser.add_argument("--ttft-threshold", type=float, default=TTFT_THRESHOLD_S,
                        help=f"TTFT objective threshold, a bucket edge (default {TTFT_THRESHOLD_S})")
    args = parser.parse_args(argv)
    out = args.source or args.out or Path(tempfile.mkdtemp(prefix="features-"))
    if args.check:
        return check(out)
    runs = args.live or []
    if not runs:
        parser.error("name a run with --live (or --check)")
    rows = []
    for run in runs:
        folder = out / run if len(runs) > 1 or args.source is None else out
        if args.source is None:
            capture(run, folder, args.seconds)
        rows.append(report(run, diagnose(folder / "captures", args.ttft_threshold)))
    print(f"captures: {out}\n")
    print(table(rows, args.ttft_threshold))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
