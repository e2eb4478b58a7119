"""One query per family for every target of a shard, and which shard owns a target.

``serve --prometheus`` reads, each cycle, only the samples since the oldest scrape it fed (the first
time: one window), with one range-selector query per family of the catalog for all its targets at
once (for many targets: per part of them, ``split_read``); the answer is split by the target labels as it
arrives, each series kept compact (``stored.StoredSeries``) for its target's snapshots. So a cycle costs one
query per family and part whatever the number of targets (a shard whose names fill more than
``NARROWING_MAX_CHARS``: one per family and matcher), and the bytes read grow with the targets. Only the
series a reader takes are asked for (``MEAN_ONLY``: no finite bucket of a histogram read as a mean).

Shards split a fleet the way Prometheus' ``hashmod`` relabelling splits scrapes: the MD5 of the target
labels' values joined by ``;``, its low 64 bits modulo the number of shards. Every process computes the
same owner for a target with no coordination.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.catalog import metrics as vllm
from exporter.catalog.metrics import HISTOGRAM_PARTS, METRICS, Kind
from exporter.promsource.client import PromClient, PromError
from exporter.promsource.rebuild import TargetKey, quote_label_value, selector
from exporter.promsource.scan import Layouts, SteadyAnswer, file_steady, join_steady, read_steady, scan, scan_steady
from exporter.promsource.settings import PrometheusSource
from exporter.promsource.stored import Steady, StoredSeries


def _wire(names: Sequence[str], kind: Kind) -> tuple[str, ...]:
    if kind is Kind.HISTOGRAM:
        return tuple(name + suffix for name in names for suffix, _ in HISTOGRAM_PARTS)
    return tuple(names)


# Each family's sample names in every naming generation the parser reads: one query each.
FAMILY_NAMES: tuple[tuple[str, ...], ...] = tuple(_wire((m.name, *m.aliases), m.kind) for m in METRICS)

# Histograms whose every reader takes the mean (sum over count) and never a quantile or a bucket: the signals'
# queue, prefill, decode, inference and time-per-output-token means (exporter/signals/core.py), and the
# advisor's queue, prefill and inference means. Their finite buckets, 103 of a vLLM engine's 269 series, are
# not asked for: every finite bound ends in a digit, so the matcher keeps the sum, the count and the +Inf bucket
# (the parser's histogram is whole with it: tests/promsource/test_mean_only.py runs every scenario both ways).
MEAN_ONLY: frozenset[str] = frozenset({
    vllm.REQUEST_QUEUE_TIME_SECONDS, vllm.REQUEST_PREFILL_TIME_SECONDS, vllm.REQUEST_DECODE_TIME_SECONDS,
    vllm.REQUEST_INFERENCE_TIME_SECONDS, vllm.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS,
})
FINITE_BUCKETS_LEFT_OUT = 'le!~".*[0-9]"'
# Per family, the matcher its query adds ("": none).
FAMILY_MATCHERS: tuple[str, ...] = tuple(FINITE_BUCKETS_LEFT_OUT if m.name in MEAN_ONLY else "" for m in METRICS)


def shard_of(key: TargetKey, shards: int) -> int:
    """The shard that owns a target: ``hashmod`` of its label values, as Prometheus computes it."""
    joined = ";".join(value for _, value in key.labels)
    return int.from_bytes(hashlib.md5(joined.encode()).digest()[8:], "big") % shards


def owned(keys: Sequence[TargetKey], shard: int, shards: int) -> list[TargetKey]:
    return list(keys) if shards == 1 else [key for key in keys if shard_of(key, shards) == shard]


_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _literal(value: str) -> str:
    """``value`` as an RE2 literal (Python's ``re.escape`` also escapes spaces, which RE2 refuses)."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in value)


# VictoriaMetrics refuses a query longer than 16 KB (its -search.maxQueryLen default); a shard of a few
# thousand targets names them in more than that, so its names are split over several matchers.
NARROWING_MAX_CHARS = 12_000


def _narrowings(source: PrometheusSource, keys: Sequence[TargetKey], everything: bool) -> list[str]:
    """Matchers on the one target label that keep other targets (other shards') out of the answers, each
    under ``NARROWING_MAX_CHARS``: one query per family and matcher. [""]: no matcher, read all."""
    if everything or len(source.target_labels) != 1 or not keys:
        return [""]
    out: list[str] = []
    names: list[str] = []
    length = 0
    for key in keys:
        name = quote_label_value(_literal(key.labels[0][1]))
        if names and length + len(name) + 1 > NARROWING_MAX_CHARS:
            out.append(f'{source.target_labels[0]}=~"{"|".join(names)}"')
            names, length = [], 0
        names.append(name)
        length += len(name) + 1
    out.append(f'{source.target_labels[0]}=~"{"|".join(names)}"')
    return out


def _narrowing(source: PrometheusSource, keys: Sequence[TargetKey], everything: bool) -> str:
    """The one matcher of a shard whose names fit in one ("": none)."""
    return _narrowings(source, keys, everything)[0]


# A read of many targets comes in parts, each its own queries (one per family and matcher), so the store answers
# the next part while the diagnoser evaluates this one (central.CentralDiagnoser): as many parts as READ_PARTS
# allows with at least PART_TARGETS targets each, so a cycle costs the same queries from 1,000 targets on.
READ_PARTS: tuple[int, ...] = (10, 5, 2)
PART_TARGETS = 100
# Where every target is read, the store picks a part's targets by one character of their label's value, counted
# from its end: these characters round-robin over the parts, every other one (none, punctuation, other scripts) in
# the last part. Which character is chosen from the fleet's own names: the one that spreads them most evenly, the
# last where it does as well (a pod name's random suffix), further in where the names share an ending (every
# instance "host:8000" ends in 0; the fifth from the end is the host's last digit). At most MAX_SKIP characters in.
_ENDINGS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
MAX_SKIP = 12


def parts_for(targets: int) -> int:
    """How many parts a read of ``targets`` targets comes in."""
    return next((parts for parts in READ_PARTS if targets >= parts * PART_TARGETS), 1)


def part_of(value: str, parts: int, skip: int = 0) -> int | None:
    """The part whose selector (``ending_matchers`` with the same ``skip``) picks a target label's ``value``: by its
    character ``skip`` places before the last; None: a value whose part the stores may not agree on (a line break,
    which RE2's ``.`` does not cross)."""
    if "\n" in value:
        return None
    at = _ENDINGS.find(value[-1 - skip]) if len(value) > skip else -1
    return at % parts if at >= 0 and at % parts < parts - 1 else parts - 1


def ending_matchers(label: str, parts: int, skip: int = 0) -> list[str]:
    """Per part, the matcher that picks the targets whose ``label`` value has one of its characters ``skip`` places
    before the last; the last part's picks every value no other part's does (so each series is in exactly one
    part's answers, by the store's own reading of the expressions)."""
    chars = ["".join(_ENDINGS[i::parts]) for i in range(parts - 1)]
    tail = f".{{{skip}}}" if skip else ""
    return [f'{label}=~".*[{ending}]{tail}"' for ending in chars] + [f'{label}!~".*[{"".join(chars)}]{tail}"']


def ending_skip(values: Sequence[str], parts: int) -> int:
    """The character, counted back from the last, that spreads ``values`` most evenly over ``parts`` parts (the
    largest part smallest; the nearest the end among equals)."""
    return _ending_skip(tuple(values), parts)


@functools.lru_cache(maxsize=8)
def _ending_skip(values: tuple[str, ...], parts: int) -> int:
    # Cached: a steady fleet's names are the same every cycle (a string keeps its hash, so the lookup is cheap).
    def largest(skip: int) -> int:
        sizes = [0] * parts
        for value in values:
            sizes[part_of(value, parts, skip) or 0] += 1
        return max(sizes)

    return min(range(MAX_SKIP + 1), key=lambda skip: (largest(skip), skip))


@dataclass(frozen=True, slots=True)
class Part:
    """The targets one part of a read files (``keys``), and the matchers that ask the store for them (one query
    per family and matcher; ``[""]``: none, every target the selector finds)."""

    keys: list[TargetKey]
    narrowings: list[str]


def split_read(source: PrometheusSource, keys: Sequence[TargetKey], everything: bool,
               parts: int) -> tuple[list[Part], list[TargetKey]]:
    """``keys`` in ``parts`` parts (fewer where they cannot be split), and the targets no part's selector can
    vouch for (read with every part, judged after the last: ``part_of``). ``everything``: the keys are every
    target the selector finds (parts by their value's ending), else each part names its own (``_narrowings``)."""
    if parts <= 1 or len(source.target_labels) != 1 or len(keys) < parts:
        return [Part(list(keys), _narrowings(source, keys, everything))], []
    if everything:
        split: list[list[TargetKey]] = [[] for _ in range(parts)]
        unsure = []
        skip = ending_skip([key.labels[0][1] for key in keys], parts)
        for key in keys:
            at = part_of(key.labels[0][1], parts, skip)
            if at is None:
                unsure.append(key)
            else:
                split[at].append(key)
        label = source.target_labels[0]
        return [Part(part + unsure, [matcher]) for part, matcher in zip(split, ending_matchers(label, parts, skip),
                                                                        strict=True)], unsure
    size = math.ceil(len(keys) / parts)
    chunks = [list(keys[i:i + size]) for i in range(0, len(keys), size)]
    return [Part(chunk, _narrowings(source, chunk, False)) for chunk in chunks], []


async def read_families(client: PromClient, source: PrometheusSource, keys: Sequence[TargetKey], start: float,
                        end: float, *, everything: bool = False, narrowings: Sequence[str] | None = None,
                        layouts: Layouts | None = None) -> dict[TargetKey, list[StoredSeries | Steady]]:
    """Every sample in ``(start, end]`` of the targets ``keys``, one query per family: target -> its series.

    ``everything`` says the keys are all the targets the selector finds (no narrowing matcher needed);
    ``narrowings``, where given, are the matchers that pick them (a ``Part``'s: one query per family and each). Each
    answer is made compact (``StoredSeries``) as it arrives and its decoded JSON dropped: memory holds the
    numbers of the read, and at most ``max_concurrency`` answers at once. ``layouts``: each query's last steady
    answer's label blocks worked out (``scan.scan_steady``), kept by the caller from cycle to cycle.
    """
    labels = tuple(source.target_labels)
    by_values = {tuple(value for _, value in key.labels): key for key in keys}
    if narrowings is None:
        narrowings = _narrowings(source, keys, everything)
    millis = max(1, int((end - start) * 1000 + 0.999))
    limit = asyncio.Semaphore(source.max_concurrency)
    queries = [(names, ", ".join(m for m in (matcher, narrowing) if m))
               for names, matcher in zip(FAMILY_NAMES, FAMILY_MATCHERS, strict=True) for narrowing in narrowings]
    # Each answer's series apart, joined in the order of the queries (not of the answers' arrival): each target's
    # series then come in the same order every cycle, what stored.snapshots' plans are cached by.
    answers: list[dict[TargetKey, list[StoredSeries | Steady]] | SteadyAnswer] = [{} for _ in queries]
    split = Split(labels, by_values, Layouts() if layouts is None else layouts)

    def decode(body: bytes, into: dict[TargetKey, list[StoredSeries | Steady]]) -> None:
        data = client.data("query", body)
        if data.get("resultType") != "matrix":
            raise PromError(f"{client.shown}: expected a matrix for a range selector, got {data.get('resultType')}")
        split.decoded(data.get("result") or [], into)

    async def one(index: int, names: tuple[str, ...], narrowing: str) -> None:
        expr = selector(source.match, names)
        if narrowing:  # the family's own matcher and the part's
            expr = expr[:-1] + ", " + narrowing + "}"
        async with limit:
            body = await client.query_body(f"{expr}[{millis}ms]", end)
            steady = split.steady(body, expr)  # a steady cycle's: joined with the others below
            if steady is not None:
                answers[index] = steady
                return
            into = answers[index] = {}
            if not split.scanned(body, into, None):
                decode(body, into)  # json's objects dropped before the next answer is read

    await asyncio.gather(*(one(index, names, narrowing) for index, (names, narrowing) in enumerate(queries)))
    by_target: dict[TargetKey, list[StoredSeries | Steady]] = {key: [] for key in keys}
    steady = [answer for answer in answers if isinstance(answer, SteadyAnswer)]
    if steady and len(steady) == len(answers):
        joined = split.joined(steady)
        if joined is not None:
            by_target.update(joined)
            return by_target
    for answer in answers:
        if isinstance(answer, SteadyAnswer):  # answer by answer (a target's series at several times)
            answer = split.filed(answer)
        for key, series in answer.items():
            by_target[key] += series
    return by_target


class Split:
    """Answers -> each target's series, in each answer's order (``into``: target -> its series, a list made
    for a target as its first series is found)."""

    def __init__(self, labels: tuple[str, ...], by_values: dict[tuple[str, ...], TargetKey],
                 layouts: Layouts | None = None) -> None:
        self.labels = labels
        self.strip = frozenset(labels)
        self.by_values = by_values
        self.by_value = {values[0]: key for values, key in by_values.items()} if len(labels) == 1 else {}
        self.raw_keys: dict[bytes, TargetKey | None] = {}  # the targets by their label's value as answers spell it
        self.layouts = Layouts() if layouts is None else layouts

    def steady(self, body: bytes, query: str) -> SteadyAnswer | None:
        """A steady answer to ``query`` read (:func:`exporter.promsource.scan.read_steady`), nothing filed yet."""
        return read_steady(body, self.labels[0], self.layouts, query) if self.by_value else None

    def joined(self, answers: Sequence[SteadyAnswer]) -> dict[TargetKey, list[StoredSeries | Steady]] | None:
        """A read's steady answers -> each target's samples as one ``Steady``; None: file them one by one."""
        return join_steady(answers, self.by_value, self.raw_keys, self.layouts)

    def filed(self, answer: SteadyAnswer) -> dict[TargetKey, list[StoredSeries | Steady]]:
        """A steady answer's series by target, as ``scanned`` files them."""
        into: dict[TargetKey, list[StoredSeries | Steady]] = {}
        file_steady(answer, self.by_value, into, self.raw_keys)
        return into

    def scanned(self, body: bytes, into: dict[TargetKey, list[StoredSeries | Steady]],
                query: str | None = "") -> bool:
        """The answer's series filed without decoding its JSON (:mod:`exporter.promsource.scan`: as ``Steady``
        samples where it is a steady answer, ``query`` given); False: it must be decoded (``decoded``),
        nothing was filed."""
        if not self.by_value:
            return False
        label = self.labels[0]
        return ((query is not None and scan_steady(body, label, self.by_value, into, self.raw_keys, self.layouts,
                                                   query))
                or scan(body, label, self.by_value, self.strip, into, self.raw_keys))

    def decoded(self, result: Sequence[Mapping[str, Any]], into: dict[TargetKey, list[StoredSeries | Steady]]) -> None:
        for series in result:
            metric = series.get("metric", {})
            if self.by_value:
                key = self.by_value.get(metric.get(self.labels[0], ""))
            else:
                key = self.by_values.get(tuple(metric.get(label, "") for label in self.labels))
            if key is not None and "__name__" in metric:
                into.setdefault(key, []).append(StoredSeries.of(metric, self.strip, series.get("values", ())))
