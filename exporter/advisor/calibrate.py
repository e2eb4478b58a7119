"""Window -> a calibrated engine model that reproduces what the window shows.

What is read, and from where (all window deltas, never lifetime counters):

* traffic: finished requests per second (``request_success_total``) and their dispersion across
  scrapes (burstiness), running + waiting (open or closed, ``arrival``);
* lengths: the prompt and output token histograms, placed inside their buckets so the exact
  window means (``_sum``/``_count``) come out;
* step cost: ``fixed + per_token x (prefill tokens + decode weight x decodes)``, the decode weight the
  window's own reading where its steps identify it (``stepcost.identify``), else the prior
  (``advice_decode_token_weight``, with ``advice_decode_weight_sigma`` as its uncertainty; where the two means
  leave no fixed part at it, that prior truncated at the ceiling they set, ``_bounded``), else, where the
  prior does not reproduce the window, the weight ``search.searched`` finds that does; fixed and
  per-token solved so the simulated ITL mean and prefill-time mean equal the observed ones (``fit_step_cost``), and a
  step-time jitter fitted to the share of gaps above the bound that resolves the ITL p95
  (``tail_bound``);
* KV: ``num_gpu_blocks`` and ``block_size`` from ``cache_config_info``; budget and sequence cap
  from the engine facts;
* prefix reuse: the token hit ratio, as one shared system prompt of that share of the mean prompt;
* frontend: mean e2e minus queue and inference time (tokenisation, template, IPC, and the wait for
  the step under way, since vLLM stamps QUEUED between steps), at most the mean TTFT beyond the mean
  prefill; the model applies that minus its own mean wait for a step, so the wait is not counted twice.

``exporter.advisor.reproduce.check`` then runs the calibrated model with several seeds and compares TTFT
p95, ITL p95, preemptions/s and generation throughput with the window; the error is part of the result.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from exporter.advisor import curvature as bend
from exporter.advisor.arrival import ArrivalModel, infer_arrivals
from exporter.advisor.model import CalibratedEngine, Clients, OpenArrivals, StepCost
from exporter.advisor.stepcost import StepEvidence, identify, prior_within_window
from exporter.advisor.tail import Buckets, TailPlacement, matched
from exporter.catalog import gpus
from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import BY_KEY, Thresholds
from exporter.config import EngineFacts
from exporter.simulator.engine import CostModel, EngineConfig, Histogram
from exporter.simulator.workload import Arrivals, LengthDist, PrefixSpec, RequestClass, Workload
from exporter.window import HistogramDelta, Window

METRIC_KEYS: tuple[str, ...] = ("ttft_p95_seconds", "itl_p95_seconds", "preemption_rate",
                                "generation_tokens_per_second")
SEEDS: tuple[int, ...] = (1, 2, 3)
FIT_ROUNDS = 4
NOISE_ROUNDS = 5
NOISE_SIGMA_MAX = 1.6
# Requests one seed's replay holds at least (its length stretches past advice_simulated_seconds for
# them, up to the window's): a p95 of a few dozen requests rests on one or two of them.
REPLAY_MIN_REQUESTS = 100
# Simulated seconds before the measured part: three mean request lifetimes, within these bounds.
WARMUP_MIN_S = 10.0
WARMUP_MAX_S = 30.0


class CannotCalibrate(Exception):
    """Too little evidence, or a deployment the model does not cover: the advisor predicts nothing."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The four numbers a what-if is judged by (None when the window has no such observation)."""

    ttft_p95_seconds: float | None
    itl_p95_seconds: float | None
    preemption_rate: float | None
    generation_tokens_per_second: float | None
    # TTFT's mean and the queue's share of it: what carries the calibration's TTFT residual into a what-if
    ttft_mean_seconds: float | None = None
    queue_mean_seconds: float | None = None
    # the latency histograms the p95s were read from: how many observations each p95 rests on
    ttft_histogram: HistogramDelta | None = None
    itl_histogram: HistogramDelta | None = None

    def get(self, key: str) -> float | None:
        return cast("float | None", getattr(self, key))

    def to_dict(self) -> dict[str, float | None]:
        return {key: self.get(key) for key in METRIC_KEYS}


def observe(window: Window) -> Outcome:
    """The observed outcome over the window, read exactly as the simulated one is."""
    ttft = window.histogram(vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    itl = window.histogram(vllm.INTER_TOKEN_LATENCY_SECONDS)
    queue = window.histogram(vllm.REQUEST_QUEUE_TIME_SECONDS)
    return Outcome(
        ttft_p95_seconds=ttft.quantile(0.95) if ttft is not None else None,
        itl_p95_seconds=itl.quantile(0.95) if itl is not None else None,
        preemption_rate=window.rate(vllm.NUM_PREEMPTIONS_TOTAL),
        generation_tokens_per_second=window.rate(vllm.GENERATION_TOKENS_TOTAL),
        ttft_mean_seconds=ttft.mean() if ttft is not None else None,
        queue_mean_seconds=queue.mean() if queue is not None else None,
        ttft_histogram=ttft, itl_histogram=itl,
    )


# --------------------------------------------------------------------------------------------
# Length distributions from histograms
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Empirical:
    """Token lengths as one uniform range per populated bucket of a length histogram.

    Each range is centred on a point at the same relative position inside every bucket, chosen so
    that the mean is the window's exact mean, and reaches as far to both sides as the bucket allows
    (symmetric, so the mean stays). The 1-2-5 buckets are wide: a point per bucket would turn a tail
    of 256- and 480-token answers into one length and understate the KV cache the long ones hold.
    A ``cap`` models a max_tokens limit at the gateway.
    """

    values: tuple[float, ...]
    weights: tuple[float, ...]
    spreads: tuple[float, ...] = ()  # half-width of each range (none: a point with a small jitter)
    jitter: float = 0.05
    cap: int | None = None

    @property
    def mean(self) -> float:
        total = math.fsum(self.weights)
        return math.fsum(v * w for v, w in zip(self.values, self.weights)) / total

    def _spread(self, i: int) -> float:
        return self.spreads[i] if self.spreads else 0.0

    def quantile(self, q: float) -> float:
        total, acc = math.fsum(self.weights), 0.0
        for value, weight in sorted(zip(self.values, self.weights)):
            acc += weight
            if acc >= q * total:
                return value
        return max(self.values)

    def scaled(self, factor: float) -> Empirical:
        return replace(self, values=tuple(max(1.0, v * factor) for v in self.values),
                       spreads=tuple(w * factor for w in self.spreads))

    def sample(self, rng: random.Random) -> int:
        i = rng.choices(range(len(self.values)), self.weights)[0]
        spread = self._spread(i)
        if spread > 0:
            value = self.values[i] + rng.uniform(-spread, spread)
        else:
            value = self.values[i] * (1.0 + rng.uniform(-self.jitter, self.jitter))
        out = max(1, int(round(value)))
        return min(out, self.cap) if self.cap is not None else out


def lengths_from_histogram(hist: HistogramDelta) -> Empirical:
    """Place each populated bucket's mass around lower + theta x width, theta solved for the exact mean."""
    buckets = Buckets.of(hist)
    if buckets is None:
        raise CannotCalibrate("a token-length histogram holds no observation in the window")
    values, spreads = buckets.placed() or ((), ())
    return Empirical(values=values, weights=tuple(n for _, _, n in buckets.ranges), spreads=spreads)


# --------------------------------------------------------------------------------------------
# The calibration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Calibration:
    """Everything the model needs to replay this window, plus how well it did."""

    duration_s: float  # simulated seconds per seed after the warm-up: the window's, at most advice_simulated_seconds
    warmup_s: float
    prompt: Empirical
    output: Empirical
    shared_prefix_tokens: int
    arrivals: ArrivalModel
    cost: StepCost
    frontend_s: float  # the frontend work the model applies per request (tokenise, IPC, output)
    block_size: int
    num_gpu_blocks: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    enable_prefix_caching: bool
    kv_bytes_per_block: float | None  # when kv_cache_memory_bytes is known: what one block costs
    # What the window shows outside queue and inference: the frontend work plus the wait for the step
    # under way when a request reaches the engine (vLLM stamps QUEUED between steps).
    frontend_observed_s: float
    evidence: StepEvidence | None = None  # what the window's own steps say about the step cost
    weight_sigma: float = 0.0  # uncertainty of cost.decode_weight, log terms (one standard deviation)
    weight_source: str = "prior"  # where the decode weight came from: window, profile, prior or search
    fit_means: tuple[float, float | None] = (0.0, None)  # the observed ITL and prefill-time means fitted to
    cost_scale: float = 1.0  # the fitted cost times this, where only a scaled cost reproduced the window (search)
    tail: TailPlacement | None = None  # where the output tail sits in its bucket: by the KV usage, or why not
    curvature: bend.Curvature | None = None  # the step cost's curvature: the window's reading, or why not

    def engine_config(self, **changes: Any) -> EngineConfig:
        values: dict[str, Any] = {
            "max_num_batched_tokens": self.max_num_batched_tokens, "max_num_seqs": self.max_num_seqs,
            "num_gpu_blocks_override": self.num_gpu_blocks, "block_size": self.block_size,
            "max_model_len": self.max_model_len, "enable_prefix_caching": self.enable_prefix_caching,
            "costs": CostModel(tokenize_base_s=self.frontend_s, tokenize_per_token_s=0.0, output_per_token_s=0.0),
        }
        values.update(changes)
        # The model length never exceeds what the (possibly smaller) cache can hold for one request.
        usable_tokens = (values["num_gpu_blocks_override"] - 1) * self.block_size
        values["max_model_len"] = min(values["max_model_len"], usable_tokens)
        values["max_num_batched_tokens"] = max(values["max_num_batched_tokens"], values["max_num_seqs"])
        return EngineConfig(**values)

    def workload(self, output_cap: int | None = None, shared_prefix_tokens: int | None = None) -> Workload:
        shared = self.shared_prefix_tokens if shared_prefix_tokens is None else shared_prefix_tokens
        output = replace(self.output, cap=output_cap) if output_cap is not None else self.output
        prompt = self.prompt
        if shared:
            # The shared part is added before the request's own part: keep the total mean as observed.
            prompt = prompt.scaled(max(1.0, self.prompt.mean - shared) / self.prompt.mean)
        prefix = PrefixSpec(groups=1, shared_len=shared) if shared else PrefixSpec()
        cls = RequestClass("observed", Arrivals("steady", rate=0.0), cast(LengthDist, prompt),
                           cast(LengthDist, output), prefix, max_tokens=None)
        return Workload(classes=(cls,), client_timeout_s=1e9)


@dataclass(frozen=True, slots=True)
class Fitted:
    """A calibration that reproduced its window, with what a later what-if of it needs: the arrival
    reading the advice used (``open`` or ``closed``) and the model's own outcome of the window (the
    baseline a prediction's change is measured from, ``predict``)."""

    calibration: Calibration
    kind: str
    simulated: Outcome


@dataclass(frozen=True, slots=True)
class Run:
    """One simulated window: its outcome, the latency histograms it was read from, and the fit's linear sums."""

    outcome: Outcome
    itl_coefficients: tuple[float, float] | None
    prefill_coefficients: tuple[float, float] | None
    ttft: HistogramDelta
    itl: HistogramDelta
    queue: HistogramDelta
    step_wait_s: float  # mean wait of a ready request for the step under way
    decodes: tuple[float | None, float | None] = (None, None)  # decodes per ITL and per prefill observation


def _sum(deltas: Sequence[HistogramDelta]) -> HistogramDelta:
    """Histograms of one layout (the simulator's), added bucket by bucket."""
    cumulative = tuple(math.fsum(c) for c in zip(*(d.cumulative for d in deltas)))
    return HistogramDelta(deltas[0].bounds, cumulative, math.fsum(d.sum for d in deltas),
                          math.fsum(d.count for d in deltas))


def pooled(runs: Sequence[Run]) -> Outcome:
    """The seeds' runs as one longer window: latency quantiles from their summed histograms, rates averaged.

    A p95 from one window of a few dozen requests rests on its two or three slowest; where it falls
    near a bucket bound (TTFT at 100 ms, say) one request more or less above the bound moves the
    interpolated value by half. The pooled histogram is the model's expectation, not one draw of it.
    """
    ttft, itl, queue = _sum([r.ttft for r in runs]), _sum([r.itl for r in runs]), _sum([r.queue for r in runs])
    return Outcome(
        ttft_p95_seconds=ttft.quantile(0.95), itl_p95_seconds=itl.quantile(0.95),
        preemption_rate=_mean([r.outcome.preemption_rate for r in runs]),
        generation_tokens_per_second=_mean([r.outcome.generation_tokens_per_second for r in runs]),
        ttft_mean_seconds=ttft.mean(), queue_mean_seconds=queue.mean(),
        ttft_histogram=ttft, itl_histogram=itl,
    )


def _delta(before: tuple[list[int], float, int], hist: Histogram) -> HistogramDelta:
    counts, total, n = before
    bounds = (*hist.bounds, math.inf)
    cum, acc = [], 0
    for now, then in zip(hist.counts, counts):
        acc += now - then
        cum.append(float(acc))
    return HistogramDelta(bounds, tuple(cum), hist.sum - total, float(hist.count - n))


def simulate(cal: Calibration, config: EngineConfig, workload: Workload, traffic: OpenArrivals | Clients,
             cost: StepCost, seed: int) -> Run:
    """Run the model for warm-up + the window's duration; measure the window part only."""
    engine = CalibratedEngine(config, workload, cost, traffic, seed=seed, measure_from=cal.warmup_s)
    engine.advance_to(cal.warmup_s)
    st = engine.stats
    ttft0 = (list(st.time_to_first_token.counts), st.time_to_first_token.sum, st.time_to_first_token.count)
    itl0 = (list(st.inter_token_latency.counts), st.inter_token_latency.sum, st.inter_token_latency.count)
    queue0 = (list(st.request_queue_time.counts), st.request_queue_time.sum, st.request_queue_time.count)
    pre0, gen0, t0 = st.num_preemptions, st.generation_tokens, engine.now
    engine.advance_to(cal.warmup_s + cal.duration_s)
    span = max(engine.now - t0, 1e-9)
    ttft, itl = _delta(ttft0, st.time_to_first_token), _delta(itl0, st.inter_token_latency)
    queue = _delta(queue0, st.request_queue_time)
    outcome = Outcome(
        ttft_p95_seconds=ttft.quantile(0.95), itl_p95_seconds=itl.quantile(0.95),
        preemption_rate=(st.num_preemptions - pre0) / span,
        generation_tokens_per_second=(st.generation_tokens - gen0) / span,
        ttft_mean_seconds=ttft.mean(), queue_mean_seconds=queue.mean(),
        ttft_histogram=ttft, itl_histogram=itl,
    )
    trace = engine.trace
    return Run(outcome, trace.itl.coefficients(), trace.prefill.coefficients(), ttft, itl, queue,
               trace.step_wait_mean(), (trace.itl.decodes_per_observation(), trace.prefill.decodes_per_observation()))


def fit_step_cost(itl: tuple[float, float], prefill: tuple[float, float] | None,
                  itl_mean: float, prefill_mean: float | None) -> StepCost:
    """Solve fixed, per_token >= 0 from ITL mean = a x s1 + b x k1 and prefill mean = a x s2 + b x k2."""
    s1, k1 = itl
    if prefill is not None and prefill_mean is not None:
        s2, k2 = prefill
        det = s1 * k2 - s2 * k1
        if abs(det) > 1e-12:
            a = (itl_mean * k2 - prefill_mean * k1) / det
            b = (s1 * prefill_mean - s2 * itl_mean) / det
            if a > 0 and b >= 0:
                return StepCost(a, b)
        # One of the two is not positive: the best fit with the other alone (least squares).
        only_a = (itl_mean * s1 + prefill_mean * s2) / (s1 * s1 + s2 * s2)
        only_b = (itl_mean * k1 + prefill_mean * k2) / max(k1 * k1 + k2 * k2, 1e-12)
        err_a = (only_a * s1 - itl_mean) ** 2 + (only_a * s2 - prefill_mean) ** 2
        err_b = (only_b * k1 - itl_mean) ** 2 + (only_b * k2 - prefill_mean) ** 2
        return StepCost(only_a, 0.0) if err_a <= err_b or k1 <= 0 else StepCost(1e-5, only_b)
    return StepCost(itl_mean / max(s1, 1e-9), 0.0)


def _need(value: Any, what: str) -> Any:
    if value is None:
        raise CannotCalibrate(f"needs {what}")
    return value


def calibrate(window: Window, facts: EngineFacts, thresholds: Thresholds,
              prior: Calibration | None = None, profile: StepEvidence | None = None,
              weight: float | None = None) -> Calibration:
    """Everything but the step cost from the window and facts; then the step cost by fitting.

    With a ``prior`` (an earlier window's calibration of the same engine, same facts), its fitted step
    cost and frontend work are taken as they are instead of fitted again: they describe the engine
    and the machine, not the traffic. The caller checks the result against this window and fits
    afresh when it does not reproduce it (``advise``). ``weight``: this decode weight instead of the prior,
    where neither the window nor a profile identifies one (one of ``search.search_weights``)."""
    if window.duration <= 0 or len(window) < 3:
        raise CannotCalibrate("the window holds fewer than three scrapes")
    for name, value in (("tensor_parallel_size", facts.tensor_parallel_size),
                        ("pipeline_parallel_size", facts.pipeline_parallel_size),
                        ("data_parallel_size", facts.data_parallel_size)):
        if value is not None and value > 1:
            raise CannotCalibrate(f"{name} {value}: the model does not cover multi-GPU parallelism")
    if window.restarts:
        raise CannotCalibrate("the engine restarted inside the window")
    finished = window.increase(vllm.REQUEST_SUCCESS_TOTAL) or 0.0
    if finished < thresholds.advice_min_requests:
        raise CannotCalibrate(f"{finished:.0f} finished requests in the window, needs "
                              f"{thresholds.advice_min_requests:.0f} (advice_min_requests)")
    budget = _need(facts.max_num_batched_tokens, "engine.max_num_batched_tokens (configure it or share vLLM's PID "
                                                 "namespace)")
    max_seqs = _need(facts.max_num_seqs, "engine.max_num_seqs (configure it or share vLLM's PID namespace)")
    blocks = _need(facts.num_gpu_blocks, f"num_gpu_blocks from {vllm.CACHE_CONFIG_INFO}")
    block_size = _need(facts.block_size, f"block_size from {vllm.CACHE_CONFIG_INFO}")
    prompt_hist = _need(window.histogram(vllm.REQUEST_PROMPT_TOKENS), vllm.REQUEST_PROMPT_TOKENS)
    output_hist = _need(window.histogram(vllm.REQUEST_GENERATION_TOKENS), vllm.REQUEST_GENERATION_TOKENS)
    itl_hist = _need(window.histogram(vllm.INTER_TOKEN_LATENCY_SECONDS), vllm.INTER_TOKEN_LATENCY_SECONDS)
    ttft_hist = _need(window.histogram(vllm.TIME_TO_FIRST_TOKEN_SECONDS), vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    prefill_hist = window.histogram(vllm.REQUEST_PREFILL_TIME_SECONDS)
    queue_hist = window.histogram(vllm.REQUEST_QUEUE_TIME_SECONDS)
    e2e_hist = window.histogram(vllm.E2E_REQUEST_LATENCY_SECONDS)
    if not itl_hist.count or not ttft_hist.count:
        raise CannotCalibrate("no token latencies in the window")
    prompt, output = lengths_from_histogram(prompt_hist), lengths_from_histogram(output_hist)
    queries = window.increase(vllm.PREFIX_CACHE_QUERIES_TOTAL) or 0.0
    hits = window.increase(vllm.PREFIX_CACHE_HITS_TOTAL) or 0.0
    hit_ratio = hits / queries if queries > 0 else 0.0
    shared = int(hit_ratio * prompt.mean) // block_size * block_size + (block_size if hit_ratio > 0 else 0)
    shared = min(shared, int(prompt.mean))
    ttft_mean = ttft_hist.mean() or 0.0
    queue_mean = queue_hist.mean() if queue_hist is not None else None
    prefill_mean = prefill_hist.mean() if prefill_hist is not None else None
    e2e_mean = e2e_hist.mean() if e2e_hist is not None else None
    inference_hist = window.histogram(vllm.REQUEST_INFERENCE_TIME_SECONDS)
    inference_mean = inference_hist.mean() if inference_hist is not None else None
    frontend = frontend_seconds(ttft_mean, queue_mean, prefill_mean, e2e_mean, inference_mean,
                                finished / window.duration)
    arrivals = infer_arrivals(window, thresholds, e2e_mean)
    kv_bytes = facts.kv_cache_memory_bytes
    cal = Calibration(
        # At most advice_simulated_seconds, unless that holds too few requests to read a p95 from.
        duration_s=min(window.duration, max(thresholds.advice_simulated_seconds,
                                            REPLAY_MIN_REQUESTS * window.duration / finished)),
        warmup_s=min(WARMUP_MAX_S, max(WARMUP_MIN_S, 3.0 * (e2e_mean or 1.0))),
        prompt=prompt, output=output, shared_prefix_tokens=shared if facts.enable_prefix_caching is not False else 0,
        arrivals=arrivals, cost=StepCost(itl_hist.mean() or 0.01, 0.0), frontend_s=frontend,
        frontend_observed_s=frontend,
        block_size=block_size, num_gpu_blocks=blocks, max_num_batched_tokens=budget, max_num_seqs=max_seqs,
        max_model_len=facts.max_model_len or (blocks - 1) * block_size,
        enable_prefix_caching=facts.enable_prefix_caching is not False,
        kv_bytes_per_block=kv_bytes / blocks if kv_bytes else None,
    )
    evidence = identify(window)
    prior_weight, sigma, source = thresholds.advice_decode_token_weight, thresholds.advice_decode_weight_sigma, "prior"
    if weight is not None:
        prior_weight, source = weight, "search"
    weight = prior_weight
    # The window's own reading first, then a profile of this engine (vllm-diag profile), then the prior.
    for reading, name in ((evidence, "window"), (profile, "profile")):
        if (reading is not None and reading.identified and reading.decode_weight is not None
                and reading.decode_weight_sigma is not None):
            weight = min(max(reading.decode_weight, WEIGHT_BOUNDS[0]), WEIGHT_BOUNDS[1])
            sigma, source = reading.decode_weight_sigma, name
            break
    cached = thresholds.advice_cached_token_weight if cal.enable_prefix_caching else 0.0
    curved = bend.identify(window, budget, evidence, thresholds.advice_step_curvature)
    cal = replace(cal, cost=replace(cal.cost, compute_per_token_s=compute_floor(facts, thresholds),
                                    decode_weight=weight, cached_weight=cached, curvature=curved.used),
                  evidence=evidence, weight_sigma=sigma, weight_source=source, curvature=curved,
                  fit_means=(itl_hist.mean() or 0.0, prefill_mean))
    if prior is not None:
        return matched(replace(cal, cost=prior.cost, frontend_s=prior.frontend_s, weight_sigma=prior.weight_sigma,
                               weight_source=prior.weight_source), window, output_hist, SEEDS[0], None)
    # The output tail placed by the KV the batch held changes the steps' sizes: the means are fitted again.
    return matched(_fit(cal, itl_hist.mean() or 0.0, prefill_mean, itl_hist), window, output_hist, SEEDS[0],
                   lambda moved: _fit_means(moved, moved.cost, itl_hist.mean() or 0.0, prefill_mean, 2)[0])


# advice_decode_token_weight's declared range, read from its one entry: a reading outside it is clamped to it.
_WEIGHT = BY_KEY["advice_decode_token_weight"]
WEIGHT_BOUNDS = (_WEIGHT.minimum, _WEIGHT.maximum if _WEIGHT.maximum is not None else math.inf)


def brackets(cal: Calibration) -> tuple[tuple[Calibration, Outcome], ...]:
    """The calibration refitted with its decode weight one standard deviation lower and higher (the fixed and
    per-token parts re-solved to the same window each time), with each one's own simulated window: what a
    prediction's parameter uncertainty is read from. Empty when the weight is certain or cannot move."""
    if cal.weight_sigma <= 0:
        return ()
    out = []
    for factor in (math.exp(-cal.weight_sigma), math.exp(cal.weight_sigma)):
        weight = min(max(cal.cost.decode_weight * factor, WEIGHT_BOUNDS[0]), WEIGHT_BOUNDS[1])
        if weight == cal.cost.decode_weight:
            continue
        try:
            out.append(refit(cal, replace(cal.cost, decode_weight=weight)))
        except CannotCalibrate:
            continue
    return tuple(out)


def refit(cal: Calibration, cost: StepCost) -> tuple[Calibration, Outcome]:
    """``cal`` with another of its cost's parameters, the fixed and per-token parts re-solved to the same window's means
    (times the scale that reproduced the window, where the search scaled it), and its own simulated window."""
    itl_mean, prefill_mean = cal.fit_means
    moved, run = _fit_means(cal, cost, itl_mean, prefill_mean, 2)
    if cal.cost_scale != 1.0:
        moved = replace(moved, cost=replace(moved.cost, fixed_s=moved.cost.fixed_s * cal.cost_scale,
                                            per_token_s=moved.cost.per_token_s * cal.cost_scale))
        run = simulate(moved, moved.engine_config(), moved.workload(), moved.arrivals.primary(), moved.cost, SEEDS[0])
    return moved, run.outcome


DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "auto": 2, "fp8": 1, "int8": 1}


def compute_floor(facts: EngineFacts, thresholds: Thresholds) -> float:
    """Seconds per token of a compute-bound step on the deployment's GPU, or 0 when GPU or model is unknown."""
    sheet = gpus.lookup(facts.gpu)
    if sheet is None or not facts.model_weight_bytes:
        return 0.0
    params = facts.model_weight_bytes / DTYPE_BYTES.get((facts.dtype or "auto").lower(), 2)
    return 2.0 * params / (sheet.peak_flops * thresholds.advice_compute_efficiency)


def frontend_seconds(ttft: float, queue: float | None, prefill: float | None, e2e: float | None,
                     inference: float | None, rate: float) -> float:
    """Time a request spends outside the engine (tokenisation, template, IPC, output handling).

    e2e - queue - inference is one population (all observed at finish); TTFT is observed at the first
    token, so with long outputs and long queues its mean is of other requests than the queue's. The
    model's API server handles one request at a time, so the estimate is also capped where it would
    keep that server more than half busy (waiting for a CPU is not work). The model spends the
    frontend time before the first token, so it is also capped at the mean TTFT beyond the mean
    prefill: one request that the client or the server held after its last token (seconds of e2e
    with a fast first token) must not put that wait in front of every first token.
    """
    if e2e is not None and queue is not None and inference is not None:
        value = e2e - queue - inference
    elif prefill is not None:
        value = ttft - (queue or 0.0) - prefill
    else:
        value = 0.0
    cap = 0.5 / rate if rate > 0 else value
    if prefill is not None:
        cap = min(cap, ttft - prefill)
    return max(0.0, min(value, cap))


def _bounded(cal: Calibration, cost: StepCost, run: Run, itl_mean: float, prefill_mean: float | None,
             prior: tuple[float, float]) -> tuple[Calibration, StepCost, Run]:
    """``prior_within_window`` on this run's sums, which are then recounted at the weight it gives."""
    itl, pre = run.itl_coefficients, run.prefill_coefficients
    (d_itl, d_pre), at = run.decodes, cost.decode_weight  # the sums are counted at the weight the run used
    if itl is None or pre is None or d_itl is None or d_pre is None:
        return cal, cost, run
    weight, sigma, source = prior_within_window((*itl, d_itl), (*pre, d_pre), at, prior, itl_mean, prefill_mean,
                                                WEIGHT_BOUNDS[0])
    run = replace(run, itl_coefficients=(itl[0], itl[1] + (weight - at) * d_itl),
                  prefill_coefficients=(pre[0], pre[1] + (weight - at) * d_pre))
    return replace(cal, weight_sigma=sigma, weight_source=source), replace(cost, decode_weight=weight), run


def _fit_means(cal: Calibration, cost: StepCost, itl_mean: float, prefill_mean: float | None,
               rounds: int, prior: tuple[float, float] | None = None) -> tuple[Calibration, Run]:
    """Fixed and per-token cost (at the given noise) so the simulated ITL and prefill means are the
    observed; and the frontend work that, with the model's own wait for a step under way, makes the
    observed frontend time. ``prior``: the prior decode weight and spread, bounded by the means each round."""
    workload, traffic = cal.workload(), cal.arrivals.primary()
    run = simulate(cal, cal.engine_config(), workload, traffic, cost, SEEDS[0])
    for _ in range(rounds):
        if prior is not None:
            cal, cost, run = _bounded(cal, cost, run, itl_mean, prefill_mean, prior)
        if run.itl_coefficients is None:
            raise CannotCalibrate("the model produced no decode steps for this traffic")
        fitted = fit_step_cost(run.itl_coefficients, run.prefill_coefficients, itl_mean, prefill_mean)
        new = replace(cost, fixed_s=fitted.fixed_s, per_token_s=fitted.per_token_s)  # the rest of it as it was
        frontend = max(0.0, cal.frontend_observed_s - run.step_wait_s)
        converged = (abs(new.fixed_s - cost.fixed_s) <= 0.01 * cost.fixed_s
                     and abs(new.per_token_s - cost.per_token_s) <= 0.01 * max(cost.per_token_s, 1e-9)
                     and abs(frontend - cal.frontend_s) <= 0.01 * max(cal.frontend_s, 1e-4))
        cost, cal = new, replace(cal, frontend_s=frontend)
        run = simulate(cal, cal.engine_config(), workload, traffic, cost, SEEDS[0])
        if converged:
            break
    return replace(cal, cost=cost), run


def tail_bound(hist: HistogramDelta) -> tuple[float, float] | None:
    """(bound, observed share of gaps above it): the bucket bound that resolves the ITL p95.

    That is the lower bound of the p95's bucket, where ``histogram_quantile`` interpolates from, so a
    share matched there is the p95 matched; but in the first bucket the p95 is interpolated from 0
    and barely moves while the share above the bucket's upper bound doubles, so there it is that
    upper bound. A share above a bound is an exact count, not an interpolation.
    """
    p95 = hist.quantile(0.95)
    if p95 is None:
        return None
    finite = [b for b in hist.bounds if not math.isinf(b)]
    below = [b for b in finite if b < p95]
    bound = below[-1] if below else next((b for b in finite if b >= p95), None)
    if bound is None:
        return None
    share = hist.share_above(bound)
    return (bound, share) if share else None


def _fit(cal: Calibration, itl_mean: float, prefill_mean: float | None, itl_hist: HistogramDelta) -> Calibration:
    """Means first; then, when the simulated ITL tail is short of the observed one, the step-time
    noise that makes it (bisection on sigma, the means re-fitted at each): the share of gaps above
    ``tail_bound``."""
    prior = (cal.cost.decode_weight, cal.weight_sigma) if cal.weight_source == "prior" else None
    fitted, run = _fit_means(cal, cal.cost, itl_mean, prefill_mean, FIT_ROUNDS, prior)
    tail = tail_bound(itl_hist)
    if tail is None:
        return fitted
    bound, target = tail

    def measure(r: Run) -> float:
        return r.itl.share_above(bound) or 0.0

    value = measure(run)
    if value >= 0.9 * target:
        return fitted
    lo, hi = 0.0, NOISE_SIGMA_MAX
    best, best_err = fitted, abs(value - target)
    for _ in range(NOISE_ROUNDS):
        sigma = (lo + hi) / 2.0
        trial, run = _fit_means(fitted, replace(fitted.cost, noise_sigma=sigma), itl_mean, prefill_mean, 2, prior)
        value = measure(run)
        if abs(value - target) < best_err:
            best, best_err = trial, abs(value - target)
        if value < target:
            lo = sigma
        else:
            hi = sigma
    return best


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None
