"""The sidecar's first scrapes: spread over the interval, on slots at least SLOT_SECONDS apart."""

from __future__ import annotations

from collections import Counter

import pytest

from exporter.server import SLOT_SECONDS, first_run_offset


@pytest.mark.parametrize(("count", "interval"), [(1, 5.0), (7, 1.1), (20, 5.0), (100, 5.0), (1000, 15.0), (3, 0.1)])
def test_first_runs_spread_over_the_interval_on_few_slots(count, interval):
    offsets = [first_run_offset(i, count, interval) for i in range(count)]
    assert offsets == sorted(offsets) and offsets[0] == 0.0
    assert all(0.0 <= offset < interval for offset in offsets)
    slots = sorted(Counter(offsets).items())
    # as many slots as fit SLOT_SECONDS apart, never more than the targets, evenly spaced and filled
    assert len(slots) == max(1, min(count, int(interval / SLOT_SECONDS)))
    gaps = {round(b[0] - a[0], 9) for a, b in zip(slots, slots[1:])}
    assert len(gaps) <= 1 and all(gap >= min(SLOT_SECONDS, interval / count) - 1e-9 for gap in gaps)
    sizes = [size for _, size in slots]
    assert max(sizes) - min(sizes) <= 1


def test_a_hundred_targets_at_five_seconds_wake_the_scheduler_twenty_times_a_cycle():
    offsets = {first_run_offset(i, 100, 5.0) for i in range(100)}
    assert len(offsets) == 20 and max(offsets) == pytest.approx(4.75)
