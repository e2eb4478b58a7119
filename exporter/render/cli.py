"""``vllm-diag render rules|dashboards|docs|all [--check]``.

Wire it with ``register(subparsers)``; the parsed ``args.func(args)`` returns the exit status:
0 when written (or, with ``--check``, when everything is up to date), 1 on drift or a lint
finding, listing every problem with the command that fixes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.catalog import buckets
from exporter.config import ConfigError, load_settings

if TYPE_CHECKING:
    from exporter.render.rules import Options

# The generators (exporter.render.rules, dashboards via grafanalib, ...) build their tables at import,
# which costs every vllm-diag command's start-up: this module imports them inside the functions
# that run `render`, never at the top (they import nothing of this module, so no cycle hides here).

EXIT_DRIFT = 1


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    # Any: the main CLI's subparsers make its own ArgumentParser subclass (one-line errors).
    parser = subparsers.add_parser(
        "render", help="regenerate alert rules, runbooks, dashboards and reference docs from the catalog",
        description="Regenerate alert_rules/, docs/runbooks/, deploy/alertmanager/alertmanager.yml and "
                    "deploy/kubernetes/prometheusrule.yaml (rules), dashboards/ and "
                    "deploy/kubernetes/grafana-dashboards.yaml (dashboards), docs/metrics.md, "
                    "docs/vllm-metrics.md and docs/vllm-metric-versions.md (docs) from the catalog. "
                    "--check renders in memory and fails on any drift. Every run fails when a generated query "
                    "reads a series nobody exports, or a vLLM name that a supported release "
                    "(exporter/catalog/versions.py) lacks without the fallback name that release has.")
    parser.add_argument("what", choices=("rules", "dashboards", "docs", "scaling", "all"), help="which artefacts")
    parser.add_argument("--check", action="store_true",
                        help="compare with the files on disk instead of writing; exit 1 on drift or orphans")
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="repository root holding alert_rules/, dashboards/, docs/ (default: current directory)")
    parser.add_argument("--config", type=Path, default=None,
                        help="render with this deployment's slo and thresholds (raw-series rules have no sidecar "
                             "to read the objectives from)")
    parser.add_argument("--sidecar-job", default=None,
                        help="Prometheus job name that scrapes the sidecar (default vllm-diag)")
    parser.add_argument("--severity-labels", default=None, metavar="critical=X,warning=Y,info=Z",
                        help="rename the severity label values for your routing tree")
    parser.add_argument("--runbook-url", default=None, metavar="BASE",
                        help="base URL of the runbooks the alerts link to (BASE/<alertname lowercase>.md; default "
                             "the project's docs/runbooks on GitHub)")
    parser.add_argument("--raw-only", action="store_true",
                        help="rules for a fleet Prometheus scrapes without vllm-diag sidecars: no sidecar-down alert")
    parser.add_argument("--histogram-buckets", default=None, metavar="JSON",
                        help="the JSON given to vLLM's --custom-histogram-buckets (0.32+), when it replaces the "
                             "time_to_first_token or inter_token_latency edges: objectives must sit on an edge")
    parser.set_defaults(func=run)


def options_from(args: argparse.Namespace) -> Options | None:
    """Render options from the flags; None (the committed defaults) when no flag is given."""
    from exporter.render.rules import DEFAULT_OPTIONS, SEVERITIES, Options

    config, job, labels = getattr(args, "config", None), getattr(args, "sidecar_job", None), \
        getattr(args, "severity_labels", None)
    custom = getattr(args, "histogram_buckets", None)
    runbooks, raw_only = getattr(args, "runbook_url", None), getattr(args, "raw_only", False)
    if config is None and job is None and labels is None and custom is None and runbooks is None and not raw_only:
        return None
    extra: dict[str, Any] = {}
    if custom is not None:
        extra["histogram_edges"] = _histogram_edges(custom)
    settings = load_settings(config) if config is not None else None
    o = (Options.from_settings(settings, **extra) if settings is not None
         else replace(DEFAULT_OPTIONS, **extra) if extra else DEFAULT_OPTIONS)
    extra = {}
    if runbooks is not None:
        if not runbooks.startswith(("http://", "https://")):
            raise ValueError(f"--runbook-url: {runbooks!r} is not an http(s) URL")
        extra["runbook_base_url"] = runbooks.rstrip("/")
    if raw_only:
        extra["sidecars"] = False
    if job is not None:
        extra["sidecar_job"] = job
    if labels is not None:
        mapping = dict(o.severity_labels)
        for item in labels.split(","):
            key, sep, value = item.partition("=")
            if not sep or key.strip() not in SEVERITIES or not value.strip():
                raise ValueError(f"--severity-labels: {item!r} is not one of {'/'.join(SEVERITIES)}=NAME")
            mapping[key.strip()] = value.strip()
        extra["severity_labels"] = mapping
    return replace(o, **extra)


def _histogram_edges(text: str) -> dict[str, tuple[float, ...]]:
    """vLLM's --custom-histogram-buckets JSON: {"family": [edges...]}, families replaced whole."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--histogram-buckets: not JSON ({exc})") from None
    if not isinstance(data, dict) or not all(
            isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v) for v in data.values()):
        raise ValueError('--histogram-buckets: give {"family": [edge, ...]} as for vLLM\'s --custom-histogram-buckets')
    edges = dict(buckets.DEFAULT_EDGES)
    edges.update({k: tuple(float(x) for x in v) for k, v in data.items()})
    return edges


def run(args: argparse.Namespace) -> int:
    from exporter.render.generate import check, orphans, render, write
    from exporter.render.lint import lint, version_lint

    root: Path = args.root
    try:
        options = options_from(args)
    except (ConfigError, ValueError) as exc:
        print(f"render: {exc}", file=sys.stderr)
        return 2
    outputs = render(args.what, options)
    if args.what in ("all", "docs"):
        # The accuracy reports' tables, from the results summaries committed under the root's docs/data/.
        from exporter.render.reports import ReportError, render_files

        try:
            outputs.update(render_files(root))
        except ReportError as exc:
            print(f"render: {exc}", file=sys.stderr)
            return 2
    # A query naming a series nobody emits is a bug in the generator, whichever mode runs.
    problems = [f"lint: {line}" for line in lint()]
    # ... and so is one that reads a vLLM name some supported release lacks, with no fallback for it.
    problems += [f"versions: {line}" for line in version_lint()]
    if args.check:
        problems += check(root, outputs, args.what)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print(f"render --check: {len(problems)} problem(s)", file=sys.stderr)
            return EXIT_DRIFT
        print(f"render --check: {len(outputs)} file(s) up to date")
        return 0
    for line in write(root, outputs, args.what):
        print(line)
    problems += [f"{rel}: orphan, no generator produces it (delete it: `git rm {rel}`)"
                 for rel in orphans(root, outputs, args.what)]
    for line in problems:
        print(line, file=sys.stderr)
    return EXIT_DRIFT if problems else 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m exporter.render.cli``) until the main CLI wires ``register``."""
    parser = argparse.ArgumentParser(prog="vllm-diag")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
