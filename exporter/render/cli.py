"""``vllm-diag render rules|dashboards|all [--check]``.

Wire it with ``register(subparsers)``; the parsed ``args.func(args)`` returns the exit status:
0 when written (or, with ``--check``, when everything is up to date), 1 on drift or a lint
finding, listing every problem with the command that fixes it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_DRIFT = 1


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "render", help="regenerate alert rules, runbooks and dashboards from the catalog",
        description="Regenerate alert_rules/, docs/runbooks/, deploy/alertmanager/alertmanager.yml (rules) "
                    "and dashboards/ from the catalog. --check renders in memory and fails on any drift.")
    parser.add_argument("what", choices=("rules", "dashboards", "all"), help="which artefacts")
    parser.add_argument("--check", action="store_true",
                        help="compare with the files on disk instead of writing; exit 1 on drift or orphans")
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="repository root holding alert_rules/, dashboards/, docs/ (default: current directory)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exporter.render import check, render, write
    from exporter.render.lint import lint

    root: Path = args.root
    outputs = render(args.what)
    # A query naming a series nobody emits is a bug in the generator, whichever mode runs.
    problems = [f"lint: {line}" for line in lint()]
    if args.check:
        problems += check(root, outputs, args.what)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print(f"render --check: {len(problems)} problem(s)", file=sys.stderr)
            return EXIT_DRIFT
        print(f"render --check: {len(outputs)} file(s) up to date")
        return 0
    from exporter.render import orphans

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
