"""A vLLM V1 engine simulator that speaks vLLM 0.32's exact ``/metrics`` (plus 0.34's render duration where a
scenario serves 0.34).

``vllm-diag simulate --scenario NAME [--port N | --out DIR --duration S --interval S]``
either serves a scenario live (``server``) or writes captures for offline replay
(``capture``). The model (``engine``), its traffic (``workload``), the wire format
(``exposition``) and the named scenarios with their expected diagnosis (``scenarios``) are
one module each; ``docs/scenarios.md`` tabulates the scenarios.

CLI wiring: ``configure_parser`` adds the ``simulate`` options to an argparse (sub)parser and
``run`` executes them; ``main`` does both for a bare argument list.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from exporter.argtypes import port, positive

if TYPE_CHECKING:
    from exporter.simulator.capture import write_captures
    from exporter.simulator.scenarios import SCENARIOS, Expected, Scenario, get_scenario, scenario_names

# The advisor in the sidecar reads the engine model (``engine``, ``workload``) through this package: the scenarios,
# the wire format and the capture writer load when a name of theirs is first read, not with it.
_LAZY = {"write_captures": "exporter.simulator.capture", "SCENARIOS": "exporter.simulator.scenarios",
         "Expected": "exporter.simulator.scenarios", "Scenario": "exporter.simulator.scenarios",
         "get_scenario": "exporter.simulator.scenarios", "scenario_names": "exporter.simulator.scenarios"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "SCENARIOS",
    "Expected",
    "Scenario",
    "configure_parser",
    "get_scenario",
    "main",
    "run",
    "scenario_names",
    "write_captures",
]


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``simulate`` options to ``parser`` (a subcommand parser or a fresh one)."""
    parser.add_argument(
        "--scenario", action="append", metavar="NAME",
        help="scenario to simulate (repeat to serve several); see --list",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=port, default=None, help="serve /metrics on this port")
    parser.add_argument("--speed", type=positive, default=1.0, help="simulated seconds per wall second")
    parser.add_argument("--out", metavar="DIR", help="write captures to DIR instead of serving")
    parser.add_argument("--duration", type=positive, default=600.0, help="simulated seconds to capture")
    parser.add_argument("--interval", type=positive, default=15.0, help="simulated seconds between captures")
    parser.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    return parser


def run(args: argparse.Namespace) -> int:
    """Execute parsed ``simulate`` options; returns the process exit code."""
    from exporter.simulator.capture import write_captures
    from exporter.simulator.scenarios import SCENARIOS, get_scenario

    if args.list:
        for sc in SCENARIOS.values():
            print(f"{sc.name:24s} {sc.case:8s} expect {sc.expected.verdict:11s} {sc.description}")
        return 0
    if not args.scenario:
        print("vllm-diag: --scenario NAME is required (see --list)", file=sys.stderr)
        return 2
    try:
        scenarios = [get_scenario(name) for name in args.scenario]
    except KeyError as exc:
        print(f"vllm-diag: --scenario: {exc.args[0]}", file=sys.stderr)
        return 2
    if args.out is not None:
        if args.port is not None:
            print("vllm-diag: use either --port or --out, not both", file=sys.stderr)
            return 2
        if len(scenarios) != 1:
            print("vllm-diag: --out takes exactly one --scenario", file=sys.stderr)
            return 2
        try:
            paths = write_captures(scenarios[0], args.out, args.duration, args.interval, args.seed)
        except ValueError as exc:
            print(f"vllm-diag: --duration {args.duration:g} is shorter than --interval {args.interval:g}"
                  if args.duration < args.interval else f"vllm-diag: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {len(paths)} captures of {scenarios[0].name} to {args.out}")
        return 0
    from exporter.simulator.server import DEFAULT_PORT, serve  # aiohttp only when serving

    port = DEFAULT_PORT if args.port is None else args.port
    names = ", ".join(sc.name for sc in scenarios)
    print(f"simulating {names} on http://{args.host}:{port}/metrics (speed x{args.speed})", file=sys.stderr)
    try:
        asyncio.run(serve(scenarios, args.host, port, speed=args.speed, seed=args.seed))
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = configure_parser(argparse.ArgumentParser(prog="vllm-diag simulate"))
    return run(parser.parse_args(argv))
