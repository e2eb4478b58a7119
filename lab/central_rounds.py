"""Central mode's own cost per engine and steady cycle, without a store: alternated rounds against the text
round trip it replaced.

    .venv/bin/python -m lab.central_rounds                 # 200 engines, 7 rounds: about a minute
    .venv/bin/python -m lab.central_rounds --engines 500 --rounds 9

The store's answers are made in this process (:class:`ReplayedStore`: the fleet of :mod:`lab.fleet`,
engine ``i`` running scenario ``i % 8``, each answer encoded as the Prometheus API's compact JSON and read
by the diagnoser as a real answer is), and the time spent making them is left out: what is measured is the
diagnoser's CPU from the answer's bytes to every engine's published verdict. Two diagnosers follow the
same fleet cycle by cycle: ours (:class:`CentralDiagnoser`: steady answers split at their samples, each
answer's label blocks worked out once and known again by their hashes, each target's snapshot assembled
by its layout's plan) and the baseline, the same class with main's read path before issue 52's work
(every answer kept whole, each scrape rewritten as exposition text and parsed, the cyclic garbage
collector running through the cycle). After the cold cycle and one steady
cycle of each (unmeasured: ours works out the answers' layouts there), each round is one steady cycle of
each, alternated (lab/rounds.py); the verdict documents of the two must be identical every round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from exporter.config import load_settings
from exporter.poll import ScrapeResult
from exporter.promsource import backfill
from exporter.promsource.central import CentralDiagnoser
from exporter.promsource.client import PromClient, PromError, QueryStats
from exporter.promsource.rebuild import TargetKey, scrapes
from exporter.promsource.settings import PrometheusSource
from exporter.publish import document
from exporter.simulator import write_captures
from exporter.state import TargetState
from lab.fleet import INTERVAL, SCENARIOS, WINDOW, instance
from lab.rounds import alternated

_SAMPLE = re.compile(r"([^{ ]+)(?:\{(.*)\})? (\S+) (\S+)$")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)(=~|!~|!=|=)"((?:[^"\\]|\\.)*)"')


class ReplayedStore:
    """A ``PromClient`` stand-in answering range selectors over the fleet's captures, as Prometheus 2 does
    (both ends of the range held); ``making`` is the CPU time spent making answers (not the diagnoser's)."""

    shown = "replayed"

    def __init__(self, root: Path, engines: int, start: float, duration: float) -> None:
        self.engines = engines
        self.stats = QueryStats()
        self.making = 0.0
        # scenario -> wire name -> label pairs -> [(time, value)]
        self.series: dict[str, dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, str]]]]] = {}
        for name in SCENARIOS:
            write_captures(name, root / name, duration, INTERVAL)
            table: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, str]]]] = {}
            for at, text in backfill.folder(root / name, start, INTERVAL):
                for line in backfill.samples(text, at, {"job": "vllm"}):
                    found = _SAMPLE.match(line)
                    assert found is not None, line
                    wire, block, value, stamp = found.groups()
                    labels = tuple(_PAIR.findall(block or ""))
                    table.setdefault(wire, {}).setdefault(labels, []).append((float(stamp), value))
            self.series[name] = table

    async def query(self, expr: str, at: float) -> dict[str, Any]:
        return self.data("query", await self.query_body(expr, at))

    def data(self, endpoint: str, body: bytes) -> dict[str, Any]:
        return dict(json.loads(body)["data"])

    async def query_body(self, expr: str, at: float) -> bytes:
        """The answer's bytes, compact as Prometheus writes them (``json`` decodes them in ``data``)."""
        began = time.process_time()
        if expr.startswith("group by"):
            data: dict[str, Any] = {"resultType": "vector", "result": [
                {"metric": {"instance": instance(i)}, "value": [at, "1"]} for i in range(self.engines)]}
        else:
            names = re.search(r'__name__=~"([^"]*)"', expr)
            span = re.search(r"\[(\d+)ms\]$", expr)
            if names is None or span is None:
                raise PromError(f"replayed store: cannot answer {expr[:80]}")
            wanted = names.group(1).replace("\\", "").split("|")
            low = at - int(span.group(1)) / 1000
            # The other matchers (the part's, a family's left-out buckets) as the store reads them: anchored.
            tests = [(label, op, re.compile(value.replace("\\\\", "\\")))
                     for label, op, value in _MATCHER.findall(expr) if label != "__name__" and op in ("=~", "!~")]
            result = []
            for i in range(self.engines):
                table = self.series[SCENARIOS[i % len(SCENARIOS)]]
                for wire in wanted:
                    for labels, values in table.get(wire, {}).items():
                        metric = {"__name__": wire, **dict(labels), "instance": instance(i)}
                        if not all(bool(pattern.fullmatch(metric.get(label, ""))) == (op == "=~")
                                   for label, op, pattern in tests):
                            continue
                        kept = [[t, v] for t, v in values if low <= t <= at]
                        if kept:
                            result.append({"metric": metric, "values": kept})
            data = {"resultType": "matrix", "result": result}
        body = json.dumps({"status": "success", "data": data}, separators=(",", ":")).encode()
        self.stats.queries += 1
        self.stats.bytes_read += len(body)
        self.making += time.process_time() - began
        return body


class TextRoundTrip(CentralDiagnoser):
    """The baseline: main's read path before issue 52's work (whole answers kept, each scrape rewritten as
    exposition text and parsed, Python's cyclic collector running through the cycle), the rest unchanged."""

    pause_collector = False

    async def _refresh_all(self, client: Any, keys: list[TargetKey], now: float,
                           everything: bool) -> list[TargetState]:
        from exporter.promsource.batch import FAMILY_NAMES
        from exporter.promsource.rebuild import selector
        from exporter.promsource.span import LEAD_SECONDS

        since = {key: (p.window.latest.timestamp if (p := self._pipeline(key)).window.latest else None)
                 for key in keys}
        known = [key for key in keys if since[key] is not None]
        fresh = [key for key in keys if since[key] is None]
        by_target: dict[TargetKey, list[Mapping[str, Any]]] = {key: [] for key in keys}
        for group in (known, fresh):
            if not group:
                continue
            start = max(min(since[key] or 0.0 for key in group), now - self.settings.window_seconds - LEAD_SECONDS)
            millis = max(1, int((now - start) * 1000 + 0.999))
            wanted = set(group)
            for names in FAMILY_NAMES:
                data = await client.query(f"{selector(self.source.match, names)}[{millis}ms]", now)
                for series in data.get("result") or []:
                    key = TargetKey.of(series.get("metric", {}), self.source.target_labels)
                    if key in wanted:
                        by_target[key].append(series)
        states = []
        for key in keys:
            pipeline = self.pipelines[key.name]
            for at, text in scrapes(by_target[key], after=since[key]):
                pipeline.ingest(ScrapeResult(started_at=at, duration=0.0, body=text.encode()), evaluate_now=False)
            states.append(pipeline.evaluate(now))
        return states


def diagnoser(kind: type[CentralDiagnoser], store: ReplayedStore) -> CentralDiagnoser:
    source = PrometheusSource(url="http://replayed:9090", match='{job="vllm"}', interval=INTERVAL,
                              max_targets=max(1000, store.engines), max_concurrency=1)
    central = kind(load_settings(None, {"window_seconds": WINDOW, "prometheus": source.model_dump()}), source)
    central.client = cast(PromClient, store)  # answers made here, as the store's API would
    return central


def run(engines: int, rounds: int) -> dict[str, Any]:
    start = 1_700_000_000.0
    duration = WINDOW + INTERVAL * (rounds + 4)
    with tempfile.TemporaryDirectory(prefix="vllm-diag-central-rounds-") as tmp:
        store = ReplayedStore(Path(tmp), engines, start, duration)
    ours, baseline = diagnoser(CentralDiagnoser, store), diagnoser(TextRoundTrip, store)
    first = start + INTERVAL + WINDOW
    per_engine: dict[str, list[float]] = {"ours": [], "baseline": []}
    read: list[int] = []

    def cycle(central: CentralDiagnoser, at: float, side: str) -> float:
        store.making = 0.0
        began = time.process_time()
        stats = asyncio.run(central.cycle(now=at))
        cost = time.process_time() - began - store.making
        assert stats.diagnosed == engines, (side, stats)
        per_engine[side].append(cost / engines * 1000)
        if side == "ours":
            read.append(stats.bytes_read)
        return cost

    for central in (ours, baseline):  # the cold cycle (a window per engine), then a first steady one, where ours
        asyncio.run(central.cycle(now=first))  # works out each answer's layout once (exporter/promsource/scan.py)
        asyncio.run(central.cycle(now=first + INTERVAL))
    first += INTERVAL

    def same(i: int) -> None:
        mine = json.dumps(document.build(ours.states.values(), now=0.0), sort_keys=True)
        theirs = json.dumps(document.build(baseline.states.values(), now=0.0), sort_keys=True)
        assert mine == theirs, f"round {i}: the verdict documents differ"

    def ours_round(i: int) -> float:
        return cycle(ours, first + (i + 1) * INTERVAL, "ours")

    def baseline_round(i: int) -> float:
        cost = cycle(baseline, first + (i + 1) * INTERVAL, "baseline")
        if len(per_engine["ours"]) == len(per_engine["baseline"]):
            same(i)
        return cost

    measured = alternated(ours_round, baseline_round, rounds)
    return {
        "engines": engines,
        "rounds": measured.as_dict(),
        "ratio_note": measured.describe(),
        "ours_ms_per_engine": statistics.median(per_engine["ours"]),
        "baseline_ms_per_engine": statistics.median(per_engine["baseline"]),
        "ours_ms_per_engine_range": [min(per_engine["ours"]), max(per_engine["ours"])],
        "baseline_ms_per_engine_range": [min(per_engine["baseline"]), max(per_engine["baseline"])],
        "bytes_per_engine": statistics.median(read) / engines,
        "verdicts_identical_every_round": True,
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.central_rounds", description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    result = run(args.engines, args.rounds)
    print(f"{args.engines} engines, steady cycles: ours {result['ours_ms_per_engine']:.2f} ms of CPU per engine, "
          f"the text round trip {result['baseline_ms_per_engine']:.2f} ms: {result['ratio_note']}; "
          f"{result['bytes_per_engine'] / 1e3:.1f} KB read per engine; verdicts identical in every round")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
