"""Each vLLM metric name (``vllm:...``) is written once, in the catalog (``exporter/catalog/metrics.py``).

Product code names a family by its catalog constant (``vllm.KV_CACHE_USAGE_PERC``), never by a string:
a typo then fails at import and in mypy instead of reading a family that never appears. Checked on the
source with ``ast``: every string the code evaluates (plain literals, f-strings, ``+`` concatenations),
docstrings excepted (prose may name a family).
"""

from __future__ import annotations

import ast
import gzip
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.catalog import metrics as vllm
from tests.conftest import FIXTURES

# A real vLLM 0.32 capture with --kv-cache-metrics (lab/engine_witnesses.py).
WITNESS_CAPTURES = Path(__file__).parents[1] / "fixtures" / "vllm-0.32-witnesses" / "kv-template"

REPO = Path(__file__).resolve().parents[2]
PRODUCT = REPO / "exporter"
CATALOG = PRODUCT / "catalog"
HOLE = "\x00"  # stands for a value an f-string or a concatenation inserts

# "vllm:" starting a metric name, or followed by whatever an f-string or concatenation puts there. Not
# inside a URL or host name (http://vllm:8000).
METRIC_NAME = re.compile(r"(?<![\w/.-])vllm:(?=[A-Za-z_" + HOLE + r"]|$)")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def evaluated_strings(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every string expression the module evaluates; an inserted value reads as HOLE.

    An f-string or a ``+`` chain is one text (so ``f"vllm:{x}"`` and ``"vllm:" + x`` show their
    prefix); the expressions inside them are read on their own as well.
    """
    tree = ast.parse(source)
    skip = _docstrings(tree)

    def text(node: ast.expr, inner: list[ast.expr]) -> str | None:
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.FormattedValue):
                    inner.append(value.value)
                    parts.append(HOLE)
                else:
                    parts.append(text(value, inner) or "")
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = text(node.left, inner), text(node.right, inner)
            if left is None and right is None:
                return None
            for side, value in ((node.left, left), (node.right, right)):
                if value is None:
                    inner.append(side)
            return (left if left is not None else HOLE) + (right if right is not None else HOLE)
        return None

    def visit(node: ast.AST) -> Iterator[tuple[int, str]]:
        if isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)) and id(node) not in skip:
            inner: list[ast.expr] = []
            value = text(node, inner)
            if value is not None:
                yield node.lineno, value
                for expr in inner:
                    yield from visit(expr)
                return
        for child in ast.iter_child_nodes(node):
            yield from visit(child)

    yield from visit(tree)


def metric_name_literals(source: str) -> list[tuple[int, str]]:
    return [(line, value.replace(HOLE, "{...}")) for line, value in evaluated_strings(source)
            if METRIC_NAME.search(value)]


def test_no_product_module_outside_the_catalog_writes_a_vllm_metric_name() -> None:
    found = [f"{path.relative_to(REPO)}:{line}: {value!r}"
             for path in sorted(PRODUCT.rglob("*.py")) if CATALOG not in path.parents
             for line, value in metric_name_literals(path.read_text(encoding="utf-8"))]
    assert not found, "name these families by their constant in exporter/catalog/metrics.py:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    'x = "vllm:num_requests_running"\n',
    'x = window.rate("vllm:num_preemptions_total")\n',
    "x = f'sum(rate(vllm:num_preemptions_total[{w}]))'\n",
    'x = f"vllm:{name}_total"\n',
    'x = "vllm:" + name\n',
    'x = "vll" + "m:num_requests_running"\n',
    'x = f"{agg(\'vllm:num_requests_running\')} > 0"\n',
    'x = name.startswith("vllm:")\n',
])
def test_the_check_finds_a_name_however_the_string_is_built(source: str) -> None:
    assert metric_name_literals(source), source


@pytest.mark.parametrize("source", [
    '"""Reads ``vllm:cache_config_info`` labels."""\n',
    'def f():\n    """The ``vllm:num_requests_running`` gauge."""\n',
    'url = "http://vllm:8000/metrics"\n',
    'x = f"{vllm.NUM_REQUESTS_RUNNING} > 0"\n',
    'pattern = r"(vllm_diag_[a-z]+|vllm:[a-z0-9_:]+)"\n',
])
def test_the_check_leaves_prose_urls_and_constants_alone(source: str) -> None:
    assert metric_name_literals(source) == [], source


# -- the catalog side -------------------------------------------------------------------------------
# The version map writes every name vLLM ever exported, once each, as history, not as a family the
# pipeline reads: tests/unit/test_metric_versions.py keeps it and metrics.py in step.
VERSION_MAP = CATALOG / "versions.py"


def _catalog_names() -> list[str]:
    """Every vllm: name written in the catalog's sources (the version map aside), as many times as it is written."""
    return [m.group(0) for path in sorted(CATALOG.rglob("*.py")) if path != VERSION_MAP
            for _, value in evaluated_strings(path.read_text(encoding="utf-8"))
            for m in re.finditer(r"vllm:[A-Za-z_][A-Za-z0-9_:]*", value)]


ALIASES = {alias for m in vllm.KNOWN.values() for alias in m.aliases}


def test_every_name_the_catalog_exposes_is_one_of_its_known_metrics() -> None:
    exposed = {value for name, value in vars(vllm).items()
               if name.isupper() and isinstance(value, str) and value.startswith(vllm.NAMESPACE)}
    assert exposed - {vllm.NAMESPACE} <= set(vllm.KNOWN)
    for name in _catalog_names():
        assert name in vllm.KNOWN or name in ALIASES, f"{name} is written in the catalog but is no known metric"
    assert {v for v in vllm.WATCHED_INPUTS.values() if v is not None} <= set(vllm.KNOWN)


def test_every_known_vllm_metric_has_one_constant_and_each_name_is_written_once() -> None:
    constants = [value for name, value in vars(vllm).items()
                 if name.isupper() and isinstance(value, str) and value in vllm.KNOWN]
    known_vllm = {name for name in vllm.KNOWN if name.startswith(vllm.NAMESPACE)}
    assert sorted(constants) == sorted(set(constants)) and set(constants) >= known_vllm
    written = _catalog_names()
    assert [n for n in set(written) if written.count(n) > 1] == []


def test_an_unknown_name_raises() -> None:
    assert vllm.known(vllm.KV_CACHE_USAGE_PERC).aliases == ("vllm:gpu_cache_usage_perc",)
    with pytest.raises(KeyError, match="vllm:kv_cache_usage"):
        vllm.known("vllm:kv_cache_usage")


def test_the_catalog_knows_exactly_the_vllm_families_of_a_real_capture() -> None:
    # Sample names per TYPE line; _created twins are prometheus_client's, not families of their own.
    # The block residency families need --kv-cache-metrics: a capture of the witness fixtures has them.
    texts = [path.read_text() for path in FIXTURES.glob("snapshot-*.txt")]
    texts.append(gzip.decompress(sorted(WITNESS_CAPTURES.glob("*.txt.gz"))[-1].read_bytes()).decode())
    typed = {line.split()[2] for text in texts for line in text.splitlines() if line.startswith("# TYPE vllm:")}
    families = {name for name in typed if not name.endswith("_created")}
    # The KV connector families come from vLLM's source: the CPU build cannot register them.
    assert families == {name for name in vllm.KNOWN if name.startswith(vllm.NAMESPACE)} - vllm.FROM_SOURCE_ONLY
    assert not families & vllm.FROM_SOURCE_ONLY
