"""Catalog lint: every series a generated rule, runbook or dashboard queries must exist.

Stricter than vLLM's own check (which only knows ``vllm:`` names): a name must resolve to
- the vLLM name catalog (``exporter.catalog.metrics.wire_names()``, and the families it knows but the
  sidecar does not read, ``UNREAD_METRICS``: a raw-series page may read them) or ``EXTRA_VLLM_NAMES``
  below (real vLLM names the catalog does not need; a test checks each against a real capture),
- a ``vllm_diag_*`` series in the exported-metrics catalog (``exporter.publish.exported``, which the
  /metrics exposition is a loop over; ``_total`` on counters),
- a recording rule we generate, or
- a Prometheus built-in series (``up``, and ``ALERTS``, which the dashboards' alert annotation reads).
A typo in a panel or rule then fails the test suite instead of showing "No data" in production.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from exporter.catalog import versions
from exporter.catalog.metrics import HISTOGRAM_PARTS, KNOWN, NAMESPACE, UNREAD_METRICS, Kind, wire_names
from exporter.publish.exported import sample_names
from exporter.render import dashboards, rules, runbooks

# Real vLLM sample names used by the generators that the parsing catalog does not list.
# Every entry must appear in the real vLLM 0.32 capture (tests/render/test_render.py checks).
EXTRA_VLLM_NAMES: frozenset[str] = frozenset()

# Series Prometheus itself provides.
BUILTIN_SERIES: frozenset[str] = frozenset({"up", "ALERTS"})

_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                       "bool", "offset", "inf", "nan"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """Series names a PromQL expression reads (functions, keywords and label names excluded)."""
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("", text)  # label matchers
    text = _RANGE.sub("", text)  # [5m], [$__rate_interval]
    text = _LABEL_LIST.sub("", text)  # by (...), on (...), group_left (...)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def variable_query_expr(query: str) -> str:
    """The series selector inside a Grafana ``label_values(selector, label)`` variable query."""
    match = re.fullmatch(r"\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*", query, re.S)
    return match.group(1) if match else query


def diag_names() -> frozenset[str]:
    """Sample names of the families the sidecar exports (the catalog the /metrics exposition loops over)."""
    return sample_names()


def unread_names() -> frozenset[str]:
    """Sample names of the vLLM families the catalog knows and the parser skips."""
    return frozenset(m.name + suffix for m in UNREAD_METRICS
                     for suffix in ((s for s, _ in HISTOGRAM_PARTS) if m.kind is Kind.HISTOGRAM else ("",)))


def known_names() -> frozenset[str]:
    return wire_names() | unread_names() | EXTRA_VLLM_NAMES | diag_names() | rules.recording_names() | BUILTIN_SERIES


def all_expressions() -> dict[str, list[str]]:
    """Every generated PromQL expression, by where it comes from."""
    return {
        "rules": rules.all_expressions(),
        "runbooks": runbooks.verify_expressions(),
        "dashboards": dashboards.raw_queries(),
        "dashboard variables": [variable_query_expr(q) for q in dashboards.variable_queries()],
        "dashboard annotations": dashboards.annotation_queries(),
    }


def lint(expressions: dict[str, list[str]] | None = None, known: Iterable[str] | None = None) -> list[str]:
    """One line per unknown series name: ``<source>: <name> in <expr>``. Empty when clean."""
    known_set = frozenset(known) if known is not None else known_names()
    problems: list[str] = []
    for source, exprs in (expressions if expressions is not None else all_expressions()).items():
        for expr in exprs:
            for name in sorted(metric_names(expr) - known_set):
                problems.append(f"{source}: unknown series {name!r} in {expr!r}")
    return problems


def version_lint(expressions: dict[str, list[str]] | None = None) -> list[str]:
    """One line per ``vllm:`` name an expression reads that a supported release lacks without a fallback.

    Supported releases are ``exporter.catalog.versions.SUPPORTED``. For each one, every family an
    expression reads must be exported there under one of the names the expression reads (a rename is
    covered by reading the old name too, ``or``), unless that release has no name of the family at all
    and the catalog dates the family to a later release (``MetricDef.since``: the signals abstain
    before it). A hidden name (``--show-hidden-metrics-for-version``) counts as absent. Names the version
    map does not know fail too.
    """
    problems: list[str] = []
    for source, exprs in (expressions if expressions is not None else all_expressions()).items():
        for expr in exprs:
            samples = {n for n in metric_names(expr) if n.startswith(NAMESPACE)}
            read: dict[str, str] = {}
            for sample in sorted(samples):
                family = versions.family_of_sample(sample)
                if family is None:
                    problems.append(f"{source}: {sample!r} is in no vLLM release's metrics "
                                    f"(exporter/catalog/versions.py) in {expr!r}")
                else:
                    read[family] = sample
            for family in sorted(read):
                problems += _release_gaps(source, family, set(read), expr)
    return problems


def _release_gaps(source: str, family: str, read: set[str], expr: str) -> list[str]:
    """The supported releases where ``family``, as ``expr`` reads it, has no data."""
    names = versions.lineage(family)
    newest = names[0]
    since = KNOWN[newest].since if newest in KNOWN else ""
    unfallen: dict[str, list[str]] = {}  # name the release has -> releases
    absent: list[str] = []
    for release in versions.SUPPORTED:
        if any(versions.exported_in(versions.BY_WIRE[n], release) for n in names if n in read):
            continue
        there = [n for n in names if versions.exported_in(versions.BY_WIRE[n], release)]
        if there:
            unfallen.setdefault(there[0], []).append(release)
        elif not since or versions.version_key(release) >= versions.version_key(since):
            absent.append(release)
    problems = [f"{source}: reads {family!r} but vLLM {versions.ranges(releases)} export(s) it as {name!r}: "
                f"read both (`or`, exporter.render.rules.generations) in {expr!r}"
                for name, releases in unfallen.items()]
    if absent:
        problems.append(f"{source}: reads {family!r}, which vLLM {versions.ranges(absent)} lack(s), and the catalog "
                        f"dates no later `since` for it (exporter/catalog/metrics.py) in {expr!r}")
    return problems
