"""docs/metrics.md and docs/vllm-metrics.md come from the catalogs and say everything they hold."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.catalog import metrics as vllm
from exporter.publish import exported
from exporter.render import docs
from exporter.render.generate import check, render, write
from exporter.signals import FLAT_KEYS

REPO = Path(__file__).resolve().parents[2]


def test_render_all_covers_both_pages() -> None:
    outputs = render("all")
    assert {docs.METRICS_FILE, docs.VLLM_METRICS_FILE} <= set(outputs)
    assert render("docs") == docs.render_files()


def test_the_metrics_page_lists_every_exported_family_with_its_type_labels_and_help() -> None:
    page = docs.metrics_page()
    for m in exported.ALL_EXPORTED:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{m.sample_name}` |"))
        assert f"| {m.type} |" in row and m.help in row, m.name
        assert all(f"`{label}`" in row for label in m.labels), m.name


def test_the_metrics_page_lists_the_json_signal_keys_in_order() -> None:
    page = docs.metrics_page()
    positions = [page.index(f"| `{key}` |") for key in FLAT_KEYS]
    assert positions == sorted(positions)


def test_the_vllm_page_names_every_known_family_and_every_older_name() -> None:
    page = docs.vllm_metrics_page()
    for m in vllm.KNOWN.values():
        assert f"`{m.name}`" in page, m.name
        for alias in m.aliases:
            assert f"`{alias}` renamed to `{m.name}`" in page and f"`{alias}` no longer exported" in page


def test_a_catalog_change_makes_the_committed_page_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, render("docs"), "docs")
    first = exported.EXPORTED[0]
    monkeypatch.setattr(exported, "EXPORTED", (replace(first, help="A new help text."), *exported.EXPORTED[1:]))
    monkeypatch.setattr(docs, "EXPORTED", exported.EXPORTED)
    assert check(tmp_path, render("docs"), "docs") == [
        "docs/metrics.md: differs from the generated output (run `vllm-diag render docs`)"]
