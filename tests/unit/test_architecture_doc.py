"""docs/architecture.md against the code: what it says serves /metrics does, the module paths it names exist,
the signal groups and the fields the pipeline writes after compute() are the code's, and the recipe for a
cause names the places the rules library reads."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from exporter import pipeline, server
from exporter.catalog.thresholds import STRENGTHS
from exporter.config import load_settings
from exporter.diagnosis import rules
from exporter.publish.exposition import Exposition
from exporter.server import Sidecar
from exporter.signals import GROUPS

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")


def row(stage: str) -> str:
    """The table row of the stages (or of "To add ...") whose first cell is ``stage``."""
    match = re.search(rf"^\| {re.escape(stage)} \|(.*)$", DOC, re.M)
    assert match is not None, f"no row {stage!r} in docs/architecture.md"
    return match.group(1)


def test_every_module_path_the_doc_names_exists() -> None:
    paths = set(re.findall(r"`(exporter/[\w/]+(?:\.py|/))`", DOC))
    assert len(paths) > 20
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_the_module_named_as_serving_metrics_is_the_one_the_server_calls() -> None:
    """The publish row names exposition.py as what serves /metrics; the handler calls Sidecar.metrics, which
    renders through that module's Exposition, and its body starts with exactly that module's text."""
    publish = row("publish")
    named = re.search(r"`(\w+)\.py` \(the loop over it that serves `/metrics`", publish)
    assert named is not None, publish
    module = f"exporter.publish.{named.group(1)}"
    assert "sidecar.metrics" in inspect.getsource(server.handle_metrics)
    sidecar = Sidecar(load_settings(overrides={"targets": [{"name": "t", "url": "http://127.0.0.1:9/metrics"}]}),
                      read_processes=False)
    assert type(sidecar.exposition).__module__ == module == Exposition.__module__
    assert "self.exposition.render" in inspect.getsource(Sidecar.metrics)
    expected = Exposition(sidecar.settings).render(sidecar.states.values())
    assert sidecar.metrics().startswith(expected) and expected.startswith(b"# HELP vllm_diag_")


def test_the_signal_recipe_lists_every_group_of_the_code() -> None:
    recipe = row("a signal")
    listed = re.findall(r"`([A-Z]\w+)`", recipe.split(" and its value")[0])
    assert listed == [group.__name__ for _, group in GROUPS]
    stages = row("signals")
    assert "eleven small groups (`GROUPS`)" in stages and len(GROUPS) == 11


def written_after_compute() -> set[str]:
    """``group.field`` for every signal TargetPipeline.evaluate replaces after compute()."""
    source = inspect.getsource(pipeline.TargetPipeline.evaluate)
    after = source[source.index("compute("):]
    found = set(re.findall(r"replace\(signals\.(\w+), (\w+)=", after))
    found |= {("traffic", name) for name in re.findall(r"replace\(traffic, (\w+)=", after)}
    return {f"{group}.{name}" for group, name in found}


def test_the_fields_the_pipeline_writes_after_compute_are_the_ones_the_doc_lists() -> None:
    listed = set(re.findall(r"`(\w+\.\w+)`", row("pipeline").split("After `compute()`", 1)[1]))
    assert written_after_compute() == listed
    assert len(listed) == 6


@pytest.mark.parametrize("module", ["finding", "effects", "conditions", "prefix", "unexplained"])
def test_the_cause_recipe_names_the_rules_librarys_modules(module: str) -> None:
    recipe = row("a cause (its diagnosis rule)")
    assert f"`{module}.py`" in recipe or f"`{module}.py`" in row("diagnosis")
    assert hasattr(rules, module)
    assert "@rule(" in recipe and "`STRENGTHS`" in recipe and "CASES" in recipe
    assert STRENGTHS  # the table the recipe names
