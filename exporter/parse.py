"""Exposition text -> :class:`Snapshot`, through the name catalog.

Accepts the classic text format (what vLLM's Python frontend serves) and the OpenMetrics
variant (vLLM's Rust frontend: ``# EOF``, integer values, declaration-order labels).
Every sample line is validated, so garbage fails the scrape with the line number, the way
Prometheus itself fails it; only families in the catalog are kept, and ``*_created``
twins and unknown families are dropped without building their labels.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TypeVar

from exporter.catalog.metrics import VLLM, Catalog, Kind
from exporter.snapshot import HistogramSample, LabelSet, Snapshot


class ParseError(ValueError):
    """The payload is not a valid exposition; the message names the line and the fault."""


_LINE = re.compile(
    r'([a-zA-Z_:][a-zA-Z0-9_:]*)'  # metric name
    r'(?:\{((?:[^"}]|"(?:[^"\\\n]|\\.)*")*)\})?'  # optional label block, quotes respected
    r'[ \t]+(\S+)'  # value
    r'(?:[ \t]+(-?[0-9][0-9.eE+-]*))?'  # optional timestamp
    r'(?:[ \t]+#.*)?[ \t]*'  # optional OpenMetrics exemplar
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE = re.compile(r'\\[\\"n]')

DEFAULT_MAX_SERIES_PER_FAMILY = 2000


def _labels(block: str, lineno: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(block):
        match = _LABEL.match(block, pos)
        if match is None:
            if block[pos:].strip(" \t,") == "":
                break
            raise ParseError(f"line {lineno}: malformed labels {{{block[:80]}}}")
        value = match.group(2)
        if "\\" in value:
            value = _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], value)
        labels[match.group(1)] = value
        pos = match.end()
    return labels


# Label blocks repeat across lines, families and scrapes (same engine, model and le values), so
# parsed blocks are memoised; the cache is bounded and simply cleared when full.
# (sorted labels without le, the le text, the le as a number when it is one, all labels)
_Block = tuple[LabelSet, str | None, float | None, tuple[tuple[str, str], ...]]
_BLOCK_CACHE: dict[str, _Block] = {}
_BLOCK_CACHE_MAX = 8192


def _label_block(block: str, lineno: int) -> _Block:
    """(sorted labels without le, the le text, its number, all labels) for one label block."""
    cached = _BLOCK_CACHE.get(block)
    if cached is not None:
        return cached
    labels = _labels(block, lineno)
    le = labels.pop("le", None)
    key: LabelSet = tuple(sorted(labels.items()))
    everything = tuple(labels.items()) + ((("le", le),) if le is not None else ())
    try:
        bound = float(le) if le is not None else None
    except ValueError:
        bound = None  # reported with its line when a bucket reads it
    if bound is not None and math.isnan(bound):
        bound = None  # NaN: a new float per line, as before (one cached NaN would equal itself in a dict)
    if len(_BLOCK_CACHE) >= _BLOCK_CACHE_MAX:
        _BLOCK_CACHE.clear()
    _BLOCK_CACHE[block] = result = (key, le, bound, everything)
    return result


_TIMESTAMP = re.compile(r"-?[0-9][0-9.eE+-]*")

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_BLOCK = r'(?:[^"}]|"(?:[^"\\\n]|\\.)*")*'


# A whole line's head (``name`` or ``name{labels}``) seen once in the plain form ``head value`` is remembered
# with what the parser made of it (its family entry, or None for a family not kept, and its labels), so the next
# scrape's line with that head costs a partition at its last space, a lookup and ``float``. Only a line the slow
# path accepted in exactly that form (no timestamp, no exemplar, one space) records its head; a line whose value
# part is anything else than one token takes the slow path, so errors and their messages are the slow path's.
_Head = tuple[object, tuple[str, str, int] | None, LabelSet, str | None, float | None, tuple[tuple[str, str], ...]]
_HEADS: dict[str, _Head] = {}
_HEADS_MAX = 8192
_NO_LABELS: _Block = ((), None, None, ())
_NAME_AND_BLOCK = re.compile(_NAME.pattern + r"(?:\{" + _BLOCK + r"\})?")
_TOKEN = re.compile(r"\S+")


def _remember(head: str, index: object, entry: tuple[str, str, int] | None, block: _Block) -> None:
    """Record a head the slow path accepted in the plain form ``head value``."""
    if len(_HEADS) >= _HEADS_MAX:
        _HEADS.clear()
    _HEADS[head] = (index, entry, *block)


def _sample_name(line: str) -> str:
    """The sample name a valid line starts with (for messages)."""
    match = _NAME.match(line)
    return match.group(0) if match is not None else line[:80]


def _valid_tail(extra: list[str]) -> bool:
    """After the value: an optional timestamp, then an optional OpenMetrics exemplar."""
    if extra and extra[0] != "#":
        if _TIMESTAMP.fullmatch(extra[0]) is None:
            return False
        extra = extra[1:]
    return not extra or extra[0] == "#"


# A scrape laid out as one parsed before (every line's head the same, only values moved: vLLM's usual next
# scrape) is read by that layout's plan: where each kept value goes, checked against the full parse's rules, so
# the Snapshot is the one the full parse makes of it. A plan is made by a full parse in which every sample line
# was ``head value`` and nothing was dropped; its layout is its line heads (text before the last space) joined by
# newlines: one string, not one object a line that would hold the parse's memory arenas for as long as it is kept.
_Placed = tuple[int, str, LabelSet, float | None, int]  # (store, family, labels, le, line index)
_VALUE, _SUM, _COUNT, _BUCKET, _INFO = range(5)
_T = TypeVar("_T")
_PLANS: dict[tuple[int, int], list[_Plan]] = {}  # (lines, max series per family) -> plans, newest first
_SEEN: dict[tuple[int, int], list[str]] = {}  # ... -> the layouts of the last full parses
_PLANS_PER_SHELF = 4
_PLANS_MAX = 64


def _picker(positions: list[int]) -> Callable[[Sequence[_T]], tuple[_T, ...]]:
    """The items at ``positions``, as a tuple (itemgetter of one position returns the item alone)."""
    if not positions:
        return lambda items: ()
    if len(positions) == 1:
        only = positions[0]
        return lambda items: (items[only],)
    return operator.itemgetter(*positions)


# One histogram series of a plan: its labels, its shared bounds, the pick of its buckets' numbers in bound order,
# and the number of its sum and of its count (None: the series has none)
_PlannedHistogram = tuple[LabelSet, tuple[float, ...], Callable[[list[float]], tuple[float, ...]], int | None,
                          int | None]


class _Plan:
    """How a scrape of one layout becomes its Snapshot, given its values."""

    __slots__ = ("index", "layout", "numbers", "tokens", "blanks", "words", "finite", "scalars", "histograms", "info")

    def __init__(self, index: object, layout: str, numbers: list[int], tokens: list[int], blanks: list[int],
                 words: tuple[tuple[int, str], ...], finite: list[int],
                 scalars: tuple[tuple[str, tuple[tuple[LabelSet, int], ...]], ...],
                 histograms: tuple[tuple[str, tuple[_PlannedHistogram, ...]], ...],
                 info: Mapping[str, tuple[Mapping[str, str], ...]]) -> None:
        self.index = index
        self.layout = layout
        self.numbers = _picker(numbers)  # every kept line's value: each must read as a number
        self.tokens = _picker(tokens)  # the values of lines of families not kept: one token each
        self.blanks = _picker(blanks)  # empty lines: still empty
        self.words = words  # comments of one word ("# EOF" ends the text): the same word
        self.finite = _picker(finite)  # among the numbers, the scalars, sums and counts: NaN or Inf is dropped
        self.scalars = scalars  # (family, ((labels, number), ...))
        self.histograms = histograms  # (family, (series, ...))
        self.info = info  # the Snapshot's info, as is (its lines' values are not read)

    @classmethod
    def of(cls, index: object, layout: str, parts: list[tuple[str, str, str]], placed: list[_Placed],
           scalars: dict[str, dict[LabelSet, float]], buckets: dict[str, dict[LabelSet, dict[float, float]]],
           sums: dict[str, dict[LabelSet, float]], counts: dict[str, dict[LabelSet, float]], laid: Snapshot) -> _Plan:
        """The plan of a full parse's text (its line ``parts``), what it filed where (``placed``) and made of
        it (``laid``: nothing dropped)."""
        at = {spot[:4]: spot[4] for spot in placed}
        kept = {spot[4] for spot in placed}
        numbers: list[int] = []
        tokens: list[int] = []
        blanks: list[int] = []
        words: list[tuple[int, str]] = []
        for line, (head, space, value) in enumerate(parts):
            if line in kept:
                numbers.append(line)
            elif not head and not space and not value:
                blanks.append(line)
            elif head.startswith("#") or (not head and value.startswith("#")):
                if head.rstrip() == "#" or not head:
                    words.append((line, value))
            else:
                tokens.append(line)
        slot = {line: i for i, line in enumerate(numbers)}
        finite = sorted(slot[line] for (store, _, _, _), line in at.items() if store in (_VALUE, _SUM, _COUNT))
        plain = tuple((family, tuple((key, slot[at[(_VALUE, family, key, None)]]) for key in series))
                      for family, series in scalars.items())

        def number(store: int, family: str, key: LabelSet) -> int | None:
            line = at.get((store, family, key, None))
            return None if line is None else slot[line]

        histograms = tuple((family, tuple(
            (key, laid.histograms[family][key].bounds,
             _picker([slot[at[(_BUCKET, family, key, le)]] for le in sorted(by_le)]),
             number(_SUM, family, key) if key in sums.get(family, {}) else None,
             number(_COUNT, family, key) if key in counts.get(family, {}) else None)
            for key, by_le in series.items())) for family, series in buckets.items())
        return cls(index, layout, numbers, tokens, blanks, tuple(words), finite, plain, histograms, laid.info)

    def read(self, values: list[str], timestamp: float) -> Snapshot | None:
        """The Snapshot of a scrape of this layout with these values (one a line); None when a value is one the
        full parse must judge (not a number, NaN or Inf in a scalar, a token that is not one, # EOF)."""
        try:
            numbers = list(map(float, self.numbers(values)))
        except ValueError:
            return None
        tokens = self.tokens(values)
        if len(" ".join(tokens).split()) != len(tokens) or any(self.blanks(values)):
            return None
        for line, word in self.words:
            if values[line] != word:
                return None
        if not all(map(math.isfinite, self.finite(numbers))):
            return None
        dropped = 0
        histograms: dict[str, MappingProxyType[LabelSet, HistogramSample]] = {}
        for family, planned in self.histograms:
            assembled: dict[LabelSet, HistogramSample] = {}
            for key, bounds, pick, total, count in planned:
                cumulative = pick(numbers)
                # _assemble's checks, in bound order: finite, and not going down
                if not all(map(math.isfinite, cumulative)) or not all(map(operator.le, cumulative, cumulative[1:])):
                    dropped += 1
                    continue
                assembled[key] = HistogramSample(bounds, cumulative, math.nan if total is None else numbers[total],
                                                 cumulative[-1] if count is None else numbers[count])
            if assembled:
                histograms[family] = MappingProxyType(assembled)
        return Snapshot(
            timestamp=timestamp,
            scalars=MappingProxyType({family: MappingProxyType({key: numbers[number] for key, number in series})
                                      for family, series in self.scalars if series}),
            histograms=MappingProxyType(histograms), info=self.info, dropped_samples=dropped)


def _shelve(plan: _Plan, lines: int, max_series: int) -> None:
    if sum(map(len, _PLANS.values())) >= _PLANS_MAX:
        _PLANS.clear()
    shelf = _PLANS.setdefault((lines, max_series), [])
    shelf.insert(0, plan)
    del shelf[_PLANS_PER_SHELF:]


def _value(text: str, lineno: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"line {lineno}: value {text[:40]!r} is not a number") from None


def parse(text: str, timestamp: float, *, max_series_per_family: int = DEFAULT_MAX_SERIES_PER_FAMILY,
          catalog: Catalog = VLLM) -> Snapshot:
    """Parse one scrape taken at ``timestamp``, keeping the families of ``catalog`` (vLLM's by default).

    Raises :class:`ParseError` on malformed input or on a duplicate series (Prometheus rejects
    those scrapes too). Non-finite values and series over ``max_series_per_family`` are
    dropped and counted in ``Snapshot.dropped_samples``.
    """
    lines = text.split("\n")
    parts = [line.rpartition(" ") for line in lines]
    layout = "\n".join([head for head, _, _ in parts])
    index = catalog.sample_index
    shelf = (len(lines), max_series_per_family)
    for plan in _PLANS.get(shelf, ()):
        if plan.index is index and plan.layout == layout:
            laid = plan.read([value for _, _, value in parts], timestamp)
            if laid is not None:
                return laid
            break  # a value the plan cannot vouch for: the full parse says what it is
    # A layout seen before gets its plan (making one costs about half a parse: not for a one-off layout)
    seen = _SEEN.get(shelf)
    if seen is None:
        if len(_SEEN) >= _PLANS_MAX:
            _SEEN.clear()
        seen = _SEEN[shelf] = []
    placed: list[_Placed] | None = None
    # The copy already kept, if any (the plan keeps it: they are equal). One pass, no index: a large payload is
    # parsed in a worker thread, and the loop's parse may trim this list between a check and a lookup.
    kept = next((known for known in seen if known == layout), None)
    if kept is not None:
        placed, layout = [], kept
    else:
        seen.insert(0, layout)
        del seen[_PLANS_PER_SHELF:]
    return _parse(lines, parts, layout, timestamp, max_series_per_family, catalog, placed)


def _parse(lines: list[str], parts: list[tuple[str, str, str]], layout: str, timestamp: float,
           max_series_per_family: int, catalog: Catalog,
           placed: list[_Placed] | None) -> Snapshot:
    """The full parse, line by line. ``placed``: where each kept value went (store, family, labels, le, line
    index) is recorded there, and a plan made of it when every line allows one (see :class:`_Plan`)."""
    # wire family -> labelset -> value; histograms collect parts before they are assembled
    scalars: dict[str, dict[LabelSet, float]] = {}
    buckets: dict[str, dict[LabelSet, dict[float, float]]] = {}
    sums: dict[str, dict[LabelSet, float]] = {}
    counts: dict[str, dict[LabelSet, float]] = {}
    info: dict[str, list[dict[str, str]]] = {}
    alias_rank: dict[str, int] = {}
    dropped = 0
    seen_eof = False
    index = catalog.sample_index
    kinds = {name: metric.kind for name, metric in catalog.by_name.items()}
    heads = _HEADS
    plain = True  # every sample line is ``head value``: a plan can read the next scrape laid out alike

    for lineno, line in enumerate(lines, 1):
        if not line:
            continue
        first = line[0]
        if first == "#":
            if seen_eof:
                raise ParseError(f"line {lineno}: content after # EOF")
            if line.rstrip() == "# EOF":
                seen_eof = True
            continue
        if seen_eof:
            if line.isspace():
                continue
            raise ParseError(f"line {lineno}: content after # EOF")
        head, _, value_text = parts[lineno - 1]
        known = heads.get(head)
        fast: _Head | None = None
        if known is not None and known[0] is index:
            if known[1] is None:  # a family the diagnosis does not read, this head already validated
                if _TOKEN.fullmatch(value_text) is not None:
                    continue
            else:
                try:
                    value = float(value_text)
                    fast = known
                except ValueError:
                    pass  # the slow path says what is wrong
        if fast is not None:
            _, entry, key, le_text, bound, everything = fast
            canonical, part, rank = entry  # type: ignore[misc]  # a kept head has its entry
            best = alias_rank.get(canonical)
            if best is not None and rank > best:
                continue  # an older alias of a family this scrape also carries under its current name
        else:
            brace = line.find("{")
            space = line.find(" ")
            end = brace if brace != -1 and (space == -1 or brace < space) else space
            entry = index.get(line[:end]) if end > 0 else None
            if entry is None:
                # A family the diagnosis does not read (incl. *_created twins): validated, not kept.
                # Checked once: the next scrape's line with this head takes the fast path above.
                if not line.isspace() and _LINE.fullmatch(line.rstrip("\r")) is None:
                    raise ParseError(f"line {lineno}: not a sample line: {line[:80]!r}")
                if _TOKEN.fullmatch(value_text) is not None and _NAME_AND_BLOCK.fullmatch(head) is not None:
                    _remember(head, index, None, _NO_LABELS)
                else:
                    plain = False
                continue
            canonical, part, rank = entry
            best = alias_rank.get(canonical)
            if best is not None and rank > best:
                continue  # an older alias of a family this scrape also carries under its current name
            if end == brace:
                if " # " in line:  # an exemplar may hold braces too: let the full grammar split it
                    match = _LINE.fullmatch(line.rstrip("\r"))
                    if match is None:
                        raise ParseError(f"line {lineno}: not a sample line: {line[:80]!r}")
                    close = match.end(2)
                else:
                    close = line.rfind("}")
                    if close < brace:
                        raise ParseError(f"line {lineno}: unterminated label block: {line[:80]!r}")
                block = _label_block(line[brace + 1:close], lineno)
                rest = line[close + 1:]
            else:
                block = _NO_LABELS
                rest = line[end:]
            key, le_text, bound, everything = block
            fields = rest.split()
            # Most lines are just "name{labels} value": the tail check is for the others.
            if (not fields or rest[:1] not in (" ", "\t")
                    or (len(fields) > 1 and not _valid_tail(fields[1:]))):
                raise ParseError(f"line {lineno}: not a sample line: {line[:80]!r}")
            try:
                value = float(fields[0])
            except ValueError:
                raise ParseError(f"line {lineno}: value {fields[0][:40]!r} is not a number") from None
            if len(fields) == 1 and rest == " " + fields[0] and " # " not in line:
                _remember(head, index, entry, block)
            else:
                plain = False
        if best is None or rank < best:
            alias_rank[canonical] = rank
            for store in (scalars, buckets, sums, counts, info):
                store.pop(canonical, None)
            if placed and best is not None:  # what the older alias placed is gone too
                placed[:] = [spot for spot in placed if spot[1] != canonical]

        if kinds[canonical] is Kind.INFO:
            info.setdefault(canonical, []).append(dict(everything))
            if placed is not None:
                placed.append((_INFO, canonical, (), None, lineno - 1))
            continue
        if part == "bucket":
            if le_text is None:
                raise ParseError(f"line {lineno}: histogram bucket without le")
            le = bound if bound is not None else _value(le_text, lineno)
            family = buckets.get(canonical)
            if family is None:
                family = buckets[canonical] = {}
            series = family.get(key)
            if series is None:
                if len(family) >= max_series_per_family:
                    dropped += 1
                    continue
                series = family[key] = {}
            if le in series:
                raise ParseError(f"line {lineno}: duplicate bucket le={le_text}")
            series[le] = value
            if placed is not None:
                placed.append((_BUCKET, canonical, key, le, lineno - 1))
            continue
        if le_text is not None:
            key = tuple(sorted((*key, ("le", le_text))))
        store = scalars if part == "value" else sums if part == "sum" else counts
        family_values = store.setdefault(canonical, {})
        if key in family_values:
            raise ParseError(f"line {lineno}: duplicate series {_sample_name(line)}{dict(key)}")
        if len(family_values) >= max_series_per_family:
            dropped += 1
            continue
        if math.isnan(value) or math.isinf(value):
            dropped += 1
            continue
        family_values[key] = value
        if placed is not None:
            placed.append((_VALUE if part == "value" else _SUM if part == "sum" else _COUNT, canonical, key, None,
                           lineno - 1))

    laid = snapshot(timestamp, scalars, buckets, sums, counts, info, dropped)
    # NaN bounds are new keys at each line: no plan stands for them
    if (placed is not None and plain and not seen_eof and laid.dropped_samples == 0
            and all(spot[3] == spot[3] for spot in placed if spot[3] is not None)):
        _shelve(_Plan.of(index, layout, parts, placed, scalars, buckets, sums, counts, laid), len(lines),
                max_series_per_family)
    return laid


def snapshot(timestamp: float, scalars: dict[str, dict[LabelSet, float]],
             buckets: dict[str, dict[LabelSet, dict[float, float]]], sums: dict[str, dict[LabelSet, float]],
             counts: dict[str, dict[LabelSet, float]], info: dict[str, list[dict[str, str]]], dropped: int) -> Snapshot:
    """One scrape's samples, as parse() files them, assembled (histograms checked) into its Snapshot; the
    central diagnoser files stored samples the same way (``exporter.promsource.stored``)."""
    histograms: dict[str, dict[LabelSet, HistogramSample]] = {}
    for canonical, family in buckets.items():
        assembled: dict[LabelSet, HistogramSample] = {}
        for key, by_le in family.items():
            sample = _assemble(key, by_le, sums.get(canonical, {}), counts.get(canonical, {}))
            if sample is None:
                dropped += 1
            else:
                assembled[key] = sample
        if assembled:
            histograms[canonical] = assembled
    return laid_out(timestamp, scalars, histograms, info, dropped)


def laid_out(timestamp: float, scalars: Mapping[str, Mapping[LabelSet, float]],
             histograms: Mapping[str, Mapping[LabelSet, HistogramSample]], info: Mapping[str, list[dict[str, str]]],
             dropped: int) -> Snapshot:
    """The Snapshot of a scrape's stores, histograms assembled (``histogram``): read-only views, families
    without a series left out. The central diagnoser's steady scrapes come here straight, their histograms
    assembled by their layout (``exporter.promsource.stored``)."""
    return Snapshot(
        timestamp=timestamp,
        scalars=MappingProxyType({k: MappingProxyType(v) for k, v in scalars.items() if v}),
        histograms=MappingProxyType({k: MappingProxyType(v) for k, v in histograms.items() if v}),
        info=MappingProxyType({k: tuple(MappingProxyType(d) for d in v) for k, v in info.items()}),
        dropped_samples=dropped,
    )


# Bucket bounds repeat across series, scrapes and targets: the newest scrape of every target shares them.
_BOUNDS: dict[tuple[float, ...], tuple[float, ...]] = {}
_BOUNDS_MAX = 1024


def _assemble(key: LabelSet, by_le: dict[float, float], sums: dict[LabelSet, float],
              counts: dict[LabelSet, float]) -> HistogramSample | None:
    """Build a histogram series; None when it is unusable (no +Inf, NaN, not cumulative)."""
    bounds = tuple(sorted(by_le))
    if not bounds or bounds[-1] != math.inf:
        return None
    if 0.0 not in bounds:  # (0.0 and -0.0 are equal keys, not the same bound)
        shared = _BOUNDS.get(bounds)
        if shared is None:
            if len(_BOUNDS) >= _BOUNDS_MAX:
                _BOUNDS.clear()
            _BOUNDS[bounds] = shared = bounds
        bounds = shared
    return histogram(bounds, tuple(map(by_le.__getitem__, bounds)), sums.get(key, math.nan), counts.get(key))


def histogram(bounds: tuple[float, ...], cumulative: tuple[float, ...], total: float,
              count: float | None) -> HistogramSample | None:
    """One histogram series from its buckets in ascending bound order, the last +Inf (``count`` None: the
    series has no ``_count``, the +Inf bucket stands for it); None when unusable (a bucket that is no finite
    number, or buckets that go down)."""
    if not all(map(math.isfinite, cumulative)):
        return None
    if not all(map(operator.le, cumulative, cumulative[1:])):  # finite: "not <=" is "went down"
        return None
    return HistogramSample(bounds=bounds, cumulative=cumulative, sum=total,
                           count=cumulative[-1] if count is None else count)
