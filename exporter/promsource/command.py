"""The ``--prometheus`` side of ``vllm-diag diagnose`` and ``vllm-diag serve``: flags, settings, output.

Credentials come from files or the configuration (``prometheus.bearer_token``, or the environment
variable ``VLLM_DIAG_PROMETHEUS__BEARER_TOKEN``), never from a flag: a command line is readable
by every user of the machine (``ps``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from exporter import __version__
from exporter.argtypes import positive
from exporter.config import Settings
from exporter.pipeline import TargetPipeline
from exporter.promsource.client import PromClient, PromError
from exporter.promsource.span import TargetSpan, judge_span
from exporter.promsource.timespec import TimeSpecError, iso, parse_duration, parse_time
from exporter.publish import document, text, timeline

DEFAULT_STEP = 60.0
MAX_STEPS = 10_000  # per target: beyond this the text strip and the JSON stop being readable


class PromInputError(Exception):
    """A one-line reason for exit status 2 (the CLI prints it as ``vllm-diag: ...``)."""


# flag -> (dest, dotted setting); the setting names what an error line points at.
SOURCE_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--prometheus", "prometheus", "prometheus.url"),
    ("--match", "match", "prometheus.match"),
    ("--target-label", "target_label", "prometheus.target_labels"),
    ("--bearer-token-file", "bearer_token_file", "prometheus.bearer_token_file"),
    ("--basic-auth-user", "basic_auth_user", "prometheus.basic_auth.username"),
    ("--basic-auth-password-file", "basic_auth_password_file", "prometheus.basic_auth.password_file"),
    ("--ca-file", "ca_file", "prometheus.tls.ca_file"),
    ("--cert-file", "cert_file", "prometheus.tls.cert_file"),
    ("--key-file", "key_file", "prometheus.tls.key_file"),
    ("--insecure-skip-verify", "insecure_skip_verify", "prometheus.tls.insecure_skip_verify"),
    ("--tenant", "tenant", "prometheus.tenant"),
    ("--query-timeout", "query_timeout", "prometheus.timeout"),
)


def add_source_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("from Prometheus (or Thanos, Mimir, VictoriaMetrics)")
    group.add_argument("--prometheus", metavar="URL", help="base URL of the HTTP API, with any path prefix "
                       "(Mimir: http://mimir/prometheus)")
    group.add_argument("--match", metavar="SELECTOR", help="label selector of the vLLM series, e.g. '{job=\"vllm\"}'")
    group.add_argument("--target-label", action="append", metavar="LABEL",
                       help="label(s) that name one vLLM server (repeatable; default instance, e.g. pod)")
    group.add_argument("--bearer-token-file", metavar="FILE", help="file holding a bearer token")
    group.add_argument("--basic-auth-user", metavar="USER", help="basic auth user (password from the file below)")
    group.add_argument("--basic-auth-password-file", metavar="FILE", help="file holding the basic auth password")
    group.add_argument("--ca-file", metavar="FILE", help="CA bundle for the store's TLS certificate")
    group.add_argument("--cert-file", metavar="FILE", help="client certificate (mutual TLS)")
    group.add_argument("--key-file", metavar="FILE", help="client key (mutual TLS)")
    group.add_argument("--insecure-skip-verify", action="store_true", default=None,
                       help="do not verify the store's certificate (testing only)")
    group.add_argument("--tenant", metavar="ORG", help="X-Scope-OrgID header (Mimir, Cortex multi-tenancy)")
    group.add_argument("--query-timeout", type=positive, metavar="SECONDS", help="per query (default 30)")


def add_diagnose_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("time span (with --prometheus)")
    group.add_argument("--at", metavar="TIME", help="judge the window ending at TIME: RFC 3339, Unix seconds, now, "
                       "or relative like -2h")
    group.add_argument("--from", dest="from_", metavar="TIME", help="first evaluation step (same forms as --at)")
    group.add_argument("--to", metavar="TIME", help="last evaluation step (default now)")
    group.add_argument("--step", metavar="DURATION", help="between evaluation steps: 15s, 1m, 5m (default 1m)")


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    add_source_flags(parser)
    parser.add_argument("--interval", type=positive, metavar="SECONDS",
                        help="with --prometheus: seconds between diagnosis cycles (default 15)")
    parser.add_argument("--shard", type=shard_spec, metavar="I/N",
                        help="with --prometheus: diagnose only shard I of N (0-based), the targets whose target "
                             "labels hash to I modulo N, as Prometheus' hashmod does")


def shard_spec(text: str) -> tuple[int, int]:
    """``I/N`` -> (I, N), with 0 <= I < N."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()) or int(count) < 1 or int(index) >= int(count):
        raise argparse.ArgumentTypeError(f"{text!r}: write the shard as I/N with 0 <= I < N, e.g. 0/4")
    return int(index), int(count)


def overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``prometheus`` settings the flags give, and which flag set which setting."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}

    def put(path: str, value: Any, flag: str) -> None:
        node = values
        keys = path.split(".")[1:]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
        origins[path] = flag
        for end in range(2, len(keys) + 1):  # a section's own error (basic_auth, tls) names the flag too
            origins.setdefault(".".join(path.split(".")[:end]), flag)

    for flag, dest, path in SOURCE_FLAGS:
        value = getattr(args, dest, None)
        if value is None:
            continue
        if dest == "prometheus":
            put("prometheus.url", value, flag)
        elif dest == "target_label":
            put(path, tuple(value), flag)
        elif dest == "query_timeout":
            put(path, value, flag)
        else:
            put(path, value, flag)
    if getattr(args, "interval", None) is not None and getattr(args, "command", "") == "serve":
        put("prometheus.interval", args.interval, "--interval")
    if getattr(args, "shard", None) is not None and getattr(args, "command", "") == "serve":
        put("prometheus.shard", args.shard[0], "--shard")
        put("prometheus.shards", args.shard[1], "--shard")
    return ({"prometheus": values} if values else {}), origins


TIME_FLAGS = ("--at", "--from", "--to")


def join_relative_times(argv: list[str]) -> list[str]:
    """``--from -2h`` as ``--from=-2h``: argparse would take ``-2h`` for an option of its own."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in TIME_FLAGS and arg.startswith("-") and arg[1:2].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def wanted(args: argparse.Namespace) -> bool:
    return any(getattr(args, dest, None) is not None for _, dest, _ in SOURCE_FLAGS)


# -- diagnose --------------------------------------------------------------------------------
def span(args: argparse.Namespace, now: float) -> tuple[float, float, float]:
    """(first step, last step, step) from --at or --from/--to/--step."""
    def when(flag: str, value: str) -> float:
        try:
            return parse_time(value, now)
        except TimeSpecError as exc:
            raise PromInputError(f"{flag}: {exc}") from None

    if args.at is not None and (args.from_ is not None or args.to is not None):
        raise PromInputError("--at judges one instant; --from/--to a span: give one of them")
    if args.at is None and args.from_ is None:
        raise PromInputError("--prometheus needs a time: --at TIME, or --from TIME [--to TIME] [--step S]")
    try:
        step = parse_duration(args.step) if args.step is not None else DEFAULT_STEP
    except TimeSpecError as exc:
        raise PromInputError(f"--step: {exc}") from None
    if args.at is not None:
        at = when("--at", args.at)
        return at, at, step
    start = when("--from", args.from_)
    end = when("--to", args.to) if args.to is not None else now
    if end < start:
        raise PromInputError(f"--to {args.to or 'now'} ({iso(end)}) is before --from {args.from_} ({iso(start)})")
    if (end - start) / step > MAX_STEPS:
        raise PromInputError(f"--step {args.step or '1m'}: {(end - start) / step:.0f} steps, more than {MAX_STEPS}; "
                             "use a larger step")
    return start, end, step


def diagnose(args: argparse.Namespace, settings: Settings) -> int:
    source = settings.prometheus
    assert source is not None
    start, end, step = span(args, time.time())

    async def run() -> tuple[list[TargetSpan], dict[str, Any]]:
        async with PromClient(source) as client:
            spans = await judge_span(client, source, settings, start, end, step)
            info = {"prometheus": client.shown, "match": source.match, "target_labels": list(source.target_labels),
                    "from": start, "to": end, "step_seconds": step, "window_seconds": settings.window_seconds,
                    "queries": client.stats.queries, "bytes_read": client.stats.bytes_read,
                    "warnings": list(client.stats.warnings)}
            return spans, info

    try:
        spans, info = asyncio.run(run())
    except PromError as exc:
        raise PromInputError(str(exc)) from None
    if args.at is not None:
        doc = document.build([s.final_state for s in spans], now=end)
        doc["source"] = info
        if args.format == "json":
            _write_json(doc)
        else:
            sys.stdout.write(_source_line(info, at=True) + "\n\n" + text.render(doc) + _warnings(info))
        return 0
    doc = timeline_document(spans, info)
    if args.format == "json":
        _write_json(doc)
    else:
        sys.stdout.write(render_timelines(doc))
    return 0


def pipelines_at(args: argparse.Namespace, settings: Settings) -> list[TargetPipeline]:
    """Each target's pipeline after judging it at ``--at`` (its window then), for ``advise --prometheus``."""
    source = settings.prometheus
    if source is None:
        raise PromInputError("--at reads from Prometheus: add --prometheus URL")
    start, end, step = span(args, time.time())

    async def run() -> list[TargetSpan]:
        async with PromClient(source) as client:
            return await judge_span(client, source, settings, start, end, step)

    try:
        spans = asyncio.run(run())
    except PromError as exc:
        raise PromInputError(str(exc)) from None
    return [s.pipeline for s in spans if s.pipeline is not None]


def timeline_document(spans: list[TargetSpan], info: dict[str, Any]) -> dict[str, Any]:
    step = info["step_seconds"]
    targets = []
    for s in spans:
        final = s.final_state.to_dict()
        targets.append({
            "target": s.key.name, "labels": dict(s.key.labels), "model_name": final["model_name"],
            "scrapes": s.scrapes, "timeline": timeline.segments(s.steps, step),
            "incidents": timeline.incidents(s.key.name, s.steps, step),
            "steps": [x.to_dict() for x in s.steps], "missing": final["missing"],
            "engine": final["engine"],
        })
    return document.finite({"generated_at": time.time(), "version": __version__, "source": info,
                            "targets": targets})


def render_timelines(doc: dict[str, Any]) -> str:
    info = doc["source"]
    lines = [_source_line(info, at=False), f"legend: {timeline.legend()}", ""]
    for target in doc["targets"]:
        head = target["target"] + (f" (model {target['model_name']})" if target["model_name"] else "")
        lines += [head, "=" * len(head)]
        steps = [timeline.StepVerdict(s["at"], s["state"], s["verdict"], s["score"] or 0.0, tuple(s["symptoms"]),
                                      tuple(s["causes"])) for s in target["steps"]]
        lines += timeline.strip(steps)
        if target["incidents"]:
            lines.append("incidents:")
            lines += [f"  {incident['summary']}" for incident in target["incidents"]]
        else:
            lines.append("incidents: none (no layer held performance back at any step)")
        lines.append("timeline:")
        for run in target["timeline"]:
            symptoms = f" [{', '.join(run['symptoms'])}]" if run["symptoms"] else ""
            lines.append(f"  {timeline.clock(run['from'], info['from'])}-{timeline.clock(run['to'], info['from'])} "
                         f"{run['verdict']}{symptoms} ({run['steps']} step{'s' if run['steps'] != 1 else ''})")
        if target["missing"]:
            lines.append(f"missing: {', '.join(target['missing'])}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n" + _warnings(info)


def _source_line(info: dict[str, Any], at: bool) -> str:
    when = (f"at {iso(info['to'])}" if at else
            f"from {iso(info['from'])} to {iso(info['to'])}, step {info['step_seconds']:g} s")
    return (f"from {info['prometheus']} {info['match']}, {when}, window {info['window_seconds']:g} s "
            f"({info['queries']} queries, {info['bytes_read']} bytes read)")


def _warnings(info: dict[str, Any]) -> str:
    return "".join(f"warning from the store (partial data?): {w}\n" for w in info["warnings"])


def _write_json(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document.finite(doc), indent=2, allow_nan=False) + "\n")


# -- serve -----------------------------------------------------------------------------------
def serve(settings: Settings) -> None:
    import logging

    from aiohttp import web

    from exporter.promsource.central import create_central_app
    from exporter.webconfig import load_web_config

    source = settings.prometheus
    assert source is not None
    if settings.window_seconds < 2 * source.interval:
        raise PromInputError(f"window_seconds {settings.window_seconds:g} must hold at least two cycles "
                             f"(--interval {source.interval:g})")
    app = create_central_app(settings, source)
    ssl_context = load_web_config(settings.web_config_file).ssl_context() if settings.web_config_file else None
    log = logging.getLogger("exporter.promsource")
    web.run_app(app, host=settings.listen_host, port=settings.listen_port, access_log=None, ssl_context=ssl_context,
                print=lambda _: log.info("vllm-diag %s listening on %s (central diagnoser)", __version__,
                                         settings.listen))
