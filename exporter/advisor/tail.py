"""Where the output-length tail sits inside its histogram bucket, read from the KV cache the batch held.

vLLM's generation-length histogram is 1-2-5: its last populated bucket is wide ((200, 500] holds a 256-token and
a 480-token answer alike), and ``calibrate.lengths_from_histogram`` places every bucket's mass at one relative
position, solved so the window's exact mean comes out. The mean fixes the tokens generated, not how long the
longest requests are; a request holds KV for as long as it decodes, so the running batch holds on average
``prompt + E[L^2] / (2 E[L])`` tokens a sequence (length-biased), and a tail placed too low holds too little.
Preemptions that start from none are a pool crossing its edge, and that held context decides them.

The window carries the held context itself: the mean of ``vllm:kv_cache_usage_perc``. Here the top populated
bucket's mass is placed at its own relative position (the other buckets' one position re-solved so the mean
still comes out) so that the model's batch holds what the window's did: the model is simulated once at the
histogram's placement, the gap in held tokens a sequence is read from the two usage means, and the tail's
position that closes it is solved on the length-biased mean (the step cost is then refitted, ``calibrate``).

Not identified, and the histogram's placement kept (``TailPlacement.reason`` says why): no KV usage gauge in the
window; one populated bucket (the mean alone places it); a window that preempted (its pool held what fitted,
not what the batch asked); the model's usage already within the gauge mean's sampling error (two standard
errors of the scrapes' mean); a gap the tail's position cannot close alone (another part of the model, the
prompts or the prefix sharing, holds it; the nearest position is then taken, and the reason says so).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import Field, dataclass, replace
from typing import Any, ClassVar, Protocol, TypeVar

from exporter.advisor.arrival import ArrivalModel
from exporter.advisor.model import StepCost
from exporter.catalog import metrics as vllm
from exporter.simulator.engine import EngineConfig
from exporter.simulator.workload import Workload
from exporter.window import HistogramDelta, Window

# Positions of the top bucket's mass tried (0: at its lower bound, 1: at its upper): a fine grid, since the
# length-biased mean is cheap to evaluate and need not be monotone in the position (the range's spread moves too).
GRID = 200
# The gauge's standard error is taken from the scrapes as independent draws; they are not (a batch lives
# several scrapes), so the gap must exceed this many of them to be read as the model's.
GAP_STANDARD_ERRORS = 2.0
MIN_SAMPLES = 3
# Points the model's usage is read at over its replay, as a scrape would read the gauge.
USAGE_SAMPLES = 100


@dataclass(frozen=True, slots=True)
class Buckets:
    """A length histogram's populated buckets: (lower, upper, count) each, in order, and its exact mean."""

    ranges: tuple[tuple[float, float, float], ...]
    mean: float

    @classmethod
    def of(cls, hist: HistogramDelta) -> Buckets | None:
        bounds, ranges, below = hist.bounds, [], 0.0
        for i, (bound, cum) in enumerate(zip(bounds, hist.cumulative)):
            lower = bounds[i - 1] if i > 0 else 0.0
            n = cum - below
            below = cum
            if n > 0:
                upper = bound if math.isfinite(bound) else lower * 2.0
                ranges.append((max(lower, 1.0), max(upper, 1.0), n))
        if not ranges:
            return None
        total = sum(n for _, _, n in ranges)
        mean = hist.mean() or sum(0.5 * (lo + hi) * n for lo, hi, n in ranges) / total
        return cls(tuple(ranges), mean)

    def placed(self, top: float | None = None) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """(values, half-widths): one relative position for every bucket, or with ``top`` the last bucket at that
        position and the others at the one that keeps the exact mean (None where no position in [0, 1] does)."""
        ranges = self.ranges if top is None else self.ranges[:-1]
        count = sum(n for _, _, n in ranges)
        target = self.mean
        if top is not None:
            lo, hi, n = self.ranges[-1]
            target = (self.mean * (count + n) - n * (lo + top * (hi - lo))) / count
        lo_mean = sum(lo * n for lo, _, n in ranges) / count
        hi_mean = sum(hi * n for _, hi, n in ranges) / count
        if hi_mean <= lo_mean:
            theta = 0.5
        else:
            theta = (target - lo_mean) / (hi_mean - lo_mean)
            if top is not None and not 0.0 <= theta <= 1.0:
                return None
            theta = min(1.0, max(0.0, theta))
        positions = [theta] * len(ranges) + ([top] if top is not None else [])
        values = tuple(lo + p * (hi - lo) for p, (lo, hi, _) in zip(positions, self.ranges))
        spreads = tuple(min(v - lo, hi - v) for v, (lo, hi, _) in zip(values, self.ranges))
        return values, spreads

    def held(self, values: Sequence[float], spreads: Sequence[float]) -> float:
        """E[L^2] / (2 E[L]): the output tokens a running sequence holds on average (each range uniform)."""
        weights = [n for _, _, n in self.ranges]
        first = math.fsum(v * n for v, n in zip(values, weights))
        second = math.fsum((v * v + s * s / 3.0) * n for v, s, n in zip(values, spreads, weights))
        return second / (2.0 * first) if first > 0 else 0.0


@dataclass(frozen=True, slots=True)
class TailPlacement:
    """The top bucket's position the window's KV usage gives, or why the histogram's own placement stands."""

    position: float | None  # of the top bucket's mass in its range, when placed by the KV usage
    observed_usage: float | None
    simulated_usage: float | None
    reason: str = ""

    def to_dict(self) -> dict[str, float | str | None]:
        return {"top_bucket_position": None if self.position is None else round(self.position, 3),
                "kv_usage_observed": _round(self.observed_usage), "kv_usage_simulated": _round(self.simulated_usage),
                "placed_by": "kv_usage" if self.position is not None else "histogram", "reason": self.reason or None}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def usage_reading(window: Window) -> tuple[float, float] | str:
    """(mean KV usage over the scrapes, its standard error), or why the window has none to read."""
    if (window.increase(vllm.NUM_PREEMPTIONS_TOTAL) or 0.0) > 0:
        return "the window preempted: its pool held what fitted, not what the batch asked"
    series = window.gauge_series(vllm.KV_CACHE_USAGE_PERC, "max")
    if len(series) < MIN_SAMPLES or statistics.fmean(series) <= 0:
        return f"no {vllm.KV_CACHE_USAGE_PERC} reading in the window"
    return statistics.fmean(series), statistics.stdev(series) / math.sqrt(len(series))


def place(hist: HistogramDelta, observed: tuple[float, float] | str, simulated: tuple[float, float],
          usable_tokens: float) -> TailPlacement:
    """The top bucket's position that makes the batch hold what the window's did.

    ``simulated``: (mean KV usage, mean running sequences) of the model at the histogram's placement;
    ``usable_tokens``: the KV pool in tokens. The prompts hold the same at every placement, so the usage gap, in
    tokens a running sequence, is the outputs' alone: the position whose length-biased mean closes it is taken."""
    usage, running = simulated
    if isinstance(observed, str):
        return TailPlacement(None, None, usage, observed)
    seen, error = observed
    buckets = Buckets.of(hist)
    if buckets is None or len(buckets.ranges) < 2:
        return TailPlacement(None, seen, usage, "one populated output bucket: the mean alone places it")
    if abs(seen - usage) <= GAP_STANDARD_ERRORS * error:
        return TailPlacement(None, seen, usage, "the model's KV usage is within the gauge's sampling error")
    if running <= 0:
        return TailPlacement(None, seen, usage, "the model ran no sequence")
    base = buckets.placed()
    assert base is not None  # without ``top`` a placement always exists
    now = buckets.held(*base)
    wanted = now + (seen - usage) * usable_tokens / running
    best: tuple[float, float] | None = None
    for i in range(GRID + 1):
        position = i / GRID
        placed = buckets.placed(position)
        if placed is None:
            continue
        miss = abs(buckets.held(*placed) - wanted)
        if best is None or miss < best[1]:
            best = (position, miss)
    if best is None:
        return TailPlacement(None, seen, usage, "no position of the top bucket keeps the window's mean")
    reach = buckets.held(*(buckets.placed(best[0]) or base))
    reason = "" if best[1] <= 0.05 * max(abs(wanted - now), 1.0) else (
        f"the tail's position closes {abs(reach - now):.0f} of the {abs(wanted - now):.0f} tokens a sequence the "
        "KV usage asks; the rest is another part of the model's")
    return TailPlacement(best[0], seen, usage, reason)


class Replayable(Protocol):
    """What of a calibration (``calibrate.Calibration``, a dataclass) the placement reads: its replay, its pool and its
    outputs; the placement replaces its ``output`` and ``tail``."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def warmup_s(self) -> float: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def cost(self) -> StepCost: ...
    @property
    def arrivals(self) -> ArrivalModel: ...
    @property
    def num_gpu_blocks(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def output(self) -> Any: ...
    def engine_config(self, **changes: Any) -> EngineConfig: ...
    def workload(self, output_cap: int | None = None, shared_prefix_tokens: int | None = None) -> Workload: ...


Cal = TypeVar("Cal", bound=Replayable)


def simulated_usage(cal: Replayable, seed: int) -> tuple[float, float]:
    """(mean KV usage, mean running sequences) of the calibrated model over its replay, read at even times."""
    from exporter.advisor.model import CalibratedEngine

    engine = CalibratedEngine(cal.engine_config(), cal.workload(), cal.cost, cal.arrivals.primary(), seed=seed,
                              measure_from=cal.warmup_s)
    engine.advance_to(cal.warmup_s)
    usage, running = [], []
    for i in range(1, USAGE_SAMPLES + 1):
        engine.advance_to(cal.warmup_s + cal.duration_s * i / USAGE_SAMPLES)
        usage.append(engine.kv_cache_usage)
        running.append(engine.num_running)
    return statistics.fmean(usage), statistics.fmean(running)


def matched(cal: Cal, window: Window, hist: HistogramDelta, seed: int, refit: Callable[[Cal], Cal] | None) -> Cal:
    """``cal`` with its output tail placed by the window's KV usage (``place``), refitted; or as it is, with the
    reason, where the window does not identify the placement."""
    reading = usage_reading(window)
    if isinstance(reading, str):
        return replace(cal, tail=TailPlacement(None, None, None, reading))
    placement = place(hist, reading, simulated_usage(cal, seed), (cal.num_gpu_blocks - 1) * cal.block_size)
    buckets = Buckets.of(hist)
    placed = buckets.placed(placement.position) if buckets is not None and placement.position is not None else None
    if placed is None:
        return replace(cal, tail=placement)
    moved = replace(cal, output=replace(cal.output, values=placed[0], spreads=placed[1]), tail=placement)
    return refit(moved) if refit is not None else moved
