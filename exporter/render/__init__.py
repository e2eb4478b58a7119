"""Generated artefacts: Prometheus rules, runbooks, the Alertmanager example and Grafana dashboards.

Everything under ``alert_rules/``, ``dashboards/``, ``docs/runbooks/``,
``deploy/alertmanager/alertmanager.yml`` and the Kubernetes copies in ``deploy/kubernetes/``
(``prometheusrule.yaml``, ``grafana-dashboards.yaml``) is produced here from the catalog
(``exporter.catalog``) and the SLO defaults (``exporter.config.Slo``); edits go into the
generators, never into the generated files. ``vllm-diag render all --check`` renders in
memory and compares byte for byte, so CI notices a catalog change that was not re-rendered.

This module holds what the generators share: the PromQL builder and the render/check driver.
The generator modules are imported lazily so that ``exporter.render.rules`` and
``exporter.render.dashboards`` can import the builder from here without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------------
# PromQL builder
# ---------------------------------------------------------------------------------------------

# Labels that differ between replicas and data-parallel engines of one model: aggregate them away
# so a signal is per model (and per job/namespace, which `without` keeps).
AGGREGATE_AWAY: tuple[str, ...] = ("engine", "instance", "pod")


def fmt(value: float) -> str:
    """A catalog number as PromQL/text writes it (0.1, not 0.1000000001 or 1e-01)."""
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class PromQL:
    """PromQL builder bound to one label selector (vLLM's generator pattern).

    ``matchers`` is the inside of ``{...}`` applied to every raw series, e.g.
    ``model_name=~"$model"`` in dashboards, empty in recording rules.
    """

    matchers: str = ""
    without: tuple[str, ...] = AGGREGATE_AWAY

    def sel(self, metric: str, extra: str = "") -> str:
        parts = [m for m in (self.matchers, extra) if m]
        return f"{metric}{{{', '.join(parts)}}}" if parts else metric

    def _without(self, extra: tuple[str, ...] = ()) -> str:
        return f"without ({', '.join((*self.without, *extra))})"

    def rate(self, metric: str, window: str, extra: str = "") -> str:
        return f"rate({self.sel(metric, extra)}[{window}])"

    def sum_rate(self, metric: str, window: str, *, extra: str = "", drop: tuple[str, ...] = ()) -> str:
        return f"sum {self._without(drop)} ({self.rate(metric, window, extra)})"

    def agg(self, op: str, metric: str, extra: str = "", drop: tuple[str, ...] = ()) -> str:
        return f"{op} {self._without(drop)} ({self.sel(metric, extra)})"

    @staticmethod
    def divide(numerator: str, denominator: str) -> str:
        # `> 0` on the denominator: an idle period shows no data instead of NaN or +Inf.
        return f"({numerator})\n/\n({denominator} > 0)"

    def mean(self, histogram: str, window: str) -> str:
        """Mean observation of a histogram over the window, from its _sum and _count rates."""
        return self.divide(self.sum_rate(histogram + "_sum", window), self.sum_rate(histogram + "_count", window))

    def ratio(self, numerator: str, denominator: str, window: str) -> str:
        return self.divide(self.sum_rate(numerator, window), self.sum_rate(denominator, window))

    def quantile(self, q: float, histogram: str, window: str) -> str:
        # `without` keeps `le`, which histogram_quantile needs.
        return f"histogram_quantile({fmt(q)}, {self.sum_rate(histogram + '_bucket', window)})"


# ---------------------------------------------------------------------------------------------
# Render / check driver
# ---------------------------------------------------------------------------------------------

# Directories whose every file must come from a generator (others there are orphans), with the
# file suffix they hold.
OWNED_DIRS: tuple[tuple[str, str], ...] = (
    ("alert_rules", ".yml"),
    ("docs/runbooks", ".md"),
    ("dashboards", ".json"),
)

Outputs = Mapping[str, str]  # repo-relative path -> exact file content


def _rules_outputs(options: Any = None) -> dict[str, str]:
    from exporter.render import kubernetes, rules, runbooks

    o = options or rules.DEFAULT_OPTIONS
    files = rules.render_files(o)
    return {**files, **kubernetes.wrap_rules(files), **runbooks.render_files(o), **rules.render_alertmanager(o)}


def _dashboard_outputs(options: Any = None) -> dict[str, str]:
    from exporter.render import dashboards, kubernetes

    files = dashboards.render_files()
    return {**files, **kubernetes.wrap_dashboards(files)}


# `render rules` also writes the runbooks, the Alertmanager example and the PrometheusRule: all read
# the alert list; `render dashboards` also writes the dashboards' Kubernetes ConfigMaps.
GENERATORS: Mapping[str, Callable[[Any], dict[str, str]]] = {
    "rules": _rules_outputs,
    "dashboards": _dashboard_outputs,
}
OWNED_DIRS_BY_GENERATOR: Mapping[str, tuple[str, ...]] = {
    "rules": ("alert_rules", "docs/runbooks"),
    "dashboards": ("dashboards",),
}


def render(what: str, options: Any = None) -> dict[str, str]:
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
