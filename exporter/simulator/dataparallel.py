"""Data-parallel engines behind one API server, as vLLM's internal load balancer runs them.

One ``/metrics`` shows every engine's series side by side, told apart by the ``engine``
label, while the API-server families (``process_*``, HTTP) appear once. An engine can be
restarted at a given simulated time: its counters and histograms start again from zero while
its sibling and the API server keep running -- the partial reset the window must survive.
"""

from __future__ import annotations

import re

from exporter.simulator.engine import Engine, EngineConfig, EngineStats, GpuBin
from exporter.simulator.workload import Workload

_ENGINE_LABEL = re.compile(r'engine="0"')


class DataParallelEngine:
    """``size`` engines, each with its own copy of the workload (the load balancer's share)."""

    def __init__(self, config: EngineConfig, workload: Workload, seed: int, size: int,
                 restarts: dict[int, float] | None = None, overrides: dict[int, EngineConfig] | None = None) -> None:
        if size < 2:
            raise ValueError("a data-parallel group has at least two engines")
        self._config, self._workload, self._seed = config, workload, seed
        # A rank may run its own configuration (a slower GPU path): ``overrides`` by rank.
        self._overrides = dict(overrides or {})
        self.engines: list[Engine] = [Engine(self._overrides.get(rank, config), workload, seed + rank)
                                      for rank in range(size)]
        self.offsets: list[float] = [0.0] * size  # simulated time each engine (re)started at
        self._restarts = dict(restarts or {})
        self.now = 0.0

    # The single-engine interface the simulator server, captures and DCGM use.
    @property
    def cfg(self) -> EngineConfig:
        return self.engines[0].cfg

    @property
    def stats(self) -> EngineStats:
        return self.engines[0].stats

    def gpu_window(self, seconds: int = 1) -> GpuBin:
        return self.engines[0].gpu_window(seconds)

    def advance_to(self, t: float) -> None:
        for rank, engine in enumerate(self.engines):
            restart_at = self._restarts.get(rank)
            if restart_at is not None and t >= restart_at:
                engine.advance_to(restart_at - self.offsets[rank])
                # The engine core process is replaced: a fresh engine with empty counters.
                self.engines[rank] = engine = Engine(self._overrides.get(rank, self._config), self._workload,
                                                     self._seed + 100 + rank)
                self.offsets[rank] = restart_at
                del self._restarts[rank]
            engine.advance_to(t - self.offsets[rank])
        self.now = t


def merge_engine_expositions(texts: list[str]) -> str:
    """Merge per-engine renders into one exposition.

    The first text keeps every family; from the others only the per-engine samples (those with
    ``engine="0"``) are taken, relabelled with their rank and placed under the same family, so
    each family keeps one HELP/TYPE header and its samples stay together.
    """
    families: list[tuple[str, list[str]]] = []
    index: dict[str, int] = {}
    current: list[str] | None = None
    for line in texts[0].splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            current = [line]
            index[name] = len(families)
            families.append((name, current))
        elif current is not None:
            current.append(line)
    for rank, text in enumerate(texts[1:], start=1):
        family: str | None = None  # the family the current line belongs to
        for line in text.splitlines():
            if line.startswith("# HELP "):
                family = line.split(" ", 3)[2]
            elif line.startswith("#") or not line or family is None or family not in index:
                continue
            elif 'engine="0"' in line:
                families[index[family]][1].append(_ENGINE_LABEL.sub(f'engine="{rank}"', line))
    return "\n".join(line for _, lines in families for line in lines) + "\n"
