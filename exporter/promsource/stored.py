"""Stored samples -> the :class:`Snapshot` of each scrape, built straight from the store's answer.

The central diagnoser (``serve --prometheus``) reads a range-selector answer per family for every
target at once. Rebuilding each scrape as exposition text for the parser (``rebuild.scrapes``) costs
more than the diagnosis: every series' label block written and read back, every scrape. Here each
series is kept compact as it arrives (its name, its labels but the target's, its timestamps and values
as arrays: the decoded JSON is dropped at once, so a cold cycle over thousands of targets holds numbers,
not answers), and each scrape is assembled into the snapshot the parser would give for its text:
the same keys, values, drops and histogram assembly (``tests/promsource/test_stored.py`` compares them
on every scenario). A scrape the shortcut cannot vouch for (an older alias beside its current name, a
duplicate series, a bucket bound that is no number, a family over the cardinality cap, a value that is
no number) goes through the text and the parser, which decide it as they decide a live scrape.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from exporter.catalog.metrics import BY_NAME, SAMPLE_INDEX, Kind
from exporter.parse import DEFAULT_MAX_SERIES_PER_FAMILY, _assemble
from exporter.promsource.rebuild import KEEP_LABELS, scrapes
from exporter.snapshot import HistogramSample, LabelSet, Snapshot

_INFO = frozenset(name for name, metric in BY_NAME.items() if metric.kind is Kind.INFO)

# Label pairs repeat across targets (the same le, model_name, engine on every engine): one tuple each.
LabelPairs = tuple[tuple[str, str], ...]
_INTERNED: dict[LabelPairs, LabelPairs] = {}
_INTERNED_MAX = 65536


class StoredSeries:
    """One stored series of one target: name, labels other than the target labels, samples in time order.

    ``raw``: the values as the store sent them, kept only when one is no number (its scrape goes to the parser,
    which fails it with that text, as it fails such a live scrape).
    """

    __slots__ = ("name", "labels", "stamps", "values", "raw")

    def __init__(self, name: str, labels: LabelPairs, stamps: array, values: array,
                 raw: list[str] | None = None) -> None:
        self.name = name
        self.labels = labels
        self.stamps = stamps
        self.values = values
        self.raw = raw

    @classmethod
    def of(cls, name: str, metric: Mapping[str, str], strip: frozenset[str],
           values: Sequence[Sequence[Any]]) -> StoredSeries:
        """``strip``: the target labels (constant over a target's series by definition, put back if needed)."""
        labels = tuple(sorted((k, v) for k, v in metric.items() if k != "__name__" and k not in strip))
        interned = _INTERNED.get(labels)
        if interned is None:
            if len(_INTERNED) >= _INTERNED_MAX:
                _INTERNED.clear()
            interned = _INTERNED[labels] = labels
        stamps, numbers = array("d"), array("d")
        raw: list[str] | None = None
        for stamp, value in values:
            stamps.append(float(stamp))
            try:
                numbers.append(float(value))
            except (TypeError, ValueError):
                numbers.append(math.nan)
                raw = [str(v) for _, v in values]
        return cls(name, interned, stamps, numbers, raw)


class _Plan:
    """What parse() makes of one series' line, whatever its value: worked out once per name and label set."""

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


_PLANS: dict[tuple[str, LabelSet], _Plan] = {}
_PLANS_MAX = 65536
_DROPPED: dict[tuple[LabelSet, frozenset[str]], LabelSet] = {}


def _plan(name: str, labels: LabelSet) -> _Plan:
    plan = _PLANS.get((name, labels))
    if plan is None:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        plan = _PLANS[(name, labels)] = _Plan(name, labels)
    return plan


def _without(labels: LabelSet, drop: frozenset[str]) -> LabelSet:
    kept = _DROPPED.get((labels, drop))
    if kept is None:
        if len(_DROPPED) >= _PLANS_MAX:
            _DROPPED.clear()
        kept = _DROPPED[(labels, drop)] = tuple(pair for pair in labels if pair[0] not in drop)
    return kept


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


def snapshots(matrix: Sequence[StoredSeries], target: Mapping[str, str], after: float | None = None, *,
              max_series_per_family: int = DEFAULT_MAX_SERIES_PER_FAMILY) -> list[tuple[float, Snapshot | str]]:
    """One target's stored series -> per scrape after ``after``, oldest first, its time and its snapshot, or
    its exposition text where the parser must decide (it may fail the scrape, as it fails a live one).

    ``target``: the target labels' values (what ``StoredSeries.of`` stripped), put back where the parser's
    input keeps them: a target with one series keeps every label, and vLLM's own (model_name, engine) stay
    (``rebuild.constant_labels``).
    """
    if len(matrix) == 1:
        drop: frozenset[str] = frozenset()
        kept = [(k, v) for k, v in target.items() if v]
    else:
        drop = _constant(matrix)
        kept = [(k, v) for k, v in target.items() if k in KEEP_LABELS and v]
    building: dict[float, _Scrape] = {}
    for series in matrix:
        labels = series.labels
        if kept:
            labels = tuple(sorted((*labels, *kept)))
        if drop:
            labels = _without(labels, drop)
        plan = _plan(series.name, labels)
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
    dropped = scrape.dropped
    histograms: dict[str, dict[LabelSet, HistogramSample]] = {}
    for canonical, family in scrape.buckets.items():
        assembled: dict[LabelSet, HistogramSample] = {}
        for key, by_le in family.items():
            sample = _assemble(canonical, key, by_le, scrape.sums.get(canonical, {}), scrape.counts.get(canonical, {}))
            if sample is None:
                dropped += 1
            else:
                assembled[key] = sample
        if assembled:
            histograms[canonical] = assembled
    return Snapshot(
        timestamp=at,
        scalars=MappingProxyType({k: MappingProxyType(v) for k, v in scrape.scalars.items() if v}),
        histograms=MappingProxyType({k: MappingProxyType(v) for k, v in histograms.items()}),
        info=MappingProxyType({k: tuple(MappingProxyType(d) for d in v) for k, v in scrape.info.items()}),
        dropped_samples=dropped,
    )


def _constant(matrix: Sequence[StoredSeries]) -> frozenset[str]:
    """``rebuild.constant_labels`` over the labels kept (the target labels are constant already)."""
    common: dict[str, str] | None = None
    for series in matrix:
        if common is None:
            common = {k: v for k, v in series.labels if k not in KEEP_LABELS}
        else:
            labels = dict(series.labels)
            common = {k: v for k, v in common.items() if labels.get(k) == v}
        if not common:
            break
    return frozenset(common or ())


def _as_json(series: StoredSeries, target: Mapping[str, str]) -> dict[str, Any]:
    """A series back as the store's answer held it, for ``rebuild.scrapes`` (the parser's path)."""
    metric = {"__name__": series.name, **dict(series.labels), **{k: v for k, v in target.items() if v}}
    texts = series.raw if series.raw is not None else [repr(v) for v in series.values]
    return {"metric": metric, "values": [[at, text] for at, text in zip(series.stamps, texts, strict=True)]}
