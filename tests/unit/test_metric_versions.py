"""The version map (exporter/catalog/versions.py) against the parsing catalog, a real vLLM 0.32 capture,
the installed vLLM 0.32 source, and the generated queries (``version_lint``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from exporter.catalog import metrics as vllm
from exporter.catalog import versions
from exporter.catalog.metrics import Kind
from exporter.catalog.versions import BY_WIRE, HISTORY, SUPPORTED, exported_in, version_key
from exporter.render import lint
from tests.realvllm.engine import unavailable_reason, vllm_venv

VLLM_NAMES = [m for m in (*vllm.METRICS, *vllm.UNREAD_METRICS) if m.name.startswith(vllm.NAMESPACE)]


def _minor(release: str) -> str:
    return ".".join(release.split(".")[:2])


def _last_exporting(name: str) -> str:
    return [r for r in versions.RELEASES_READ if exported_in(BY_WIRE[name], r, hidden_ok=True)][-1]


def test_the_map_is_well_formed() -> None:
    assert len(BY_WIRE) == len(HISTORY), "one entry per wire name"
    read = [version_key(r) for r in versions.RELEASES_READ]
    assert read == sorted(read) and len(set(read)) == len(read)
    assert versions.OLDEST_SUPPORTED in SUPPORTED and versions.NEWEST_SUPPORTED == versions.RELEASES_READ[-1]
    for h in HISTORY:
        assert h.name.startswith(vllm.NAMESPACE), h.name
        dates = [d for d in (h.added, h.v1_added, h.deprecated, h.hidden, h.removed) if d]
        assert all(d in versions.RELEASES_READ for d in dates), h
        # Deprecated or hidden before removed; added before all of it.
        assert version_key(h.added) == min(version_key(d) for d in dates), h
        if h.removed:
            assert all(version_key(d) < version_key(h.removed) for d in dates if d != h.removed), h
        if h.kind is Kind.COUNTER:
            assert h.name.endswith("_total"), f"{h.name}: a counter's wire name carries _total"
        for new in h.renamed_to:
            assert new in BY_WIRE and BY_WIRE[new].kind is h.kind, f"{h.name} -> {new}"
            # The new name exists before the old one goes: a rename, not a gap.
            assert version_key(BY_WIRE[new].added) <= version_key(h.removed or versions.NEWEST_SUPPORTED), h


def test_every_catalog_name_and_alias_agrees_with_the_map() -> None:
    for m in VLLM_NAMES:
        h = BY_WIRE.get(m.name)
        assert h is not None, f"{m.name} is not in exporter/catalog/versions.py"
        assert h.kind is m.kind, f"{m.name}: catalog says {m.kind}, vLLM's source {h.kind}"
        # Every rename the map knows is an alias the parser reads and the rules fall back through.
        assert m.aliases == versions.older_names(m.name, whole_only=True), m.name
        first = {r for r in (h.added, h.v1_added) if r}
        if m.since:
            assert version_key(m.since) in {version_key(r) for r in first}, \
                f"{m.name}: since {m.since}, vLLM's source has it from {sorted(first)}"
        else:
            lacking = [r for r in SUPPORTED if not any(exported_in(BY_WIRE[n], r) for n in (m.name, *m.aliases))]
            assert lacking == [], f"{m.name}: no since, but vLLM {versions.ranges(lacking)} lack(s) it"
        if m.aliases:
            assert m.aliases_last == max((_minor(_last_exporting(a)) for a in m.aliases), key=version_key), m.name


def test_renames_chain_both_ways() -> None:
    assert versions.older_names(vllm.KV_CACHE_USAGE_PERC) == ("vllm:gpu_cache_usage_perc",)
    assert versions.newer_names("vllm:time_per_output_token_seconds") == (vllm.INTER_TOKEN_LATENCY_SECONDS,)
    assert versions.lineage("vllm:gpu_prefix_cache_hits_total") == (vllm.PREFIX_CACHE_HITS_TOTAL,
                                                                   "vllm:gpu_prefix_cache_hits_total")
    assert versions.family_of_sample("vllm:inter_token_latency_seconds_bucket") == vllm.INTER_TOKEN_LATENCY_SECONDS
    assert versions.family_of_sample("vllm:kv_cache_usage_perc_bucket") is None


def test_hidden_names_count_as_absent_unless_asked_for() -> None:
    hidden = [h for h in HISTORY if h.hidden]
    assert hidden, "vLLM hid deprecated names behind --show-hidden-metrics-for-version"
    for h in hidden:
        assert not exported_in(h, h.hidden) and exported_in(h, h.hidden, hidden_ok=True)


def _capture_families(path: Path) -> dict[str, str]:
    """``# TYPE`` lines of a capture: family -> type, counters under their _total sample name."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = re.match(r"# TYPE (vllm:\S+) (\w+)", line)
        if match:
            name, kind = match.groups()
            if name.endswith("_created"):
                continue
            found[name + "_total" if kind == "counter" and not name.endswith("_total") else name] = kind
    return found


def test_every_name_of_a_real_vllm_032_capture_is_in_the_map_as_present_in_032(fixtures_dir: Path) -> None:
    seen: dict[str, str] = {}
    for path in sorted(fixtures_dir.glob("snapshot-*.txt")):
        seen.update(_capture_families(path))
    assert len(seen) > 30, "the captures carry vLLM's families"
    for name, kind in seen.items():
        assert name in BY_WIRE, f"{name} (real vLLM 0.32) is not in the version map"
        assert exported_in(BY_WIRE[name], "0.32.0"), f"{name}: the map says vLLM 0.32 does not export it"
        expected = "gauge" if BY_WIRE[name].kind is Kind.INFO else str(BY_WIRE[name].kind)
        assert kind == expected, f"{name}: {kind} on the wire, {expected} in the map"


def _installed_vllm() -> Path:
    """vLLM's package in the real-vLLM venv (tests/realvllm): its absence fails, as that lane's does."""
    if os.environ.get("VLLM_DIAG_SKIP_REAL_VLLM") == "1":
        pytest.skip("real vLLM skipped on purpose: VLLM_DIAG_SKIP_REAL_VLLM=1")
    found = sorted((vllm_venv() / "lib").glob("python3*/site-packages/vllm/_version.py"))
    if not found:
        pytest.fail(f"vLLM not installed in {vllm_venv()}: {unavailable_reason()}")
    return found[0].parent


def test_every_name_in_the_installed_vllm_source_is_in_the_map() -> None:
    """The installed vLLM (0.32) registers no ``vllm:`` name the map lacks for its release."""
    root = _installed_vllm()
    release = re.search(r"^__version__ = version = '(\d+\.\d+\.\d+)", (root / "_version.py").read_text(), re.M)
    assert release, "the installed vLLM names its version"
    names: set[str] = set()
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("benchmarks/", "config/")) or rel in {"v1/metrics/reader.py",
                                                                  "entrypoints/serve/utils/orca_metrics.py"}:
            continue  # prose, a reader of the registry, or an external scorer's mapping: no registration
        data = path.read_bytes()
        if b"vllm:" not in data:
            continue
        for line in data.decode(errors="replace").splitlines():
            if line.lstrip().startswith("#"):
                continue
            names |= set(re.findall(r"""(?<![\w:])["'](vllm:[a-z_][a-z0-9_]*)["']""", line))
    assert len(names) > 50
    present = versions.names_in(release.group(1), hidden_ok=True)
    missing = [n for n in sorted(names) if n not in present and n + "_total" not in present]
    assert missing == [], f"vLLM {release.group(1)} registers names the map lacks: {missing}"


def test_034_adds_the_render_duration_and_the_tiering_deferred_release_and_drops_nothing() -> None:
    """vLLM 0.34.0's source (its wheel's Python files): three new names, none deprecated, hidden or removed."""
    assert SUPPORTED[-1] == "0.34.0"
    assert versions.names_in("0.34.0") - versions.names_in("0.33.0") == {
        vllm.REQUEST_RENDER_DURATION_SECONDS, "vllm:kv_offload_tiering_deferred_release_chunks",
        "vllm:kv_offload_tiering_deferred_release_hold_seconds"}
    assert versions.names_in("0.33.0") <= versions.names_in("0.34.0")
    assert not [h for h in HISTORY if "0.34.0" in (h.deprecated, h.hidden, h.removed)]
    # Dated to 0.34 in the catalog: a query of it serves every release (older ones abstain, as the signals do).
    assert lint.version_lint({"dashboards": [f"rate({vllm.REQUEST_RENDER_DURATION_SECONDS}_sum[5m])"]}) == []


# ------------------------------------------------------------------ the version check


def test_the_generated_queries_serve_every_supported_release() -> None:
    assert lint.version_lint() == []


def test_the_check_wants_the_old_name_where_a_release_has_only_it() -> None:
    problems = lint.version_lint({"dashboards": [f"max({vllm.KV_CACHE_USAGE_PERC})"]})
    assert len(problems) == 1
    assert "'vllm:gpu_cache_usage_perc'" in problems[0] and "0.8.0-" in problems[0]
    fixed = f"max({vllm.KV_CACHE_USAGE_PERC}) or max(vllm:gpu_cache_usage_perc)"
    assert lint.version_lint({"dashboards": [fixed]}) == []


def test_the_check_wants_the_new_name_where_the_old_one_is_gone() -> None:
    problems = lint.version_lint({"rules": ["rate(vllm:time_per_output_token_seconds_count[5m])"]})
    assert len(problems) == 1 and f"{vllm.INTER_TOKEN_LATENCY_SECONDS!r}" in problems[0]


def test_the_check_refuses_names_no_release_exports_and_allows_dated_families() -> None:
    problems = lint.version_lint({"rules": ["vllm:num_requests_swaped", "vllm:num_requests_swapped"]})
    assert len(problems) == 2
    assert "is in no vLLM release" in problems[0] and "vllm:num_requests_swapped" in problems[1]
    # The catalog dates waiting-by-reason to 0.20: older releases lack it and the signals abstain there.
    assert lint.version_lint({"rules": [vllm.NUM_REQUESTS_WAITING_BY_REASON]}) == []


def test_the_versions_page_lists_every_name() -> None:
    from exporter.render import docs

    page = docs.vllm_versions_page()
    for h in HISTORY:
        assert f"| `{h.name}` |" in page, h.name
    assert versions.OLDEST_SUPPORTED in page and ", ".join(versions.RELEASES_READ) in page
