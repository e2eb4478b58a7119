"""A simulated fleet of one model's replicas behind a router, scaled by an HPA fed one of three metrics.

Traffic: chat requests whose rate follows a daily curve compressed into the experiment's length (trough,
peak, trough), with a burst of extra requests, and four episodes no replica count fixes, or fixes only at
a high price: CPU starvation beside the engine on some replicas (a noisy neighbour takes their cores), a
prompt-template change that breaks the shared prefix (a request id in the system prompt), and a slow KV
transfer (the fleet's decode instances load prompt KV from prefill instances; the link falls back to TCP).

Every replica is the simulator's engine (exporter/simulator/engine.py), fed by a least-outstanding-requests
router; new replicas serve after a start-up delay, removed ones stop receiving requests and drain. Each
sync period (15 s) the HPA (lab/scaling/hpa.py) reads its metric from the replicas that serve:

* ``queue``: vLLM's ``num_requests_waiting`` summed, target ``QUEUE_TARGET`` per replica;
* ``kv``: vLLM's KV usage summed, target ``KV_TARGET`` per replica;
* ``diagnosis``: the sidecars' ``vllm_diag_desired_replicas`` summed, target 1, each replica's from the real
  sidecar pipeline (exporter/pipeline.py) scraping its engine every ``SCRAPE_S``.

The CPU episode starves the oldest half of the replicas serving when it starts (at least one, never
all: a node's worth); the transfer episode's path is shared by the fleet.

Score (``Score``): minutes in which the first-token objective burns (the share of that minute's requests
whose first token came later than the objective's threshold, or never, exceeds the error budget),
replica-hours (from creation until drained), replicas added while a non-capacity episode acts, and
direction changes of the replica count.
"""

from __future__ import annotations

import logging
import math
import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from exporter.config import Settings, load_settings
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.render.scaling import DEFAULT, Autoscaling
from exporter.simulator.engine import Engine, EngineConfig, Request
from exporter.simulator.exposition import render_vllm
from exporter.simulator.hostcpu import simulated_host_inputs
from exporter.simulator.workload import Arrivals, LengthDist, PrefixSpec, RequestClass, RequestSpec, Workload, generate
from lab.scaling.hpa import Hpa

START_UNIX = 1.8e9
SYNC_S = 15.0  # the HPA controller's sync period
SCRAPE_S = 15.0  # the sidecar's scrape interval here (Prometheus' usual one)
STARTUP_S = 120.0  # a new replica loads its model for two minutes before it serves
DRAIN_S = 60.0  # a removed replica finishes its requests for at most this long (terminationGracePeriod)
QUEUE_TARGET = 5.0  # (a): waiting requests per replica
KV_TARGET = 0.8  # (b): KV cache usage per replica
# The objective: 95 % of first tokens within 250 ms (vLLM's bucket edge), judged per minute.
TTFT_THRESHOLD_S = 0.25
TTFT_TARGET = 0.95
SLO = {"ttft": {"threshold_seconds": TTFT_THRESHOLD_S, "target": TTFT_TARGET},
       "itl": {"threshold_seconds": 0.1, "target": 0.95}}

# One replica: 32 sequences per batch (about 3 req/s of this chat), a KV pool that the batch fills to
# about 85 % (2500 blocks of 16 tokens), so queue depth and KV usage both move as load nears capacity.
ENGINE = EngineConfig(max_num_seqs=32, max_model_len=8192, num_gpu_blocks_override=2500)
# The transfer episode: the replicas take their prompts' KV from prefill instances through a KV connector
# whose transport fell back to TCP on one congested path that all of them share (0.6 GB/s in all, split
# among the replicas that serve: a replica added gets its share of the same path, not a link of its own);
# the rest of the time they prefill locally.
SHARED_SLOW_PATH = 0.6e9


@dataclass(frozen=True, slots=True)
class Episode:
    kind: str  # burst, cpu, template, transfer
    start_s: float
    stop_s: float
    share: float = 0.5  # cpu: the share of the serving replicas that starve (a node's worth; one stays healthy)

    @property
    def capacity(self) -> bool:
        """Whether more replicas are the fix (the burst) or not (the rest)."""
        return self.kind == "burst"

    def active(self, t: float) -> bool:
        return self.start_s <= t < self.stop_s


@dataclass(frozen=True, slots=True)
class Experiment:
    duration_s: float = 3 * 3600.0
    trough_rps: float = 2.0
    peak_rps: float = 9.0
    burst_rps: float = 6.0  # added during the burst
    episodes: tuple[Episode, ...] = (
        Episode("cpu", 25 * 60.0, 40 * 60.0),
        Episode("burst", 60 * 60.0, 70 * 60.0),
        Episode("template", 110 * 60.0, 125 * 60.0),
        Episode("transfer", 145 * 60.0, 160 * 60.0),
    )
    seed: int = 0
    cpu_share: float = 0.2  # what the starved replicas get of the CPU they ask for
    frontend_cost_scale: float = 10.0  # their heavy chat template and tool schemas

    def rate(self, t: float) -> float:
        """The daily curve: trough at the start and end, peak half-way."""
        phase = (1.0 - math.cos(2.0 * math.pi * t / self.duration_s)) / 2.0
        return self.trough_rps + (self.peak_rps - self.trough_rps) * phase

    def active(self, kind: str, t: float) -> Episode | None:
        return next((e for e in self.episodes if e.kind == kind and e.active(t)), None)


def _chat(name: str, prefix: PrefixSpec, arrivals: Arrivals) -> RequestClass:
    return RequestClass(name=name, arrivals=arrivals, prompt=LengthDist("lognormal", 300, 0.6, 10, 4000),
                        output=LengthDist("lognormal", 600, 0.4, 20, 3000), prefix=prefix, max_tokens=4096)


def requests(x: Experiment) -> Iterator[RequestSpec]:
    """Every request of the experiment in arrival order: the chat thinned to the daily curve (with its
    prefix broken during the template episode) and the burst beside it."""
    stable = PrefixSpec(groups=4, shared_len=2000, zipf_s=0.5)
    broken = PrefixSpec(groups=4, shared_len=2000, zipf_s=0.5, instability=0.9, dynamic_pos=24, dynamic_len=12)
    template = next(e for e in x.episodes if e.kind == "template")
    burst = next(e for e in x.episodes if e.kind == "burst")
    peak = x.peak_rps
    classes = (
        _chat("chat", stable, Arrivals("steady", rate=peak, stop_s=template.start_s)),
        _chat("chat-template", broken, Arrivals("steady", rate=peak, start_s=template.start_s,
                                                stop_s=template.stop_s)),
        _chat("chat-after", stable, Arrivals("steady", rate=peak, start_s=template.stop_s, stop_s=x.duration_s)),
        _chat("burst", stable, Arrivals("steady", rate=x.burst_rps, start_s=burst.start_s, stop_s=burst.stop_s)),
    )
    thin = random.Random(f"thin-{x.seed}")
    for spec in generate(Workload(classes), x.seed, ENGINE.max_model_len):
        is_burst = burst.start_s <= spec.arrival < burst.stop_s and thin.random() < x.burst_rps / (x.burst_rps + peak)
        if is_burst or thin.random() < x.rate(spec.arrival) / peak:
            yield spec


class Inbox:
    """One replica's arrivals: what the router sent it (the engine's ArrivalSource)."""

    def __init__(self) -> None:
        self.queue: deque[RequestSpec] = deque()

    def next_arrival(self) -> float | None:
        return self.queue[0].arrival if self.queue else None

    def arrived(self, now: float) -> Iterator[RequestSpec]:
        while self.queue and self.queue[0].arrival <= now:
            yield self.queue.popleft()

    def finished(self, spec: RequestSpec, seen: float) -> None:
        pass


@dataclass
class FirstTokens:
    """The engine's observer: each request's first-token time, by request id."""

    ttft: dict[int, float] = field(default_factory=dict)
    done: int = 0

    def admitted(self, request: Request, step: int) -> None:
        pass

    def token_gap(self, now: float, value: float, n: int) -> None:
        pass

    def finished(self, request: Request, seen: float) -> None:
        self.done += 1
        if request.t_first >= 0:
            self.ttft[request.rid] = request.t_first - request.spec.arrival


@dataclass
class Replica:
    index: int
    created: float
    engine: Engine
    inbox: Inbox
    observer: FirstTokens
    pipeline: TargetPipeline | None
    assigned: int = 0
    removed: float | None = None
    gone: float | None = None
    desired: float = 1.0  # the sidecar's latest vllm_diag_desired_replicas
    helps: bool = False
    reason: str = "unknown"

    def serving(self, t: float) -> bool:
        return self.removed is None and t >= self.created + STARTUP_S

    @property
    def outstanding(self) -> int:
        return self.assigned - self.observer.done


@dataclass
class Score:
    policy: str
    burn_minutes: int
    replica_hours: float
    added_in_non_capacity: int
    direction_changes: int
    max_changes_per_10min: int
    peak_replicas: int
    timeline: list[tuple[float, int]]  # (time, replicas) after each change
    verdicts: dict[str, dict[str, int]]  # episode kind -> sidecar reason -> evaluations (diagnosis policy)
    trace: list[tuple[float, int, float | None, str]] = field(default_factory=list)  # (t, replicas, metric, note)
    burning: list[int] = field(default_factory=list)  # the minutes that burn

    def burn_by_episode(self, x: Experiment) -> dict[str, int]:
        """The burning minutes by the episode acting in them (``other``: none acts)."""
        out = {e.kind: 0 for e in x.episodes} | {"other": 0}
        for m in self.burning:
            kind = next((e.kind for e in x.episodes if e.active(m * 60.0)), "other")
            out[kind] += 1
        return out


def _config_at(x: Experiment, replica: Replica, t: float, serving: int, starved: set[int]) -> EngineConfig:
    cfg = ENGINE
    if x.active("transfer", t):
        cfg = replace(cfg, kv_role="kv_consumer", kv_transfer_bandwidth=SHARED_SLOW_PATH / max(1, serving))
    if x.active("cpu", t) and replica.index in starved:
        cfg = replace(cfg, cpu_share=x.cpu_share, frontend_cost_scale=x.frontend_cost_scale)
    return cfg


def _settings(name: str) -> Settings:
    facts = {"max_num_batched_tokens": ENGINE.max_num_batched_tokens, "max_num_seqs": ENGINE.max_num_seqs,
             "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "gpu": ENGINE.gpu.name,
             "cpu_cores": ENGINE.cpu_cores}
    return load_settings(overrides={"listen": "127.0.0.1:9863", "slo": SLO, "targets": [
        {"name": name, "url": "http://127.0.0.1:8000/metrics", "scrape_interval": SCRAPE_S, "timeout": 1.0,
         "engine": facts, "cpu": {"pid": 1}}]})


def _new_replica(x: Experiment, index: int, t: float, sidecar: bool) -> Replica:
    inbox, observer = Inbox(), FirstTokens()
    engine = Engine(ENGINE, Workload(()), seed=x.seed * 1000 + index, arrivals=inbox, observer=observer)
    engine.now = t  # the engine's clock is the fleet's
    pipeline = None
    if sidecar:
        settings = _settings(f"vllm-{index}")
        pipeline = TargetPipeline(settings.targets[0], settings, host_probe=lambda now: simulated_host_inputs(engine))
    return Replica(index, t, engine, inbox, observer, pipeline)


def _metric(policy: str, serving: list[Replica]) -> float | None:
    if not serving:
        return None
    if policy == "queue":
        return float(sum(r.engine.num_waiting for r in serving))
    if policy == "kv":
        return sum(r.engine.kv_cache_usage for r in serving)
    return sum(r.desired for r in serving)


# What the HPA reads at a sync, given its time, the replicas serving and the policy's metric: a counterfactual
# (lab/scaling/drain.py) replaces the metric to ask what a scale-out at a given moment would have done.
MetricOverride = Callable[[float, list[Replica], float | None], float | None]


def run(policy: str, x: Experiment = Experiment(), settings: Autoscaling = DEFAULT,
        override: MetricOverride | None = None) -> Score:
    """The whole experiment under one policy: queue, kv or diagnosis."""
    logging.getLogger("exporter").setLevel(logging.ERROR)
    target = {"queue": QUEUE_TARGET, "kv": KV_TARGET, "diagnosis": 1.0}[policy]
    hpa = Hpa(settings, target)
    sidecar = policy == "diagnosis"
    replicas = [_new_replica(x, i, -STARTUP_S, sidecar) for i in range(2)]  # two replicas serve at the start
    arrivals = requests(x)
    nxt: RequestSpec | None = next(arrivals, None)
    sent: dict[int, float] = {}  # request id -> arrival
    timeline: list[tuple[float, int]] = [(0.0, len(replicas))]
    added_in_non_capacity = 0
    verdicts: dict[str, dict[str, int]] = {}
    trace: list[tuple[float, int, float | None, str]] = []
    starved: set[int] = set()  # replicas the CPU episode starves
    t, dt = 0.0, 1.0
    while t < x.duration_s:
        t_next = t + dt
        live = [r for r in replicas if r.gone is None]
        serving = [r for r in live if r.serving(t)]
        # route this second's arrivals: least outstanding requests among the serving replicas
        while nxt is not None and nxt.arrival < t_next:
            if serving:
                choice = min(serving, key=lambda r: (r.outstanding, r.index))
                choice.inbox.queue.append(nxt)
                choice.assigned += 1
            sent[nxt.rid] = nxt.arrival
            nxt = next(arrivals, None)
        cpu = x.active("cpu", t)
        if cpu is None:
            starved.clear()
        elif not starved:  # the episode starts: the oldest share of the serving replicas, one kept healthy
            count = min(len(serving) - 1, max(1, int(len(serving) * cpu.share)))
            starved.update(r.index for r in sorted(serving, key=lambda r: r.created)[:count])
        for r in live:
            cfg = _config_at(x, r, t, len(serving), starved)
            if cfg != r.engine.cfg:
                r.engine.reconfigure(cfg)
            r.engine.advance_to(t_next)
            if r.removed is not None and (r.outstanding <= 0 or t_next - r.removed >= DRAIN_S):
                r.gone = t_next
        if sidecar and int(t_next) % int(SCRAPE_S) == 0:
            for r in serving:
                assert r.pipeline is not None
                body = render_vllm(r.engine, start_unix=START_UNIX).encode()
                state = r.pipeline.ingest(ScrapeResult(START_UNIX + t_next, 0.01, body))
                r.desired, r.helps, r.reason = state.scaling.desired_replicas, state.scaling.helps, state.scaling.reason
                for e in x.episodes:
                    if e.active(t_next) and (e.kind != "cpu" or r.index in starved):
                        counts = verdicts.setdefault(e.kind, {})
                        counts[r.reason] = counts.get(r.reason, 0) + 1
        if int(t_next) % int(SYNC_S) == 0:
            active = [r for r in replicas if r.removed is None]
            current = len(active)
            metric = _metric(policy, [r for r in active if r.serving(t_next)])
            if override is not None:
                metric = override(t_next, [r for r in active if r.serving(t_next)], metric)
            desired = hpa.step(t_next, metric, current)
            trace.append((t_next, current, metric, " ".join(
                f"{r.reason}:{r.desired:.2f}" for r in active if r.serving(t_next)) if sidecar else ""))
            if desired > current:
                if any(e.active(t_next) and not e.capacity for e in x.episodes):
                    added_in_non_capacity += desired - current
                start = len(replicas)
                replicas.extend(_new_replica(x, start + i, t_next, sidecar) for i in range(desired - current))
            elif desired < current:
                for r in sorted(active, key=lambda r: -r.created)[:current - desired]:  # the newest go first
                    r.removed = t_next
            if desired != current:
                timeline.append((t_next, desired))
        t = t_next
    score = _score(policy, x, replicas, sent, timeline, added_in_non_capacity, verdicts)
    score.trace = trace
    return score


def _score(policy: str, x: Experiment, replicas: list[Replica], sent: dict[int, float],
           timeline: list[tuple[float, int]], added: int, verdicts: dict[str, dict[str, int]]) -> Score:
    ttft: dict[int, float] = {}
    for r in replicas:
        ttft.update(r.observer.ttft)
        # first tokens of requests still running at the end (or cut by a drain) count when they came
        for req in list(r.engine.running.values()):
            if req.t_first >= 0:
                ttft.setdefault(req.rid, req.t_first - req.spec.arrival)
    minutes = int(x.duration_s // 60)
    total, bad = [0] * minutes, [0] * minutes
    for rid, arrival in sent.items():
        m = int(arrival // 60)
        if m >= minutes - 1:
            continue  # the last minute's requests may not have had their first token yet
        total[m] += 1
        if ttft.get(rid, math.inf) > TTFT_THRESHOLD_S:
            bad[m] += 1
    burning = [m for m, (n, b) in enumerate(zip(total, bad, strict=True)) if n and b / n > 1.0 - TTFT_TARGET]
    end = x.duration_s
    hours = sum(((r.gone if r.gone is not None else end) - max(r.created, 0.0)) for r in replicas) / 3600.0
    moves = [(t, n - p) for (_, p), (t, n) in zip(timeline, timeline[1:])]
    changes = [t for (_, a), (t, b) in zip(moves, moves[1:]) if (a > 0) != (b > 0)]
    per_10 = max((sum(1 for c in changes if s <= c < s + 600) for s in changes), default=0)
    return Score(policy, len(burning), hours, added, len(changes), per_10, max(n for _, n in timeline), timeline,
                 verdicts, burning=burning)
