"""Times as users type them: RFC 3339, Unix seconds, now, relative; durations in Prometheus units."""

from __future__ import annotations

import pytest

from exporter.promsource.timespec import TimeSpecError, iso, parse_duration, parse_time

NOW = 1_796_100_000.0


@pytest.mark.parametrize(("text", "expected"), [
    ("now", NOW),
    ("-2h", NOW - 7200),
    ("now-90s", NOW - 90),
    ("-1h30m", NOW - 5400),
    ("-300", NOW - 300),
    ("1796000000", 1_796_000_000.0),
    ("1796000000.5", 1_796_000_000.5),
    ("2026-11-30T03:02:00Z", 1_796_007_720.0),
    ("2026-11-30T04:02:00+01:00", 1_796_007_720.0),
    ("2026-11-30T03:02:00.250Z", 1_796_007_720.25),
])
def test_times(text: str, expected: float) -> None:
    assert parse_time(text, NOW) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "says"), [
    ("yesterday", "is not a time"),
    ("2026-11-30T03:02:00", "has no time zone"),
    ("-2x", "is not a duration"),
    ("-0s", "must be positive"),
])
def test_bad_times(text: str, says: str) -> None:
    with pytest.raises(TimeSpecError, match=says):
        parse_time(text, NOW)


def test_durations() -> None:
    assert parse_duration("15") == 15
    assert parse_duration("15s") == 15
    assert parse_duration("5m") == 300
    assert parse_duration("1d") == 86400
    assert parse_duration("500ms") == 0.5
    for bad in ("", "5 m", "m5", "-5s", "5mm"):
        with pytest.raises(TimeSpecError):
            parse_duration(bad)


def test_iso_round_trip() -> None:
    assert iso(parse_time("2026-11-30T03:02:00Z", NOW)) == "2026-11-30T03:02:00Z"
