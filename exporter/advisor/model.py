"""The simulator's engine, re-costed for calibration: a fitted step cost and closed-loop clients.

The simulator's own step time is a GPU roofline for a named model on a named accelerator; the
advisor knows neither, only what the window shows. So a step here costs ``fixed + per_token x
scheduled tokens`` (fitted to the observed ITL and prefill time), the KV cache has the observed
block count, and the traffic is either open (arrival times drawn in advance) or closed (``clients``
users who send their next request when the last one has finished, after ``think_s``).

While it runs, the model records which steps each observed quantity spans (``Linear``), so the
calibration can solve for the step cost that reproduces the window (``calibrate.fit_step_cost``).
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field

from exporter.simulator.engine import Engine, EngineConfig, Histogram, _Req
from exporter.simulator.workload import RequestSpec, Workload, _ClassStream


@dataclass(frozen=True, slots=True)
class StepCost:
    """Wall time of one engine step: ``max(fixed_s + per_token_s x work, compute_per_token_s x tokens) x noise``,
    where ``work`` is the prefill tokens plus ``decode_weight`` per decoding sequence.

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


@dataclass(slots=True)
class Linear:
    """Sums that make an observed mean linear in the step cost: mean = (fixed x steps + per_token x work) / n,
    with ``work`` in prefill-token units (``StepCost.decode_weight`` per decoding sequence)."""

    n: float = 0.0
    steps: float = 0.0
    work: float = 0.0

    def add(self, steps: float, work: float, weight: float = 1.0) -> None:
        self.n += weight
        self.steps += steps * weight
        self.work += work * weight

    def coefficients(self) -> tuple[float, float] | None:
        """(steps per observation, work per observation), or None without observations."""
        if self.n <= 0:
            return None
        return self.steps / self.n, self.work / self.n


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
    itl: Linear = field(default_factory=Linear)
    prefill: Linear = field(default_factory=Linear)
    admitted_at_step: dict[int, int] = field(default_factory=dict)
    # Ready for the engine -> QUEUED: the wait for the step under way (what the observed frontend time holds)
    step_wait_s: float = 0.0
    step_wait_n: int = 0

    def step_wait_mean(self) -> float:
        return self.step_wait_s / self.step_wait_n if self.step_wait_n else 0.0


class _TracedHistogram(Histogram):
    """The ITL histogram, telling the engine about each observation (decode gaps and recompute gaps alike)."""

    __slots__ = ("engine",)

    def __init__(self, bounds: tuple[float, ...], engine: CalibratedEngine) -> None:
        super().__init__(bounds)
        self.engine = engine

    def observe(self, value: float, n: int = 1) -> None:
        super().observe(value, n)
        self.engine._trace_itl(value, n)


class CalibratedEngine(Engine):
    """An :class:`Engine` with a fitted linear step cost and, optionally, closed-loop clients."""

    def __init__(self, config: EngineConfig, workload: Workload, cost: StepCost, traffic: OpenArrivals | Clients,
                 seed: int = 0, measure_from: float = 0.0) -> None:
        self._cost = cost
        self._clients = traffic if isinstance(traffic, Clients) else None
        self.trace = Trace(measure_from)
        # Requests are built from the workload's single class; its own arrival process is not used.
        self._stream = _ClassStream(0, workload.classes[0], random.Random(seed * 1_000_003), config.max_model_len)
        self._rid = 0
        self._think_rng = random.Random(seed + 17)
        self._noise_rng = random.Random(seed + 41)
        self._queue: list[tuple[float, int, RequestSpec]] = []
        super().__init__(config, workload, seed)
        self.stats.inter_token_latency = _TracedHistogram(self.stats.inter_token_latency.bounds, self)
        if isinstance(traffic, OpenArrivals):
            self._specs = self._open_specs(traffic, random.Random(seed + 29))
            self._next_spec = next(self._specs, None)
        else:
            clients = traffic
            self._specs = iter(())
            for i in range(clients.count):
                # Clients start spread over one think time (or a few ms), not all in the same instant.
                self._push_request(self._think_rng.uniform(0.0, max(clients.think_s, 0.01 * (i + 1))))
            self._next_spec = self._queue[0][2] if self._queue else None

    # -- traffic --------------------------------------------------------------------------------

    def _open_specs(self, arrivals: OpenArrivals, rng: random.Random) -> Iterator[RequestSpec]:
        for _ in range(arrivals.backlog):
            self._rid += 1
            yield self._stream.build(self._rid, 0.0)
        for t in arrivals.times(rng):
            self._rid += 1
            yield self._stream.build(self._rid, t)

    def _push_request(self, arrival: float) -> None:
        spec = self._stream.build(self._rid, arrival)
        heapq.heappush(self._queue, (arrival, self._rid, spec))
        self._rid += 1

    def _pull_arrivals(self, now: float) -> None:
        if self._clients is None:
            super()._pull_arrivals(now)
            return
        costs, cfg = self.cfg.costs, self.cfg
        queue = self._queue
        while queue and queue[0][0] <= now:
            _, _, spec = heapq.heappop(queue)
            work = (costs.tokenize_base_s + costs.tokenize_per_token_s * spec.prompt_len) * cfg.frontend_cost_scale
            start = max(spec.arrival, self._frontend_free)
            self._frontend_free = start + work / cfg.cpu_share
            self.stats.frontend_cpu_s += work
            self._pending.append(_Req(spec, self._frontend_free))
        self._next_spec = queue[0][2] if queue else None

    def _finish(self, r: _Req, seen: float) -> None:
        super()._finish(r, seen)
        self._record_prefill(r)
        if self._clients is not None:
            think = self._clients.think_s
            delay = self._think_rng.expovariate(1.0 / think) if think > 0 else 0.0
            self._push_request(seen + delay)
            self._next_spec = self._queue[0][2]

    # -- step cost and the fit's bookkeeping --------------------------------------------------

    def _prep_costs(self) -> None:
        pass  # the fitted StepCost replaces the roofline constants

    def _admit(self, r: _Req, budget: int) -> int:
        # vLLM's admission gate (scheduler_reserve_full_isl, on by default since 0.2x): a waiting request
        # is admitted only when its whole sequence fits, not just its first chunk. Without it a long
        # prompt admitted on a leftover chunk of budget preempts itself on its next chunk.
        if not self._free:
            return 0
        hits = self._lookup(r)
        need = -(-r.num_tokens // self._bs) - len(hits)
        evictable = sum(1 for b in hits if self._ref[b] == 0)
        if need + evictable > len(self._free):
            return 0
        first = not r.admitted_once
        n = super()._admit(r, budget)
        if n and first:
            self.trace.admitted_at_step[r.rid] = self.step_index
        return n

    def _step_time(self, s: int, n_decode: int, chunks: list[tuple[_Req, int, int]]
                   ) -> tuple[float, float, float, float, float, float]:
        prefill = sum(c for _, _, c in chunks)
        cost = self._cost
        work = prefill + cost.decode_weight * n_decode
        dt = max(cost.fixed_s + cost.per_token_s * work, cost.compute_per_token_s * (prefill + n_decode))
        if cost.noise_sigma > 0:
            # The jitter of a shared machine is short interruptions; over a longer step more of them
            # average out, so its relative spread shrinks like 1/sqrt(length) (fitted at the shortest).
            sigma = cost.noise_sigma * math.sqrt(min(1.0, cost.fixed_s / dt)) if dt > 0 else cost.noise_sigma
            dt *= self._noise_rng.lognormvariate(-sigma * sigma / 2.0, sigma)
        trace = self.trace
        trace.step_end.append(self.now + dt)
        trace.cum_work.append(trace.cum_work[-1] + work)
        return dt, dt, 0.0, 0.0, 0.0, 0.0

    def _trace_itl(self, value: float, n: int) -> None:
        """The steps an ITL observation of ``value`` seconds, ending with the current step, spans."""
        trace = self.trace
        if self.now < trace.measure_from:
            return
        end = len(trace.step_end) - 1
        # The gap began at the end of step j (a previous output, or the step that preempted the request).
        j = min(bisect_left(trace.step_end, trace.step_end[end] - value - 1e-9), end - 1)
        trace.itl.add(end - j, trace.cum_work[end] - trace.cum_work[j], weight=n)

    def _record_prefill(self, r: _Req) -> None:
        """Which steps the request's prefill time (scheduled -> first token) spans."""
        trace = self.trace
        first = trace.admitted_at_step.pop(r.rid, None)
        if first is None or r.t_sched < trace.measure_from:
            return
        trace.step_wait_s += r.t_queued - r.t_engine
        trace.step_wait_n += 1
        last = bisect_left(trace.step_end, r.t_first)
        if last >= len(trace.step_end) or last < first:
            return
        trace.prefill.add(last - first + 1, trace.cum_work[last] - trace.cum_work[first - 1])

