"""The one time-window buffer: cumulative readings keep a baseline, point samples do not."""

from __future__ import annotations

import pytest

from exporter.timebuffer import Readings, TimeBuffer


def _filled(keep_baseline: bool, times: list[float], span: float = 10.0) -> TimeBuffer[float]:
    buffer: TimeBuffer[float] = TimeBuffer(span, keep_baseline=keep_baseline)
    for t in times:
        buffer.push(t, t * 100)
    return buffer


def test_cumulative_readings_keep_the_newest_at_or_before_the_horizon():
    buffer = _filled(True, [0, 3, 6, 9, 12, 15])  # horizon 5: 3 is the baseline, 0 goes
    assert list(buffer) == [300, 600, 900, 1200, 1500]
    assert buffer.covered_seconds == 12  # the deltas cover the whole 10 s span


def test_a_reading_exactly_at_the_horizon_is_the_baseline():
    buffer = _filled(True, [0, 5, 15])
    assert list(buffer) == [500, 1500]


def test_point_samples_keep_only_what_lies_inside_the_span():
    buffer = _filled(False, [0, 3, 5, 9, 15])  # horizon 5: a sample at 5 still counts, 3 does not
    assert list(buffer) == [500, 900, 1500]


def test_trim_without_a_new_item_ages_point_samples_out():
    buffer = _filled(False, [0, 3])
    buffer.trim(20)
    assert len(buffer) == 0 and buffer.latest is None and buffer.covered_seconds == 0.0


def test_a_baseline_buffer_never_empties_itself():
    buffer = _filled(True, [0])
    buffer.trim(100)
    assert list(buffer) == [0]


def test_latest_newest_first_and_replace_latest():
    buffer = _filled(True, [1, 2, 3])
    assert buffer.latest == 300
    assert list(buffer.newest_first()) == [300, 200, 100]
    buffer.replace_latest(7)
    assert list(buffer) == [100, 200, 7] and buffer.covered_seconds == 2  # the timestamp stays
    buffer.clear()
    assert len(buffer) == 0


def test_span_must_be_positive():
    with pytest.raises(ValueError):
        TimeBuffer(0, keep_baseline=True)


def test_readings_keep_what_a_point_sample_buffer_keeps():
    times = [0.0, 3.0, 5.0, 9.0, 15.0, 15.5, 30.0, 31.0]
    values = [0.1, 0.7, 1 / 3, 2.5e-9, 0.0, 0.9, 0.2, 0.4]
    readings, buffer = Readings(10.0), TimeBuffer[float](10.0, keep_baseline=False)
    for t, v in zip(times, values):
        readings.push(t, v)
        buffer.push(t, v)
        assert list(readings) == list(buffer) and len(readings) == len(buffer)
        assert readings.newest(2) == buffer.newest(2) and readings.newest(0) == buffer.newest(0) == []
    readings.trim(50.0)
    assert not readings and list(readings) == []
