"""Recording rules: the core signals straight from vLLM (for users without the sidecar), the SLIs
and burn rates per replica and per model (exporter.render.slo explains the method)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter.catalog import metrics as vllm
from exporter.catalog.metrics import BY_NAME
from exporter.config import SLO_PERIOD_DAYS
from exporter.render import slo
from exporter.render.promql import PromQL, fmt
from exporter.render.rules._config import DEFAULT_OPTIONS, RATE_WINDOW, Options

# ---------------------------------------------------------------------------------------------
# Recording rules (for users without the sidecar: the core signals straight from vLLM)
# ---------------------------------------------------------------------------------------------

# Recording rules aggregate the data-parallel engines of one vLLM away and keep everything else
# (namespace, pod, instance, job, model_name): one series per replica, so dashboards filter them by
# the selected target and raw-series alerts name the replica. Sum again for a fleet view.
RAW = PromQL(without=("engine",))


@dataclass(frozen=True, slots=True)
class Recording:
    record: str
    expr: str
    help: str  # rendered as a comment above the rule and used in the runbooks/dashboards
    labels: Mapping[str, str] = field(default_factory=dict)


def frontend_overhead(q: PromQL, window: str) -> str:
    """mean(e2e) - mean(queue) - mean(inference), clamped at 0: per-request time outside the engine.

    The three means come from different histograms whose buckets close at slightly different times,
    so the difference can dip below zero; negative time outside the engine is meaningless.
    """
    diff = "\n-\n".join(f"({q.mean(h, window)})" for h in (
        vllm.E2E_REQUEST_LATENCY_SECONDS, vllm.REQUEST_QUEUE_TIME_SECONDS, vllm.REQUEST_INFERENCE_TIME_SECONDS))
    return f"clamp_min(\n{diff},\n0)"


def generations(build: Callable[[Callable[[str], str]], str], *families: str) -> str:
    """``build`` once per vLLM naming generation, joined with ``or`` (newest first).

    ``build`` receives a function mapping a canonical family name to its wire name in that
    generation (exporter.catalog.metrics aliases, newest first). vLLM 0.9.2-0.11 exports both names;
    ``or`` keeps the newest where both exist, so nothing is counted twice.
    """
    depth = max(len(BY_NAME[f].aliases) for f in families)
    variants = []
    for rank in range(depth + 1):
        def wire(name: str, rank: int = rank) -> str:
            names = (name, *BY_NAME[name].aliases) if name in BY_NAME else (name,)
            return names[min(rank, len(names) - 1)]
        variants.append(build(wire))
    return "\nor\n".join(f"(\n{v}\n)" if len(variants) > 1 else v for v in dict.fromkeys(variants))


def sli_recording_rules(o: Options = DEFAULT_OPTIONS) -> list[Recording]:
    """The objectives as constants, then per window: per-replica events and bad events per objective,
    their per-model sums, and the burn rates of both (exporter.render.slo explains the method)."""
    out = [Recording(slo.ERROR_BUDGET_RECORD, f"vector({fmt(slo.error_budget(obj, o.slo))})",
                     f"Error budget of the {slo.OBJECTIVE_TITLE[obj]} objective (1 - target "
                     f"{fmt(slo.target(obj, o.slo))}) over {SLO_PERIOD_DAYS} days, rendered from the configuration.",
                     {"objective": obj})
           for obj in slo.OBJECTIVES]
    out += [Recording(slo.THRESHOLD_RECORD, f"vector({fmt(objective.threshold_seconds)})",
                      f"Threshold of the {slo.OBJECTIVE_TITLE[name]} objective (a bucket edge of vLLM's histogram).",
                      {"objective": name}) for name, objective in o.slo.objectives().items()]
    for w in slo.SLI_WINDOWS:
        for obj in slo.OBJECTIVES:
            out.append(Recording(slo.pod_events(w), slo.events(obj, w),
                                 f"{slo.OBJECTIVE_TITLE[obj]} SLI: events per second over {w}, per replica.",
                                 {"objective": obj}))
            out.append(Recording(slo.pod_bad_events(w), slo.bad_events(obj, o.slo, w),
                                 f"{slo.OBJECTIVE_TITLE[obj]} SLI: bad events per second over {w}, per replica.",
                                 {"objective": obj}))
        out += [
            Recording(slo.model_events(w), slo.model_sum(slo.pod_events(w)),
                      f"SLI events per second over {w}, per model (all replicas)."),
            Recording(slo.model_bad_events(w), slo.model_sum(slo.pod_bad_events(w)),
                      f"SLI bad events per second over {w}, per model (all replicas)."),
            Recording(slo.pod_burn(w), slo.burn(slo.pod_bad_events(w), slo.pod_events(w)),
                      f"Error-budget burn rate over {w}, per replica (1 = the budget lasts the period)."),
            Recording(slo.model_burn(w), slo.burn(slo.model_bad_events(w), slo.model_events(w)),
                      f"Error-budget burn rate over {w}, per model (1 = the budget lasts the period)."),
        ]
    return out


def recording_rules() -> list[Recording]:
    w = RATE_WINDOW
    finished = RAW.sum_rate(vllm.REQUEST_SUCCESS_TOTAL, w, drop=("finished_reason",))
    kv, hits, queries = vllm.KV_CACHE_USAGE_PERC, vllm.PREFIX_CACHE_HITS_TOTAL, vllm.PREFIX_CACHE_QUERIES_TOTAL
    itl = vllm.INTER_TOKEN_LATENCY_SECONDS
    return [
        Recording(f"pod:vllm_preemptions:rate{w}", RAW.sum_rate(vllm.NUM_PREEMPTIONS_TOTAL, w),
                  "Preemptions per second, per replica (its data-parallel engines summed)."),
        Recording(f"pod:vllm_requests_finished:rate{w}", finished,
                  "Finished requests per second per replica, all finished_reason values (client aborts are not "
                  "counted by vLLM)."),
        Recording(f"pod:vllm_preemptions_per_request:ratio_rate{w}",
                  RAW.divide(RAW.sum_rate(vllm.NUM_PREEMPTIONS_TOTAL, w), finished),
                  "Preemptions per finished request, per replica (symptom D reads this)."),
        Recording(f"pod:vllm_prefix_cache_hit:ratio_rate{w}",
                  generations(lambda n: RAW.ratio(n(hits), n(queries), w), hits, queries),
                  "Prefix-cache hit efficiency per replica: cached / queried prompt tokens (symptom F); "
                  "vLLM <= 0.9 names: gpu_prefix_cache_*."),
        Recording("pod:vllm_kv_cache_usage:max", generations(lambda n: RAW.agg("max", n(kv)), kv),
                  "Highest KV cache usage (0..1) across one replica's data-parallel engines; "
                  "vLLM <= 0.9 name: gpu_cache_usage_perc."),
        Recording(f"pod:vllm_ttft_seconds:p95_rate{w}",
                  RAW.quantile(0.95, vllm.TIME_TO_FIRST_TOKEN_SECONDS, w), "TTFT p95 per replica (the SLO quantile)."),
        Recording(f"pod:vllm_ttft_seconds:p99_rate{w}",
                  RAW.quantile(0.99, vllm.TIME_TO_FIRST_TOKEN_SECONDS, w), "TTFT p99 per replica (tail latency)."),
        Recording(f"pod:vllm_itl_seconds:p95_rate{w}",
                  generations(lambda n: RAW.quantile(0.95, n(itl), w), itl),
                  "Inter-token latency p95 per replica (the SLO quantile); vLLM <= 0.10 name: "
                  "time_per_output_token_seconds."),
        Recording(f"pod:vllm_requests_waiting:deriv{w}",
                  f"sum {RAW._without()} (deriv({vllm.NUM_REQUESTS_WAITING}[{w}]))",
                  "Queue growth per replica: waiting requests added per second (positive = the queue builds up)."),
        Recording(f"pod:vllm_frontend_overhead_seconds:mean_rate{w}",
                  frontend_overhead(RAW, w),
                  "Mean time per request outside the engine, per replica: e2e - queue - inference, clamped at 0 "
                  "(tokenization, templates, IPC, output handling; the CPU path)."),
    ]

