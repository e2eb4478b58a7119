"""Numbers as people read them, for every human-facing output (CLI text, HTML page, evidence).

One formatter per kind of quantity: durations in ms/s/min, ratios as percentages, counts and
rates with thousands separators and a few significant digits, never exponent notation
("1,030", not "1.03e+03"). ``compared`` keeps a value and its threshold distinguishable
("29.6% < 30%", not "30% < 30%").
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

SIGNIFICANT = 3  # digits a reader can compare at a glance; more is noise in a window statistic


# Cached: each evaluation words its objectives' thresholds and targets (the same few numbers) in its evidence.
@functools.lru_cache(maxsize=1024, typed=True)
def number(value: float | None) -> str:
    """A count or rate: three significant digits, thousands separators, no exponent."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if value == 0:
        return "0"
    decimals = max(0, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return _trim(text) if "." in text else text


def percent(value: float | None, decimals: int = 1) -> str:
    """A ratio 0..1 as a percentage: 0.305 -> '30.5%', 1.0 -> '100%'."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{_trim(f'{value * 100:.{decimals}f}')}%"


def seconds(value: float | None) -> str:
    """A duration: '9.7 ms', '1.23 s', '2 min 34 s', '1 h 5 min'."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if abs(value) < 1:
        return f"{number(value * 1000)} ms"
    if abs(value) < 60:
        return f"{number(value)} s"
    if abs(value) < 3600:
        minutes, rest = divmod(round(value), 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, rest = divmod(round(value / 60), 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def score(value: float | None) -> str:
    """A 0..1 score or strength: two decimals, as the legend explains them."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.2f}"


def compared(value: float, threshold: float, fmt: Callable[..., str] = percent,
             max_decimals: int = 4) -> tuple[str, str]:
    """``value`` and ``threshold`` formatted with just enough decimals that unequal numbers read unequal.

    Only for formatters that take a ``decimals`` argument (``percent``); others are returned as is.
    """
    left, right = fmt(value), fmt(threshold)
    decimals = 1
    while left == right and value != threshold and decimals < max_decimals and fmt is percent:
        decimals += 1
        left, right = percent(value, decimals), percent(threshold, decimals)
    return left, right


def timestamp(unix: float | None) -> str:
    """A point in time, UTC, to the second: '2026-12-01 04:20:05 UTC'."""
    if unix is None or not math.isfinite(unix):
        return "n/a"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def iso(unix: float | None) -> str:
    """Machine-readable form for <time datetime>: '2026-12-01T04:20:05Z'."""
    if unix is None or not math.isfinite(unix):
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


def ago(unix: float | None, now: float) -> str:
    """How long before ``now``: 'just now', '42 s ago', '3 min ago', '2 h ago'."""
    if unix is None or not math.isfinite(unix):
        return "never"
    elapsed = now - unix
    if elapsed < 1:
        return "just now"
    if elapsed < 60:
        return f"{elapsed:.0f} s ago"
    if elapsed < 3600:
        return f"{elapsed // 60:.0f} min ago"
    if elapsed < 86400:
        return f"{elapsed // 3600:.0f} h ago"
    return f"{elapsed // 86400:.0f} d ago"


def by_unit(value: float | None, unit: str) -> str:
    """Dispatch on a signal's unit: 's', '%', '/s', 'score' or '' (a plain count)."""
    if unit == "s":
        return seconds(value)
    if unit == "%":
        return percent(value)
    if unit == "score":
        return score(value)
    if unit == "/s":
        return number(value) + "/s" if value is not None else "n/a"
    return number(value)


def size(value: float | None) -> str:
    """Bytes in binary units: '512 B', '7.5 KiB', '1.2 GiB'."""
    if value is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{_trim(f'{value:.1f}')} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _trim(text: str) -> str:
    """'30.0' -> '30', '2.50' -> '2.5': trailing zeros after the point carry no information."""
    return text.rstrip("0").rstrip(".") if "." in text else text
