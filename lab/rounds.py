"""Alternated rounds: a ratio against a baseline measured in the same run, with its spread.

A ratio from one pass over a shared machine says little: the baseline moves with the load as much as
the figure does. So each round measures both, back to back, in alternating order (ours then the
baseline, then the baseline then ours, ...), and yields one ratio; the figure is the median of the
rounds' ratios (at least five), printed with its spread: the lowest and highest round and
(max - min) / median. Two runs whose medians differ by more than their spreads are not comparable.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

MIN_ROUNDS = 5


@dataclass(frozen=True)
class Rounds:
    """Per-round costs of ours and of the baseline, and the ratio baseline / ours of each round."""

    ours: tuple[float, ...]
    baseline: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(b / o for o, b in zip(self.ours, self.baseline))

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> float:
        """(highest - lowest round ratio) / median ratio."""
        return (max(self.ratios) - min(self.ratios)) / self.ratio

    def describe(self) -> str:
        return (f"{self.ratio:.2f}x (median of {len(self.ratios)} alternated rounds; rounds "
                f"{min(self.ratios):.2f}-{max(self.ratios):.2f}x, spread {self.spread:.0%})")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratios": list(self.ratios), "ratio": self.ratio, "spread": self.spread}


def alternated(ours: Callable[[int], float], baseline: Callable[[int], float], rounds: int = MIN_ROUNDS) -> Rounds:
    """Run ``rounds`` rounds of both (each called with the round number, returning its cost), alternating
    which goes first, so a load that rises or falls during a round weighs on both sides equally."""
    if rounds < MIN_ROUNDS:
        raise ValueError(f"a ratio needs at least {MIN_ROUNDS} rounds, not {rounds}")
    mine: list[float] = []
    theirs: list[float] = []
    for i in range(rounds):
        if i % 2 == 0:
            mine.append(ours(i))
            theirs.append(baseline(i))
        else:
            theirs.append(baseline(i))
            mine.append(ours(i))
    return Rounds(tuple(mine), tuple(theirs))
