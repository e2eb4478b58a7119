"""A span of stored data judged step by step (``diagnose --prometheus``).

Each evaluation step ``t`` judges the window ``[t - window, t]`` afresh, as ``diagnose FILES``
judges a set of captures: the live verdict's hysteresis would make a step depend on the steps
before it, and after the fact the verdict should follow the data. Scrapes are fed in time order,
so memory holds one window per target whatever the span.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from exporter.diagnosis.engine import VerdictTracker
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.publish.timeline import StepVerdict, no_data
from exporter.state import TargetState


class SpanJudge:
    """Feeds one target's scrapes in time order and judges it at each step."""

    def __init__(self, pipeline: TargetPipeline, steps: Sequence[float], staleness: float) -> None:
        self.pipeline = pipeline
        self.steps = list(steps)
        self.staleness = staleness
        self.results: list[StepVerdict] = []
        self.last_state: TargetState | None = None
        self._next = 0  # index of the next step to judge
        self._latest: float | None = None  # timestamp of the newest scrape fed

    @property
    def latest(self) -> float | None:
        return self._latest

    def feed(self, scrapes: Iterable[tuple[float, str]], until: float) -> None:
        """Feed scrapes (oldest first), judging every step they pass; then every step up to ``until``."""
        for at, text in scrapes:
            self._judge_before(at)
            if self._latest is not None and at - self._latest > self.pipeline.settings.window_seconds:
                self.pipeline.window.clear()  # a gap longer than the window: no step spans it
            self.pipeline.ingest(ScrapeResult(started_at=at, duration=0.0, body=text.encode()), evaluate_now=False)
            self._latest = at
        self._judge_before(until, inclusive=True)

    def _judge_before(self, at: float, inclusive: bool = False) -> None:
        while self._next < len(self.steps) and (self.steps[self._next] < at or
                                                 (inclusive and self.steps[self._next] <= at)):
            self._judge(self.steps[self._next])
            self._next += 1

    def _judge(self, at: float) -> None:
        if self._latest is None or self._latest < at - self.staleness:
            self.results.append(no_data(at))
            return
        self.pipeline.tracker = VerdictTracker()  # each step judged on its own window
        self.last_state = self.pipeline.evaluate(at)
        self.results.append(StepVerdict.of(self.last_state))
