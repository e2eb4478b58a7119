"""One threshold's catalog entry and the field declaration that carries it (``exporter.catalog.thresholds``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Threshold:
    """One threshold's catalog entry: its default, unit, what it controls and its allowed range."""

    key: str
    default: float
    unit: str
    controls: str
    minimum: float = 0.0
    maximum: float | None = None


def threshold(default: float, unit: str, controls: str, minimum: float = 0.0, maximum: float | None = None) -> float:
    """A field of :class:`Thresholds`: its default, with the rest of its entry in the field's metadata."""
    entry = {"unit": unit, "controls": controls, "minimum": minimum, "maximum": maximum}
    return field(default=default, metadata=MappingProxyType(entry))
