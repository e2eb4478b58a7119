"""Stored samples -> the :class:`Snapshot` of each scrape, built straight from the store's answer.

The central diagnoser (``serve --prometheus``) reads a range-selector answer per family for every
target at once. Rebuilding each scrape as exposition text for the parser (``rebuild.scrapes``) costs
more than the diagnosis: every series' label block written and read back, every scrape. Here each
series is kept compact as it arrives (its name, its labels but the target's, its timestamps and values
as numbers: the answer, scanned as bytes or decoded, is dropped at once, so a cold cycle over thousands of
targets holds numbers, not answers), and each scrape is assembled into the snapshot the parser would give for its text:
the same keys, values, drops and histogram assembly (``tests/promsource/test_stored.py`` compares them
on every scenario). A scrape the shortcut cannot vouch for (an older alias beside its current name, a
duplicate series, a bucket bound that is no number, a family over the cardinality cap, a value that is
no number) goes through the text and the parser, which decide it as they decide a live scrape.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

from exporter.catalog.metrics import BY_NAME, SAMPLE_INDEX, Kind
from exporter.parse import DEFAULT_MAX_SERIES_PER_FAMILY, histogram, laid_out, snapshot
from exporter.promsource.rebuild import KEEP_LABELS, scrapes
from exporter.snapshot import LabelSet, Snapshot

_INFO = frozenset(name for name, metric in BY_NAME.items() if metric.kind is Kind.INFO)

LabelPairs = tuple[tuple[str, str], ...]


class StoredSeries:
    """One stored series of one target: name, labels other than the target labels, samples in time order
    (arrays, compact for a window; one sample, a steady read's, as a tuple: cheaper to make).

    ``raw``: the values as the store sent them, kept only when one is no number (its scrape goes to the parser,
    which fails it with that text, as it fails such a live scrape).
    """

    __slots__ = ("known", "stamps", "values", "raw")

    def __init__(self, known: Known, stamps: Sequence[float], values: Sequence[float],
                 raw: list[str] | None = None) -> None:
        self.known = known
        self.stamps = stamps
        self.values = values
        self.raw = raw

    @property
    def name(self) -> str:
        return self.known.name

    @property
    def labels(self) -> LabelPairs:
        return self.known.labels

    @classmethod
    def of(cls, metric: Mapping[str, str], strip: frozenset[str], values: Sequence[Sequence[Any]]) -> StoredSeries:
        """``metric`` with its ``__name__``; ``strip``: the target labels (constant over a target's series by
        definition, put back where the parser's input keeps them: ``snapshots``)."""
        return cls.of_known(known_of(metric, strip), values)

    @classmethod
    def of_known(cls, known: Known, values: Sequence[Sequence[Any]]) -> StoredSeries:
        if len(values) == 1:  # a steady cycle: the one new scrape
            stamp, text = values[0]
            try:
                return cls(known, (float(stamp),), (float(text),))
            except (TypeError, ValueError):
                pass
        stamps = array("d", [stamp for stamp, _ in values])
        texts = [value for _, value in values]
        try:
            return cls(known, stamps, array("d", map(float, texts)))
        except (TypeError, ValueError):
            numbers = array("d", [_number(text) for text in texts])
            return cls(known, stamps, numbers, [str(text) for text in texts])


# One target's series of one steady answer (one sample each, at one time): their names and labels, the time,
# the values in that order (exporter.promsource.scan.scan_steady: no object per series).
Steady = tuple[tuple["Known", ...], float, Sequence[float]]


def expand(matrix: Sequence[StoredSeries | Steady]) -> list[StoredSeries]:
    """Each ``Steady`` as its series."""
    out: list[StoredSeries] = []
    for item in matrix:
        if isinstance(item, StoredSeries):
            out.append(item)
        else:
            knowns, at, values = item
            out += [StoredSeries(known, (at,), (value,)) for known, value in zip(knowns, values, strict=True)]
    return out


def known_of(metric: Mapping[str, str], strip: frozenset[str]) -> Known:
    """A series' name and labels but the target labels ``strip`` (``metric`` holds ``__name__``)."""
    rest = dict(metric)
    for label in strip:
        rest.pop(label, None)
    # The same name and labels come for every target and cycle: worked out once (in the store's label order).
    seen = tuple(rest.items())
    known = _SEEN.get(seen)
    if known is None:
        if len(_SEEN) >= _CACHE_MAX:
            _SEEN.clear()
        name = rest.pop("__name__")
        known = _SEEN[seen] = Known(name, tuple(sorted(rest.items())))
    return known


def _number(text: object) -> float:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


class Known:
    """A series' name and labels (the target's left out), and what parse() makes of its line under each set of
    labels a target drops and keeps (``plan``)."""

    __slots__ = ("name", "labels", "plans")

    def __init__(self, name: str, labels: LabelPairs) -> None:
        self.name = name
        self.labels = labels
        self.plans: dict[tuple[frozenset[str], LabelPairs], _Plan] = {}

    def plan(self, drop: frozenset[str], kept: LabelPairs) -> _Plan:
        plan = self.plans.get((drop, kept))
        if plan is None:
            labels = tuple(sorted((*self.labels, *kept))) if kept else self.labels
            plan = self.plans[(drop, kept)] = _Plan(self.name, tuple(p for p in labels if p[0] not in drop))
        return plan


_SEEN: dict[tuple[tuple[str, str], ...], Known] = {}
_CACHE_MAX = 65536


class _Plan:
    """What parse() makes of one series' line, whatever its value."""

    __slots__ = ("canonical", "part", "rank", "key", "le", "bound", "info", "refer")

    def __init__(self, name: str, labels: LabelSet) -> None:
        self.refer = False
        entry = SAMPLE_INDEX.get(name)
        self.canonical, self.part, self.rank = entry if entry is not None else ("", "", 0)
        self.le = next((value for label, value in labels if label == "le"), None)
        without = tuple(pair for pair in labels if pair[0] != "le")
        self.info: dict[str, str] | None = None
        self.key: LabelSet = labels
        self.bound = math.nan
        if entry is None:
            return
        if self.canonical in _INFO:
            self.info = dict(without) | ({"le": self.le} if self.le is not None else {})
        elif self.part == "bucket":
            self.key = without
            try:
                self.bound = float(self.le) if self.le is not None else math.nan
            except ValueError:
                pass
            self.refer = self.bound != self.bound  # no le, or none the parser would file a bucket under


class _Scrape:
    """One scrape being assembled: parse()'s stores, or a reason to hand it to the parser."""

    __slots__ = ("scalars", "buckets", "sums", "counts", "info", "ranks", "dropped", "refer")

    def __init__(self) -> None:
        self.scalars: dict[str, dict[LabelSet, float]] = {}
        self.buckets: dict[str, dict[LabelSet, dict[float, float]]] = {}
        self.sums: dict[str, dict[LabelSet, float]] = {}
        self.counts: dict[str, dict[LabelSet, float]] = {}
        self.info: dict[str, list[dict[str, str]]] = {}
        self.ranks: dict[str, int] = {}
        self.dropped = 0
        self.refer = False  # to the parser, through the text


def snapshots(matrix: Sequence[StoredSeries | Steady], target: Mapping[str, str], after: float | None = None, *,
              max_series_per_family: int = DEFAULT_MAX_SERIES_PER_FAMILY) -> list[tuple[float, Snapshot | str]]:
    """One target's stored series -> per scrape after ``after``, oldest first, its time and its snapshot, or
    its exposition text where the parser must decide (it may fail the scrape, as it fails a live one).

    ``target``: the target labels' values (what ``StoredSeries.of`` stripped), put back where the parser's
    input keeps them: a target with one series keeps every label, and vLLM's own (model_name, engine) stay
    (``rebuild.constant_labels``).
    """
    if matrix and all(type(item) is tuple for item in matrix):
        steady = _steady(matrix, target, after, max_series_per_family)  # type: ignore[arg-type]
        if steady is not None:
            return steady
    matrix = expand(matrix)
    building: dict[float, _Scrape] = {}
    for series, plan in zip(matrix, _plans(matrix, target), strict=True):
        refer = plan.refer or series.raw is not None
        for at, value in zip(series.stamps, series.values, strict=True):
            if after is not None and at <= after:
                continue
            scrape = building.get(at)
            if scrape is None:
                scrape = building[at] = _Scrape()
            if refer:
                scrape.refer = True
            elif not scrape.refer and plan.part:  # names the parser does not know it skips too
                _add(scrape, plan, value, max_series_per_family)
    out: list[tuple[float, Snapshot | str]] = []
    texts: dict[float, str] | None = None
    for at in sorted(building):
        scrape = building[at]
        if scrape.refer:
            if texts is None:
                texts = dict(scrapes([_as_json(s, target) for s in matrix], after=after))
            out.append((at, texts[at]))
        else:
            out.append((at, _snapshot(scrape, at)))
    return out


def _add(scrape: _Scrape, plan: _Plan, value: float, cap: int) -> None:
    """parse()'s handling of one sample line; what it would decide otherwise refers the scrape to it."""
    canonical = plan.canonical
    best = scrape.ranks.get(canonical)
    if best is None:
        scrape.ranks[canonical] = plan.rank
    elif best != plan.rank:  # an older alias beside the current name: the parser's line order decides
        scrape.refer = True
        return
    if plan.info is not None:
        scrape.info.setdefault(canonical, []).append(dict(plan.info))
        return
    key = plan.key
    if plan.part == "bucket":
        family = scrape.buckets.get(canonical)
        if family is None:
            family = scrape.buckets[canonical] = {}
        series = family.get(key)
        if series is None:
            if len(family) >= cap:
                scrape.refer = True
                return
            series = family[key] = {}
        if plan.bound in series:
            scrape.refer = True
            return
        series[plan.bound] = value
        return
    store = scrape.scalars if plan.part == "value" else scrape.sums if plan.part == "sum" else scrape.counts
    family_values = store.get(canonical)
    if family_values is None:
        family_values = store[canonical] = {}
    if key in family_values or len(family_values) >= cap:
        scrape.refer = True
        return
    if math.isnan(value) or math.isinf(value):
        scrape.dropped += 1
        return
    family_values[key] = value


def _snapshot(scrape: _Scrape, at: float) -> Snapshot:
    return snapshot(at, scrape.scalars, scrape.buckets, scrape.sums, scrape.counts, scrape.info, scrape.dropped)


def _plans(matrix: Sequence[StoredSeries], target: Mapping[str, str]) -> tuple[_Plan, ...]:
    """Each series' plan: the labels it keeps depend on all of the target's series, which are the same series
    (the same ``Known`` objects, in the same order) cycle after cycle, and alike across a fleet's targets."""
    return _plans_of(tuple(series.known for series in matrix), target)


def _kept(series: int, target: Mapping[str, str]) -> LabelPairs:
    """The target labels a target's series keep (``rebuild.constant_labels``: all where it has one series)."""
    if series == 1:
        return tuple((k, v) for k, v in target.items() if v)
    return tuple((k, v) for k, v in target.items() if k in KEEP_LABELS and v)


def _plans_of(knowns: tuple[Known, ...], target: Mapping[str, str]) -> tuple[_Plan, ...]:
    drop: frozenset[str] = frozenset()
    kept = _kept(len(knowns), target)
    layout = (knowns, kept)  # holds the Known objects: their ids stay theirs
    plans = _LAYOUTS.get(layout)
    if plans is None:
        if len(knowns) > 1:
            drop = _constant(knowns)
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        plans = _LAYOUTS[layout] = tuple(known.plan(drop, kept) for known in knowns)
    return plans


_LAYOUTS: dict[tuple[tuple[Known, ...], LabelPairs], tuple[_Plan, ...]] = {}
_LAYOUTS_MAX = 1024


def _constant(knowns: Sequence[Known]) -> frozenset[str]:
    """``rebuild.constant_labels`` over the labels kept (the target labels are constant already)."""
    common = [pair for pair in knowns[0].labels if pair[0] not in KEEP_LABELS]
    for known in {id(known): known for known in knowns}.values():
        if common and not all(pair in known.labels for pair in common):
            common = [pair for pair in common if pair in known.labels]
    return frozenset(label for label, _ in common)


Pick = Callable[[Sequence[Any]], tuple[Any, ...]]  # the same positions of stamps (bytes) and values


def picker(where: list[int]) -> Pick:
    """The values at ``where``, as a tuple (``itemgetter`` gives one position's value bare)."""
    if len(where) == 1:
        only = where[0]
        return lambda seq: (seq[only],)
    return itemgetter(*where)


class _Assembly:
    """How one layout's values (a steady scrape's, in series order) fill parse()'s stores, worked out once from
    ``_add`` run over the layout: each family's keys (buckets: bounds) and which values are theirs."""

    __slots__ = ("scalars", "sums", "counts", "buckets", "info", "histograms", "direct")

    def __init__(self, plans: Sequence[_Plan], cap: int) -> None:
        trial = _Scrape()
        for plan in plans:
            if plan.part:
                _add(trial, plan, 0.0, cap)
        if trial.refer or any(plan.refer for plan in plans):
            raise ValueError("a layout the parser decides")
        at: dict[tuple[str, str, LabelSet], list[int]] = {}  # (part, family, key) -> its values' positions
        for index, plan in enumerate(plans):
            if plan.part and plan.info is None:
                at.setdefault((plan.part, plan.canonical, plan.key), []).append(index)
        flat: dict[str, dict[str, tuple[tuple[LabelSet, ...], Pick]]] = {}
        for part, store in (("value", trial.scalars), ("sum", trial.sums), ("count", trial.counts)):
            flat[part] = {family: (tuple(keys), picker([at[(part, family, key)][0] for key in keys]))
                          for family, keys in store.items()}
        self.scalars, self.sums, self.counts = flat["value"], flat["sum"], flat["count"]
        self.buckets = {family: tuple((key, tuple(bounds), picker(at[("bucket", family, key)]))
                                      for key, bounds in series.items())
                        for family, series in trial.buckets.items()}
        self.info = trial.info
        # Each histogram series as parse()'s assembly reads it (exporter/parse.py, _assemble): its bounds
        # ascending, its buckets' values in that order, its sum's and count's positions (None: not in the layout).
        self.histograms: list[tuple[str, list[tuple[LabelSet, tuple[float, ...], Pick, int | None, int | None]]]] = []
        for family, series in trial.buckets.items():
            assembled = []
            for key, by_bound in series.items():
                bounds = tuple(sorted(by_bound))
                if bounds[-1] != math.inf:
                    self.histograms = []  # a series parse() drops: the general assembly decides
                    break
                where = at[("bucket", family, key)]
                position = dict(zip(by_bound, where, strict=True))
                total, count = at.get(("sum", family, key)), at.get(("count", family, key))
                assembled.append((key, bounds, picker([position[bound] for bound in bounds]),
                                  total[0] if total else None, count[0] if count else None))
            else:
                self.histograms.append((family, assembled))
                continue
            break
        self.direct = len(self.histograms) == len(trial.buckets)

    def snapshot(self, at: float, values: Sequence[float]) -> Snapshot:
        scalars = {family: dict(zip(keys, pick(values), strict=True)) for family, (keys, pick) in self.scalars.items()}
        if self.direct:
            return self._direct(at, values, scalars)
        sums = {family: dict(zip(keys, pick(values), strict=True)) for family, (keys, pick) in self.sums.items()}
        counts = {family: dict(zip(keys, pick(values), strict=True)) for family, (keys, pick) in self.counts.items()}
        buckets = {family: {key: dict(zip(bounds, pick(values), strict=True)) for key, bounds, pick in series}
                   for family, series in self.buckets.items()}
        info = {family: [dict(labels) for labels in found] for family, found in self.info.items()}
        return snapshot(at, scalars, buckets, sums, counts, info, 0)

    def _direct(self, at: float, values: Sequence[float], scalars: dict[str, dict[LabelSet, float]]) -> Snapshot:
        """What parse.snapshot() makes of these values, each histogram series handed to its assembly
        (``parse.histogram``) with its buckets already in bound order: no dicts by bound to file and sort."""
        histograms = {}
        dropped = 0
        for family, series in self.histograms:
            assembled = {}
            for key, bounds, pick, total, count in series:
                sample = histogram(bounds, pick(values), values[total] if total is not None else math.nan,
                                   values[count] if count is not None else None)
                if sample is None:  # buckets that go down: dropped and counted, as parse() does
                    dropped += 1
                else:
                    assembled[key] = sample
            histograms[family] = assembled
        return laid_out(at, scalars, histograms, self.info, dropped)


_ASSEMBLIES: dict[tuple[tuple[tuple[Known, ...], ...], LabelPairs, int], _Assembly | None] = {}  # by layout


def _steady(matrix: Sequence[Steady], target: Mapping[str, str], after: float | None,
            cap: int) -> list[tuple[float, Snapshot | str]] | None:
    """A steady read's one scrape of a target, its values put where the layout's ``_Assembly`` says; None: the
    general path decides (stamps that differ, a value that is no finite number, a layout the parser decides)."""
    at = matrix[0][1]
    if any(item[1] != at for item in matrix):
        return None
    if after is not None and at <= after:
        return []
    knowns = tuple(item[0] for item in matrix)
    layout = (knowns, _kept(sum(map(len, knowns)), target), cap)
    if layout in _ASSEMBLIES:
        assembly = _ASSEMBLIES[layout]
    else:
        plans = _plans_of(tuple(chain.from_iterable(knowns)), target)
        try:
            assembly = _Assembly(plans, cap)
        except ValueError:
            assembly = None
        if len(_ASSEMBLIES) >= _LAYOUTS_MAX:
            _ASSEMBLIES.clear()
        _ASSEMBLIES[layout] = assembly
    if assembly is None:
        return None
    values = list(chain.from_iterable(item[2] for item in matrix))
    if not all(map(math.isfinite, values)):  # the parser drops such samples and counts them: the general path
        return None
    return [(at, assembly.snapshot(at, values))]


def _as_json(series: StoredSeries, target: Mapping[str, str]) -> dict[str, Any]:
    """A series back as the store's answer held it, for ``rebuild.scrapes`` (the parser's path)."""
    metric = {"__name__": series.name, **dict(series.labels), **{k: v for k, v in target.items() if v}}
    texts = series.raw if series.raw is not None else [repr(v) for v in series.values]
    return {"metric": metric, "values": [[at, text] for at, text in zip(series.stamps, texts, strict=True)]}
