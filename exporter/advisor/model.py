"""The simulator's engine, re-costed for calibration: a fitted step cost and closed-loop clients.

The simulator's own step time is a GPU roofline for a named model on a named accelerator; the
advisor knows neither, only what the window shows. So a step here costs ``fixed + per_token x
scheduled tokens`` (fitted to the observed ITL and prefill time), the KV cache has the observed
block count, and the traffic is either open (arrival times drawn in advance) or closed (``clients``
users who send their next request when the last one has finished, after ``think_s``).

While it runs, the model records which steps each observed quantity spans (``Linear``), so the
calibration can solve for the step cost that reproduces the window (``calibrate.fit_step_cost``).

All of it plugs into the simulator's engine through its public protocols (``StepCostModel``:
``FittedCost``; ``ArrivalSource``: ``OpenSource``, ``ClosedLoop``; ``EngineObserver``:
``TraceObserver``) and its ``reserve_full_isl`` admission gate: no private method of the engine is
overridden, so a change inside the simulator either keeps these contracts or fails to type-check.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from exporter.simulator.engine import Engine, EngineConfig, Request, SpecStream, StepTime
from exporter.simulator.workload import ClassStream, RequestSpec, Workload

# The unit of StepCost.curvature: at curvature c, a prefill token in a step of this many prefill tokens costs
# 1 + c times one in a step of a few (vLLM's default token budget, and the top of its chunk sizes).
CURVATURE_TOKENS = 1024.0


@dataclass(frozen=True, slots=True)
class StepCost:
    """Wall time of one engine step: ``max(fixed_s + per_token_s x work, compute_per_token_s x tokens) x noise``,
    where ``work`` is the step's ``P`` prefill tokens, each at ``1 + curvature x P / CURVATURE_TOKENS`` (a larger step
    dearer by the token: attention over the chunk, caches), plus ``decode_weight`` per decoding sequence.

    The linear part is fitted to the window; where every step of the window had about the same
    number of tokens it cannot tell fixed from per-token cost, so the compute floor (the GPU's
    datasheet FLOPs at ``advice_compute_efficiency``, 2 x parameters FLOPs per token) keeps a much
    larger token budget from looking free.

    ``noise_sigma`` is the log-space spread of a mean-1 lognormal factor on the shortest step (it
    shrinks like 1/sqrt of a longer step's length): the step-time jitter of a shared machine (other
    processes, the API server on the same cores), which makes the ITL tail and, through the variance
    of service times, the queue.
    """

    fixed_s: float
    per_token_s: float
    noise_sigma: float = 0.0
    compute_per_token_s: float = 0.0  # floor from the GPU's FLOPs: a big step cannot be faster than its GEMMs
    decode_weight: float = 1.0  # one decoding sequence costs this many prefill tokens (advice_decode_token_weight)
    cached_weight: float = 0.0  # a prefix-cache hit costs its admitting step this many prefill tokens (each)
    curvature: float = 0.0  # a prefill token's extra cost share per CURVATURE_TOKENS prefill tokens in its step

    def prefill_work(self, prefill: float) -> float:
        """The work of ``prefill`` tokens in one step, in prefill tokens at the small-step cost."""
        return prefill * (1.0 + self.curvature * prefill / CURVATURE_TOKENS) if self.curvature else prefill


@dataclass(slots=True)
class Linear:
    """Sums that make an observed mean linear in the step cost: mean = (fixed x steps + per_token x work) / n,
    with ``work`` in prefill-token units (``StepCost.decode_weight`` per decoding sequence)."""

    n: float = 0.0
    steps: float = 0.0
    work: float = 0.0
    decodes: float = 0.0  # the decoding sequences inside ``work`` (each counted there at the decode weight)

    def add(self, steps: float, work: float, weight: float = 1.0, decodes: float = 0.0) -> None:
        self.n += weight
        self.steps += steps * weight
        self.work += work * weight
        self.decodes += decodes * weight

    def coefficients(self) -> tuple[float, float] | None:
        """(steps per observation, work per observation), or None without observations."""
        if self.n <= 0:
            return None
        return self.steps / self.n, self.work / self.n

    def decodes_per_observation(self) -> float | None:
        return self.decodes / self.n if self.n > 0 else None


@dataclass(frozen=True, slots=True)
class OpenArrivals:
    """Open traffic: a renewal process at ``rate`` req/s whose gaps have squared coefficient of
    variation ``cv2`` (1: Poisson; above 1: bursty, gamma-distributed gaps)."""

    rate: float
    cv2: float = 1.0
    backlog: int = 0  # requests already in the engine when the window starts (a standing queue)

    def times(self, rng: random.Random) -> Iterator[float]:
        shape = 1.0 / max(self.cv2, 1e-3)
        scale = 1.0 / (self.rate * shape)
        t = 0.0
        while True:
            t += rng.gammavariate(shape, scale)
            yield t


@dataclass(frozen=True, slots=True)
class Clients:
    """Closed-loop traffic: ``count`` users, each sending its next request ``think_s`` after a response."""

    count: int
    think_s: float = 0.0


@dataclass(slots=True)
class Trace:
    """Per-step bookkeeping for the fit (only what the step-cost equations need)."""

    measure_from: float
    step_end: list[float] = field(default_factory=lambda: [0.0])
    cum_work: list[float] = field(default_factory=lambda: [0.0])
    cum_decodes: list[float] = field(default_factory=lambda: [0.0])
    itl: Linear = field(default_factory=Linear)
    prefill: Linear = field(default_factory=Linear)
    admitted_at_step: dict[int, int] = field(default_factory=dict)
    # Ready for the engine -> QUEUED: the wait for the step under way (what the observed frontend time holds)
    step_wait_s: float = 0.0
    step_wait_n: int = 0

    def step_wait_mean(self) -> float:
        return self.step_wait_s / self.step_wait_n if self.step_wait_n else 0.0


class FittedCost:
    """The window's fitted :class:`StepCost` as the engine's step cost (``StepCostModel``), recording
    each step's end and cumulative work in the trace for the fit."""

    def __init__(self, cost: StepCost, trace: Trace, rng: random.Random) -> None:
        self._cost = cost
        self._trace = trace
        self._noise_rng = rng
        self._admitted: set[tuple[int, int]] = set()  # (request, preemptions): admissions whose hits were costed

    def _cached(self, chunks: Sequence[tuple[Request, int, int]]) -> int:
        """Prefix-cache hits of the requests admitted in this step: an admission's first chunk starts where its
        hits end (a later chunk of the same admission starts past its own earlier chunks, which are no hits)."""
        hits = 0
        for request, start, _ in chunks:
            key = (request.rid, request.preemptions)
            if key not in self._admitted:
                self._admitted.add(key)
                hits += start
        return hits

    def step_time(self, now: float, n_decode: int, decode_context: int,
                  chunks: Sequence[tuple[Request, int, int]]) -> StepTime:
        prefill = sum(c for _, _, c in chunks)
        cost = self._cost
        work = cost.prefill_work(prefill) + cost.decode_weight * n_decode
        if cost.cached_weight > 0:
            work += cost.cached_weight * self._cached(chunks)
        dt = max(cost.fixed_s + cost.per_token_s * work, cost.compute_per_token_s * (prefill + n_decode))
        if cost.noise_sigma > 0:
            # The jitter of a shared machine is short interruptions; over a longer step more of them
            # average out, so its relative spread shrinks like 1/sqrt(length) (fitted at the shortest).
            sigma = cost.noise_sigma * math.sqrt(min(1.0, cost.fixed_s / dt)) if dt > 0 else cost.noise_sigma
            dt *= self._noise_rng.lognormvariate(-sigma * sigma / 2.0, sigma)
        trace = self._trace
        trace.step_end.append(now + dt)
        trace.cum_work.append(trace.cum_work[-1] + work)
        trace.cum_decodes.append(trace.cum_decodes[-1] + n_decode)
        return StepTime(dt, dt, 0.0, 0.0, 0.0, 0.0)


class OpenSource(SpecStream):
    """Open traffic as the engine's ``ArrivalSource``: a backlog at time 0, then the renewal process."""

    def __init__(self, arrivals: OpenArrivals, stream: ClassStream, rng: random.Random) -> None:
        super().__init__(self._specs_of(arrivals, stream, rng))

    @staticmethod
    def _specs_of(arrivals: OpenArrivals, stream: ClassStream, rng: random.Random) -> Iterator[RequestSpec]:
        rid = 0
        for _ in range(arrivals.backlog):
            rid += 1
            yield stream.build(rid, 0.0)
        for t in arrivals.times(rng):
            rid += 1
            yield stream.build(rid, t)


class ClosedLoop:
    """Closed-loop clients as the engine's ``ArrivalSource``: each sends its next request an exponential
    think time (mean ``think_s``) after its last one's response."""

    def __init__(self, clients: Clients, stream: ClassStream, think_rng: random.Random) -> None:
        self._clients = clients
        self._stream = stream
        self._think_rng = think_rng
        self._rid = 0
        self._queue: list[tuple[float, int, RequestSpec]] = []
        for i in range(clients.count):
            # Clients start spread over one think time (or a few ms), not all in the same instant.
            self._push(think_rng.uniform(0.0, max(clients.think_s, 0.01 * (i + 1))))

    def _push(self, arrival: float) -> None:
        spec = self._stream.build(self._rid, arrival)
        heapq.heappush(self._queue, (arrival, self._rid, spec))
        self._rid += 1

    def next_arrival(self) -> float | None:
        return self._queue[0][2].arrival if self._queue else None

    def arrived(self, now: float) -> Iterator[RequestSpec]:
        queue = self._queue
        while queue and queue[0][0] <= now:
            yield heapq.heappop(queue)[2]

    def finished(self, spec: RequestSpec, seen: float) -> None:
        think = self._clients.think_s
        delay = self._think_rng.expovariate(1.0 / think) if think > 0 else 0.0
        self._push(seen + delay)


class TraceObserver:
    """The engine's ``EngineObserver`` for the fit: which steps each observed ITL gap and prefill time spans."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def admitted(self, request: Request, step: int) -> None:
        self._trace.admitted_at_step[request.rid] = step

    def token_gap(self, now: float, value: float, n: int) -> None:
        """The steps an ITL observation of ``value`` seconds, ending with the current step, spans."""
        trace = self._trace
        if now < trace.measure_from:
            return
        end = len(trace.step_end) - 1
        # The gap began at the end of step j (a previous output, or the step that preempted the request).
        j = min(bisect_left(trace.step_end, trace.step_end[end] - value - 1e-9), end - 1)
        trace.itl.add(end - j, trace.cum_work[end] - trace.cum_work[j], weight=n,
                      decodes=trace.cum_decodes[end] - trace.cum_decodes[j])

    def finished(self, request: Request, seen: float) -> None:
        """Which steps the request's prefill time (scheduled -> first token) spans."""
        trace = self._trace
        first = trace.admitted_at_step.pop(request.rid, None)
        if first is None or request.t_sched < trace.measure_from:
            return
        trace.step_wait_s += request.t_queued - request.t_engine
        trace.step_wait_n += 1
        last = bisect_left(trace.step_end, request.t_first)
        if last >= len(trace.step_end) or last < first:
            return
        trace.prefill.add(last - first + 1, trace.cum_work[last] - trace.cum_work[first - 1],
                          decodes=trace.cum_decodes[last] - trace.cum_decodes[first - 1])


class CalibratedEngine(Engine):
    """An :class:`Engine` with a fitted linear step cost and open or closed-loop traffic, built from the
    simulator's public parts only (``StepCostModel``, ``ArrivalSource``, ``EngineObserver``)."""

    def __init__(self, config: EngineConfig, workload: Workload, cost: StepCost, traffic: OpenArrivals | Clients,
                 seed: int = 0, measure_from: float = 0.0) -> None:
        # vLLM's admission gate (scheduler_reserve_full_isl, on by default since 0.2x): a waiting request is
        # admitted only when its whole sequence fits, not just its first chunk.
        config = replace(config, reserve_full_isl=True)
        self.trace = Trace(measure_from)
        # Requests are built from the workload's single class; its own arrival process is not used.
        stream = ClassStream(0, workload.classes[0], random.Random(seed * 1_000_003), config.max_model_len)
        arrivals: OpenSource | ClosedLoop
        if isinstance(traffic, OpenArrivals):
            arrivals = OpenSource(traffic, stream, random.Random(seed + 29))
        else:
            arrivals = ClosedLoop(traffic, stream, random.Random(seed + 17))
        super().__init__(config, workload, seed, cost=FittedCost(cost, self.trace, random.Random(seed + 41)),
                         arrivals=arrivals, observer=TraceObserver(self.trace))
