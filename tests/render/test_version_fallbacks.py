"""Every generated rule and runbook query over a renamed vLLM family returns data on each supported
release's names, evaluated by the real promtool.

For each distinct set of names the supported releases export (exporter/catalog/versions.py: vLLM
0.8.0-0.9.1 has only the old names, 0.10.2-0.11 both, 0.12+ only the new ones, hidden names count as
absent), a replica exporting exactly those names is fed to every query that reads a renamed family
(and only vLLM series); each query must return at least one series. ``version_lint`` checks the
names statically; this checks the PromQL around them (``or`` precedence, label matching) on data.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.catalog import versions
from exporter.catalog.buckets import INTER_TOKEN_LATENCY, TIME_TO_FIRST_TOKEN
from exporter.catalog.metrics import KV_CACHE_USAGE_PERC, NAMESPACE, Kind
from exporter.render import lint

LABELS = 'job="vllm", namespace="ns", pod="p", model_name="m", engine="0"'
EDGES = sorted(set(INTER_TOKEN_LATENCY) | set(TIME_TO_FIRST_TOKEN))
# Runbook queries are scoped with placeholders the reader replaces (docs/runbooks/*.md).
PLACEHOLDERS = {"$namespace": "ns", "$target": "p"}


def _renamed(family: str) -> bool:
    return len(versions.lineage(family)) > 1


def _queries() -> list[str]:
    """Rule and runbook expressions that read a renamed vLLM family and no series of another kind."""
    chosen = []
    exprs = lint.all_expressions()
    for expr in exprs["rules"] + exprs["runbooks"]:
        names = lint.metric_names(expr)
        families = {versions.family_of_sample(n) for n in names}
        if not names or None in families or not any(f is not None and _renamed(f) for f in families):
            continue
        for placeholder, value in PLACEHOLDERS.items():
            expr = expr.replace(placeholder, value)
        chosen.append(expr)
    return chosen


def _series(name: str) -> list[dict[str, str]]:
    kind = versions.BY_WIRE[name].kind
    if kind is Kind.HISTOGRAM:
        # Every observation at 0.02 s: cumulative buckets from the 0.02 edge on.
        buckets = [{"series": f'{name}_bucket{{{LABELS}, le="{edge!r}"}}',
                    "values": "0x10" if edge < 0.02 else "0+10x10"} for edge in EDGES]
        return [*buckets, {"series": f'{name}_bucket{{{LABELS}, le="+Inf"}}', "values": "0+10x10"},
                {"series": f"{name}_count{{{LABELS}}}", "values": "0+10x10"},
                {"series": f"{name}_sum{{{LABELS}}}", "values": "0+0.2x10"}]
    values = "0+10x10" if kind is Kind.COUNTER else "0.5x10"
    if name.endswith("request_success_total"):
        return [{"series": f'{name}{{{LABELS}, finished_reason="{reason}"}}', "values": values}
                for reason in ("stop", "error")]
    return [{"series": f"{name}{{{LABELS}}}", "values": values}]


def _generations(families: set[str]) -> dict[str, frozenset[str]]:
    """The first supported release of each distinct set of exported names of ``families``."""
    seen: dict[frozenset[str], str] = {}
    for release in versions.SUPPORTED:
        names = frozenset(n for f in families for n in versions.lineage(f)
                          if versions.exported_in(versions.BY_WIRE[n], release))
        seen.setdefault(names, release)
    return {release: names for names, release in seen.items()}


def _promtool(tmp_path: Path, queries: list[str], generations: dict[str, frozenset[str]]) -> \
        subprocess.CompletedProcess[str]:
    """promtool's verdict on: each query returns a series on each generation's names."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: run scripts/install-test-infra.sh (Debian package prometheus)")
    rules = {"groups": [{"name": "fallbacks", "rules": [
        {"record": f"fallback:check_{i}", "expr": f"clamp_max(count(\n{q}\n), 1)"} for i, q in enumerate(queries)]}]}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    tests = [{
        "name": f"vLLM {release}: {', '.join(sorted(names))}",
        "interval": "1m",
        "input_series": [s for n in sorted(names) for s in _series(n)],
        "promql_expr_test": [{"expr": f"fallback:check_{i}", "eval_time": "10m",
                              "exp_samples": [{"labels": f"fallback:check_{i}", "value": 1}]}
                             for i in range(len(queries))],
    } for release, names in generations.items()]
    (tmp_path / "test.yml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)


def test_every_renamed_family_query_returns_data_on_every_supported_generation(tmp_path: Path) -> None:
    queries = _queries()
    assert len(queries) >= 5, "the recording rules, SLIs and runbooks read renamed families"
    families = {f for q in queries for n in lint.metric_names(q)
                if n.startswith(NAMESPACE) and (f := versions.family_of_sample(n)) is not None}
    generations = _generations(families)
    assert len(generations) >= 3, generations  # old names only, both, new names only
    result = _promtool(tmp_path, queries, generations)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_a_query_without_the_old_name_fails_on_an_old_release(tmp_path: Path) -> None:
    """Guard against a vacuous pass: the current name alone returns nothing on vLLM 0.8."""
    old = _generations({KV_CACHE_USAGE_PERC})
    assert old["0.8.0"] == {"vllm:gpu_cache_usage_perc"}
    assert _promtool(tmp_path, [f"max({KV_CACHE_USAGE_PERC})"], {"0.8.0": old["0.8.0"]}).returncode != 0
    assert _promtool(tmp_path, [f"max({KV_CACHE_USAGE_PERC}) or max(vllm:gpu_cache_usage_perc)"],
                     {"0.8.0": old["0.8.0"]}).returncode == 0
