"""The ``--prometheus`` side of ``vllm-diag diagnose`` and ``vllm-diag serve``: spans, cycles, output
(the flags are in ``flags``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from exporter import __version__
from exporter.config import Settings
from exporter.pipeline import TargetPipeline
from exporter.promsource.client import PromClient, PromError
from exporter.promsource.flags import PromInputError
from exporter.promsource.span import TargetSpan, judge_span
from exporter.promsource.timespec import TimeSpecError, iso, parse_duration, parse_time
from exporter.publish import document, text, timeline

DEFAULT_STEP = 60.0
MAX_STEPS = 10_000  # per target: beyond this the text strip and the JSON stop being readable


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
