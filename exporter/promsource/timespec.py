"""Times and durations as a user types them: RFC 3339, Unix seconds, ``now``, relative ``-2h``.

Everything resolves to Unix seconds against one ``now``, so ``--from -2h --to now`` is one
consistent span however long parsing takes.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


class TimeSpecError(ValueError):
    """A one-line reason why a time or duration cannot be read."""


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``1h30m`` (Prometheus duration units) -> seconds > 0."""
    raw = text.strip()
    try:
        seconds = float(raw)
    except ValueError:
        parts = _DURATION.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise TimeSpecError(f"{text!r} is not a duration (use seconds or 30s, 15m, 2h, 1d)") from None
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if not seconds > 0:
        raise TimeSpecError(f"{text!r}: a duration must be positive")
    return seconds


def parse_time(text: str, now: float) -> float:
    """RFC 3339 (``2026-11-30T03:02:00Z``), Unix seconds, ``now``, or ``-2h`` / ``now-2h`` relative to now."""
    raw = text.strip()
    if raw == "now":
        return now
    relative = raw.removeprefix("now")
    if relative.startswith("-"):  # a negative Unix time is never meant: -300 is five minutes ago
        return now - parse_duration(relative[1:])
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise TimeSpecError(f"{text!r} is not a time (use RFC 3339 like 2026-11-30T03:02:00Z, "
                            "Unix seconds, now, or -2h)") from None
    if stamp.tzinfo is None:  # RFC 3339 requires an offset; a bare local time would be a guess
        raise TimeSpecError(f"{text!r} has no time zone (add Z or an offset like +01:00)")
    return stamp.astimezone(UTC).timestamp()


def iso(timestamp: float) -> str:
    """RFC 3339 in UTC, second precision (what the API takes and what reports print)."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
