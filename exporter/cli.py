"""The ``vllm-diag`` command: serve, diagnose (offline captures or a live URL), and the other tools.

Exit status is 0 whatever the verdict; 2 for bad input, with one line on stderr that starts
``vllm-diag:`` and names the flag, or the file with line and column, that caused it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from exporter import __version__
from exporter.argtypes import positive
from exporter.config import ConfigError, Settings, load_settings, target_from_url
from exporter.facts.discovery import FactDiscovery
from exporter.pipeline import TargetPipeline, replay
from exporter.poll import fetch
from exporter.promsource import flags as source_flags
from exporter.publish import document, text
from exporter.render import cli as render

if TYPE_CHECKING:
    from exporter.advisor.stepcost import StepEvidence
    from exporter.offline import CaptureSet, Skipped

EXIT_BAD_INPUT = 2
DEFAULT_INTERVAL = 15.0  # seconds between plain captures when nothing says otherwise


class BadInput(Exception):
    """A one-line reason for a non-zero exit."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``vllm-diag: diagnose: argument --interval: ...``, exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.removeprefix("vllm-diag").strip()
        self.exit(EXIT_BAD_INPUT, f"vllm-diag: {command + ': ' if command else ''}{message}\n")


def _settings(config: str | None, overrides: dict[str, Any], origins: dict[str, str] | None = None) -> Settings:
    try:
        return load_settings(config, overrides, origins)
    except ConfigError as exc:
        raise BadInput("; ".join(exc.lines)) from None


def _emit(doc: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(text.render(doc))


def _diagnose_target(settings: Settings, source: str, name: str = "captures") -> dict[str, Any]:
    """The target `diagnose` evaluates: the config's first one (engine facts, SLOs), else a bare one."""
    if settings.targets:
        first = settings.targets[0].model_dump()
        first["url"] = source if source.startswith("http") else first["url"]
        first["record_dir"] = None  # diagnose only reads: it never writes captures, whatever the config says
        return first
    return target_from_url(source if source.startswith("http") else "http://captures/metrics", name=name)


# Which flag fills which setting, so a bad value is reported under the flag the user typed.
DIAGNOSE_FLAGS = {"targets.0.scrape_interval": "--interval", "targets.0.timeout": "--interval",
                  "window_seconds": "--window"}


def cmd_diagnose(args: argparse.Namespace) -> int:
    if source_flags.wanted(args) or args.at or args.from_ or args.to or args.step:
        return _diagnose_prometheus(args)
    pipeline, skipped = _diagnosed_and_skipped(args)
    doc = document.build([pipeline.state])
    if not args.url:  # offline: which captures were left out, and why
        doc["skipped_captures"] = [s.to_dict() for s in skipped]
    _emit(doc, args.format)
    return 0


def cmd_advise(args: argparse.Namespace) -> int:
    """diagnose, then the what-if advisor on the same window (exporter/advisor)."""
    from exporter.advisor import BadQuestion, advise, parse_question
    from exporter.facts.resolve import engine_facts

    for question in args.what_if or ():
        try:
            parse_question(question)
        except BadQuestion as exc:
            raise BadInput(f"--what-if {question}: {exc}") from None
    profile = None
    if args.profile:
        from exporter.advisor.profile import ProfileError, load

        try:
            profile = load(Path(args.profile))
        except ProfileError as exc:
            raise BadInput(f"--profile: {exc}") from None
    pipelines = _advise_prometheus(args) if source_flags.wanted(args) else [_diagnosed(args)]
    states = []
    for pipeline in pipelines:
        state = pipeline.state
        active = {cause.id for cause in state.diagnosis.active_causes if not cause.informational}
        try:
            result = advise(pipeline.window, engine_facts(state.engine), pipeline.thresholds, args.what_if or (),
                            active, profile=profile or _target_profile(pipeline))
        except BadQuestion as exc:
            raise BadInput(f"--what-if: {exc}") from None
        states.append(replace(state, advice=result))
    _emit(document.build(states), args.format)
    return 0


def _target_profile(pipeline: TargetPipeline) -> StepEvidence | None:
    """The step profile a target's configuration names (``step_profile``), or None."""
    from exporter.advisor.profile import ProfileError, load

    path = pipeline.target.step_profile
    if path is None:
        return None
    try:
        return load(path)
    except ProfileError as exc:
        raise BadInput(f"targets[{pipeline.target.name}].step_profile: {exc}") from None


def cmd_profile(args: argparse.Namespace) -> int:
    """A short, bounded sweep of the engine's step cost (exporter/advisor/profile.py), written to --out."""
    from exporter.advisor.profile import PHASES, ProfileError, sweep

    if not args.url.startswith(("http://", "https://")):
        raise BadInput(f"profile: {args.url} is not an http(s) URL of a vLLM server")
    print(f"profiling {args.url}: {len(PHASES)} phases of {args.seconds:g} s of load (use an engine out of "
          "service)", file=sys.stderr)
    try:
        data = asyncio.run(sweep(args.url, args.seconds, args.interval))
    except ProfileError as exc:
        raise BadInput(f"profile: {exc}") from None
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    evidence = data["evidence"]
    said = (f"decode weight {evidence['decode_token_weight']:.1f} prefill tokens (log sigma "
            f"{evidence['decode_token_weight_log_sigma']:.2f})" if evidence["identified"]
            else f"not identified: {evidence['reason']}")
    print(f"{args.out}: {said}")
    return 0


def _advise_prometheus(args: argparse.Namespace) -> list[TargetPipeline]:
    """Every target's window at --at T, rebuilt from the raw series in Prometheus (issue 15's source)."""
    if args.files or args.url:
        raise BadInput("give capture FILEs, --url URL or --prometheus URL (one of them)")
    if args.at is None or args.from_ or args.to or args.step:
        raise BadInput("advise --prometheus calibrates on one window: give --at T (not --from/--to/--step)")
    overrides, origins = source_flags.overrides(args)
    if args.window is not None:
        overrides["window_seconds"], origins["window_seconds"] = args.window, "--window"
    settings = _settings(args.config, overrides, origins)
    from exporter.promsource.command import pipelines_at  # the store's side, loaded only when asked for

    try:
        return pipelines_at(args, settings)
    except source_flags.PromInputError as exc:
        raise BadInput(str(exc)) from None


def _diagnosed(args: argparse.Namespace) -> TargetPipeline:
    """The pipeline after judging the captures (or the live URL) as one window."""
    return _diagnosed_and_skipped(args)[0]


def _diagnosed_and_skipped(args: argparse.Namespace) -> tuple[TargetPipeline, tuple[Skipped, ...]]:
    """The same, and the damaged or unreadable captures left out (each warned about on stderr)."""
    from exporter.offline import CaptureError, resolve  # reading captures: not the sidecar's path

    if bool(args.files) == bool(args.url):
        raise BadInput("give capture FILEs, a folder of captures, or --url URL (not both)")
    overrides: dict[str, Any] = {}
    if args.window is not None:
        overrides["window_seconds"] = args.window
    if args.url:
        base = _settings(args.config, {})
        interval = args.interval or DEFAULT_INTERVAL
        target = _diagnose_target(base, args.url)
        target.update(url=args.url, scrape_interval=interval, timeout=min(target.get("timeout", 3.0), interval))
        window = overrides.get("window_seconds", max(base.window_seconds, args.duration + interval))
        _check_window(window, interval)
        settings = _settings(args.config, {**overrides, "window_seconds": window, "targets": [target]},
                             DIAGNOSE_FLAGS)
        return asyncio.run(_live(settings, args.duration)), ()
    else:
        try:
            captures = resolve(args.files)
        except CaptureError as exc:
            raise BadInput(str(exc)) from None
        config = args.config or (str(captures.config) if captures.config else None)  # --config wins
        dcgm = Path(args.dcgm) if args.dcgm is not None else captures.dcgm  # --dcgm wins
        if dcgm is not None and not dcgm.is_dir():
            raise BadInput(f"--dcgm {dcgm}: not a directory")
        for skipped in captures.skipped:  # one line each, and the rest is diagnosed
            sys.stderr.write(f"vllm-diag: warning: skipped {skipped.file}: {skipped.reason}\n")
        base = _settings(config, {})
        # The folder's own configuration says how its captures were taken, whatever --config judges them by.
        folder = None
        if captures.config is not None:
            folder = base if config == str(captures.config) else _settings(str(captures.config), {})
        interval = _capture_interval(args.interval, captures, folder)
        span = captures.span if captures.span is not None else interval * max(1, len(captures.files) - 1)
        window = overrides.get("window_seconds", max(base.window_seconds, span + interval))
        _check_window(window, interval)
        target = _diagnose_target(base, str(captures.files[0]), name=captures.target or "captures")
        target.update(scrape_interval=interval, timeout=min(target.get("timeout", 3.0), interval))
        if folder is not None and folder is not base and folder.targets:  # the engine's facts, --config's first
            recorded = folder.targets[0].engine.model_dump(exclude_none=True)
            target["engine"] = {**recorded, **{k: v for k, v in target.get("engine", {}).items() if v is not None}}
        settings = _settings(config, {**overrides, "window_seconds": window, "targets": [target]}, DIAGNOSE_FLAGS)
        pipeline = TargetPipeline(settings.targets[0], settings)
        state = replay(list(captures.files), pipeline, interval, dcgm_dir=dcgm)
        if state.status == "ok":
            # The captures are one window, judged once as a whole: the live verdict's hysteresis
            # would hold what the first few captures suggested (two captures vs three would differ).
            pipeline.tracker = type(pipeline.tracker)()
            pipeline.evaluate(state.evaluated_at)
        return pipeline, captures.skipped


def _diagnose_prometheus(args: argparse.Namespace) -> int:
    if args.files or args.url:
        raise BadInput("give capture FILEs, --url URL or --prometheus URL (one of them)")
    overrides, origins = source_flags.overrides(args)
    if args.window is not None:
        overrides["window_seconds"], origins["window_seconds"] = args.window, "--window"
    settings = _settings(args.config, overrides, origins)
    if settings.prometheus is None:
        raise BadInput("--at/--from/--to/--step read from Prometheus: add --prometheus URL")
    from exporter.promsource.command import diagnose  # the store's side, loaded only when asked for

    try:
        return diagnose(args, settings)
    except source_flags.PromInputError as exc:
        raise BadInput(str(exc)) from None


def _capture_interval(flag: float | None, captures: CaptureSet, folder: Settings | None) -> float:
    """Seconds between captures: the flag, else the recorded scrape times, else the folder's config."""
    if flag is not None:
        return flag
    if captures.spacing is not None and captures.spacing > 0:
        return captures.spacing
    if folder is not None and folder.targets:
        return folder.targets[0].scrape_interval  # `simulate --out` writes its capture interval there
    return DEFAULT_INTERVAL


def _check_window(window: float, interval: float) -> None:
    if window < 2 * interval:
        raise BadInput(f"--window {window:g}: must hold at least two scrapes (2 x --interval {interval:g} s)")


async def _live(settings: Settings, duration: float) -> TargetPipeline:
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
    return pipeline


def cmd_serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    origins: dict[str, str] = {}
    if args.listen:
        overrides["listen"], origins["listen"] = args.listen, "--listen"
    if args.web_config_file:
        overrides["web_config_file"], origins["web_config_file"] = args.web_config_file, "--web-config-file"
    if args.target:
        overrides["targets"], origins["targets"] = [target_from_url(url) for url in args.target], "--target"
    source, source_origins = source_flags.overrides(args)
    if args.target and source:
        raise BadInput("--target scrapes vLLM, --prometheus reads a store: give one of them")
    settings = _settings(args.config, {**overrides, **source}, {**origins, **source_origins})
    logging.getLogger().setLevel(settings.log_level)
    if settings.prometheus is not None:  # the central diagnoser: targets come from the store's series
        listen = f"--listen {settings.listen}" if args.listen else f"listen {settings.listen}"
        ensure_free(settings.listen_host, settings.listen_port, listen)
        from exporter.promsource.command import serve  # the store's side, loaded only when asked for

        try:
            serve(settings)
        except source_flags.PromInputError as exc:
            raise BadInput(str(exc)) from None
        except OSError as exc:
            raise BadInput(f"{listen}: {_os_error(exc)}") from None
        return 0
    if not settings.targets:
        raise BadInput("no targets: give --target URL or a config file with targets")
    from exporter.hostcpu import host_probe_for
    from exporter.server import run
    from exporter.webconfig import WebConfigError

    listen = f"--listen {settings.listen}" if args.listen else f"listen {settings.listen}" + (
        f" (from {args.config})" if args.config else "")
    ensure_free(settings.listen_host, settings.listen_port, listen)
    try:
        run(settings, host_probes=host_probe_for)
    except WebConfigError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:  # the port was taken between the check and the bind
        raise BadInput(f"{listen}: {_os_error(exc)}") from None
    return 0


def ensure_free(host: str, port: int, what: str) -> None:
    """Fail with one line, before anything starts or logs, when HOST:PORT cannot be bound."""
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BadInput(f"{what}: cannot resolve {host!r} ({exc.strerror})") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            # The server binds with SO_REUSEADDR too: a port in TIME_WAIT is free to it, and to us.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise BadInput(f"{what}: {exc.strerror or exc}") from None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command``, the simulator's and the demo's flags only for their own command
    (``serve`` then never loads the simulator: a megabyte of RSS)."""
    parser = Parser(prog="vllm-diag", description=__doc__.splitlines()[0].replace("``", ""),
                    epilog="Run 'vllm-diag COMMAND --help' for a command's flags. Exit status: 0 whatever "
                           "the verdict, 2 for bad input (one line on stderr).")
    parser.add_argument("--version", action="version", version=f"vllm-diag {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="one of the commands below")

    serve = sub.add_parser("serve", help="run the sidecar",
                           description="Poll vLLM /metrics and serve the diagnosis: /metrics, /api/v1/diagnosis, "
                                       "/ (HTML), /healthz, /readyz. Settings: YAML file, then VLLM_DIAG_* "
                                       "environment variables, then these flags.")
    serve.add_argument("--config", metavar="FILE", help="YAML configuration file")
    serve.add_argument("--target", action="append", metavar="URL", help="a vLLM /metrics URL (repeatable)")
    serve.add_argument("--listen", metavar="HOST:PORT", help="address to serve on (default 0.0.0.0:9863)")
    serve.add_argument("--web-config-file", metavar="FILE",
                       help="TLS and basic auth, in the Prometheus exporter-toolkit format")
    source_flags.add_serve_flags(serve)
    serve.set_defaults(func=cmd_serve)

    diag = sub.add_parser("diagnose", help="diagnose saved captures, or a live URL for a while",
                          description="Offline: saved /metrics captures, or one folder of them as written by "
                                      "'simulate --out' or a target's record_dir (its vllm-diag.yaml and dcgm/ "
                                      "are used unless --config or --dcgm is given). Recorded captures are "
                                      "ordered by their scrape time. Live: --url for --duration seconds. "
                                      "Never writes files.")
    diag.add_argument("files", nargs="*", metavar="FILE|DIR",
                      help="saved /metrics captures in scrape order, or one folder of captures")
    diag.add_argument("--url", help="live vLLM /metrics URL")
    diag.add_argument("--duration", type=positive, default=30.0, metavar="SECONDS",
                      help="seconds to watch a live URL (default 30)")
    diag.add_argument("--interval", type=positive, default=None, metavar="SECONDS",
                      help="seconds between captures or live scrapes (default: the recorded scrape times, "
                           "else the folder's vllm-diag.yaml, else 15)")
    diag.add_argument("--window", type=positive, metavar="SECONDS",
                      help="diagnosis window (default: the configured window, or all captures if longer)")
    diag.add_argument("--config", metavar="FILE",
                      help="YAML configuration: first target's engine facts, SLOs, thresholds")
    diag.add_argument("--format", choices=("text", "json"), default="text",
                      help="text report (default) or the JSON of /api/v1/diagnosis")
    diag.add_argument("--dcgm", metavar="DIR", help="DCGM captures with the same file names (GPU utilisation)")
    source_flags.add_source_flags(diag)
    source_flags.add_diagnose_flags(diag)
    diag.set_defaults(func=cmd_diagnose)

    # advise takes diagnose's inputs (parents=[diag] copies its arguments, and any it gains later).
    adv = sub.add_parser("advise", parents=[diag], add_help=False,
                         help="predict what a knob change would do to this workload",
                         description="Diagnose the captures (or a live URL) as 'diagnose' does, calibrate the "
                                     "engine model to that window, check it reproduces the window, then predict "
                                     "TTFT p95, ITL p95, preemptions/s and throughput for each --what-if (alone, "
                                     "then together), or for the changes the active causes suggest. Never writes "
                                     "files.")
    adv.add_argument("--what-if", action="append", metavar="KNOB=VALUE",
                     help="a change to evaluate (repeatable), e.g. max_num_seqs=6, kv_cache_memory_bytes=8GiB, "
                          "max_tokens=512, max_num_batched_tokens=4096")
    adv.add_argument("--profile", metavar="FILE", help="the engine's step cost from `vllm-diag profile` (used where "
                     "the window does not identify it; default: the target's step_profile)")
    adv.set_defaults(func=cmd_advise)

    prof = sub.add_parser("profile", help="measure the engine's step cost with a short sweep (sends load)",
                          description="Send a few phases of closed-loop requests (one decode, many decodes, long "
                                      "prompts beside them) to a vLLM server OUT OF SERVICE, scrape its /metrics, "
                                      "fit the step cost (fixed, per prefill token, per decode) and write it to "
                                      "--out for `advise --profile` and a target's step_profile.")
    prof.add_argument("url", help="the engine's base URL, e.g. http://127.0.0.1:8000")
    prof.add_argument("--out", required=True, metavar="FILE", help="where to write the profile (JSON)")
    prof.add_argument("--seconds", type=float, default=20.0, help="seconds of load per phase (default 20)")
    prof.add_argument("--interval", type=float, default=2.0, help="seconds between scrapes (default 2)")
    prof.set_defaults(func=cmd_profile)

    simulate = sub.add_parser("simulate", help="serve or capture a simulated vLLM scenario",
                              description="A vLLM 0.32-compatible /metrics source from the built-in simulator: "
                                          "served live (--port) or written as captures (--out).")
    if command in (None, "simulate"):
        from exporter import simulator

        simulator.configure_parser(simulate)
    simulate.set_defaults(func=_simulate)

    demo_parser = sub.add_parser("demo", help="simulated vLLM engines plus the sidecar, for a first look",
                                 description="Simulated vLLM engines plus the sidecar in one process, for a first "
                                             "look without a GPU. The diagnosis window (three minutes) starts "
                                             "filled with the simulator's warm-up, so verdicts are settled at once.")
    if command in (None, "demo"):
        from exporter import demo

        demo.configure_parser(demo_parser)
    demo_parser.set_defaults(func=_demo)

    render.register(sub)
    return parser


def _demo(args: argparse.Namespace) -> int:
    from exporter import demo

    host, _, port = args.listen.rpartition(":")
    if not port.isdigit():
        raise BadInput(f"--listen {args.listen!r}: not HOST:PORT")
    ensure_free(host.strip("[]"), int(port), f"--listen {args.listen}")
    ensure_free("127.0.0.1", args.simulator_port, f"--simulator-port {args.simulator_port}")
    _check_window(args.window, args.interval)
    try:
        return demo.run(args)
    except KeyError as exc:
        raise BadInput(f"--scenario: {exc.args[0]}") from None
    except OSError as exc:  # a port taken between the check and the bind
        raise BadInput(_os_error(exc)) from None


def _simulate(args: argparse.Namespace) -> int:
    from exporter import simulator

    if args.scenario and args.out is None and not args.list:
        from exporter.simulator.server import DEFAULT_PORT

        port = DEFAULT_PORT if args.port is None else args.port
        ensure_free(args.host, port, f"--port {port}" if args.port is not None else f"port {port} (the default)")
    try:
        return simulator.run(args)
    except OSError as exc:  # an --out folder we cannot write, a port taken meanwhile
        raise BadInput(_os_error(exc)) from None


def _os_error(exc: OSError) -> str:
    return f"{exc.filename}: {exc.strerror}" if exc.filename else " ".join(str(exc).split())


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per job run is noise
    words = source_flags.join_relative_times(list(sys.argv[1:] if argv is None else argv))
    command = next((word for word in words if not word.startswith("-")), None)  # no top-level flag takes a value
    args = build_parser(command).parse_args(words)
    try:
        return args.func(args)
    except BadInput as exc:
        print(f"vllm-diag: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
