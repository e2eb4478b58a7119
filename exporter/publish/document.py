"""The one serialised form of the published state (SPEC JSON); JSON, HTML and text read it."""

from __future__ import annotations

import math
import time
from typing import Any, Iterable

from exporter import __version__
from exporter.state import TargetState


def _finite(value: Any) -> Any:
    """JSON has no NaN/Inf: a non-finite number is unknown, and unknown is null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def build(states: Iterable[TargetState], now: float | None = None) -> dict[str, Any]:
    return {
        "generated_at": time.time() if now is None else now,
        "version": __version__,
        "targets": [_finite(state.to_dict()) for state in states],
    }
