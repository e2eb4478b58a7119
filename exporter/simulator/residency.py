"""KV block residency, as vLLM's ``--kv-cache-metrics`` samples it (``vllm/v1/core/kv_cache_metrics.py``).

A block is sampled when it is allocated, with probability ``--kv-cache-metrics-sample``; a prefix-cache hit
on a sampled block (the pool's ``touch``) records an access, the last four kept; when the sampled block's
slot is handed out again (vLLM calls that its eviction, whether or not its content was cached) its lifetime
(allocation to now), its idle time (last access, or its allocation, to now) and the gaps between its kept
accesses are observed into three histograms. The pool calls ``allocated`` and ``accessed``; the clock is the
engine's simulated one.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable
from typing import Final

from exporter.simulator.stats import EngineStats

ACCESS_HISTORY: Final = 4  # BlockMetricsState's ring buffer of recent accesses


class BlockResidency:
    """The sampled blocks' births and accesses; their evictions go to the engine's three residency histograms."""

    __slots__ = ("sample", "clock", "_rng", "_births", "_last", "_accesses", "lifetime", "idle", "reuse_gap")

    def __init__(self, sample: float, clock: Callable[[], float], stats: EngineStats, seed: int = 0) -> None:
        if not 0.0 < sample <= 1.0:
            raise ValueError("kv_cache_metrics_sample must be in (0, 1]")  # vLLM asserts the same
        self.sample = sample
        self.clock = clock
        self._rng = random.Random(f"kv-metrics-{seed}")
        self._births: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._accesses: dict[int, deque[float]] = {}
        self.lifetime, self.idle = stats.kv_block_lifetime, stats.kv_block_idle
        self.reuse_gap = stats.kv_block_reuse_gap

    def allocated(self, block: int) -> None:
        """``block``'s slot is handed out: the sampled block that held it is evicted, the new one maybe sampled."""
        now = self.clock()
        born = self._births.pop(block, None)
        if born is not None:
            self.lifetime.observe(now - born)
            self.idle.observe(now - self._last.pop(block))
            history = self._accesses.pop(block, None)
            if history is not None:
                times = list(history)
                for before, after in zip(times, times[1:]):
                    self.reuse_gap.observe(after - before)
        if self._rng.random() < self.sample:
            self._births[block] = self._last[block] = now

    def accessed(self, blocks: Iterable[int]) -> None:
        """Prefix-cache hits on ``blocks``: the sampled ones record the access."""
        births = self._births
        now = None
        for block in blocks:
            if block in births:
                now = self.clock() if now is None else now
                self._last[block] = now
                history = self._accesses.get(block)
                if history is None:
                    history = self._accesses[block] = deque(maxlen=ACCESS_HISTORY)
                history.append(now)
