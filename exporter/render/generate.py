"""The render/check driver: every generated file in memory, then written or compared byte for byte.

``render(what)`` runs the generators (``GENERATORS``), ``write`` puts what differs on disk,
``check`` lists every drift and orphan with the command that fixes it (``vllm-diag render all --check``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from exporter.render import dashboards, docs, kubernetes, rules, runbooks
from exporter.render import scaling as autoscaling  # issue 51

# Directories whose every file must come from a generator (others there are orphans), with the
# file suffix they hold.
OWNED_DIRS: tuple[tuple[str, str], ...] = (
    ("alert_rules", ".yml"),
    ("docs/runbooks", ".md"),
    ("dashboards", ".json"),
    (autoscaling.DIR, ".yaml"),
)

Outputs = Mapping[str, str]  # repo-relative path -> exact file content


def _rules_outputs(options: rules.Options | None = None) -> dict[str, str]:
    o = options or rules.DEFAULT_OPTIONS
    files = rules.render_files(o)
    return {**files, **kubernetes.wrap_rules(files), **runbooks.render_files(o), **rules.render_alertmanager(o)}


def _dashboard_outputs(options: rules.Options | None = None) -> dict[str, str]:
    files = dashboards.render_files()
    return {**files, **kubernetes.wrap_dashboards(files)}


def _docs_outputs(options: rules.Options | None = None) -> dict[str, str]:
    return docs.render_files()  # the reference pages describe the product, not one deployment's options


# `render rules` also writes the runbooks, the Alertmanager example and the PrometheusRule: all read
# the alert list; `render dashboards` also writes the dashboards' Kubernetes ConfigMaps; `render docs`
# the reference pages generated from the catalogs (docs/metrics.md, docs/vllm-metrics.md,
# docs/vllm-metric-versions.md).
GENERATORS: Mapping[str, Callable[[rules.Options | None], dict[str, str]]] = {
    "rules": _rules_outputs,
    "dashboards": _dashboard_outputs,
    "docs": _docs_outputs,
    "scaling": lambda o: autoscaling.render_for(o.thresholds if o else None),  # KEDA, HPA, adapter (issue 51)
}
OWNED_DIRS_BY_GENERATOR: Mapping[str, tuple[str, ...]] = {
    "rules": ("alert_rules", "docs/runbooks"),
    "dashboards": ("dashboards",),
    "docs": (),  # three files in docs/, beside hand-written pages: no directory of its own
    "scaling": (autoscaling.DIR,),
}


def render(what: str, options: rules.Options | None = None) -> dict[str, str]:
    """Every output of ``what`` (rules, dashboards or all), in memory; ``options`` is an
    ``exporter.render.rules.Options`` (deployment SLOs, thresholds, sidecar job, severity names)."""
    names = list(GENERATORS) if what == "all" else [what]
    out: dict[str, str] = {}
    for name in names:
        out.update(GENERATORS[name](options))
    return out


def write(root: Path, outputs: Outputs, what: str) -> list[str]:
    """Write the outputs that differ under ``root``; return what was written.

    Orphans are reported by ``check`` but never deleted here: a stray file may be someone's work.
    """
    changed: list[str] = []
    for rel, content in sorted(outputs.items()):
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != content:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
            changed.append(f"wrote {rel}")
    return changed


def orphans(root: Path, outputs: Outputs, what: str) -> list[str]:
    """Files in the generator-owned directories that no generator produced."""
    names = list(GENERATORS) if what == "all" else [what]
    dirs = {d for name in names for d in OWNED_DIRS_BY_GENERATOR[name]}
    found: list[str] = []
    for directory, suffix in OWNED_DIRS:
        if directory not in dirs or not (root / directory).is_dir():
            continue
        for path in sorted((root / directory).iterdir()):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and path.suffix == suffix and rel not in outputs:
                found.append(rel)
    return found


def check(root: Path, outputs: Outputs, what: str) -> list[str]:
    """Every drift between ``outputs`` and the files under ``root``, one line each with its fix."""
    fix = f"vllm-diag render {what}"
    problems: list[str] = []
    for rel, content in sorted(outputs.items()):
        path = root / rel
        if not path.is_file():
            problems.append(f"{rel}: missing (run `{fix}`)")
        elif path.read_text(encoding="utf-8") != content:
            problems.append(f"{rel}: differs from the generated output (run `{fix}`)")
    for rel in orphans(root, outputs, what):
        problems.append(f"{rel}: orphan, no generator produces it (delete it: `git rm {rel}`)")
    return problems
