"""The generated rules pass the real promtool (and the Alertmanager example the real amtool).

These tools are part of the test infrastructure (scripts/install-test-infra.sh installs them):
a missing binary fails the test, it never skips it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = sorted(str(p) for p in (REPO / "alert_rules").glob("*.yml"))
PROMTOOL_TESTS = sorted(str(p) for p in (REPO / "tests/render/promtool").glob("*.yml"))


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: run scripts/install-test-infra.sh (Debian package prometheus / "
                    "prometheus-alertmanager)")
    return path


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO)


def test_promtool_check_rules() -> None:
    assert RULE_FILES, "alert_rules/ is empty: run `vllm-diag render rules`"
    result = _run(_tool("promtool"), "check", "rules", *RULE_FILES)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", PROMTOOL_TESTS, ids=lambda p: Path(p).name)
def test_promtool_test_rules(test_file: str) -> None:
    result = _run(_tool("promtool"), "test", "rules", test_file)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_catches_a_broken_expectation(tmp_path: Path) -> None:
    """Guard against a vacuous pass: a wrong `for` expectation must make promtool fail."""
    source = (REPO / "tests/render/promtool/alerts_test.yml").read_text()
    broken = source.replace("../../../alert_rules/", str(REPO / "alert_rules") + "/").replace(
        "eval_time: 4m", "eval_time: 11m", 1)
    assert broken != source
    path = tmp_path / "broken_test.yml"
    path.write_text(broken)
    assert _run(_tool("promtool"), "test", "rules", str(path)).returncode != 0


def test_amtool_check_config() -> None:
    result = _run(_tool("amtool"), "check-config", str(REPO / "deploy/alertmanager/alertmanager.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_dashboard_and_runbook_query_parses(tmp_path: Path) -> None:
    """promtool parses PromQL in rule files: wrap each query in a throwaway recording rule."""
    import yaml

    from exporter.render import dashboards, runbooks

    queries = dashboards.all_queries() + runbooks.verify_expressions()
    doc = {"groups": [{"name": "queries", "rules": [
        {"record": f"query:parse_check_{i}:check", "expr": q} for i, q in enumerate(queries)]}]}
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump(doc))
    result = _run(_tool("promtool"), "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
