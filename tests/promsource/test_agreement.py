"""Acceptance: ``diagnose --prometheus`` agrees with ``diagnose FILES`` on the same captures.

Every simulated scenario's captures (``simulate --out``, the simulator's own times) are
backfilled into a real Prometheus 2.42 with ``promtool tsdb create-blocks-from openmetrics``,
one ``instance`` per scenario. ``vllm-diag diagnose --prometheus ... --from --to --step`` then
judges every scenario at each step, and ``vllm-diag diagnose FILES`` judges the captures of the
same window at the same steps. The verdicts must agree in >= 95 % of the steps and the core
signals within 2 %. Both run as commands (``exporter.cli.main`` in this process).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import main
from exporter.promsource import backfill
from exporter.simulator import SCENARIOS
from tests.promsource.conftest import backfill as promtool_backfill
from tests.promsource.conftest import prometheus
from tests.scenario_captures import shared_captures

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

INTERVAL = 15.0
DURATION = 420.0  # 28 captures: a full 180 s window, then four steps a minute apart
WINDOW = 180.0
STEP = 60.0
CORE = ("preemption_rate", "prefix_cache_hit_ratio", "kv_cache_usage", "kv_cache_usage_max", "kv_cache_usage_mean",
        "ttft_p95_seconds", "itl_p95_seconds", "e2e_p95_seconds", "requests_per_second",
        "generation_tokens_per_second", "prompt_tokens_per_second", "running_mean", "waiting_mean")


def run_cli(*argv: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--format", "json"])
    assert code == 0, f"vllm-diag {' '.join(argv)} exited {code}"
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every scenario's captures, the config with their engine facts, and the start time used."""
    root = tmp_path_factory.mktemp("agreement")
    folders: dict[str, Path] = {}
    # Recent, hour-aligned times: inside Prometheus' retention, and readable in the report.
    start = math.floor(time.time() / 3600) * 3600 - 3 * 3600
    targets = []
    with (root / "captures.om").open("w") as out:
        loaded_captures = []
        for name in SCENARIOS:
            folder = shared_captures(tmp_path_factory, name, DURATION, INTERVAL)  # the scenario suite's too
            folders[name] = folder
            loaded_captures += [(at, text, {"instance": name, "job": "vllm"})
                                for at, text in backfill.folder(folder, start, INTERVAL)]
            facts = yaml.safe_load((folder / "vllm-diag.yaml").read_text())["targets"][0]
            targets.append(facts)
        loaded_captures.sort(key=lambda c: c[0])
        backfill.write(out, loaded_captures)
    (root / "vllm-diag.yaml").write_text(yaml.safe_dump({"window_seconds": WINDOW, "targets": targets}))
    storage = root / "tsdb"
    promtool_backfill(root / "captures.om", storage)
    return {"root": root, "start": start, "storage": storage, "folders": folders}


def captures_judged(folder: Path, config: Path, steps: int) -> list[dict[str, Any]]:
    """``diagnose FILES`` on the captures of each step's window (the capture at the step and 180 s before it)."""
    files = sorted(folder.glob("capture-*.txt"))
    per_window = int(WINDOW / INTERVAL)
    out = []
    for step in range(steps):
        last = per_window + int(step * STEP / INTERVAL)
        window = files[last - per_window:last + 1]  # one capture at the horizon, as the live window keeps
        doc = run_cli("diagnose", *map(str, window), "--interval", f"{INTERVAL:g}", "--window", f"{WINDOW:g}",
                      "--config", str(config))
        out.append(doc["targets"][0])
    return out


def test_prometheus_agrees_with_captures(loaded: dict[str, Any]) -> None:
    root, start = loaded["root"], loaded["start"]
    # The first step with a full window: the capture 180 s after the first one.
    first = start + INTERVAL + WINDOW
    last = start + DURATION
    steps = int((last - first) // STEP) + 1
    with prometheus(loaded["storage"]) as url:
        began = time.perf_counter()
        doc = run_cli("diagnose", "--prometheus", url, "--match", '{job="vllm"}', "--from", f"{first:.0f}",
                      "--to", f"{last:.0f}", "--step", f"{STEP:g}s", "--config", str(root / "vllm-diag.yaml"))
        took = time.perf_counter() - began
    by_target = {t["target"]: t for t in doc["targets"]}
    assert sorted(by_target) == sorted(SCENARIOS), "every scenario is a target of its own"
    assert doc["source"]["warnings"] == []

    agree = total = 0
    disagreements: list[str] = []
    signal_errors: list[str] = []
    for name in SCENARIOS:
        stored = by_target[name]["steps"]
        assert len(stored) == steps
        folder = loaded["folders"][name]
        reference = captures_judged(folder, folder / "vllm-diag.yaml", steps)
        for at, (p, c) in enumerate(zip(stored, reference, strict=True)):
            total += 1
            same = p["verdict"] == c["verdict"]["layer"] and p["state"] == c["state"]
            agree += same
            if not same:
                disagreements.append(f"{name} step {at}: prometheus {p['verdict']} vs captures {c['verdict']['layer']}")
            for key in CORE:
                a, b = p["signals"].get(key), c["signals"].get(key)
                if a is None or b is None:
                    if (a is None) != (b is None):
                        signal_errors.append(f"{name} step {at} {key}: {a} vs {b}")
                    continue
                if abs(a - b) > 0.02 * max(abs(a), abs(b)) + 1e-9:
                    signal_errors.append(f"{name} step {at} {key}: {a:.6g} vs {b:.6g}")
    print(f"\nagreement: {agree}/{total} steps over {len(SCENARIOS)} scenarios; diagnose --prometheus took "
          f"{took:.1f} s, {doc['source']['queries']} queries, {doc['source']['bytes_read']} bytes")
    assert agree / total >= 0.95, "\n".join(disagreements[:20])
    assert not signal_errors, "\n".join(signal_errors[:20])
    # Not a vacuous agreement: the scenarios reach several different verdicts.
    verdicts = {s["verdict"] for t in doc["targets"] for s in t["steps"]}
    assert {"kv_cache", "none"} <= verdicts and len(verdicts) >= 4, verdicts
