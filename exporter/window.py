"""Per-target ring buffer of snapshots and the reset-safe arithmetic over it.

Each push stores the step delta against the previous snapshot (:mod:`exporter.deltas`: by column,
one array per series), so a window query is a sum over stored steps (no re-walk of raw snapshots)
and a counter reset is decided once, where it happens: a counter that went down restarted from
zero, so its step increase is its new value, never a negative or a huge number. A vLLM restart
(``process_start_time_seconds`` changed) resets every counter of that step the same way.

Older snapshots keep only their gauges: their counters and histograms live on as step deltas, and
the info families are read at the newest scrape only, so a window holds one full scrape.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from exporter.deltas import HistogramDelta, LabelFilter, StepDeltas
from exporter.frozen import replace
from exporter.snapshot import LabelIs, LabelSet, Snapshot
from exporter.timebuffer import TimeBuffer

__all__ = ["GaugeAgg", "HistogramDelta", "LabelFilter", "Step", "Window"]

GaugeAgg = Literal["sum", "max", "min", "mean"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Step:
    """Two consecutive snapshots: when, and whether a counter was re-based (its deltas are in the
    window's :class:`~exporter.deltas.StepDeltas` under ``seq``)."""

    seq: int
    start: float
    end: float
    restarted: bool  # process restart or any counter reset: the step was re-based, not spiked


def _start_time(snapshot: Snapshot) -> float | None:
    series = snapshot.scalars.get("process_start_time_seconds")
    if not series:
        return None
    return max(series.values())


_NOTHING: MappingProxyType = MappingProxyType({})
_UNREAD = object()  # Window.per_step: a step not read yet


class _Layout:
    """Which gauge families and series an older scrape held, in order: shared by every scrape that held
    the same ones (nearly all of a window's)."""

    __slots__ = ("structure", "where")

    def __init__(self, structure: tuple[tuple[str, tuple[LabelSet, ...]], ...]) -> None:
        self.structure = structure
        self.where: dict[str, tuple[int, tuple[LabelSet, ...]]] = {}
        start = 0
        for name, keys in structure:
            self.where[name] = (start, keys)
            start += len(keys)


class _Gauges(Mapping[str, Mapping[LabelSet, float]]):
    """An older scrape's gauges: its values in one array, read through the shared layout."""

    __slots__ = ("_layout", "_values")

    def __init__(self, layout: _Layout, values: array) -> None:
        self._layout = layout
        self._values = values

    def __getitem__(self, name: str) -> Mapping[LabelSet, float]:
        start, keys = self._layout.where[name]
        return dict(zip(keys, self._values[start:start + len(keys)]))

    def __iter__(self) -> Iterator[str]:
        return iter(self._layout.where)

    def __len__(self) -> int:
        return len(self._layout.where)


@dataclass(frozen=True, slots=True)
class _Scrape:
    """A snapshot in the window, the step that led to it (None for the first one ever) and its number
    (consecutive over the window's life: the gauge memo's index)."""

    snapshot: Snapshot
    step: Step | None
    serial: int


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
        self._deltas = StepDeltas(self._counter_names)
        self._serial = 0
        self._layout: _Layout | None = None
        # (family, aggregation, filter) -> the serial of the window's oldest scrape it was read at, and the gauge at
        # each scrape since (NaN: none); each scrape stays for 36 evaluations at the shipped 180 s / 5 s.
        self._gauge_memo: dict[tuple[str, str, LabelIs | None], tuple[int, array]] = {}
        # what a signal reads of each step (``per_step``: its key) -> step seq -> the value, for the steps held
        self._step_memo: dict[Hashable, dict[int, Any]] = {}
        self._steps: tuple[Step, ...] | None = None
        self._present: frozenset[str] = frozenset()  # the newest scrape's families: asked ~100 times an evaluation
        # (query, family, filter, steps) -> its answer, until the next push: an evaluation asks for some sums
        # two or three times (the recent TTFT beside each recent share), and what is stored does not change
        self._reads: dict[tuple[str, str, LabelFilter, int], Any] = {}

    def forget_reads(self) -> None:
        """Drop the sums the last evaluation read: kept until the next push, they held 13 KB a target between
        evaluations (lab.memory at 1,000 targets: 158 KB a target with them, 145 without)."""
        self._reads = {}

    def clear(self) -> None:
        self._scrapes.clear()
        self._present = frozenset()
        self._steps = None
        self._deltas = StepDeltas(self._counter_names)
        self._gauge_memo = {}
        self._step_memo = {}
        self._reads = {}

    def copy(self) -> Window:
        """An independent view of the window as it is now: a reader on another thread keeps it while
        this window goes on taking scrapes (the scrapes are immutable; the buffer and the columns are new)."""
        clone = Window(self.span_seconds, self._counter_names)
        clone._scrapes = self._scrapes.copy()
        clone._deltas = self._deltas.copy()
        clone._serial = self._serial
        clone._present = self._present
        return clone

    def _gauges_only(self, older: Snapshot) -> Snapshot:
        """An older scrape as the window keeps it: its gauges, in one array (its counters and histograms live
        on as step deltas, and the info families are read at the newest scrape only)."""
        kept = [(name, series) for name, series in older.scalars.items() if name not in self._counter_names]
        structure = tuple((name, tuple(series)) for name, series in kept)
        if self._layout is None or self._layout.structure != structure:
            self._layout = _Layout(structure)
        values = array("d", chain.from_iterable(series.values() for _, series in kept))
        return replace(older, scalars=_Gauges(self._layout, values), histograms=_NOTHING, info=_NOTHING)

    def push(self, snapshot: Snapshot) -> Step | None:
        """Add a scrape. A timestamp that does not move forward (clock jump) restarts the window."""
        last = self._scrapes.latest
        if last is not None and snapshot.timestamp <= last.snapshot.timestamp:
            self.clear()
            last = None
        step = None
        if last is not None:
            older = last.snapshot
            old_start, new_start = _start_time(older), _start_time(snapshot)
            # A changed start time re-bases every series; otherwise each series decides for itself, so one
            # data-parallel engine that restarts never turns its siblings' lifetime totals into a spike.
            process_restarted = old_start is not None and new_start is not None and new_start != old_start
            seq = self._deltas.next
            reset = self._deltas.push(older, snapshot, process_restarted)
            step = Step(seq, older.timestamp, snapshot.timestamp, reset)
            self._scrapes.replace_latest(replace(last, snapshot=self._gauges_only(older)))
        self._scrapes.push(snapshot.timestamp, _Scrape(snapshot, step, self._serial))
        self._present = snapshot.families()
        self._steps = None
        self._reads = {}
        self._serial += 1
        first = next(islice(self._scrapes, 1, None), None)
        self._deltas.drop_before(first.step.seq if first is not None and first.step is not None
                                 else self._deltas.next)
        oldest = self._deltas.first
        for memo in self._step_memo.values():  # filled oldest step first: the steps gone are at its start
            while memo and next(iter(memo)) < oldest:
                del memo[next(iter(memo))]
        return step

    # -- shape ---------------------------------------------------------------------------
    @property
    def snapshots(self) -> list[Snapshot]:
        """The snapshots of the window, oldest first."""
        return [scrape.snapshot for scrape in self._scrapes]

    @property
    def steps(self) -> list[Step]:
        """The steps between consecutive snapshots of the window, oldest first."""
        return list(self.steps_view)

    @property
    def steps_view(self) -> tuple[Step, ...]:
        """``steps`` as the window keeps them (no copy)."""
        if self._steps is None:  # read dozens of times per evaluation; changes only with a push
            self._steps = tuple(scrape.step for scrape in islice(self._scrapes, 1, None) if scrape.step is not None)
        return self._steps

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
        return sum(1 for step in self.steps_view if step.restarted)

    def present(self, name: str) -> bool:
        """Whether the newest scrape carries the family."""
        return name in self._present

    def _first_of(self, steps: Sequence[Step]) -> int:
        """The sequence number of the oldest of ``steps`` (the window's next one when there are none)."""
        return steps[0].seq if steps else self._deltas.next

    def _recent(self, steps: int) -> int:
        """The sequence number of the oldest of the newest ``steps`` steps (``steps[-n:]``, as a list slices)."""
        return self._first_of(self.steps_view[-steps:])

    def _summed(self, kind: Literal["increase", "histogram"], name: str, match: LabelFilter, lo: int) -> Any:
        """The family's increase or histogram over the steps from ``lo`` to the newest, read once a push
        through one filter (a lambda is new each call: read afresh)."""
        key = (kind, name, match, lo)
        known = match is None or type(match) is LabelIs
        if known:
            value = self._reads.get(key, _UNREAD)
            if value is not _UNREAD:
                return value
        deltas = self._deltas
        if kind == "increase":
            value = deltas.increase(name, match, lo, deltas.next)
        else:
            value = deltas.histogram(name, match, lo, deltas.next)
        if known:
            self._reads[key] = value
        return value

    # -- counters ------------------------------------------------------------------------
    def increase(self, name: str, match: LabelFilter = None) -> float | None:
        """Reset-safe increase over the window, summed over matching series; None if absent."""
        if len(self._scrapes) < 2 or not self.present(name):
            return None
        return self._summed("increase", name, match, self._deltas.first)

    def increase_recent(self, name: str, steps: int, match: LabelFilter = None) -> float | None:
        """The increase over the newest ``steps`` steps only (a cause's evidence now); None if absent."""
        if len(self._scrapes) < 2 or not self.present(name):
            return None
        return self._summed("increase", name, match, self._recent(steps))

    def increase_by_step(self, name: str) -> list[float]:
        """Each step's increase, summed over the family's series, oldest first (0 where it had none)."""
        return self._deltas.increase_by_step(name, self._deltas.first, self._deltas.next)

    def increase_at(self, step: Step, name: str) -> float:
        """One step's increase, summed over the family's series (0 where it had none): ``increase_by_step``'s
        value for that step."""
        return self._deltas.increase_at(name, step.seq)

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
        return self._summed("histogram", name, match, self._deltas.first)

    def histogram_recent(self, name: str, steps: int, match: LabelFilter = None) -> HistogramDelta | None:
        """Observations over the newest ``steps`` steps only (the effect next to a cause's recent evidence)."""
        if len(self._scrapes) < 2 or not self.present(name):
            return None
        return self._summed("histogram", name, match, self._recent(steps))

    def histogram_since(self, name: str, since: float, earlier_steps: int = 0,
                        match: LabelFilter = None) -> HistogramDelta | None:
        """Observations of the steps that end at or after ``since``, and of the ``earlier_steps`` before them
        (the effect since a cause's evidence began, with the steps that evidence was read over)."""
        if len(self._scrapes) < 2 or not self.present(name):
            return None
        steps = self.steps_view
        first = next((i for i, step in enumerate(steps) if step.end >= since), len(steps))
        return self._summed("histogram", name, match, self._first_of(steps[max(0, first - earlier_steps):]))

    def histogram_by_step(self, name: str, match: LabelFilter = None) -> list[tuple[float, HistogramDelta]]:
        """Each step's observations as (the step's end, delta), oldest first; steps with none are left out."""
        if len(self._scrapes) < 2 or not self.present(name):
            return []
        out = []
        for step in self.steps_view:
            delta = HistogramDelta.merge(self._deltas.histograms_at(name, step.seq, match))
            if delta is not None and delta.count > 0:
                out.append((step.end, delta))
        return out

    def histograms_at(self, step: Step, name: str) -> list[HistogramDelta]:
        """Each series' observations in one step of the window (the series that step held, in the order
        they first appeared)."""
        return self._deltas.histograms_at(name, step.seq)

    def per_step(self, key: Hashable, read: Callable[[Step], T]) -> list[T]:
        """``read(step)`` for every step of the window, oldest first, each step read once while the window
        holds it: a step's deltas never change once stored, so neither does what is read from them.
        ``key`` names the reading with everything it depends on besides the step (a threshold it compares
        with): one key, one ``read``."""
        memo = self._step_memo.get(key)
        if memo is None:
            memo = self._step_memo[key] = {}
        out = []
        for step in self.steps_view:
            value = memo.get(step.seq, _UNREAD)
            if value is _UNREAD:
                value = memo[step.seq] = read(step)
            out.append(value)
        return out

    def duration_recent(self, steps: int) -> float:
        """Seconds covered by the newest ``steps`` steps."""
        recent = self.steps_view[-steps:]
        return recent[-1].end - recent[0].start if recent else 0.0

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
        if match is not None and not isinstance(match, LabelIs):  # a filter that is new each call: read afresh
            values = [self.gauge_at(s, name, agg, match) for s in self.snapshots]
            return [v for v in values if v is not None]
        scrapes = list(self._scrapes)
        if not scrapes:
            return []
        oldest = scrapes[0].serial
        key = (name, agg, match)
        known = self._gauge_memo.get(key)
        if known is None or known[0] > oldest:
            known = (oldest, array("d"))
        elif known[0] < oldest:
            del known[1][:oldest - known[0]]
            known = (oldest, known[1])
        memo = known[1]
        for scrape in scrapes[len(memo):]:
            value = self.gauge_at(scrape.snapshot, name, agg, match)
            memo.append(math.nan if value is None else value)
        self._gauge_memo[key] = known
        return [v for v in memo if v == v]  # NaN: no gauge at that scrape (the parser drops NaN samples)

