"""A histogram column's running sums give the window's total exactly as the sum over its rows does."""

from __future__ import annotations

import random

from exporter.deltas import _Histogram


def test_the_running_total_is_the_sum_of_the_rows_through_drops_and_widening():
    rng = random.Random(3)
    bounds = (0.1, 0.5, 1.0, float("inf"))
    column = _Histogram(bounds, first=0)
    for seq in range(200):
        if rng.random() < 0.1:
            continue  # a step without the series: a zero row, presence 0
        big = seq > 120 and rng.random() < 0.2  # past 2**16: the column widens to 4 bytes
        buckets = sorted(rng.randrange(0, 70_000 if big else 50) for _ in bounds)
        column.append(seq, float(buckets[-1]), rng.random() * 10, map(float, buckets))
        if len(column.present) > 36:
            column.drop(len(column.present) - 36)
        fast = column.total(column.first, seq + 1)
        slow_column = column.copy()
        slow_column.running = None
        assert column.running is not None
        assert fast == slow_column.total(column.first, seq + 1)
        assert column.total(seq - 3, seq + 1) == slow_column.total(seq - 3, seq + 1)  # a recent range: the rows
    assert column.counts.typecode == "I"
    column.append(201, 0.5, 0.5, [0.5] * len(bounds))  # a fraction: doubles from here on, no running sums
    assert column.running is None and column.counts.typecode == "d"
