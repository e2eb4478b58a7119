"""The engine's KV cache: prefix lookups, block growth, recompute preemption, and the KV loads of a
disaggregated decode instance or an offload tier (``engine``'s docstring describes the model).

A mixin of ``Engine``, whose state it reads and changes: the attributes below are set by ``Engine.__init__``.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict, deque

from exporter.simulator.blockpool import BlockPool
from exporter.simulator.deployment import EngineConfig
from exporter.simulator.request import _DECODE, _DONE, _PREFILL, _WAITING, Request
from exporter.simulator.stats import EngineStats


class KvCache:
    """The KV cache's part of ``Engine`` (a mixin: ``Engine`` holds the state)."""

    cfg: EngineConfig
    stats: EngineStats
    now: float
    running: dict[int, Request]
    waiting: deque[Request]
    _bs: int
    _pool: BlockPool
    _prefilling: dict[int, Request]
    _clock: int
    _n_decode: int
    _ctx_base: int
    _order: int
    _preempted_this_step: bool
    _loading: list[tuple[float, int, Request]]
    _link_free: dict[str, float]
    _kv_rng: random.Random
    _cpu_tier: OrderedDict[tuple[int, int], None] | None

    # ----------------------------------------------------------------- KV cache

    def _lookup(self, r: Request) -> list[int]:
        """Longest run of cached leading blocks of ``r`` (``BlockPool.lookup``); none without prefix caching."""
        if not self.cfg.enable_prefix_caching:
            return []
        return self._pool.lookup(r.seg_ends, r.seg_keys, r.num_tokens)

    def _register(self, r: Request, computed_tokens: int) -> None:
        """Make every full, computed block of ``r`` findable by later requests."""
        if not self.cfg.enable_prefix_caching:
            return
        r.n_hashed = self._pool.register(r.blocks, r.n_hashed, r.seg_ends, r.seg_keys, computed_tokens,
                                         stored=self._offload_store if self._cpu_tier is not None else None)

    def _free_blocks(self, r: Request) -> None:
        self._pool.release(r.blocks)
        r.blocks = []
        r.n_hashed = 0

    def _ensure_blocks(self, r: Request, tokens: int) -> bool:
        """Grow ``r`` to hold ``tokens`` slots, preempting from the running tail when short.
        Returns False when ``r`` itself had to be preempted."""
        need = -(-tokens // self._bs) - len(r.blocks)
        if need <= 0:
            return True
        free = self._pool.free
        while len(free) < need:
            _, victim = self.running.popitem()
            self._preempt(victim)
            if victim is r:
                return False
        r.blocks.extend(self._pool.allocate(need))
        return True

    def _preempt(self, r: Request) -> None:
        """Recompute preemption of ``r`` (already removed from ``running``)."""
        if r.phase == _DECODE:
            steps = self._clock - r.c0
            r.num_tokens = r.t0 + steps
            r.generated = r.g0 + steps
            r.t_last_out = self.now
            self._n_decode -= 1
            self._ctx_base -= r.t0 - r.c0
            self._register(r, r.num_tokens - 1)
        elif r.phase == _PREFILL:
            del self._prefilling[r.rid]
            self._register(r, r.computed)
        self._free_blocks(r)
        r.computed = 0
        r.target = r.num_tokens
        r.epoch += 1
        r.phase = _WAITING
        r.preemptions += 1
        self.stats.num_preemptions += 1
        self._preempted_this_step = True
        self.waiting.appendleft(r)

    def _take_blocks(self, r: Request, hits: list[int], tokens: int) -> bool:
        """Give ``r`` the cached ``hits`` and new blocks up to ``tokens`` slots; False if KV has no room."""
        pool = self._pool
        need = -(-tokens // self._bs) - len(hits)
        if need + pool.evictable(hits) > len(pool.free):
            return False
        pool.touch(hits)
        r.blocks = hits + pool.allocate(need)
        r.n_hashed = len(hits)
        r.target = r.num_tokens
        return True

    def _external_tokens(self, r: Request, hits: list[int]) -> tuple[int, str]:
        """Prompt tokens the KV connector would load after the ``hits`` of the GPU prefix cache, and from where:
        a prefill instance (a remote prefill: all but the last prompt token), or the CPU offload tier (its
        leading run of stored blocks, whole blocks, fewer than num_tokens)."""
        cached = len(hits) * self._bs
        if r.remote:
            return max(0, r.num_tokens - 1 - cached), "nixl"
        tier = self._cpu_tier
        if tier is None or not self.cfg.enable_prefix_caching:
            return 0, ""
        limit = (r.num_tokens - 1) // self._bs
        ends, keys, bs = r.seg_ends, r.seg_keys, self._bs
        found, j = 0, 0
        for i in range(len(hits), limit):
            end = (i + 1) * bs
            while ends[j] < end:
                j += 1
            h = (keys[j], i)
            if h not in tier:
                break
            tier.move_to_end(h)
            found += 1
        return found * bs, "offload"

    def _start_load(self, r: Request, hits: list[int], external: int, kind: str) -> int:
        """Give ``r`` blocks for its cached and loaded tokens and start the load; 0 if KV has no room."""
        cached_tokens = len(hits) * self._bs
        if not self._take_blocks(r, hits, cached_tokens + external):
            return 0
        r.computed = cached_tokens + external
        st = self.stats
        if not r.admitted_once:
            # vLLM records both prefix caches at this admission (a preempted request's lookups are not counted).
            r.admitted_once = True
            r.hits_first = cached_tokens
            r.ext_first = external
            st.prefix_cache_queries += r.num_tokens
            st.prefix_cache_hits += cached_tokens
            st.external_prefix_queries += r.num_tokens - cached_tokens
            st.external_prefix_hits += external
        size = external * self.cfg.model.kv_bytes_per_token
        bandwidth = self.cfg.kv_transfer_bandwidth if kind == "nixl" else self.cfg.kv_offload_bandwidth
        start = max(self.now, self._link_free[kind])  # loads share their link in the order they start
        self._link_free[kind] = start + size / bandwidth
        done = self._link_free[kind] + (self.cfg.kv_transfer_latency_s if kind == "nixl" else 0.0)
        r.load = (kind, size, done - self.now)
        r.load_fails = kind == "nixl" and self._kv_rng.random() < self.cfg.kv_transfer_failure_rate
        r.remote = False
        self._order += 1
        heapq.heappush(self._loading, (done, self._order, r))
        return -1

    def _complete_loads(self) -> None:
        """Loads done by now: the request waits for its turn again (vLLM's fetch stage completed_waiting), at the
        head of the queue; a failed load errors the request or leaves its prompt to compute here."""
        loading, st, done = self._loading, self.stats, []
        while loading and loading[0][0] <= self.now:
            _, _, r = heapq.heappop(loading)
            assert r.load is not None
            kind, size, seconds = r.load
            r.load = None
            if kind == "offload":
                st.offload_load_bytes += size
                st.offload_load_time += seconds
            elif r.load_fails:
                st.nixl_failed += 1
                if self.cfg.kv_load_failure_policy == "fail":
                    self._free_blocks(r)
                    r.phase = _DONE
                    st.request_success["error"] += 1
                    continue
                r.computed = r.hits_first  # recompute: the prompt is prefilled here, in the blocks it holds
                r.ext_first = 0
            else:
                st.nixl_xfer_time.observe(seconds)
                st.nixl_bytes.observe(size)
            done.append(r)
        if done:
            self.waiting.extendleft(reversed(done))

    def _offload_store(self, h: tuple[int, int]) -> None:
        """A computed block's copy in the CPU tier (stored once, LRU when the tier is full)."""
        tier = self._cpu_tier
        assert tier is not None
        if h in tier:
            tier.move_to_end(h)
            return
        tier[h] = None
        if len(tier) > self.cfg.kv_offload_blocks:
            tier.popitem(last=False)
        size = self._bs * self.cfg.model.kv_bytes_per_token
        self.stats.offload_store_bytes += size
        self.stats.offload_store_time += size / self.cfg.kv_offload_bandwidth
