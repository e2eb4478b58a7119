"""Open or closed traffic, read from the window.

Open traffic (production APIs) arrives whatever the latency: a slower engine builds a queue.
Closed traffic (a fixed set of clients, batch jobs, benchmarks) sends the next request when the
last response is complete: requests in flight stay constant and throughput follows latency. A
what-if differs a lot between the two (a faster engine serves closed clients more often), so the
advisor predicts both when the window cannot tell them apart.

The tell is the number of requests in the engine (running + waiting) across the scrapes: nearly
constant (and above one) for closed traffic, fluctuating for open traffic.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

from exporter.advisor.model import Clients, OpenArrivals
from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.window import Window

Kind = Literal["open", "closed", "unclear"]


@dataclass(frozen=True, slots=True)
class ArrivalModel:
    kind: Kind
    open: OpenArrivals
    closed: Clients
    occupancy_mean: float
    occupancy_cv: float
    dispersion: float  # variance / mean of requests arrived per scrape interval (1: Poisson)

    def primary(self) -> OpenArrivals | Clients:
        """The traffic the calibration fits to (open when unclear: the conservative reading)."""
        return self.closed if self.kind == "closed" else self.open

    def alternatives(self) -> dict[str, OpenArrivals | Clients]:
        if self.kind == "unclear":
            return {"open": self.open, "closed": self.closed}
        return {self.kind: self.primary()}

    def describe(self) -> str:
        if self.kind == "closed":
            what = f"closed: {self.closed.count} clients, think time {self.closed.think_s:.2f} s"
        elif self.kind == "open":
            what = f"open: {self.open.rate:.2f} req/s, gap CV^2 {self.open.cv2:.2f}"
        else:
            what = (f"unclear (open {self.open.rate:.2f} req/s or closed {self.closed.count} clients): "
                    "both predicted")
        return f"{what}; running + waiting {self.occupancy_mean:.1f} (CV {self.occupancy_cv:.2f})"


def poisson_band(intervals: int, confidence: float) -> tuple[float, float]:
    """The variance / mean of ``intervals`` Poisson counts (population variance), at ``confidence`` either side.

    (n - 1) x the sample variance / mean of n Poisson counts is about chi-square with n - 1 degrees of freedom
    (Wilson-Hilferty's cube for its quantiles): over 15 scrape intervals it reads 0.37-1.74 one time in twenty
    from Poisson arrivals, over 30 0.53-1.52. Taken as the arrivals' CV^2, that sampling error goes straight
    into the model's queue: the lab's Poisson load read 0.70-0.78 over 30 intervals and 1.24 over 15."""
    k = intervals - 1
    if k < 1:
        return 1.0, 1.0
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    return chi_square(k, -z) / intervals, chi_square(k, z) / intervals


def chi_square(df: int, z: float) -> float:
    """The chi-square quantile with ``df`` degrees of freedom at the standard normal's ``z`` (Wilson-Hilferty)."""
    return df * max(1.0 - 2.0 / (9 * df) + z * math.sqrt(2.0 / (9 * df)), 0.0) ** 3


def _arrived_per_step(window: Window, occupancy: list[float]) -> list[float]:
    """Requests that reached the engine in each scrape interval: those that finished in it plus the change in
    running + waiting across it (read at the same scrapes).

    Finished requests alone measure the engine as much as the arrivals: the same seeded arrivals (the lab's
    wide engine, long prompts, budget 128 and 512) finished with a variance / mean of 1.76 and 0.89 per 4 s,
    and arrived with 1.24 both times. Read as the arrivals' burstiness, the 1.76 doubled the model's queue
    and made its decoding requests meet another's prefill chunks twice as often as the window's did."""
    finished = window.increase_by_step(vllm.REQUEST_SUCCESS_TOTAL)
    if len(occupancy) != len(finished) + 1:  # gauges not read at every scrape: what finished is all there is
        return finished
    return [max(0.0, f + occupancy[i + 1] - occupancy[i]) for i, f in enumerate(finished)]


def infer_arrivals(window: Window, thresholds: Thresholds, e2e_mean: float | None) -> ArrivalModel:
    completed = window.rate(vllm.REQUEST_SUCCESS_TOTAL) or 0.0
    running = window.gauge_series(vllm.NUM_REQUESTS_RUNNING)
    waiting = window.gauge_series(vllm.NUM_REQUESTS_WAITING)
    occupancy = [r + w for r, w in zip(running, waiting)] or [0.0]
    # Open arrivals are what finished plus what piled up: an overloaded engine completes less than arrives.
    growth = (occupancy[-1] - occupancy[0]) / window.duration if window.duration > 0 else 0.0
    rate = completed + max(0.0, growth)
    mean = statistics.fmean(occupancy)
    cv = statistics.pstdev(occupancy) / mean if mean > 0 else math.inf
    per_step = _arrived_per_step(window, occupancy)
    dispersion = 1.0
    if len(per_step) >= 6 and statistics.fmean(per_step) > 0:
        dispersion = statistics.pvariance(per_step) / statistics.fmean(per_step)
    # Counts per interval of a renewal process have variance/mean -> CV^2 of its gaps; one that Poisson
    # arrivals would show by chance over these intervals is read as Poisson (``poisson_band``).
    low, high = poisson_band(len(per_step), thresholds.advice_calibration_confidence)
    cv2 = min(10.0, max(0.3, 1.0 if low <= dispersion <= high else dispersion))
    # Each client also spends time outside the engine (frontend, network, its own turn), so the engine
    # holds fewer requests than there are clients, never more: 13.3 in flight is 14 clients (and a
    # hair over 13, the rounding of the mean, is still 13).
    clients = max(1, math.ceil(mean - 0.05))
    # Little's law for the closed loop: clients / rate = time in system + think time.
    think = max(0.0, clients / completed - (e2e_mean or 0.0)) if completed > 0 else 0.0
    if mean >= thresholds.advice_closed_min_in_flight and cv <= thresholds.advice_closed_occupancy_cv:
        kind: Kind = "closed"
    elif mean < 1.0 or cv >= thresholds.advice_open_occupancy_cv:  # under one in flight: no client set at all
        kind = "open"
    else:
        kind = "unclear"
    open_traffic = OpenArrivals(max(rate, 1e-3), cv2, backlog=round(occupancy[0]))
    return ArrivalModel(kind, open_traffic, Clients(clients, think), mean, cv, dispersion)
