"""The PromQL builder the generators share: recording and alert rules, runbooks and dashboards."""

from __future__ import annotations

from dataclasses import dataclass

# Labels that differ between replicas and data-parallel engines of one model: aggregate them away
# so a signal is per model (and per job/namespace, which `without` keeps).
AGGREGATE_AWAY: tuple[str, ...] = ("engine", "instance", "pod")


def fmt(value: float) -> str:
    """A catalog number as PromQL/text writes it (0.1, not 0.1000000001 or 1e-01)."""
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class PromQL:
    """PromQL builder bound to one label selector (vLLM's generator pattern).

    ``matchers`` is the inside of ``{...}`` applied to every raw series, e.g.
    ``model_name=~"$model"`` in dashboards, empty in recording rules.
    """

    matchers: str = ""
    without: tuple[str, ...] = AGGREGATE_AWAY

    def sel(self, metric: str, extra: str = "") -> str:
        parts = [m for m in (self.matchers, extra) if m]
        return f"{metric}{{{', '.join(parts)}}}" if parts else metric

    def _without(self, extra: tuple[str, ...] = ()) -> str:
        return f"without ({', '.join((*self.without, *extra))})"

    def rate(self, metric: str, window: str, extra: str = "") -> str:
        return f"rate({self.sel(metric, extra)}[{window}])"

    def sum_rate(self, metric: str, window: str, *, extra: str = "", drop: tuple[str, ...] = ()) -> str:
        return f"sum {self._without(drop)} ({self.rate(metric, window, extra)})"

    def agg(self, op: str, metric: str, extra: str = "", drop: tuple[str, ...] = ()) -> str:
        return f"{op} {self._without(drop)} ({self.sel(metric, extra)})"

    @staticmethod
    def divide(numerator: str, denominator: str) -> str:
        # `> 0` on the denominator: an idle period shows no data instead of NaN or +Inf.
        return f"({numerator})\n/\n({denominator} > 0)"

    def mean(self, histogram: str, window: str) -> str:
        """Mean observation of a histogram over the window, from its _sum and _count rates."""
        return self.divide(self.sum_rate(histogram + "_sum", window), self.sum_rate(histogram + "_count", window))

    def ratio(self, numerator: str, denominator: str, window: str) -> str:
        return self.divide(self.sum_rate(numerator, window), self.sum_rate(denominator, window))

    def quantile(self, q: float, histogram: str, window: str) -> str:
        # `without` keeps `le`, which histogram_quantile needs.
        return f"histogram_quantile({fmt(q)}, {self.sum_rate(histogram + '_bucket', window)})"
