"""Corrupted requests on a real vLLM: the CPU build counts requests whose logits hold NaNs
(``vllm:corrupted_requests_total``, with ``VLLM_COMPUTE_NANS_IN_LOGITS=1``), and a real Prometheus evaluating
the shipped raw-series rules (alert_rules/vllm-diag-raw-alerts.yml) raises VLLMCorruptedRequests from it.

The model is the tiny one with one word's embedding row NaN (``make_model.py --nan-word``): a prompt holding
that word computes NaN logits, every other prompt is served normally, so one engine shows both a clean
count and a corrupted one. Prometheus scrapes the engine every second; the page waits ``for: 1m``, so the
test reads its pending state, the expression true on real data, and the labels and annotations it will
page with.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.helpers import free_port

from .engine import corpus_words, make_text, one_request
from .harness import RealVLLM, vllm_venv

pytestmark = pytest.mark.realvllm

REPO = Path(__file__).resolve().parents[2]
RAW_RULES = REPO / "alert_rules" / "vllm-diag-raw-alerts.yml"
NAN_WORD = corpus_words()[7]


@pytest.fixture(scope="session")
def nan_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nan-model")
    subprocess.run([str(vllm_venv() / "bin" / "python"), str(REPO / "tests/realvllm/make_model.py"), str(out),
                    "--nan-word", NAN_WORD], check=True, capture_output=True)
    return out


def _corrupted(engine: RealVLLM) -> float:
    text = engine.fetch_metrics()
    assert "vllm:corrupted_requests_total" in text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:corrupted_requests_total"))


def _alerts(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=5) as response:
        alerts: list[dict[str, Any]] = json.load(response)["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == "VLLMCorruptedRequests"]


async def _requests(engine: RealVLLM, poisoned: bool, count: int) -> None:
    rng = random.Random(7 if poisoned else 5)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for _ in range(count):
            prompt = make_text(40, rng) + (f" {NAN_WORD} " + make_text(20, rng) if poisoned else "")
            result = await one_request(session, engine.base_url, prompt, 4)
            assert result.ok, result


def test_requests_with_nans_in_their_logits_are_counted_and_page(
        real_vllm_engines: Any, nan_model: Path, tmp_path: Path) -> None:
    engine: RealVLLM = real_vllm_engines.get(model=nan_model, env={"VLLM_COMPUTE_NANS_IN_LOGITS": "1"})
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RAW_RULES)],
        "scrape_configs": [{"job_name": "vllm", "metrics_path": "/metrics",
                            "static_configs": [{"targets": [engine.metrics_url.split("/")[2]]}]}],
    }))
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "prometheus.log").open("w")
    prometheus = subprocess.Popen(["/usr/bin/prometheus", f"--config.file={config}",
                                   f"--web.listen-address=127.0.0.1:{port}",
                                   f"--storage.tsdb.path={tmp_path / 'tsdb'}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        asyncio.run(_requests(engine, poisoned=False, count=3))
        assert _corrupted(engine) == 0  # clean prompts: no NaN, no count (the series is there, at 0)
        time.sleep(8)  # Prometheus discovers the target and scrapes the clean count first
        assert _alerts(url) == []
        asyncio.run(_requests(engine, poisoned=True, count=3))
        assert _corrupted(engine) == 3  # each poisoned request counted once
        deadline, alerts = time.monotonic() + 30, list[dict[str, Any]]()
        while time.monotonic() < deadline and not alerts:
            time.sleep(1)
            alerts = _alerts(url)
        assert alerts, (tmp_path / "prometheus.log").read_text()[-2000:]
        (alert,) = alerts
        assert alert["state"] in ("pending", "firing")
        assert alert["labels"]["severity"] == "critical" and alert["labels"]["model_name"] == "tiny"
        assert float(alert["value"]) >= 1 and "wrong answers" in alert["annotations"]["summary"]
    finally:
        os.kill(prometheus.pid, signal.SIGTERM)
        prometheus.wait(10)
        log.close()
