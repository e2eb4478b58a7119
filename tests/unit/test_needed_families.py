"""The parser keeps exactly the families the diagnosis reads: the catalog's ``METRICS``.

A family that some reader names (by its catalog constant or by its wire name) but the parser skips
would read as absent forever, silently; a family the parser keeps that no reader names costs memory
in every window for nothing. Readers are every module of ``exporter`` except the catalog itself,
the simulator (it writes families, it does not read them) and the generated artefacts (``render``:
their PromQL reads the store, not the parser).
"""

from __future__ import annotations

import ast
from pathlib import Path

from exporter.catalog import metrics as vllm
from exporter.parse import parse

EXPORTER = Path(__file__).resolve().parents[2] / "exporter"
NOT_READERS = ("catalog", "simulator", "render")
KEPT = frozenset(m.name for m in vllm.METRICS)
# Every canonical and older wire name of a family the catalog knows, read or not.
CONSTANTS = {name: value for name, value in vars(vllm).items()
             if name.isupper() and isinstance(value, str) and value in vllm.KNOWN}


def _readers() -> list[Path]:
    return [path for path in sorted(EXPORTER.rglob("*.py"))
            if path.relative_to(EXPORTER).parts[0] not in NOT_READERS]


def named_families(source: str) -> set[str]:
    """The catalog families a module names: ``vllm.X``, ``from ...metrics import X``, or a literal."""
    tree = ast.parse(source)
    aliases = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module == "exporter.catalog" for alias in node.names if alias.name == "metrics"}
    imported = {alias.asname or alias.name: alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "exporter.catalog.metrics" for alias in node.names}
    found: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr in CONSTANTS):
            found.add(CONSTANTS[node.attr])
        elif isinstance(node, ast.Name) and imported.get(node.id) in CONSTANTS:
            found.add(CONSTANTS[imported[node.id]])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in vllm.KNOWN:
            found.add(node.value)
    return found


def read_families() -> dict[str, set[str]]:
    """Family -> the reader modules that name it."""
    out: dict[str, set[str]] = {}
    for path in _readers():
        for family in named_families(path.read_text(encoding="utf-8")):
            out.setdefault(family, set()).add(str(path.relative_to(EXPORTER)))
    return out


def test_every_family_a_reader_names_is_kept_by_the_parser() -> None:
    skipped = {family: sorted(where) for family, where in read_families().items() if family not in KEPT}
    assert not skipped, f"read but skipped by the parser (move them to catalog METRICS): {skipped}"


def test_every_family_the_parser_keeps_is_read() -> None:
    unread = sorted(KEPT - set(read_families()))
    assert not unread, f"kept by the parser but read by nothing (move them to UNREAD_METRICS): {unread}"


def test_the_scan_sees_each_way_of_naming_a_family() -> None:
    source = (
        "from exporter.catalog import metrics as m\n"
        "from exporter.catalog.metrics import NUM_REQUESTS_WAITING as W\n"
        "a = m.KV_CACHE_USAGE_PERC\nb = W\nc = 'process_cpu_seconds_total'\nd = 'not_a_family'\n"
    )
    assert named_families(source) == {vllm.KV_CACHE_USAGE_PERC, vllm.NUM_REQUESTS_WAITING,
                                      vllm.PROCESS_CPU_SECONDS_TOTAL}


def test_a_skipped_family_is_absent_from_the_snapshot_and_a_kept_one_present() -> None:
    unread = next(m for m in vllm.UNREAD_METRICS if m.kind is vllm.Kind.HISTOGRAM)
    text = (
        f'{unread.name}_bucket{{le="1.0"}} 3\n{unread.name}_bucket{{le="+Inf"}} 4\n'
        f"{unread.name}_sum 2.5\n{unread.name}_count 4\n"
        f'{vllm.NUM_REQUESTS_RUNNING}{{engine="0"}} 2\n'
    )
    snapshot = parse(text, 1.0)
    assert snapshot.families() == {vllm.NUM_REQUESTS_RUNNING}
