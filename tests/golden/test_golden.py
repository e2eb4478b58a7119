"""Golden files: the exact ``/metrics`` and JSON the sidecar publishes for a few scenarios.

Each scenario is replayed (seed 0, 15 s scrapes, the shipped window), its state published by the
sidecar (``Sidecar.publish``) and what its ``/metrics`` serves (``Sidecar.metrics``: the ``vllm_diag_*``
families, then the process metrics, which measure this process and are left out) and its JSON are
compared byte for byte with ``tests/golden/<scenario>.prom`` and ``.json``; the exposition is also
checked by the real ``promtool check metrics``. A change to a name, a label, a help text or a
number shows up here as a diff to review. The files change only on request::

    .venv/bin/python -m pytest tests/golden --update-golden

Values that measure this machine rather than the diagnosis (scrape and parse durations) are
replaced by a placeholder before comparing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from exporter.config import Settings
from exporter.publish import document
from exporter.publish.exported import EXPORTED
from exporter.server import Sidecar
from exporter.state import TargetState
from tests.judged import judge_scenario

GOLDEN = Path(__file__).resolve().parent
# One scenario per verdict family: healthy, a KV-cache storm, CPU starvation, a scheduler stutter; and a
# healthy speculative-decoding run (its ITL objective judged per token).
SCENARIOS_UNDER_TEST = ("healthy", "preemption-storm", "cpu-starved", "itl-stutter", "speculative-healthy",
                        "pd-decode-slow-transfer")
DURATION, INTERVAL, SEED = 300.0, 15.0, 0
MEASURED = "<measured>"
# Families whose value is a wall-clock measurement of this run.
MEASURED_FAMILIES = ("vllm_diag_scrape_duration_seconds",)
MEASURED_KEYS = frozenset({"scrape_duration_seconds", "duration_seconds"})


def published_state(name: str, out: Path) -> tuple[TargetState, Settings]:
    return judge_scenario(name, out, DURATION, INTERVAL, SEED)


def exposition(state: TargetState, settings: Settings) -> str:
    """The ``vllm_diag_*`` families of the sidecar's ``/metrics`` body once ``state`` is published."""
    sidecar = Sidecar(settings, read_processes=False)
    sidecar.publish(state.target, state)
    body = sidecar.metrics().decode()
    # The exported catalog's families come first; what follows is the registry's (process metrics).
    last = EXPORTED[-1].sample_name
    cut = body.index("\n# HELP ", body.index(f"# TYPE {last} ")) + 1
    text, rest = body[:cut], body[cut:]
    assert rest.startswith("# HELP vllm_diag_process_"), rest[:200]
    assert all(line.startswith(("# HELP vllm_diag_process_", "# TYPE vllm_diag_process_", "vllm_diag_process_"))
               for line in rest.splitlines()), rest
    for family in MEASURED_FAMILIES:
        text = re.sub(rf"^({family}\{{[^}}]*\}}) \S+$", rf"\1 {MEASURED}", text, flags=re.M)
    return text


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (MEASURED if k in MEASURED_KEYS and v is not None else _mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return value


def json_document(state: TargetState) -> str:
    doc = document.build([state], now=state.evaluated_at)
    doc["version"] = MEASURED  # the package version is not part of the contract under test
    return json.dumps(_mask(doc), indent=2, sort_keys=True) + "\n"


def compare(path: Path, produced: str, update: bool) -> None:
    if update:
        path.write_text(produced, encoding="utf-8")
        return
    if not path.is_file():
        pytest.fail(f"{path.name} missing: run `pytest tests/golden --update-golden` and review the new file")
    expected = path.read_text(encoding="utf-8")
    assert produced == expected, (
        f"{path.name} differs from the golden file; if the change is intended, run "
        "`pytest tests/golden --update-golden` and review the diff")


@pytest.mark.parametrize("name", SCENARIOS_UNDER_TEST)
def test_published_state_matches_golden_files(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    update = bool(request.config.getoption("--update-golden"))
    state, settings = published_state(name, tmp_path)
    assert state.status == "ok", state.health
    compare(GOLDEN / f"{name}.prom", exposition(state, settings), update)
    compare(GOLDEN / f"{name}.json", json_document(state), update)


def test_golden_files_have_no_stray_scenarios() -> None:
    found = {p.stem for p in GOLDEN.glob("*.prom")} | {p.stem for p in GOLDEN.glob("*.json")}
    assert found == set(SCENARIOS_UNDER_TEST)


# The exported catalog (exporter/publish/exported.py) defines the window quantiles as gauges with a
# `quantile` label (the dashboards and the alert rules select on it), which promtool's lint reserves
# for summaries. These are the only findings allowed; anything else promtool reports fails the test.
SPEC_QUANTILE_GAUGES = ("vllm_diag_ttft_seconds", "vllm_diag_itl_seconds", "vllm_diag_e2e_latency_seconds",
                        "vllm_diag_slo_seconds")
ALLOWED_LINT = frozenset(f'{name} non-summary metrics should not have "quantile" label'
                         for name in SPEC_QUANTILE_GAUGES)


@pytest.mark.parametrize("name", SCENARIOS_UNDER_TEST)
def test_golden_exposition_passes_promtool(name: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not installed (scripts/install-test-infra.sh installs it)")
    text = (GOLDEN / f"{name}.prom").read_text(encoding="utf-8").replace(MEASURED, "0.01")
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    findings = {line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()}
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr  # 3: lint findings, 1: unparsable
    assert findings <= ALLOWED_LINT, sorted(findings - ALLOWED_LINT)


def test_promtool_lint_catches_a_naming_mistake() -> None:
    """The check above is not blind: a counter without `_total` is reported."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not installed (scripts/install-test-infra.sh installs it)")
    text = "# HELP vllm_diag_bad Bad.\n# TYPE vllm_diag_bad counter\nvllm_diag_bad 1\n"
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    findings = {line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()}
    assert proc.returncode == 3 and findings and not findings <= ALLOWED_LINT, findings
