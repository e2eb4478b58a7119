"""`vllm-diag profile URL` against a real vLLM (CPU build): the bounded sweep runs every phase, writes its
file, and the step cost it fits describes the engine's token gaps over the sweep (exporter/advisor/profile.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from exporter.advisor.profile import PHASES, load
from exporter.catalog import metrics as vllm
from exporter.cli import main
from exporter.parse import parse
from exporter.pipeline import COUNTERS
from exporter.window import Window

from .harness import RealVLLM

pytestmark = pytest.mark.realvllm


def test_profile_sweeps_every_phase_and_fits_the_engines_steps(real_vllm: RealVLLM, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "engine.profile.json"
    window = Window(3600, COUNTERS)
    window.push(parse(real_vllm.fetch_metrics(), time.time()))
    started = time.monotonic()
    assert main(["profile", real_vllm.base_url, "--out", str(out), "--seconds", "6", "--interval", "1.5"]) == 0
    took = time.monotonic() - started
    window.push(parse(real_vllm.fetch_metrics(), time.time()))
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["format"] == 1 and data["requests"] > 0 and data["failed_requests"] == 0
    assert len(data["phases"]) == len(PHASES) and all(p["intervals"] >= 1 for p in data["phases"])
    assert took < len(PHASES) * 6 + 60  # bounded: the phases plus the requests in flight at their ends
    evidence = data["evidence"]
    # Every interval's gaps are the engine's: their mean is the engine's own mean token gap over the sweep.
    gaps = window.histogram(vllm.INTER_TOKEN_LATENCY_SECONDS)
    assert gaps is not None and gaps.mean() is not None
    assert evidence["seconds_per_step"] == pytest.approx(gaps.mean(), rel=0.25)
    # Identified with positive parts, or not, with the reason in words.
    if evidence["identified"]:
        assert evidence["fixed_seconds"] >= 0 and evidence["per_prefill_token_seconds"] > 0
        assert evidence["decode_token_weight"] > 0
    else:
        assert evidence["reason"]
    assert load(out).identified == evidence["identified"]
    assert str(out) in capsys.readouterr().out
