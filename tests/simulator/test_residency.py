"""KV block residency as vLLM's KVCacheMetricsCollector observes it (``--kv-cache-metrics``): a sampled block is
observed when its slot is handed out again; its lifetime from its allocation, its idle time from its last
prefix-cache hit (or its allocation), and the gaps between its last four hits."""

from __future__ import annotations

import pytest

from exporter.simulator.blockpool import BlockPool
from exporter.simulator.deployment import EngineConfig
from exporter.simulator.residency import BlockResidency
from exporter.simulator.stats import EngineStats


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pool(sample: float = 1.0) -> tuple[BlockPool, Clock, EngineStats]:
    clock, stats = Clock(), EngineStats(EngineConfig())
    pool = BlockPool(3, 16)  # blocks 1 and 2 (block 0 is the null block)
    pool.residency = BlockResidency(sample, clock, stats)
    return pool, clock, stats


def test_a_reused_block_reports_its_life_its_idle_time_and_its_reuse_gaps() -> None:
    pool, clock, stats = _pool()
    (block,) = pool.allocate(1)
    for at in (2.0, 5.0, 9.0, 14.0, 20.0):  # five hits: the ring buffer keeps the last four
        clock.now = at
        pool.touch([block])
    pool.release([block] * 6)
    clock.now = 30.0
    pool.allocate(2)  # the LRU hands out the other free block first, then this one: its eviction
    assert (stats.kv_block_lifetime.count, stats.kv_block_lifetime.sum) == (1, 30.0)
    assert (stats.kv_block_idle.count, stats.kv_block_idle.sum) == (1, 10.0)
    assert stats.kv_block_reuse_gap.count == 3 and stats.kv_block_reuse_gap.sum == pytest.approx(20.0 - 5.0)


def test_a_block_never_hit_is_idle_for_its_whole_life_with_no_gap() -> None:
    pool, clock, stats = _pool()
    blocks = pool.allocate(2)
    pool.release(blocks)
    clock.now = 7.5
    pool.allocate(2)
    assert stats.kv_block_lifetime.sum == stats.kv_block_idle.sum == 15.0
    assert stats.kv_block_reuse_gap.count == 0


def test_only_sampled_blocks_are_observed() -> None:
    pool, clock, stats = _pool(sample=0.01)
    for _ in range(2000):
        blocks = pool.allocate(2)
        pool.release(blocks)
        clock.now += 1.0
    assert 10 < stats.kv_block_lifetime.count < 80  # ~1 % of 4000 evictions


def test_the_engine_follows_blocks_only_with_kv_cache_metrics() -> None:
    from exporter.simulator import SCENARIOS

    plain, witnessed = SCENARIOS["template-instability"].build(), SCENARIOS["template-witnessed"].build()
    for engine in (plain, witnessed):
        engine.advance_to(300.0)
    assert plain.stats.kv_block_lifetime.count == 0
    assert witnessed.stats.kv_block_lifetime.count > 0
    with pytest.raises(ValueError):
        EngineConfig(kv_cache_metrics_sample=1.5)
