"""``vllm-diag``: serve, diagnose (offline captures or a live URL), and the other tools.

Exit status is 0 whatever the verdict; non-zero only for bad input, with a one-line reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

import aiohttp

from exporter import __version__
from exporter.config import ConfigError, Settings, load_settings, target_from_url
from exporter.facts.discovery import FactDiscovery
from exporter.parse import ParseError, parse
from exporter.pipeline import TargetPipeline, capture_timestamp, replay
from exporter.poll import fetch
from exporter.publish import document, text
from exporter import demo, simulator
from exporter.render import cli as render

EXIT_BAD_INPUT = 2


class BadInput(Exception):
    """A one-line reason for a non-zero exit."""


def _settings(config: str | None, overrides: dict[str, Any]) -> Settings:
    try:
        return load_settings(config, overrides)
    except ConfigError as exc:
        raise BadInput("invalid configuration: " + "; ".join(exc.lines)) from None


def _emit(doc: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(text.render(doc))


def _diagnose_target(settings: Settings, source: str) -> dict[str, Any]:
    """The target `diagnose` evaluates: the config's first one (engine facts, SLOs), else a bare one."""
    if settings.targets:
        first = settings.targets[0].model_dump()
        first["url"] = source if source.startswith("http") else first["url"]
        return first
    return target_from_url(source if source.startswith("http") else "http://captures/metrics", name="captures")


def cmd_diagnose(args: argparse.Namespace) -> int:
    if bool(args.files) == bool(args.url):
        raise BadInput("give capture FILEs or --url URL (not both)")
    base = _settings(args.config, {})
    overrides: dict[str, Any] = {}
    if args.window is not None:
        overrides["window_seconds"] = args.window
    if args.url:
        interval = args.interval
        target = _diagnose_target(base, args.url)
        target.update(url=args.url, scrape_interval=interval, timeout=min(target.get("timeout", 3.0), interval))
        window = overrides.get("window_seconds", max(base.window_seconds, args.duration + interval))
        settings = _settings(args.config, {**overrides, "window_seconds": window, "targets": [target]})
        state = asyncio.run(_live(settings, args.duration))
    else:
        files = [Path(f) for f in args.files]
        for path in files:
            if not path.is_file():
                raise BadInput(f"{path}: no such file")
            _validate_capture(path)
        span = args.interval * max(1, len(files) - 1)
        window = overrides.get("window_seconds", max(base.window_seconds, span + args.interval))
        target = _diagnose_target(base, str(files[0]))
        target.update(scrape_interval=args.interval, timeout=min(target.get("timeout", 3.0), args.interval))
        settings = _settings(args.config, {**overrides, "window_seconds": window, "targets": [target]})
        if args.dcgm is not None and not Path(args.dcgm).is_dir():
            raise BadInput(f"{args.dcgm}: not a directory")
        state = replay(files, TargetPipeline(settings.targets[0], settings), args.interval,
                       dcgm_dir=Path(args.dcgm) if args.dcgm else None)
    _emit(document.build([state]), args.format)
    return 0


def _validate_capture(path: Path) -> None:
    try:
        body = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read as UTF-8 text ({exc})") from None
    try:
        snapshot = parse(body, capture_timestamp(body) or 0.0)
    except ParseError as exc:
        raise BadInput(f"{path}: {exc}") from None
    if not any(name.startswith("vllm:") for name in snapshot.families()):
        raise BadInput(f"{path}: no vLLM metrics in this capture (is it a vLLM /metrics page?)")


async def _live(settings: Settings, duration: float):
    target = settings.targets[0]
    pipeline = TargetPipeline(target, settings)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration
    async with aiohttp.ClientSession() as session:
        # Only the sources that need no process access: the HTTP API (metrics come with the scrapes).
        discovery = FactDiscovery(target, local=False)
        for source, values in (await discovery.read_http(session)).items():
            pipeline.observe_facts(source, values)
        while True:
            started = loop.time()
            pipeline.ingest(await fetch(session, target.url, timeout=target.timeout, max_bytes=target.max_bytes))
            if started + target.scrape_interval > deadline:
                break
            await asyncio.sleep(max(0.0, started + target.scrape_interval - loop.time()))
    return pipeline.state


def cmd_serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.listen:
        overrides["listen"] = args.listen
    if args.web_config_file:
        overrides["web_config_file"] = args.web_config_file
    if args.target:
        overrides["targets"] = [target_from_url(url) for url in args.target]
    settings = _settings(args.config, overrides)
    logging.getLogger().setLevel(settings.log_level)
    if not settings.targets:
        raise BadInput("no targets: give --target URL or a config file with targets")
    from exporter.hostcpu import host_probe_for
    from exporter.server import run
    from exporter.webconfig import WebConfigError

    try:
        run(settings, host_probes=host_probe_for)
    except WebConfigError as exc:
        raise BadInput(str(exc)) from None
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm-diag", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"vllm-diag {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the sidecar")
    serve.add_argument("--config", help="YAML configuration file")
    serve.add_argument("--target", action="append", metavar="URL", help="a vLLM /metrics URL (repeatable)")
    serve.add_argument("--listen", metavar="HOST:PORT", help="address to serve on")
    serve.add_argument("--web-config-file", metavar="FILE",
                       help="TLS and basic auth, in the Prometheus exporter-toolkit format")
    serve.set_defaults(func=cmd_serve)

    diag = sub.add_parser("diagnose", help="diagnose saved captures, or a live URL for a while")
    diag.add_argument("files", nargs="*", metavar="FILE", help="saved /metrics captures, in order")
    diag.add_argument("--url", help="live vLLM /metrics URL")
    diag.add_argument("--duration", type=float, default=30.0, help="seconds to watch a live URL (default 30)")
    diag.add_argument("--interval", type=float, default=15.0,
                      help="seconds between captures, or between live scrapes (default 15)")
    diag.add_argument("--window", type=float, help="window seconds (default: all captures)")
    diag.add_argument("--config", help="YAML configuration: first target's engine facts, SLOs, thresholds")
    diag.add_argument("--format", choices=("text", "json"), default="text")
    diag.add_argument("--dcgm", metavar="DIR", help="DCGM captures with the same file names (GPU utilisation)")
    diag.set_defaults(func=cmd_diagnose)

    simulate = sub.add_parser("simulate", help="serve or capture a simulated vLLM scenario")
    simulator.configure_parser(simulate)
    simulate.set_defaults(func=simulator.run)

    demo_parser = sub.add_parser("demo", help="simulated vLLM engines plus the sidecar, for a first look")
    demo.configure_parser(demo_parser)
    demo_parser.set_defaults(func=_demo)

    render.register(sub)
    return parser


def _demo(args: argparse.Namespace) -> int:
    try:
        return demo.run(args)
    except KeyError as exc:
        raise BadInput(str(exc.args[0])) from None


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per job run is noise
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BadInput as exc:
        print(f"vllm-diag: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
