"""Synthetic request streams: arrival processes, length distributions and shared prefixes.

A workload is a tuple of request classes (e.g. interactive chat next to batch summarisation).
Each class has its own arrival process, prompt and output length distributions and, optionally,
shared-prefix groups (system prompts). Classes are merged into one time-ordered stream.

Prompt *content* is never materialised as tokens. What the prefix cache needs is which token
prefixes two requests have in common, so a prompt is described as a list of segments, each
with an identity: two requests whose first ``k`` segments have the same identities and end
positions have identical tokens up to the end of segment ``k``. The engine turns that into
vLLM's block hash chain (``engine.block_hash``). Everything is integers so that hashing is
deterministic across processes (Python randomises ``str`` hashes, not ``int``/``tuple`` ones).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import Literal

# Segment identity tags. Small ints, so segment ids are tuples of ints.
_SYS_HEAD = 1  # system prompt text before the dynamic field (identical for the whole group)
_SYS_TAIL = 2  # system prompt text after the dynamic field
_DYNAMIC = 3  # the dynamic field itself (timestamp, request id, ...)
_UNIQUE = 4  # the user's own message and everything after it, never shared


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution.

    ``fixed``: always ``mean``. ``uniform``: ``mean +- spread``. ``lognormal``: mean ``mean``
    with log-space sigma ``spread`` (long right tail, the usual shape of prompt and output
    lengths). Samples are clamped to ``[lo, hi]``.
    """

    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    mean: float = 100.0
    spread: float = 0.0
    lo: int = 1
    hi: int = 1_000_000

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            value = self.mean
        elif self.kind == "uniform":
            value = rng.uniform(self.mean - self.spread, self.mean + self.spread)
        elif self.kind == "lognormal":
            # Choose mu so that the distribution's mean (not its median) is `mean`.
            mu = math.log(self.mean) - self.spread * self.spread / 2.0
            value = rng.lognormvariate(mu, self.spread)
        else:  # pragma: no cover - guarded by the Literal type
            raise ValueError(f"unknown length distribution {self.kind!r}")
        return max(self.lo, min(self.hi, int(round(value))))


@dataclass(frozen=True, slots=True)
class Arrivals:
    """Open-loop arrival process (clients do not wait for each other, as in production).

    ``steady``: Poisson at ``rate`` req/s. ``sparse``: the same process at a low rate; kept as
    its own kind so scenarios say what they mean. ``bursty``: Poisson whose rate is
    ``burst_rate`` for the first ``burst_s`` seconds of every ``period_s`` and ``rate``
    otherwise (traffic peaks).
    """

    kind: Literal["steady", "bursty", "sparse"] = "steady"
    rate: float = 1.0
    burst_rate: float = 0.0
    burst_s: float = 0.0
    period_s: float = 0.0
    start_s: float = 0.0  # no arrivals before this simulated time
    stop_s: float = math.inf  # nor after this one (phases, drain tests)

    def rate_at(self, t: float) -> float:
        if self.kind == "bursty" and self.period_s > 0 and (t % self.period_s) < self.burst_s:
            return self.burst_rate
        return self.rate

    def times(self, rng: random.Random) -> Iterator[float]:
        """Arrival times in increasing order, until ``stop_s``."""
        t = self.start_s
        while t < self.stop_s:
            rate = self.rate_at(t)
            if self.kind != "bursty" or self.period_s <= 0:
                if rate <= 0:
                    return
                t += rng.expovariate(rate)
                if t < self.stop_s:
                    yield t
                continue
            # Piecewise-constant rate: draw within the current phase; if the draw crosses the
            # phase boundary, restart at the boundary (the exponential is memoryless).
            phase_start = t - (t % self.period_s)
            in_burst = (t % self.period_s) < self.burst_s
            boundary = phase_start + (self.burst_s if in_burst else self.period_s)
            gap = rng.expovariate(rate) if rate > 0 else math.inf
            if t + gap < boundary:
                t += gap
                if t < self.stop_s:
                    yield t
            else:
                t = boundary


@dataclass(frozen=True, slots=True)
class PrefixSpec:
    """Shared system prompts and what breaks them.

    ``groups`` distinct system prompts of ``shared_len`` tokens each (0 groups = nothing
    shared). Group popularity follows a Zipf law with exponent ``zipf_s`` (0 = uniform).
    ``variants`` splits each group into that many token-level variants (few-shot examples or
    tool schemas serialised in varying order). With probability ``instability`` a request
    carries a dynamic field of ``dynamic_len`` tokens at token ``dynamic_pos`` of the system
    prompt (a request id, a timestamp); if ``dynamic_period_s`` > 0 the field's value changes
    only every that many seconds (a clock with minute resolution), else it is per request.
    """

    groups: int = 0
    shared_len: int = 0
    zipf_s: float = 0.0
    variants: int = 1
    instability: float = 0.0
    dynamic_pos: int = 0
    dynamic_len: int = 8
    dynamic_period_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RequestClass:
    """One kind of traffic. ``prompt`` is the request's own part of the prompt (added after
    the shared prefix). ``max_tokens`` is the request parameter; ``None`` means unbounded
    (vLLM then caps the output at ``max_model_len``)."""

    name: str
    arrivals: Arrivals
    prompt: LengthDist
    output: LengthDist
    prefix: PrefixSpec = field(default_factory=PrefixSpec)
    max_tokens: int | None = 1024
    lora: int = 0  # the LoRA adapter the requests name (vLLM's lora_int_id); 0 = the base model


@dataclass(frozen=True, slots=True)
class Workload:
    """Traffic classes plus client behaviour.

    ``client_timeout_s``: clients give up on a request that has not been scheduled after
    this long (the OpenAI client's default is 600 s). vLLM counts such aborts nowhere, so
    they vanish from the metrics; the timeout only keeps overloaded scenarios bounded when a
    server runs for hours.
    """

    classes: tuple[RequestClass, ...]
    client_timeout_s: float = 600.0


@dataclass(slots=True)
class RequestSpec:
    """One request as the client sends it.

    ``seg_ends``/``seg_keys``: cumulative end positions of the prompt's segments and the chain
    key of the content up to each end; the last segment is unique to the request and extends
    over the rest of the prompt and the whole output.
    """

    rid: int
    arrival: float
    prompt_len: int
    output_len: int
    max_tokens: int | None
    finished_reason: str
    seg_ends: tuple[int, ...]
    seg_keys: tuple[int, ...]
    lora: int = 0


def _chain(segments: list[tuple[int, tuple[int, ...]]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(end, identity) segments -> (ends, chain keys); a key covers all content up to its end."""
    ends: list[int] = []
    keys: list[int] = []
    key = 0
    for end, ident in segments:
        key = hash((key, ident, end))
        ends.append(end)
        keys.append(key)
    return tuple(ends), tuple(keys)


class ClassStream:
    """Turns one request class into RequestSpecs (without request ids)."""

    def __init__(self, index: int, cls: RequestClass, rng: random.Random, max_model_len: int) -> None:
        self.index = index
        self.cls = cls
        self.rng = rng
        self.max_model_len = max_model_len
        self.times = cls.arrivals.times(rng)
        groups = cls.prefix.groups
        if groups > 0:
            weights = [1.0 / (g + 1) ** cls.prefix.zipf_s for g in range(groups)]
            total = sum(weights)
            acc = 0.0
            self.cum_weights: list[float] = []
            for w in weights:
                acc += w / total
                self.cum_weights.append(acc)
        else:
            self.cum_weights = []

    def next_arrival(self) -> float | None:
        return next(self.times, None)

    def build(self, rid: int, arrival: float) -> RequestSpec:
        cls, rng, spec = self.cls, self.rng, self.cls.prefix
        segments: list[tuple[int, tuple[int, ...]]] = []
        shared = 0
        if spec.groups > 0 and spec.shared_len > 0:
            g = min(self._pick_group(), spec.groups - 1)
            variant = rng.randrange(spec.variants) if spec.variants > 1 else 0
            group_id = (self.index, g)
            head = min(spec.dynamic_pos, spec.shared_len)
            if head > 0:
                segments.append((head, (_SYS_HEAD, *group_id)))
            shared = head
            if spec.instability > 0 and rng.random() < spec.instability:
                value = int(arrival // spec.dynamic_period_s) if spec.dynamic_period_s > 0 else rid
                shared += spec.dynamic_len
                segments.append((shared, (_DYNAMIC, value)))
            shared += spec.shared_len - head
            segments.append((shared, (_SYS_TAIL, *group_id, variant)))
        own = cls.prompt.sample(rng)
        prompt_len = min(shared + own, self.max_model_len - 1)
        segments.append((1 << 62, (_UNIQUE, rid)))  # open-ended: rest of prompt and the output
        ends, keys = _chain(segments)
        wanted = cls.output.sample(rng)
        cap = self.max_model_len - prompt_len
        reason = "stop"
        if cls.max_tokens is not None and wanted >= cls.max_tokens:
            wanted, reason = cls.max_tokens, "length"
        if wanted >= cap:
            wanted, reason = cap, "length"
        return RequestSpec(
            rid=rid,
            arrival=arrival,
            prompt_len=prompt_len,
            output_len=max(1, wanted),
            max_tokens=cls.max_tokens,
            finished_reason=reason,
            seg_ends=ends,
            seg_keys=keys,
            lora=cls.lora,
        )

    def _pick_group(self) -> int:
        u = self.rng.random()
        for g, c in enumerate(self.cum_weights):
            if u <= c:
                return g
        return len(self.cum_weights) - 1


def class_rng(seed: int, index: int) -> random.Random:
    """The RNG of the workload's class ``index``: its arrival times first, then its requests' draws."""
    return random.Random(seed * 1_000_003 + index)


def generate(workload: Workload, seed: int, max_model_len: int) -> Iterator[RequestSpec]:
    """All requests of the workload in arrival order, forever (or until every class ends).

    Each class draws from its own RNG derived from ``seed``, so adding a class does not change
    the requests of the others.
    """
    streams = [ClassStream(i, cls, class_rng(seed, i), max_model_len) for i, cls in enumerate(workload.classes)]
    heap: list[tuple[float, int]] = []
    for i, stream in enumerate(streams):
        t = stream.next_arrival()
        if t is not None:
            heap.append((t, i))
    heapq.heapify(heap)
    rids = count()
    while heap:
        t, i = heapq.heappop(heap)
        yield streams[i].build(next(rids), t)
        nxt = streams[i].next_arrival()
        if nxt is not None:
            heapq.heappush(heap, (nxt, i))
