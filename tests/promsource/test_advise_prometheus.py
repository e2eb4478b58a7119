"""``vllm-diag advise --prometheus URL --at T``: the advisor on a window rebuilt from a real Prometheus
agrees with ``advise DIR`` on the captures of the same window (the same calibration, the same answer)."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import yaml

from exporter.promsource import backfill
from exporter.simulator import SCENARIOS, write_captures
from tests.promsource.conftest import backfill as promtool_backfill
from tests.promsource.conftest import prometheus
from tests.promsource.test_agreement import run_cli

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

INTERVAL, WINDOW = 15.0, 180.0
KEYS = ("ttft_p95_seconds", "itl_p95_seconds", "preemption_rate", "generation_tokens_per_second")


def _close(a: float | None, b: float | None, rel: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-9


def test_advise_from_prometheus_matches_captures(tmp_path: Any) -> None:
    name = "small-token-budget"
    folder = tmp_path / name
    write_captures(SCENARIOS[name], folder, WINDOW, INTERVAL)  # 12 captures: exactly one window
    start = math.floor(time.time() / 3600) * 3600 - 2 * 3600
    with (tmp_path / "captures.om").open("w") as out:
        backfill.write(out, [(at, text, {"instance": name, "job": "vllm"})
                             for at, text in backfill.folder(folder, start, INTERVAL)])
    target = yaml.safe_load((folder / "vllm-diag.yaml").read_text())["targets"][0]
    (tmp_path / "vllm-diag.yaml").write_text(yaml.safe_dump({"window_seconds": WINDOW, "targets": [target]}))
    promtool_backfill(tmp_path / "captures.om", tmp_path / "tsdb")
    at = start + WINDOW  # the last capture's time: its window holds every capture
    question = "max_num_batched_tokens=2048"
    with prometheus(tmp_path / "tsdb") as url:
        stored = run_cli("advise", "--prometheus", url, "--match", '{job="vllm"}', "--at", f"{at:.0f}",
                         "--config", str(tmp_path / "vllm-diag.yaml"), "--what-if", question)["targets"][0]
    captured = run_cli("advise", str(folder), "--window", f"{WINDOW:g}", "--what-if", question)["targets"][0]
    assert not stored.get("reason") and not captured.get("reason")
    for key in KEYS:
        assert _close(stored["observed"][key], captured["observed"][key], 0.02), key
        assert _close(stored["advice"][0]["predicted"][key], captured["advice"][0]["predicted"][key], 0.1), key
    assert stored["advice"][0]["knob"] == "max_num_batched_tokens"
