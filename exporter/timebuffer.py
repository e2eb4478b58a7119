"""One time-ordered buffer, trimmed to a span, for everything the diagnosis keeps over its window.

The scrape window (:mod:`exporter.window`), the host-CPU counter history
(:mod:`exporter.hostcpu.probe`) and the DCGM readings (:mod:`exporter.pipeline`) all keep the
last ``span_seconds`` of timestamped items. They differ in one thing only, which
``keep_baseline`` says:

- cumulative readings (counters, scrapes) are turned into deltas, so the buffer keeps the newest
  item at or before the horizon as the baseline: the deltas then cover the whole span;
- point samples (a utilisation reading) are averaged, so only items at or after the horizon count.

:class:`Readings` is the point-sample buffer for plain numbers, kept as two arrays of doubles: 16 bytes a
reading instead of a tuple and two float objects (about 110), for the half-dozen a target keeps per evaluation.
"""

from __future__ import annotations

import copy
from array import array
from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class TimeBuffer(Generic[T]):
    """Items with their timestamps, oldest first, pushed in time order and trimmed to ``span_seconds``."""

    def __init__(self, span_seconds: float, *, keep_baseline: bool) -> None:
        if span_seconds <= 0:
            raise ValueError("span must be positive")
        self.span_seconds = span_seconds
        self.keep_baseline = keep_baseline
        self._entries: deque[tuple[float, T]] = deque()

    def push(self, timestamp: float, item: T) -> None:
        """Append an item (timestamps must not go back) and trim to the span ending at it."""
        self._entries.append((timestamp, item))
        self.trim(timestamp)

    def trim(self, now: float) -> None:
        """Drop what lies before ``now - span_seconds`` (keeping the baseline when asked for one)."""
        horizon = now - self.span_seconds
        entries = self._entries
        if self.keep_baseline:
            while len(entries) > 1 and entries[1][0] <= horizon:
                entries.popleft()
        else:
            while entries and entries[0][0] < horizon:
                entries.popleft()

    def clear(self) -> None:
        self._entries.clear()

    def copy(self) -> TimeBuffer[T]:
        """A buffer with the same entries that the original can go on changing without affecting."""
        clone = copy.copy(self)
        clone._entries = deque(self._entries)
        return clone

    def replace_latest(self, item: T) -> None:
        """Swap the newest item for a lighter copy of it (same timestamp)."""
        timestamp, _ = self._entries[-1]
        self._entries[-1] = (timestamp, item)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[T]:
        """The items, oldest first."""
        return (item for _, item in self._entries)

    def newest_first(self) -> Iterator[T]:
        return (item for _, item in reversed(self._entries))

    def newest(self, count: int) -> list[tuple[float, T]]:
        """The newest ``count`` entries with their timestamps, oldest first (all of them when fewer)."""
        return list(self._entries)[-count:] if count > 0 else []

    @property
    def latest(self) -> T | None:
        return self._entries[-1][1] if self._entries else None

    @property
    def covered_seconds(self) -> float:
        """Seconds between the oldest and the newest item (0 with fewer than two)."""
        if len(self._entries) < 2:
            return 0.0
        return self._entries[-1][0] - self._entries[0][0]


class Readings:
    """Point samples of one number with their timestamps, oldest first, trimmed to ``span_seconds``: a
    ``TimeBuffer[float]`` without a baseline, stored as doubles (each reads back as the float pushed)."""

    __slots__ = ("span_seconds", "_times", "_values")

    def __init__(self, span_seconds: float) -> None:
        if span_seconds <= 0:
            raise ValueError("span must be positive")
        self.span_seconds = span_seconds
        self._times = array("d")
        self._values = array("d")

    def push(self, timestamp: float, value: float) -> None:
        """Append a reading (timestamps must not go back) and trim to the span ending at it."""
        self._times.append(timestamp)
        self._values.append(value)
        self.trim(timestamp)

    def trim(self, now: float) -> None:
        """Drop the readings before ``now - span_seconds``."""
        horizon = now - self.span_seconds
        times = self._times
        gone = 0
        while gone < len(times) and times[gone] < horizon:
            gone += 1
        if gone:
            del times[:gone]
            del self._values[:gone]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[float]:
        """The values, oldest first."""
        return iter(self._values)

    def newest(self, count: int) -> list[tuple[float, float]]:
        """The newest ``count`` readings as (timestamp, value), oldest first (all of them when fewer)."""
        if count <= 0:
            return []
        return list(zip(self._times[-count:], self._values[-count:]))
