"""Per-target ring buffer of snapshots and the reset-safe arithmetic over it.

Each push stores the step delta against the previous snapshot, so a window query is a sum
over stored steps (no re-walk of raw snapshots) and a counter reset is decided once, where
it happens: a counter that went down restarted from zero, so its step increase is its new
value, never a negative or a huge number. A vLLM restart (``process_start_time_seconds``
changed) resets every counter of that step the same way.

The sums over the stored steps are kept as running totals (:class:`_Totals`: a step is added when
it enters the window and subtracted when it leaves), so a query costs the same whatever the window
holds. They are exact: a family whose deltas are all integers (vLLM's counts) is summed in Python
integers, which gives the very float the step-by-step sum gives while the magnitudes stay within
2**53; any other family (a CPU-seconds counter, a non-integer bucket) is summed step by step.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from types import MappingProxyType
from typing import Literal

from exporter.snapshot import HistogramSample, LabelSet, Snapshot
from exporter.timebuffer import TimeBuffer

LabelFilter = Callable[[LabelSet], bool] | None
GaugeAgg = Literal["sum", "max", "min", "mean"]


@dataclass(frozen=True, slots=True)
class HistogramDelta:
    """Observations that landed in a histogram during an interval (cumulative per bound)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float

    def mean(self) -> float | None:
        if self.count <= 0 or math.isnan(self.sum):
            return None
        return self.sum / self.count

    def quantile(self, q: float) -> float | None:
        """Prometheus ``histogram_quantile`` semantics: linear inside the bucket.

        A rank in the +Inf bucket returns the highest finite bound (a lower bound on the
        truth); a rank in the first bucket interpolates from 0 (see :meth:`resolves`).
        """
        total = self.cumulative[-1] if self.cumulative else 0.0
        if total <= 0:
            return None
        rank = q * total
        for i, (bound, cum) in enumerate(zip(self.bounds, self.cumulative)):
            if cum >= rank:
                if math.isinf(bound):
                    return self.bounds[i - 1] if i > 0 else None
                lower = self.bounds[i - 1] if i > 0 else min(0.0, bound)
                below = self.cumulative[i - 1] if i > 0 else 0.0
                in_bucket = cum - below
                if in_bucket <= 0:
                    return bound
                return lower + (bound - lower) * (rank - below) / in_bucket
        return None

    def resolves(self, q: float) -> bool:
        """True when the q-quantile lies above the first bucket, i.e. the buckets say something.

        vLLM's latency buckets start at 0.3 s; a quantile interpolated inside the first bucket
        can hide a real value of microseconds (docs/method.md, "Bucket resolution").
        """
        total = self.cumulative[-1] if self.cumulative else 0.0
        return total > 0 and self.cumulative[0] < q * total

    def share_above(self, threshold: float) -> float | None:
        """Share of observations above the smallest bound >= threshold (exact at a bound)."""
        total = self.cumulative[-1] if self.cumulative else 0.0
        if total <= 0:
            return None
        for bound, cum in zip(self.bounds, self.cumulative):
            if bound >= threshold:
                return (total - cum) / total
        return 0.0

    @staticmethod
    def merge(parts: Iterable[HistogramDelta]) -> HistogramDelta | None:
        """Sum histograms (e.g. across engines). Bounds present in all parts are kept."""
        parts = list(parts)
        if not parts:
            return None
        common = set(parts[0].bounds)
        for part in parts[1:]:
            common &= set(part.bounds)
        bounds = tuple(sorted(common))
        cumulative = []
        for bound in bounds:
            cumulative.append(sum(p.cumulative[p.bounds.index(bound)] for p in parts))
        return HistogramDelta(
            bounds=bounds,
            cumulative=tuple(cumulative),
            sum=math.fsum(p.sum for p in parts),
            count=math.fsum(p.count for p in parts),
        )


def _went_down(old: HistogramSample, new: HistogramSample) -> bool:
    """A histogram series restarted: its count or a bucket decreased, or its bounds changed."""
    return (new.count < old.count or old.bounds != new.bounds
            or any(n < o for n, o in zip(new.cumulative, old.cumulative)))


# A window holds 36 steps of every histogram series at the shipped 180 s / 5 s, most of whose deltas are
# small whole numbers and whose bounds repeat: shared tuples and float objects keep a step's memory to its
# pointers (a float object per bucket and step was most of a window's memory).
_SHARED: dict[object, object] = {}
_SHARED_MAX = 65536


def _shared_floats(values: tuple[float, ...]) -> tuple[float, ...]:
    """The same numbers, as tuples and float objects shared with every equal one seen before."""
    found = _SHARED.get(values)
    if found is not None:
        return found  # type: ignore[return-value]
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    shared = tuple(_shared_float(v) for v in values)
    _SHARED[shared] = shared
    return shared


def _shared_float(value: float) -> float:
    if value != value:  # NaN: not a key (it equals nothing), and rare
        return value
    found = _SHARED.get(value)
    if found is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        _SHARED[value] = found = value
    return found  # type: ignore[return-value]


def _histogram_step(old: HistogramSample | None, new: HistogramSample, reset: bool) -> HistogramDelta:
    bounds = _shared_floats(new.bounds)
    if old is None:
        # A series that appears mid-window has no known start: it contributes nothing yet.
        return HistogramDelta(bounds, _shared_floats(tuple(0.0 for _ in bounds)), 0.0, 0.0)
    if reset or _went_down(old, new):
        return HistogramDelta(bounds, _shared_floats(new.cumulative), new.sum, new.count)
    return HistogramDelta(
        bounds,
        _shared_floats(tuple(n - o for n, o in zip(new.cumulative, old.cumulative))),
        _shared_float(new.sum - old.sum),
        _shared_float(new.count - old.count),
    )


@dataclass(frozen=True, slots=True)
class Step:
    """What happened between two consecutive snapshots."""

    start: float
    end: float
    counters: dict[str, dict[LabelSet, float]]
    histograms: dict[str, dict[LabelSet, HistogramDelta]]
    restarted: bool  # process restart or any counter reset: the step was re-based, not spiked


def _start_time(snapshot: Snapshot) -> float | None:
    series = snapshot.scalars.get("process_start_time_seconds")
    if not series:
        return None
    return max(series.values())


def diff(old: Snapshot, new: Snapshot, counter_names: frozenset[str]) -> Step:
    """Reset-safe step delta from ``old`` to ``new``."""
    old_start, new_start = _start_time(old), _start_time(new)
    # A changed start time re-bases every series; otherwise each series decides for itself, so one
    # data-parallel engine that restarts never turns its siblings' lifetime totals into a spike.
    process_restarted = old_start is not None and new_start is not None and new_start != old_start
    any_reset = process_restarted
    counters: dict[str, dict[LabelSet, float]] = {}
    for name in counter_names:
        new_series = new.scalars.get(name)
        if not new_series:
            continue
        old_series = old.scalars.get(name, {})
        deltas: dict[LabelSet, float] = {}
        for key, value in new_series.items():
            before = old_series.get(key)
            if before is None:
                deltas[key] = 0.0  # new series: no known start inside this step
            elif process_restarted or value < before:
                any_reset = any_reset or value < before
                deltas[key] = value
            else:
                deltas[key] = _shared_float(value - before)
        counters[name] = deltas
    histograms: dict[str, dict[LabelSet, HistogramDelta]] = {}
    for name, new_histograms in new.histograms.items():
        old_histograms = old.histograms.get(name, {})
        steps: dict[LabelSet, HistogramDelta] = {}
        for key, sample in new_histograms.items():
            before_hist = old_histograms.get(key)
            steps[key] = _histogram_step(before_hist, sample, process_restarted)
            if before_hist is not None and not process_restarted and _went_down(before_hist, sample):
                any_reset = True
        histograms[name] = steps
    return Step(old.timestamp, new.timestamp, counters, histograms, any_reset)


_NOTHING: MappingProxyType = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class _Scrape:
    """A snapshot in the window and the step that led to it (None for the first one ever)."""

    snapshot: Snapshot
    step: Step | None
    # (family, aggregation) -> the gauge at this scrape: the snapshot is immutable, and each scrape
    # stays in the window for 36 evaluations at the shipped 180 s / 5 s.
    gauges: dict[tuple[str, str], float | None] = field(default_factory=dict, compare=False)


EXACT = 2 ** 53  # integers up to this magnitude are floats exactly, and so are all their partial sums


def _integral(values: Sequence[float]) -> list[int] | None:
    """The values as Python integers, or None when one is not integer-valued (or not finite)."""
    try:
        ints = list(map(int, values))
    except (OverflowError, ValueError):
        return None
    return ints if ints == list(values) else None  # int == float compares exactly


class _SeriesHistogram:
    """One series' histogram deltas in the window with one set of bounds: bucket totals in integers,
    sums and counts kept per step (``math.fsum`` is exact whatever the order, so no running float)."""

    __slots__ = ("cumulative", "sums", "counts")

    def __init__(self, size: int) -> None:
        self.cumulative = [0] * size
        self.sums: deque[float] = deque()
        self.counts: deque[float] = deque()


class _Family:
    """Running totals of one family over the window's steps, and whether they are exact."""

    __slots__ = ("inexact", "magnitude", "counters", "histograms", "latest_bounds", "parts")

    def __init__(self) -> None:
        self.inexact = 0  # parts in the window that are not integer-valued: the family is summed step by step
        self.magnitude = 0  # sum of the parts' largest absolute values: exact while <= EXACT
        self.counters: dict[LabelSet, int] = {}
        self.histograms: dict[LabelSet, dict[tuple[float, ...], _SeriesHistogram]] = {}
        self.latest_bounds: dict[LabelSet, tuple[float, ...]] = {}  # bounds of the series' newest part
        self.parts: dict[LabelSet, int] = {}  # steps in the window that hold the series

    @property
    def exact(self) -> bool:
        return not self.inexact and self.magnitude <= EXACT


class _Totals:
    """The running sums of every family over the steps currently in the window."""

    def __init__(self) -> None:
        self.steps: deque[Step] = deque()  # the steps summed, oldest first
        self.families: dict[str, _Family] = {}

    def sync(self, steps: list[Step]) -> None:
        """Follow the window: subtract the steps that left it (oldest first), add the new ones."""
        first = steps[0] if steps else None
        while self.steps and self.steps[0] is not first:
            self._apply(self.steps.popleft(), -1)
        for step in steps[len(self.steps):]:
            self.steps.append(step)
            self._apply(step, 1)

    def _family(self, name: str) -> _Family:
        family = self.families.get(name)
        if family is None:
            family = self.families[name] = _Family()
        return family

    def _release(self, family: _Family, key: LabelSet) -> None:
        """One step holding the series left the window; the series goes with its last step."""
        left = family.parts[key] - 1
        if left:
            family.parts[key] = left
        else:
            del family.parts[key]
            family.counters.pop(key, None)
            family.histograms.pop(key, None)
            family.latest_bounds.pop(key, None)

    def _apply(self, step: Step, sign: int) -> None:
        for name, deltas in step.counters.items():
            family = self._family(name)
            for key, delta in deltas.items():
                if float(delta).is_integer():
                    whole = int(delta)
                    family.magnitude += sign * abs(whole)
                    family.counters[key] = family.counters.get(key, 0) + sign * whole
                else:
                    family.inexact += sign
                if sign > 0:
                    family.parts[key] = family.parts.get(key, 0) + 1
                else:
                    self._release(family, key)
        for name, histograms in step.histograms.items():
            family = self._family(name)
            for key, part in histograms.items():
                per_bounds = family.histograms.setdefault(key, {})
                series = per_bounds.get(part.bounds)
                if series is None:
                    series = per_bounds[part.bounds] = _SeriesHistogram(len(part.bounds))
                if sign > 0:
                    series.sums.append(part.sum)
                    series.counts.append(part.count)
                    family.latest_bounds[key] = part.bounds
                    family.parts[key] = family.parts.get(key, 0) + 1
                else:
                    series.sums.popleft()
                    series.counts.popleft()
                ints = _integral(part.cumulative)
                if ints is None:
                    family.inexact += sign
                else:
                    family.magnitude += sign * max(map(abs, ints), default=0)
                    cumulative = series.cumulative
                    for i, value in enumerate(ints):
                        cumulative[i] += sign * value
                if sign < 0:
                    if not series.sums:
                        del per_bounds[part.bounds]
                    self._release(family, key)

    def increase(self, name: str, match: LabelFilter) -> float | None:
        """The family's increase, or None when it has to be summed step by step."""
        family = self.families.get(name)
        if family is None:
            return 0.0
        if not family.exact:
            return None
        return float(sum(v for k, v in family.counters.items() if match is None or match(k)))

    def histogram(self, name: str, match: LabelFilter) -> list[HistogramDelta] | None:
        """Each matching series summed over the window, or None when it has to be summed step by step."""
        family = self.families.get(name)
        if family is None:
            return []
        if not family.exact:
            return None
        out = []
        for key, bounds in family.latest_bounds.items():
            if match is None or match(key):
                series = family.histograms[key][bounds]
                out.append(HistogramDelta(bounds, tuple(map(float, series.cumulative)), math.fsum(series.sums),
                                          math.fsum(series.counts)))
        return out


class Window:
    """The last ``span_seconds`` of one target's snapshots, with their step deltas.

    The oldest snapshot kept is the newest at or before the horizon (the baseline), so the steps
    after it cover the whole span; the step that led to the baseline lies outside the window.
    """

    def __init__(self, span_seconds: float, counter_names: Iterable[str]) -> None:
        if span_seconds <= 0:
            raise ValueError("window span must be positive")
        self.span_seconds = span_seconds
        self._counter_names = frozenset(counter_names)
        self._scrapes: TimeBuffer[_Scrape] = TimeBuffer(span_seconds, keep_baseline=True)
        self._totals = _Totals()

    def clear(self) -> None:
        self._scrapes.clear()
        self._totals = _Totals()

    def copy(self) -> Window:
        """An independent view of the window as it is now (scrapes are immutable; only the buffer is
        new): a reader on another thread keeps it while this window goes on taking scrapes."""
        clone = Window(self.span_seconds, self._counter_names)
        clone._scrapes = self._scrapes.copy()
        clone._totals.sync(clone.steps)  # its own totals: this window's change with every push
        return clone

    def push(self, snapshot: Snapshot) -> Step | None:
        """Add a scrape. A timestamp that does not move forward (clock jump) restarts the window."""
        last = self._scrapes.latest
        if last is not None and snapshot.timestamp <= last.snapshot.timestamp:
            self.clear()
            last = None
        step = diff(last.snapshot, snapshot, self._counter_names) if last is not None else None
        if last is not None:
            # Older snapshots only serve gauge history and shape; their counters and histograms live on as
            # step deltas (and the info families are read at the newest scrape only), so dropping them keeps
            # a window's memory to about one full scrape.
            older = last.snapshot
            gauges_only = MappingProxyType({name: series for name, series in older.scalars.items()
                                            if name not in self._counter_names})
            self._scrapes.replace_latest(replace(last, snapshot=replace(older, scalars=gauges_only,
                                                                        histograms=_NOTHING, info=_NOTHING),
                                                 gauges=last.gauges))
        self._scrapes.push(snapshot.timestamp, _Scrape(snapshot, step))
        self._totals.sync(self.steps)
        return step

    # -- shape ---------------------------------------------------------------------------
    @property
    def snapshots(self) -> list[Snapshot]:
        """The snapshots of the window, oldest first."""
        return [scrape.snapshot for scrape in self._scrapes]

    @property
    def steps(self) -> list[Step]:
        """The steps between consecutive snapshots of the window, oldest first."""
        return [scrape.step for scrape in islice(self._scrapes, 1, None) if scrape.step is not None]

    def __len__(self) -> int:
        return len(self._scrapes)

    @property
    def latest(self) -> Snapshot | None:
        last = self._scrapes.latest
        return last.snapshot if last is not None else None

    @property
    def duration(self) -> float:
        """Seconds covered by the stored steps."""
        return self._scrapes.covered_seconds

    @property
    def restarts(self) -> int:
        return sum(1 for step in self.steps if step.restarted)

    def present(self, name: str) -> bool:
        latest = self.latest
        return latest is not None and latest.has(name)

    # -- counters ------------------------------------------------------------------------
    def increase(self, name: str, match: LabelFilter = None) -> float | None:
        """Reset-safe increase over the window, summed over matching series; None if absent."""
        if len(self._scrapes) < 2 or not self.present(name):
            return None
        total = self._totals.increase(name, match)
        return total if total is not None else self.increase_stepwise(name, match)

    def increase_stepwise(self, name: str, match: LabelFilter = None) -> float:
        """The increase summed step by step, in window order (what the running totals must equal)."""
        total = 0.0
        for step in self.steps:
            for key, delta in step.counters.get(name, {}).items():
                if match is None or match(key):
                    total += delta
        return total

    def increase_recent(self, name: str, steps: int, match: LabelFilter = None) -> float | None:
        """The increase over the newest ``steps`` steps only (a cause's evidence now); None if absent."""
        if len(self._scrapes) < 2 or not self.present(name):
            return None
        total = 0.0
        for step in self.steps[-steps:]:
            for key, delta in step.counters.get(name, {}).items():
                if match is None or match(key):
                    total += delta
        return total

    def rate(self, name: str, match: LabelFilter = None) -> float | None:
        increase = self.increase(name, match)
        if increase is None or self.duration <= 0:
            return None
        return increase / self.duration

    # -- histograms ----------------------------------------------------------------------
    def histogram(self, name: str, match: LabelFilter = None) -> HistogramDelta | None:
        """Observations over the window, merged across matching series (engines)."""
        if len(self._scrapes) < 2 or not self.present(name):
            return None
        summed = self._totals.histogram(name, match)
        return HistogramDelta.merge(summed) if summed is not None else self.histogram_stepwise(name, match)

    def histogram_stepwise(self, name: str, match: LabelFilter = None) -> HistogramDelta | None:
        """The histogram summed step by step, in window order (what the running totals must equal)."""
        return self._histogram_over(self.steps, name, match)

    def histogram_recent(self, name: str, steps: int, match: LabelFilter = None) -> HistogramDelta | None:
        """Observations over the newest ``steps`` steps only (the effect next to a cause's recent evidence)."""
        if len(self._scrapes) < 2 or not self.present(name):
            return None
        return self._histogram_over(self.steps[-steps:], name, match)

    def histogram_since(self, name: str, since: float, earlier_steps: int = 0,
                        match: LabelFilter = None) -> HistogramDelta | None:
        """Observations of the steps that end at or after ``since``, and of the ``earlier_steps`` before them
        (the effect since a cause's evidence began, with the steps that evidence was read over)."""
        if len(self._scrapes) < 2 or not self.present(name):
            return None
        steps = self.steps
        first = next((i for i, step in enumerate(steps) if step.end >= since), len(steps))
        return self._histogram_over(steps[max(0, first - earlier_steps):], name, match)

    def histogram_by_step(self, name: str, match: LabelFilter = None) -> list[tuple[float, HistogramDelta]]:
        """Each step's observations as (the step's end, delta), oldest first; steps with none are left out."""
        if len(self._scrapes) < 2 or not self.present(name):
            return []
        out = []
        for step in self.steps:
            delta = self._histogram_over([step], name, match)
            if delta is not None and delta.count > 0:
                out.append((step.end, delta))
        return out

    def duration_recent(self, steps: int) -> float:
        """Seconds covered by the newest ``steps`` steps."""
        recent = self.steps[-steps:]
        return recent[-1].end - recent[0].start if recent else 0.0

    @staticmethod
    def _histogram_over(steps: list[Step], name: str, match: LabelFilter) -> HistogramDelta | None:
        per_series: dict[LabelSet, list[HistogramDelta]] = {}
        for step in steps:
            for key, delta in step.histograms.get(name, {}).items():
                if match is None or match(key):
                    per_series.setdefault(key, []).append(delta)
        merged = [_sum_same_series(parts) for parts in per_series.values()]
        return HistogramDelta.merge(m for m in merged if m is not None)

    # -- gauges --------------------------------------------------------------------------
    @staticmethod
    def _aggregate(values: list[float], agg: GaugeAgg) -> float | None:
        if not values:
            return None
        if agg == "sum":
            return math.fsum(values)
        if agg == "max":
            return max(values)
        if agg == "min":
            return min(values)
        return math.fsum(values) / len(values)

    def gauge_at(self, snapshot: Snapshot, name: str, agg: GaugeAgg = "sum", match: LabelFilter = None) -> float | None:
        series = snapshot.scalars.get(name)
        if series is None:
            return None
        return self._aggregate([v for k, v in series.items() if match is None or match(k)], agg)

    def gauge(self, name: str, agg: GaugeAgg = "sum", match: LabelFilter = None) -> float | None:
        """Latest value, aggregated across series (``sum`` for counts, ``max`` for usage)."""
        latest = self.latest
        return None if latest is None else self.gauge_at(latest, name, agg, match)

    def gauge_series(self, name: str, agg: GaugeAgg = "sum", match: LabelFilter = None) -> list[float]:
        """The gauge at every snapshot of the window that carries it, oldest first."""
        if match is not None:
            values = [self.gauge_at(s, name, agg, match) for s in self.snapshots]
        else:
            values = []
            key = (name, agg)
            for scrape in self._scrapes:
                known = scrape.gauges
                if key not in known:
                    known[key] = self.gauge_at(scrape.snapshot, name, agg)
                values.append(known[key])
        return [v for v in values if v is not None]


def _sum_same_series(parts: list[HistogramDelta]) -> HistogramDelta | None:
    """Add the step deltas of one series; steps whose bounds changed are re-based on the latest."""
    if not parts:
        return None
    bounds = parts[-1].bounds
    same = [p for p in parts if p.bounds == bounds]
    cumulative = [0.0] * len(bounds)
    for part in same:
        for i, value in enumerate(part.cumulative):
            cumulative[i] += value
    return HistogramDelta(bounds, tuple(cumulative), math.fsum(p.sum for p in same), math.fsum(p.count for p in same))
