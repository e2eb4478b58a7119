"""Value types shared by every stage: one parsed scrape, and its histogram samples.

Plain frozen data, no logic beyond small accessors, so each stage can be tested alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# A series' labels without ``le``: sorted (name, value) pairs, hashable.
LabelSet = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class HistogramSample:
    """One cumulative histogram series at one scrape. ``bounds`` ascend and end with +Inf."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the catalog knows about one scrape of one target, keyed by canonical name.

    ``timestamp`` is when the scrape was taken (unix seconds); time enters the pipeline here
    and nowhere else, so the maths downstream needs no clock.
    """

    timestamp: float
    scalars: Mapping[str, Mapping[LabelSet, float]]
    histograms: Mapping[str, Mapping[LabelSet, HistogramSample]]
    info: Mapping[str, tuple[Mapping[str, str], ...]] = field(default_factory=lambda: MappingProxyType({}))
    dropped_samples: int = 0  # NaN/Inf or over the cardinality cap, counted not guessed

    def has(self, name: str) -> bool:
        return name in self.scalars or name in self.histograms or name in self.info

    def families(self) -> frozenset[str]:
        return frozenset((*self.scalars, *self.histograms, *self.info))

    def model_names(self) -> tuple[str, ...]:
        return tuple(sorted({value for series in (*self.scalars.values(), *self.histograms.values())
                             for labels in series for key, value in labels if key == "model_name"}))


def label_value(labels: LabelSet, name: str) -> str | None:
    for key, value in labels:
        if key == name:
            return value
    return None


@dataclass(frozen=True, slots=True)
class LabelIs:
    """A series filter: the label ``name`` has ``value``. Equal filters are equal and hash alike, so a
    window can keep what it read through one from evaluation to evaluation (a lambda is new each time)."""

    name: str
    value: str

    def __call__(self, labels: LabelSet) -> bool:
        return label_value(labels, self.name) == self.value
