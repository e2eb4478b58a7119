"""The import layers of ``exporter/``: which package may import which, checked on the source with ``ast``.

Every module under ``exporter/`` belongs to one layer of ``LAYERS``; a layer may import its own
modules and the layers it ``reads``, and whatever those read in turn. ``reads`` only ever points
down, so an import against it is an upward import and fails here, naming the file, line and the
layer to read from instead. The data flows one way, as docs/architecture.md draws it::

    catalog <- foundation <- sources, window <- signals <- diagnosis <- pipeline, publish
                                                      <- server <- promsource, demo <- cli

with the tools beside the core: ``render`` reads the catalog and the exported families
(``publish``), ``simulator`` reads the catalog (and, for its fake host CPU source, the signal type
it fakes), ``advisor`` reads the pipeline and the simulator. No core module (catalog, foundation,
sources, window, signals, host CPU, diagnosis, pipeline, publish) imports render, simulator, advisor,
promsource or cli. ``catalog`` imports nothing but the standard library and itself.

Which imports count, and why:

* **Every import statement counts**, wherever it sits: at module level, under ``if TYPE_CHECKING:``
  and inside a function. A type-only import is still a dependency (mypy and the reader follow it),
  so it must point down like any other; a function-local import may defer a heavy module for
  start-up time (``exporter/cli.py``, ``exporter/render/cli.py``, the server's advisor worker) but
  never hide a circle: the checker cannot tell why an import is local, so it judges it as if it
  were at the top.
* **No import circle** among exporter modules, over that same complete graph.
* ``from package import name`` reads the submodule ``package.name`` when there is one, else the
  package module (``exporter/<package>/__init__.py``). Importing a submodule also runs its
  package's ``__init__``: that implicit step is not an edge here, and package modules stay thin
  enough that it never matters.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "exporter"


@dataclass(frozen=True)
class Layer:
    """Modules by name (``exporter.window``) or by package (``exporter.facts.*``: the package and all
    below it), and the layers they may import besides their own."""

    modules: tuple[str, ...]
    reads: tuple[str, ...]
    why: str


# Lowest first. An exact module name wins over a package pattern, a longer package over a shorter one.
LAYERS: Mapping[str, Layer] = {
    "catalog": Layer(("exporter.catalog.*",), (),
                     "facts and numbers: vLLM's metric names, thresholds, symptoms; stdlib only"),
    "foundation": Layer(("exporter", "exporter.argtypes", "exporter.shutdown", "exporter.numbers", "exporter.frozen",
                         "exporter.snapshot", "exporter.timebuffer", "exporter.webconfig", "exporter.config",
                         "exporter.promsource.settings"),
                        ("catalog",),
                        "configuration (with its prometheus: section), value types and formatting every stage uses"),
    "sources": Layer(("exporter.poll", "exporter.parse", "exporter.record", "exporter.dcgm", "exporter.offline",
                      "exporter.facts.*"), ("foundation",),
                     "what the sidecar reads: scrapes, parsed snapshots, recorded captures, DCGM, engine facts"),
    "window": Layer(("exporter.window", "exporter.deltas"), ("foundation",), "snapshots over time: reset-safe deltas"),
    "signals": Layer(("exporter.signals", "exporter.signals.*", "exporter.objectives", "exporter.inputs"), ("window",),
                     "the window's numbers, the objectives judged on it, the watched inputs"),
    "host cpu": Layer(("exporter.hostcpu.*",), ("signals",),
                      "CPU evidence from /proc and cgroupfs, reduced to the signals' HostInputs"),
    "diagnosis": Layer(("exporter.state", "exporter.diagnosis.*", "exporter.scaling"), ("signals", "sources"),
                       "rules, layer scores, verdict, and the published state that holds them"),
    "pipeline": Layer(("exporter.pipeline",), ("diagnosis",), "one target: parse -> window -> signals -> diagnosis"),
    "publish": Layer(("exporter.publish.*",), ("diagnosis",),
                     "the published state as /metrics (with the exported families), JSON, HTML and text"),
    "simulator": Layer(("exporter.simulator.*",), ("foundation",), "a fake vLLM: engine model and its /metrics"),
    "simulated host": Layer(("exporter.simulator.hostcpu",), ("simulator", "signals"),
                            "the CPU source the sidecar would read next to a simulated engine"),
    "advisor": Layer(("exporter.advisor.*",), ("pipeline", "simulator"),
                     "what-if predictions: the simulator's engine model calibrated to a window"),
    "server": Layer(("exporter.server",), ("pipeline", "publish", "advisor"),
                    "the sidecar: polling, the pipelines, the advisor worker and the HTTP endpoints"),
    "promsource": Layer(("exporter.promsource.*",), ("server",),
                        "the same pipeline over a Prometheus store, and the central diagnoser's server"),
    "render": Layer(("exporter.render.*",), ("publish",),
                    "generated rules, runbooks, dashboards and docs from the catalog and the exported families"),
    "demo": Layer(("exporter.demo",), ("server", "simulated host"), "simulated engines plus the sidecar"),
    "cli": Layer(("exporter.cli",), ("demo", "promsource", "render", "host cpu"), "every command"),
}
CORE = ("catalog", "foundation", "sources", "window", "signals", "host cpu", "diagnosis", "pipeline", "publish")
TOOLS = ("render", "simulator", "advisor", "promsource", "cli")


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # an exporter module, or the top-level name of anything else ("aiohttp", "json")
    line: int
    where: str  # "module", "TYPE_CHECKING" or "function"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def exporter_sources() -> dict[str, str]:
    return {module_name(p): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return ast.unparse(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def imports_in(module: str, source: str, known: Iterable[str], is_package: bool = False) -> list[Import]:
    """Every import of ``source`` (module ``module``), each resolved to the module it reads."""
    modules = frozenset(known)

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:  # relative: from the module's package, one level up per extra dot
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[:len(package) - node.level + 1]
            base = ".".join([*package, *([node.module] if node.module else [])])
        return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]

    found: list[Import] = []

    def walk(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = "function"
            elif isinstance(child, ast.If) and _is_type_checking(child.test) and where == "module":
                inner = "TYPE_CHECKING"
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in targets(child):
                    name = target if target.startswith("exporter") else target.split(".")[0]
                    found.append(Import(module, name, child.lineno, inner))
            walk(child, inner)

    walk(ast.parse(source), "module")
    return found


def layer_of(module: str) -> str | None:
    """The layer a module belongs to: an exact name first, else the longest package pattern."""
    exact = [name for name, layer in LAYERS.items() if module in layer.modules]
    if exact:
        return exact[0]
    best: tuple[int, str] | None = None
    for name, layer in LAYERS.items():
        for pattern in layer.modules:
            package = pattern.removesuffix(".*")
            if pattern.endswith(".*") and (module == package or module.startswith(package + ".")):
                if best is None or len(package) > best[0]:
                    best = (len(package), name)
    return best[1] if best else None


def readable(layer: str) -> frozenset[str]:
    """The layers ``layer`` may import: itself, what it reads, and what those read in turn."""
    seen = {layer}
    todo = list(LAYERS[layer].reads)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(LAYERS[name].reads)
    return frozenset(seen)


def upward_imports(imports: Iterable[Import]) -> list[str]:
    """One line per import that reads a layer its importer may not: ``file:line: a (layer) imports b (layer)``."""
    problems = []
    for imp in imports:
        if not imp.imported.startswith("exporter"):
            continue
        source, target = layer_of(imp.importer), layer_of(imp.imported)
        assert source is not None and target is not None, (imp.importer, imp.imported)
        if target not in readable(source):
            problems.append(f"{imp.importer.replace('.', '/')}.py:{imp.line}: {imp.importer} ({source}) imports "
                            f"{imp.imported} ({target}) [{imp.where}]; {source} reads only "
                            f"{', '.join(sorted(readable(source) - {source})) or 'the standard library'}")
    return problems


def non_stdlib_imports(imports: Iterable[Import], own: str = "exporter.catalog") -> list[str]:
    return [f"{imp.importer} imports {imp.imported} (line {imp.line})" for imp in imports
            if imp.imported != "__future__" and imp.imported not in sys.stdlib_module_names
            and not (imp.imported == own or imp.imported.startswith(own + "."))]


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        if a != b:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def all_imports() -> list[Import]:
    sources = exporter_sources()
    packages = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    return [imp for module, source in sources.items()
            for imp in imports_in(module, source, sources, module in packages)]


def _edges(imports: Iterable[Import]) -> Iterator[tuple[str, str]]:
    return ((imp.importer, imp.imported) for imp in imports if imp.imported.startswith("exporter"))


# -- the layer table itself -------------------------------------------------------------------------
def test_every_module_under_exporter_has_a_layer() -> None:
    unassigned = [m for m in exporter_sources() if layer_of(m) is None]
    assert not unassigned, f"give these modules a layer in LAYERS ({__file__}): {unassigned}"


def test_the_layer_table_points_down_only() -> None:
    for name, layer in LAYERS.items():
        assert set(layer.reads) <= set(LAYERS), (name, layer.reads)
    assert cycles((name, read) for name, layer in LAYERS.items() for read in layer.reads) == []


def test_the_core_never_reads_the_tools() -> None:
    for name in CORE:
        assert not readable(name) & set(TOOLS), f"{name} may read {sorted(readable(name) & set(TOOLS))}"


# -- the code against it -----------------------------------------------------------------------------
def test_no_module_imports_upward() -> None:
    problems = upward_imports(all_imports())
    assert not problems, "\n".join(problems)


def test_the_catalog_imports_only_the_standard_library_and_itself() -> None:
    catalog = [imp for imp in all_imports() if layer_of(imp.importer) == "catalog"]
    assert catalog, "no catalog module found"
    assert non_stdlib_imports(catalog) == []


def test_there_is_no_import_circle_among_exporter_modules() -> None:
    found = cycles(_edges(all_imports()))
    assert not found, f"import circles (module-level, TYPE_CHECKING and function-local imports alike): {found}"


# -- the checker finds what it is for (synthetic modules) -----------------------------------------------
KNOWN = ("exporter.signals", "exporter.render", "exporter.render.rules", "exporter.catalog.metrics",
         "exporter.window", "exporter.publish.exported")


@pytest.mark.parametrize("source, where", [
    ("from exporter.render.rules import Options\n", "module"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from exporter.render import rules\n", "TYPE_CHECKING"),
    ("def f():\n    import exporter.render.rules\n", "function"),
])
def test_an_upward_import_is_reported_wherever_it_sits(source: str, where: str) -> None:
    imports = imports_in("exporter.signals", source, KNOWN)
    problems = upward_imports(imports)
    assert len(problems) == 1, problems
    assert "exporter.signals (signals) imports exporter.render.rules (render)" in problems[0]
    assert f"[{where}]" in problems[0]


def test_a_downward_import_passes() -> None:
    source = "from exporter.window import Window\nfrom exporter.catalog.metrics import METRICS\n"
    assert upward_imports(imports_in("exporter.signals", source, KNOWN)) == []


def test_the_publish_stage_may_not_be_read_by_the_signals() -> None:
    imports = imports_in("exporter.signals", "from exporter.publish import exported\n", KNOWN)
    assert [imp.imported for imp in imports] == ["exporter.publish.exported"]
    assert upward_imports(imports)


def test_a_circle_is_found_through_any_kind_of_import() -> None:
    a = imports_in("exporter.simulator.engine", "from exporter.simulator.exposition import X\n",
                   ("exporter.simulator.exposition",))
    b = imports_in("exporter.simulator.exposition", "def f():\n    from exporter.simulator.engine import Engine\n",
                   ("exporter.simulator.engine",))
    assert cycles(_edges([*a, *b])) == [["exporter.simulator.engine", "exporter.simulator.exposition"]]


def test_a_third_party_import_in_the_catalog_is_reported() -> None:
    imports = imports_in("exporter.catalog.metrics", "import json\nfrom pydantic import BaseModel\n"
                                                     "from exporter.catalog import buckets\n", ())
    assert non_stdlib_imports(imports) == ["exporter.catalog.metrics imports pydantic (line 2)"]
