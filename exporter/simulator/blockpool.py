"""The KV cache's block pool, as vLLM's V1 KV-cache manager keeps it.

``num_blocks`` blocks of ``block_size`` tokens; block 0 is vLLM's null block and never allocated. A
prefix cache maps block hashes to blocks; freed blocks keep their hash and go to the tail of an LRU
free queue, allocation takes from the head and evicts what it takes. A block shared by several
requests is counted (``ref``) and freed when the last one lets go.

Block ``i``'s hash is ``(chain key of the segment holding its last token, i)``: two requests share it
exactly when their content up to the block's end is identical, which is what vLLM's hash chain over
block tokens decides. The caller (the engine's scheduler) decides when to look up, register, take and
free; the pool only keeps the books.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.simulator.residency import BlockResidency

BlockHash = tuple[int, int]  # (chain key of the content up to the block's end, block index in the request)


class BlockPool:
    __slots__ = ("num_blocks", "block_size", "ref", "free", "_bhash", "_cached", "residency")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref = [0] * num_blocks  # requests holding each block
        self._bhash: list[BlockHash | None] = [None] * num_blocks
        self._cached: dict[BlockHash, int] = {}
        # the LRU free queue: head = next to allocate (and evict); a freed block goes to the tail
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self.residency: BlockResidency | None = None  # --kv-cache-metrics: told of allocations and hits

    @property
    def usage(self) -> float:
        """Held blocks / usable blocks; evictable cached blocks count as free (vLLM's rule)."""
        usable = self.num_blocks - 1
        return 1.0 - len(self.free) / usable if usable > 0 else 0.0

    def lookup(self, seg_ends: Sequence[int], seg_keys: Sequence[int], num_tokens: int) -> list[int]:
        """Longest run of cached leading blocks, whole blocks only, < ``num_tokens`` tokens."""
        hits: list[int] = []
        cached = self._cached
        bs = self.block_size
        limit = (num_tokens - 1) // bs
        j = 0
        for i in range(limit):
            end = (i + 1) * bs
            while seg_ends[j] < end:
                j += 1
            bid = cached.get((seg_keys[j], i))
            if bid is None:
                break
            hits.append(bid)
        return hits

    def evictable(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` sit in the free queue (cached, held by no request)."""
        ref = self.ref
        return sum(1 for b in blocks if ref[b] == 0)

    def touch(self, blocks: Sequence[int]) -> None:
        """Hold cache hits: out of the free queue when no one held them, one reference more."""
        free, ref = self.free, self.ref
        for b in blocks:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1
        if self.residency is not None:
            self.residency.accessed(blocks)

    def register(self, blocks: Sequence[int], n_hashed: int, seg_ends: Sequence[int], seg_keys: Sequence[int],
                 computed_tokens: int, stored: Callable[[BlockHash], None] | None = None) -> int:
        """Make every full, computed block findable by later requests; returns the new count of hashed
        leading blocks (``n_hashed`` before). ``stored`` is told each hash cached here for the first time
        (a KV offload tier keeps a copy of it)."""
        bs = self.block_size
        full = min(computed_tokens // bs, len(blocks))
        if full <= n_hashed:
            return n_hashed
        cached, bhash = self._cached, self._bhash
        j = 0
        for i in range(n_hashed, full):
            # A block's hash is the chain key of the content up to the block's end.
            end = (i + 1) * bs
            while seg_ends[j] < end:
                j += 1
            h = (seg_keys[j], i)
            if h not in cached:  # another request may have computed the same block already
                bid = blocks[i]
                cached[h] = bid
                bhash[bid] = h
                if stored is not None:
                    stored(h)
        return full

    def allocate(self, k: int) -> list[int]:
        """Take ``k`` blocks from the LRU head, evicting their cached content."""
        free, bhash, ref, cached = self.free, self._bhash, self.ref, self._cached
        out: list[int] = []
        for _ in range(k):
            bid, _ = free.popitem(last=False)
            h = bhash[bid]
            if h is not None:
                del cached[h]
                bhash[bid] = None
            ref[bid] = 1
            out.append(bid)
        if self.residency is not None:
            for bid in out:
                self.residency.allocated(bid)
        return out

    def release(self, blocks: Sequence[int]) -> None:
        """Let go of a request's blocks. Reverse order, as vLLM does: a request's tail blocks are
        evicted before its head."""
        ref, free = self.ref, self.free
        for bid in reversed(blocks):
            ref[bid] -= 1
            if ref[bid] == 0:
                free[bid] = None
