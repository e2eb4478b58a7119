"""Hooks into the simulator that only the transition matrix (lab/transitions.py) drives: when a workload
class sends its first request and every later one, as the simulator's generate() draws them, and a
schedstat reader over a simulated engine for the sidecar's own host probe."""

from __future__ import annotations

import math
from collections.abc import Callable

from exporter.simulator.dataparallel import DataParallelEngine
from exporter.simulator.engine import Engine
from exporter.simulator.hostcpu import run_queue_wait_share
from exporter.simulator.workload import ClassStream, Workload, class_rng


def first_arrival(workload: Workload, index: int, seed: int) -> float | None:
    """When class ``index`` sends its first request under ``seed`` (None: never), as generate() draws it."""
    return next(workload.classes[index].arrivals.times(class_rng(seed, index)), None)


def arrival_times(workload: Workload, index: int, seed: int, max_model_len: int) -> list[float]:
    """Every arrival of class ``index`` under ``seed``, as generate() draws them (the class's arrival times and
    its requests' draws share one RNG, so each request is built in turn). Empty for a class without an end."""
    cls = workload.classes[index]
    if math.isinf(cls.arrivals.stop_s):
        return []
    stream = ClassStream(index, cls, class_rng(seed, index), max_model_len)
    times = []
    t = stream.next_arrival()
    while t is not None:
        stream.build(0, t)
        times.append(t)
        t = stream.next_arrival()
    return times


class SimulatedSchedstat:
    """Cumulative run and run-queue wait of a simulated engine's threads, as ``/proc/<pid>/schedstat``
    would count them: each read adds the time since the last read at the engine's current CPU share.

    Fed to the sidecar's own host probe, it gives the same window arithmetic a real CPU source gets
    (a change of CPU share reaches the probe's shares only as fast as its span lets it).
    """

    name = "schedstat"

    def __init__(self, engine: Callable[[], Engine | DataParallelEngine], busy_cores: float = 1.0) -> None:
        self._engine = engine
        self._busy = busy_cores
        self._last: float | None = None
        self._run_ns = 0.0
        self._wait_ns = 0.0

    def read(self) -> dict[str, float]:
        engine = self._engine()
        now = engine.now
        if self._last is not None and now > self._last:
            run = (now - self._last) * self._busy * 1e9
            share = run_queue_wait_share(engine)
            self._run_ns += run
            self._wait_ns += run * share / (1.0 - share)
        self._last = now
        return {"run_ns": self._run_ns, "wait_ns": self._wait_ns}
