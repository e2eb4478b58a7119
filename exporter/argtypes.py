"""argparse types shared by the subcommands: a bad value fails as ``argument --flag: reason``."""

from __future__ import annotations

import argparse
import math


def positive(value: str) -> float:
    """A finite number above zero (seconds, speeds)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not (number > 0 and math.isfinite(number)):
        raise argparse.ArgumentTypeError(f"must be a number greater than 0, got {value!r}")
    return number


def non_negative(value: str) -> float:
    """A finite number of zero or more (a warm-up that may be skipped)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not (number >= 0 and math.isfinite(number)):
        raise argparse.ArgumentTypeError(f"must be a number of 0 or more, got {value!r}")
    return number


def port(value: str) -> int:
    """A TCP port, 1-65535."""
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not a TCP port (1-65535)")
    return int(value)
