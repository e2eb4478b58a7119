"""The window's step deltas, stored by column: one array of numbers per series, one row per step.

A step is what happened between two consecutive scrapes. Kept as a dict per family of parsed samples,
a step cost about 11 KB at the shipped 180 s / 5 s (dicts, one object per histogram series and step);
kept as one array per series, a step costs its numbers: 2 bytes per whole count under 65,536 (4, or a
double, for the others), 8 per histogram sum, and a presence byte per histogram series.

Rows are numbered by the step's sequence number (0, 1, ... over the window's life). A series' column
starts at the first step it appears in and ends at the last; a step it was missing from holds zeros
(and, for a histogram, presence 0), so a sum over a column's rows is the sum over the steps that held it.

The sums are the step-by-step sums, bit for bit: a bucket or a counter is summed in step order from
0.0 (``functools.reduce`` over the column, the loop a step-by-step reader would write, run in C); the
series of a multi-series counter in step order (within a step, in the order the window first held them),
unless every delta is a whole number whose total stays within 2**53, where every order gives the same float;
sums and counts with ``math.fsum``.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import reduce
from itertools import chain, repeat
from operator import add, lt, sub

from exporter.snapshot import HistogramSample, LabelSet, Snapshot

LabelFilter = Callable[[LabelSet], bool] | None
EXACT = 2 ** 53  # integers up to this magnitude are floats exactly, and so are all their partial sums


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
        if len(parts) == 1:  # bounds ascend and are distinct (the parser sorts them): the sum of one is itself
            return parts[0]
        first = parts[0].bounds
        if all(part.bounds == first for part in parts):  # the usual case: the same bounds on every engine
            return HistogramDelta(first, tuple(sum(values) for values in zip(*(p.cumulative for p in parts))),
                                  math.fsum(p.sum for p in parts), math.fsum(p.count for p in parts))
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


def went_down(old: HistogramSample, new: HistogramSample) -> bool:
    """A histogram series restarted: its count or a bucket decreased, or its bounds changed."""
    return new.count < old.count or old.bounds != new.bounds or any(map(lt, new.cumulative, old.cumulative))


def _naive(values: Iterable[float]) -> float:
    """The left-to-right float sum from 0.0 (what ``total += value`` in a loop gives)."""
    return reduce(add, values, 0.0)


def _whole(values: array) -> float:
    """The sum of whole numbers (an 'H' or 'I' column: each under 2**32, so any window's sum is exact)."""
    return float(sum(values))


# A column's numbers are whole and small nearly always (counts per step): 2 bytes each while they fit,
# then 4, then a double from the first one that is fractional, negative or larger. Every one of them
# reads back as the float it was (an integer under 2**32 is a float exactly).
_WIDER = {"H": "I", "I": "d"}


def _extend(column: array, values: list[float]) -> array:
    """Append ``values`` to ``column``, widened first when they do not fit it; returns the column."""
    while column.typecode != "d":
        try:
            whole = list(map(int, values))
        except (OverflowError, ValueError):  # inf, nan
            whole = None
        if whole == values:
            size = len(column)
            try:
                column.extend(whole)
                return column
            except OverflowError:
                del column[size:]
        column = array(_WIDER[column.typecode], column)
    column.extend(values)
    return column


class _Counter:
    """One counter series' deltas, a row per step from ``first``."""

    __slots__ = ("first", "values")

    def __init__(self, first: int) -> None:
        self.first = first
        self.values = array("H")

    def append(self, seq: int, delta: float) -> None:
        missing = seq - self.first - len(self.values)
        if missing > 0:
            self.values.extend(repeat(0, missing))
        self.values = _extend(self.values, [delta])

    def rows(self, lo: int, hi: int) -> array:
        return self.values[max(lo - self.first, 0):max(hi - self.first, 0)]


# Up to this many steps, a histogram's buckets are summed row by row (the same additions in the same order as
# column by column, in half the time for the recent few steps the rules read most).
_BY_ROW_MAX = 8


class _Histogram:
    """One histogram series' deltas with one set of bounds: per step the count then the cumulative buckets
    (``counts``), and the sum (``sums``); ``present`` is 0 for a step that did not hold the series."""

    __slots__ = ("bounds", "first", "counts", "sums", "present", "running")

    def __init__(self, bounds: tuple[float, ...], first: int) -> None:
        self.bounds = bounds
        self.first = first
        self.counts = array("H")
        self.sums = array("d")
        self.present = bytearray()
        # The count and each bucket summed over every row kept, as 8-byte integers, while the column holds whole
        # numbers (None once it holds a double): the whole window's total, read each evaluation, is then one
        # row, not a sum over every step. Integers add and subtract exactly, so it is the sum of the rows.
        self.running: array | None = array("q", bytes(8 * (len(bounds) + 1)))  # 36 rows under 2**32 fit

    @property
    def stride(self) -> int:
        return len(self.bounds) + 1

    def append(self, seq: int, count: float, total: float, cumulative: Iterable[float]) -> None:
        missing = seq - self.first - len(self.present)
        if missing > 0:
            self.counts.extend(repeat(0, missing * self.stride))
            self.sums.extend(repeat(0.0, missing))
            self.present.extend(bytes(missing))
        self.counts = _extend(self.counts, [count, *cumulative])
        self.sums.append(total)
        self.present.append(1)
        if self.running is not None:
            if self.counts.typecode == "d":
                self.running = None
            else:
                self.running = array("q", map(add, self.running, self.counts[-self.stride:]))

    def drop(self, steps: int) -> None:
        k = self.stride
        if self.running is not None:
            gone = self.counts[:steps * k]
            if steps == 1:  # the usual drop: the oldest step's row leaves as the newest arrives
                self.running = array("q", map(sub, self.running, gone))
            else:
                self.running = array("q", [kept - sum(gone[i::k]) for i, kept in enumerate(self.running)])
        del self.counts[:steps * k]
        del self.sums[:steps]
        del self.present[:steps]
        self.first += steps

    def newest_in(self, lo: int, hi: int) -> int:
        """The sequence number of the newest step in [lo, hi) that holds the series, -1 for none."""
        a, b = max(lo - self.first, 0), hi - self.first
        if b <= a:
            return -1
        at = self.present.rfind(1, a, b)
        return self.first + at if at >= 0 else -1

    def total(self, lo: int, hi: int) -> HistogramDelta:
        """The series' deltas summed over the steps in [lo, hi)."""
        k = self.stride
        a, b = max(lo - self.first, 0), max(hi - self.first, 0)
        if self.running is not None and a == 0 and b >= len(self.present):  # every row kept: the running sums
            return HistogramDelta(self.bounds, tuple(map(float, self.running[1:])), math.fsum(self.sums),
                                  float(self.running[0]))
        counts = self.counts[a * k:b * k]
        rows = len(counts) // k
        if rows <= _BY_ROW_MAX:  # a few recent steps: added row by row, each bucket in step order from 0
            running: list[float] | list[int] = [0.0 if counts.typecode == "d" else 0] * (k - 1)
            for row in range(rows):
                running = list(map(add, running, counts[row * k + 1:(row + 1) * k]))
            buckets = tuple(map(float, running))
        else:
            # Whole numbers under 2**32, 36 of them: their sum is exact, so the integer sum is the float one.
            add_up = _naive if counts.typecode == "d" else _whole
            buckets = tuple(add_up(counts[i::k]) for i in range(1, k))
        return HistogramDelta(self.bounds, buckets, math.fsum(self.sums[a:b]), math.fsum(counts[0::k]))

    def at(self, seq: int) -> HistogramDelta | None:
        """The series' delta in one step, None when the step did not hold it."""
        i = seq - self.first
        if i < 0 or i >= len(self.present) or not self.present[i]:
            return None
        k = self.stride
        return HistogramDelta(self.bounds, tuple(map(float, self.counts[i * k + 1:(i + 1) * k])), self.sums[i],
                              float(self.counts[i * k]))

    def copy(self) -> _Histogram:
        clone = _Histogram(self.bounds, self.first)
        clone.counts, clone.sums, clone.present = self.counts[:], self.sums[:], self.present[:]
        clone.running = None if self.running is None else self.running[:]
        return clone


class StepDeltas:
    """Every step's counter and histogram deltas of one window, by column, from step ``first`` to ``next - 1``."""

    def __init__(self, counter_names: frozenset[str]) -> None:
        self.counter_names = counter_names
        self.first = 0  # the oldest step kept
        self.next = 0  # the number the next step gets
        self.counters: dict[str, dict[LabelSet, _Counter]] = {}
        self.histograms: dict[str, dict[LabelSet, dict[tuple[float, ...], _Histogram]]] = {}

    def copy(self) -> StepDeltas:
        clone = StepDeltas(self.counter_names)
        clone.first, clone.next = self.first, self.next
        for name, series in self.counters.items():
            copies = clone.counters[name] = {}
            for key, column in series.items():
                copies[key] = copied = _Counter(column.first)
                copied.values = column.values[:]
        clone.histograms = {name: {key: {bounds: column.copy() for bounds, column in per_bounds.items()}
                                   for key, per_bounds in series.items()}
                            for name, series in self.histograms.items()}
        return clone

    def push(self, old: Snapshot, new: Snapshot, process_restarted: bool) -> bool:
        """Store the reset-safe step from ``old`` to ``new``; True when a counter or histogram was reset.

        A counter that went down restarted from zero, so its step increase is its new value; with
        ``process_restarted`` every series is re-based that way. A series new in ``new`` has no known
        start inside the step: it contributes nothing yet.
        """
        seq = self.next
        self.next += 1
        any_reset = process_restarted
        for name in self.counter_names:
            new_series = new.scalars.get(name)
            if not new_series:
                continue
            old_series = old.scalars.get(name, {})
            columns = self.counters.get(name)
            if columns is None:
                columns = self.counters[name] = {}
            for key, value in new_series.items():
                before = old_series.get(key)
                if before is None:
                    delta = 0.0
                elif process_restarted or value < before:
                    any_reset = any_reset or value < before
                    delta = value
                else:
                    delta = value - before
                column = columns.get(key)
                if column is None:
                    column = columns[key] = _Counter(seq)
                column.append(seq, delta)
        for name, new_histograms in new.histograms.items():
            old_histograms = old.histograms.get(name, {})
            by_key = self.histograms.get(name)
            if by_key is None:
                by_key = self.histograms[name] = {}
            for key, sample in new_histograms.items():
                per_bounds = by_key.get(key)
                if per_bounds is None:
                    per_bounds = by_key[key] = {}
                hist = per_bounds.get(sample.bounds)
                if hist is None:
                    hist = per_bounds[sample.bounds] = _Histogram(sample.bounds, seq)
                before_hist = old_histograms.get(key)
                if before_hist is None:
                    hist.append(seq, 0.0, 0.0, repeat(0.0, len(sample.bounds)))
                elif process_restarted or went_down(before_hist, sample):
                    any_reset = True
                    hist.append(seq, sample.count, sample.sum, sample.cumulative)
                else:
                    hist.append(seq, sample.count - before_hist.count, sample.sum - before_hist.sum,
                                map(sub, sample.cumulative, before_hist.cumulative))
        return any_reset

    def drop_before(self, seq: int) -> None:
        """Forget the steps before ``seq`` (they left the window); a series goes with its last step."""
        if seq <= self.first:
            return
        self.first = seq
        for series in self.counters.values():
            for key in [key for key, column in series.items() if column.first < seq]:
                column = series[key]
                drop = seq - column.first
                if drop >= len(column.values):
                    del series[key]
                else:
                    del column.values[:drop]
                    column.first = seq
        for by_key in self.histograms.values():
            for key in list(by_key):
                per_bounds = by_key[key]
                for bounds in [b for b, column in per_bounds.items() if column.first < seq]:
                    hist = per_bounds[bounds]
                    drop = seq - hist.first
                    if drop >= len(hist.present):
                        del per_bounds[bounds]
                    else:
                        hist.drop(drop)
                if not per_bounds:
                    del by_key[key]

    # -- counters ------------------------------------------------------------------------
    def increase(self, name: str, match: LabelFilter, lo: int, hi: int) -> float:
        """The family's increase over the steps in [lo, hi), summed over the matching series."""
        found = [(max(lo, column.first), column.rows(lo, hi)) for key, column in self.counters.get(name, {}).items()
                 if match is None or match(key)]
        found = [(start, rows) for start, rows in found if rows]
        if not found:
            return 0.0
        if len(found) == 1:  # whole numbers under 2**32 in an integer column: every order sums them exactly
            rows = found[0][1]
            return _naive(rows) if rows.typecode == "d" else _whole(rows)
        values = list(map(float, chain.from_iterable(rows for _, rows in found)))
        if all(map(float.is_integer, values)) and math.fsum(map(abs, values)) <= EXACT:
            return math.fsum(values)
        total = 0.0
        for seq in range(lo, hi):  # step by step, the series in each step in order
            for start, rows in found:
                if 0 <= seq - start < len(rows):
                    total += rows[seq - start]
        return total

    def increase_by_step(self, name: str, lo: int, hi: int) -> list[float]:
        """Each step's increase in [lo, hi), summed over the family's series, oldest first."""
        columns = list(self.counters.get(name, {}).values())
        return [sum(float(column.values[seq - column.first]) for column in columns
                    if 0 <= seq - column.first < len(column.values)) for seq in range(lo, hi)]

    def increase_at(self, name: str, seq: int) -> float:
        """One step's increase, summed over the family's series: ``increase_by_step``'s value for ``seq``."""
        return self.increase_by_step(name, seq, seq + 1)[0]

    # -- histograms ----------------------------------------------------------------------
    def histogram(self, name: str, match: LabelFilter, lo: int, hi: int) -> HistogramDelta | None:
        """Observations over the steps in [lo, hi), merged across matching series; a series whose bounds
        changed inside the range counts the steps with the bounds of its newest step there."""
        parts = []
        for key, per_bounds in self.histograms.get(name, {}).items():
            if match is not None and not match(key):
                continue
            newest, at = None, -1
            for hist in per_bounds.values():
                seq = hist.newest_in(lo, hi)
                if seq > at:
                    newest, at = hist, seq
            if newest is not None:
                parts.append(newest.total(lo, hi))
        return HistogramDelta.merge(parts)

    def histograms_at(self, name: str, seq: int, match: LabelFilter = None) -> list[HistogramDelta]:
        """Each matching series' delta in one step (the series that step held)."""
        out = []
        for key, per_bounds in self.histograms.get(name, {}).items():
            if match is None or match(key):
                for hist in per_bounds.values():
                    delta = hist.at(seq)
                    if delta is not None:
                        out.append(delta)
        return out
