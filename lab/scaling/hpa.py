"""The HorizontalPodAutoscaler's algorithm as Kubernetes documents it (autoscaling/v2, with ``behavior``).

Every sync period: ``ratio = metric / (target * current)``; within the tolerance (10 %) the recommendation
is the current count, else ``ceil(metric / target)`` (``ceil(current * ratio)``). Scale-up takes the lowest
recommendation of its stabilisation window (0 s: the newest), scale-down the highest of its window (300 s);
the change is bounded by the policies (the most permissive policy, ``selectPolicy: Max``, over each
policy's period) and by min/max replicas. The settings are the generated manifests' own
(``exporter.render.scaling.Autoscaling``), so the experiment scales as the shipped HPA and KEDA would.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from exporter.render.scaling import Autoscaling, Policy


@dataclass
class Hpa:
    settings: Autoscaling
    target: float  # the metric's target average value per replica
    _recs: deque[tuple[float, int]] = field(default_factory=deque)  # (time, recommendation)
    _changes: deque[tuple[float, int]] = field(default_factory=deque)  # (time, replicas added (+) or removed (-))

    def recommend(self, metric: float, current: int) -> int:
        """The raw recommendation for a total metric value (the sum over replicas)."""
        ratio = metric / (self.target * current) if current > 0 else math.inf
        if abs(ratio - 1.0) <= self.settings.tolerance:
            return current
        return max(0, math.ceil(metric / self.target - 1e-9))

    def _allowed(self, now: float, current: int, policies: tuple[Policy, ...], up: bool) -> int:
        """The most one change may move by the policies (selectPolicy Max), given the changes of their periods."""
        best = 0
        for p in policies:
            moved = sum(abs(n) for t, n in self._changes if now - t < p.period_seconds and (n > 0) == up)
            start = current - moved if up else current + moved  # the count at the period's start
            limit = p.value if p.type == "Pods" else math.ceil(start * p.value / 100) if up else \
                math.floor(start * p.value / 100)
            best = max(best, limit - moved)
        return max(0, best)

    def step(self, now: float, metric: float | None, current: int) -> int:
        """The replica count after one sync at ``now``; an absent metric changes nothing."""
        s = self.settings
        if metric is None:
            return current
        rec = self.recommend(metric, current)
        self._recs.append((now, rec))
        horizon = max(s.scale_down_stabilization_seconds, s.scale_up_stabilization_seconds)
        while self._recs and now - self._recs[0][0] > horizon:
            self._recs.popleft()
        up_floor = min(r for t, r in self._recs if now - t <= s.scale_up_stabilization_seconds)
        down_ceiling = max(r for t, r in self._recs if now - t <= s.scale_down_stabilization_seconds)
        desired = current
        if up_floor > current:
            desired = min(up_floor, current + self._allowed(now, current, s.scale_up, up=True))
        elif down_ceiling < current:
            desired = max(down_ceiling, current - self._allowed(now, current, s.scale_down, up=False))
        desired = min(max(desired, s.min_replicas), s.max_replicas)
        if desired != current:
            self._changes.append((now, desired - current))
        while self._changes and now - self._changes[0][0] > 1800:
            self._changes.popleft()
        return desired
