"""The product and the lab beside it: ``lab/`` (benchmarks, captured data, results, scoring) depends on
``exporter/`` one way, and may read the tests' helpers; the product never depends on the lab.

Checked on the source with ``ast``, the way test_import_layers.py checks the layers inside ``exporter/``:

* ``exporter/`` and ``tests/`` import nothing from ``lab/`` (``exporter/`` nothing from ``tests/`` either);
* nothing in ``exporter/`` exists only for the lab: every public top-level name of an exporter module is
  read by the product itself or pinned by the product's tests, never by the lab alone or by nobody;
* no import circle among the modules of ``exporter/``, ``tests/`` and ``lab/`` together;
* no file in ``exporter/`` over ``MAX_LINES`` lines (the reader's span; docs/architecture.md).
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from tests.unit.test_import_layers import cycles

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("exporter", "tests", "lab")
MAX_LINES = 600


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources(root: str) -> dict[str, Path]:
    return {_module(p): p for p in sorted((REPO / root).rglob("*.py")) if ".venv" not in p.parts}


def _imported(path: Path, known: Iterable[str]) -> list[tuple[str, int]]:
    """Every module ``path`` imports (absolute imports; ``from a import b`` is ``a.b`` when that is a module)."""
    modules = frozenset(known)
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module, node.lineno)
                      for a in node.names]
    return found


def _reaches(name: str, root: str) -> bool:
    return name == root or name.startswith(root + ".")


def _imports_of(importer: str, forbidden: tuple[str, ...]) -> list[str]:
    everything = {m for root in ROOTS for m in _sources(root)}
    return [f"{path.relative_to(REPO)}:{line}: imports {name}"
            for path in _sources(importer).values() for name, line in _imported(path, everything)
            if any(_reaches(name, f) for f in forbidden)]


def test_the_tests_import_nothing_from_the_lab() -> None:
    found = _imports_of("tests", ("lab",))
    assert not found, "the product's tests may not depend on the lab:\n" + "\n".join(found)


def test_the_product_imports_neither_the_lab_nor_the_tests() -> None:
    found = _imports_of("exporter", ("lab", "tests"))
    assert not found, "\n".join(found)


def _reads(paths: Iterable[Path]) -> Counter[str]:
    """How often each name is read: a name loaded, an attribute, or a name imported."""
    counts: Counter[str] = Counter()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                counts[node.id] += 1
            elif isinstance(node, ast.Attribute):
                counts[node.attr] += 1
            elif isinstance(node, ast.alias):
                counts[node.name.rsplit(".", 1)[-1]] += 1
    return counts


def _public_names(path: Path) -> Iterable[tuple[str, int]]:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list:
            continue  # registered by its decorator (a diagnosis rule's @rule): read where the registry is
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            continue
        yield from ((n, node.lineno) for n in names if not n.startswith("_"))


def lab_only_names(product: dict[str, Path], tests: Iterable[Path]) -> list[tuple[Path, int, str]]:
    """Public names of ``product`` that neither the product nor its tests read (the lab at most)."""
    product_reads, test_reads = _reads(product.values()), _reads(tests)
    return [(path, line, name) for path in product.values()
            for name, line in _public_names(path) if not product_reads[name] and not test_reads[name]]


def test_nothing_in_the_product_exists_only_for_the_lab() -> None:
    found = [f"{path.relative_to(REPO)}:{line}: {name}"
             for path, line, name in lab_only_names(_sources("exporter"), _sources("tests").values())]
    assert not found, ("read by no product module and no product test (move it to lab/, or to tests/ when "
                       "only the tests need it):\n" + "\n".join(found))


def test_the_check_finds_a_name_only_the_lab_reads(tmp_path: Path) -> None:
    product = tmp_path / "exporter" / "thing.py"
    product.parent.mkdir()
    product.write_text("def shipped() -> int:\n    return helper()\n\n\ndef helper() -> int:\n    return 1\n\n\n"
                       "def for_the_lab() -> int:\n    return 2\n")
    pinned = tmp_path / "test_thing.py"
    pinned.write_text("from exporter.thing import shipped\n")
    assert [name for _, _, name in lab_only_names({"exporter.thing": product}, [pinned])] == ["for_the_lab"]


def test_there_is_no_import_circle_in_the_product_or_the_lab() -> None:
    modules = {m: p for root in ROOTS for m, p in _sources(root).items()}
    edges = [(m, name) for m, p in modules.items() for name, _ in _imported(p, modules) if name in modules]
    assert cycles(edges) == []


def test_no_product_file_is_over_the_readers_span() -> None:
    sizes = {p.relative_to(REPO).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for p in sorted((REPO / "exporter").rglob("*.py"))}
    over = {f: n for f, n in sizes.items() if n > MAX_LINES}
    assert not over, f"files over {MAX_LINES} lines (split them by what they hold): {over}"
