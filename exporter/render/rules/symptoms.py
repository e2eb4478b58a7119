"""Symptom alerts (one per symptom class) and root-cause alerts (the sidecar's; warnings that name
the layer, while the page is the model's burn)."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.catalog import metrics as vllm
from exporter.catalog.symptoms import CAUSE_BY_ID, CAUSES, Symptom
from exporter.render.promql import fmt
from exporter.render.rules._config import (
    DEFAULT_OPTIONS,
    FOR_ROOT_CAUSE,
    FOR_SYMPTOM,
    IDENTITY,
    RATE_WINDOW,
    Options,
    _on,
    duration,
    smoothing,
)
from exporter.render.rules.alert import Alert, Verify, _causes_of, cause_mitigations
from exporter.render.rules.recording import RAW, frontend_overhead, generations

# Verification queries per symptom class: the sidecar's view, then the raw vLLM series behind it.
_W = RATE_WINDOW
SYMPTOM_VERIFY: Mapping[str, tuple[Verify, ...]] = {
    "A": (
        Verify("TTFT quantiles over the sidecar window", "vllm_diag_ttft_seconds"),
        Verify("where the first token's time goes (queue, prefill, frontend)", "vllm_diag_ttft_breakdown_seconds"),
        Verify("raw TTFT p95", RAW.quantile(0.95, vllm.TIME_TO_FIRST_TOKEN_SECONDS, _W)),
        Verify("raw mean queue time", RAW.mean(vllm.REQUEST_QUEUE_TIME_SECONDS, _W)),
        Verify("raw mean prompt length (tokens)", RAW.mean(vllm.REQUEST_PROMPT_TOKENS, _W)),
    ),
    "B": (
        Verify("ITL quantiles (p99 over p50 = stutter)", "vllm_diag_itl_seconds"),
        Verify("prompt share of computed tokens", "vllm_diag_prefill_token_share"),
        Verify("raw ITL p95 (per output event: with speculative decoding an event carries several tokens)",
               generations(lambda n: RAW.quantile(0.95, n(vllm.INTER_TOKEN_LATENCY_SECONDS), _W),
                           vllm.INTER_TOKEN_LATENCY_SECONDS)),
        Verify("running requests", RAW.agg("sum", vllm.NUM_REQUESTS_RUNNING)),
        Verify("with speculative decoding: draft acceptance rate (B5 below the low mark)",
               RAW.ratio(vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL, vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL, _W)),
    ),
    "C": (
        Verify("throughput", "vllm_diag_throughput_tokens_per_second"),
        Verify("running and waiting requests", "vllm_diag_requests"),
        Verify("CPU-starvation score and its inputs", "vllm_diag_cpu_starvation_score"),
        Verify("raw generation tokens per second", RAW.sum_rate(vllm.GENERATION_TOKENS_TOTAL, _W)),
    ),
    "D": (
        Verify("preemptions per finished request", "vllm_diag_preemptions_per_request"),
        Verify("KV usage (latest, window max and mean)", "vllm_diag_kv_cache_usage_ratio"),
        Verify("raw preemptions per second", RAW.sum_rate(vllm.NUM_PREEMPTIONS_TOTAL, _W)),
        Verify("raw requests waiting for capacity", RAW.agg("sum", vllm.NUM_REQUESTS_WAITING_BY_REASON,
                                                               'reason="capacity"')),
    ),
    "E": (
        Verify("KV usage (latest, window max and mean)", "vllm_diag_kv_cache_usage_ratio"),
        Verify("raw KV usage", generations(lambda n: RAW.agg("max", n(vllm.KV_CACHE_USAGE_PERC)),
                                           vllm.KV_CACHE_USAGE_PERC)),
        Verify("raw preemptions per second (still rare for E)", RAW.sum_rate(vllm.NUM_PREEMPTIONS_TOTAL, _W)),
    ),
    "F": (
        Verify("prefix-cache hit ratio", "vllm_diag_prefix_cache_hit_ratio"),
        Verify("raw hit ratio", generations(
            lambda n: RAW.ratio(n(vllm.PREFIX_CACHE_HITS_TOTAL), n(vllm.PREFIX_CACHE_QUERIES_TOTAL), _W),
            vllm.PREFIX_CACHE_HITS_TOTAL, vllm.PREFIX_CACHE_QUERIES_TOTAL)),
        Verify("raw mean prompt length (tokens)", RAW.mean(vllm.REQUEST_PROMPT_TOKENS, _W)),
        Verify("KV usage: full means eviction (F6), room means prompts differ (F1)", "vllm_diag_kv_cache_usage_ratio"),
    ),
    "G": (
        Verify("ITL quantiles", "vllm_diag_itl_seconds"),
        Verify("KV usage (low = memory to spare)", "vllm_diag_kv_cache_usage_ratio"),
        Verify("distributed layer score", 'vllm_diag_layer_score{layer="distributed"}'),
    ),
}


def symptom_condition(symptom: str, o: Options = DEFAULT_OPTIONS) -> str:
    """The share of the smoothing range a symptom was active: the raw 0/1 gauge flaps with bursty
    traffic, its average over minutes does not."""
    rng = duration(o.thresholds["alert_smoothing_seconds"])
    return (f'avg_over_time(vllm_diag_symptom_active{{symptom="{symptom}"}}[{rng}])\n'
            f'>= {fmt(o.thresholds["alert_symptom_active_share"])}')


def symptom_alert(s: Symptom, o: Options = DEFAULT_OPTIONS) -> Alert:
    causes = _causes_of(s.id)
    layers = ", ".join(dict.fromkeys(f"{c.id} {c.layer}" for c in causes))
    share, rng = o.thresholds["alert_symptom_active_share"], duration(o.thresholds["alert_smoothing_seconds"])
    return Alert(
        name=s.alert,
        expr=symptom_condition(s.id, o),
        severity=s.severity,
        symptom=s.id,
        # The layer of the cause that is active decides; the alert cannot know it statically.
        layer="see_cause" if len({c.layer for c in causes}) > 1 else causes[0].layer,
        summary=f"vLLM symptom {s.id}: {s.title}.",
        description=(f"Symptom {s.id} ({s.title}) was active {{{{ $value | humanizePercentage }}}} of the last "
                     f"{rng} on {{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}). Possible causes: "
                     f"{layers}. Active now: {{{{ range query "
                     f"(printf \"vllm_diag_cause_active{{target=%q,symptom=\\\"{s.id}\\\"}} == 1\" "
                     f"$labels.target) }}}}{{{{ .Labels.cause }}}} ({{{{ .Labels.layer }}}}) {{{{ end }}}}."),
        meaning=(f"The sidecar's diagnosis reported symptom class {s.id}, \"{s.title}\", in at least "
                 f"{fmt(share * 100)}% of its evaluations over the last {rng}, for longer than "
                 f"{FOR_SYMPTOM[s.severity]}. The `layer` label is `see_cause` when the causes sit in different "
                 "layers: vllm_diag_cause_active names the cause and its layer."),
        causes=causes,
        verify=(Verify("active causes and their layers", f'vllm_diag_cause_active{{symptom="{s.id}"}} == 1'),
                *SYMPTOM_VERIFY[s.id]),
        mitigations=cause_mitigations(causes),
    )


def cpu_evidence(o: Options = DEFAULT_OPTIONS) -> str:
    """Host-side CPU evidence (run-queue wait, CFS throttling, PSI), each above the floor of the score's
    input: the level measured on a calm host, where the score starts to rise."""
    t = o.thresholds
    parts = [(sig, t[key]) for sig, key in (("run_queue_wait_share", "cpu_wait_share_floor"),
                                             ("cfs_throttled_share", "cpu_throttled_floor"),
                                             ("psi_some_share", "cpu_psi_floor"))]
    inner = "\n  or\n".join(f'  avg_over_time(vllm_diag_cpu_signal{{signal="{sig}"}}[{smoothing(o)}]) > {fmt(v)}'
                            for sig, v in parts)
    return f"max by ({', '.join((*IDENTITY, 'model_name'))}) (\n{inner}\n)"


# ---------------------------------------------------------------------------------------------
# Root causes (the sidecar's): warnings that name the layer; the page is the model's burn
# ---------------------------------------------------------------------------------------------


def _cpu_alert(o: Options, *, with_evidence: bool) -> Alert:
    cpu = o.thresholds["cpu_starvation_score"]
    cpu_causes = tuple(c for c in CAUSES if c.layer == "cpu")
    verify = (Verify("the score", "vllm_diag_cpu_starvation_score"),
              Verify("each input of the score (host evidence: run_queue_wait_share, cfs_throttled_share, "
                     "psi_some_share)", "vllm_diag_cpu_signal"),
              Verify("API-server CPU in cores", "vllm_diag_api_server_cpu_cores"),
              Verify("raw frontend overhead per request (e2e - queue - inference)",
                     frontend_overhead(RAW, RATE_WINDOW)))
    if with_evidence:
        expr = (f"avg_over_time(vllm_diag_cpu_starvation_score[{smoothing(o)}]) >= {fmt(cpu)}\n"
                f"and {_on('model_name')}\n"
                f"avg_over_time(vllm_diag_requests_per_second[{smoothing(o)}]) >= "
                f"{fmt(o.thresholds['traffic_min_requests_per_second'])}\n"
                f"and {_on('model_name')}\n{cpu_evidence(o)}")
        return Alert(
            name="VLLMCPUStarvation", expr=expr, severity="warning", symptom="C", layer="cpu", for_=FOR_ROOT_CAUSE,
            summary="vLLM's processes are short of CPU: the engine loop or the frontend stalls.",
            description=(f"CPU-starvation score of {{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}) "
                         f"is {{{{ $value | printf \"%.2f\" }}}} (threshold {fmt(cpu)}) with host evidence (run-queue "
                         "wait, CFS throttling or CPU PSI above their calm floors) while it serves traffic."),
            meaning=("Root cause, not a symptom: the CPU layer holds vLLM back. The score combines run-queue wait "
                     "of the vLLM threads, cgroup throttling and CPU PSI, each above the floor measured on a calm "
                     "host (vllm_diag_cpu_signal). A warning: when it hurts users, the model's error budget burns "
                     "and VLLMErrorBudgetBurn pages with cause A3/C1 (layer cpu). It inhibits the symptom alerts it "
                     "explains on the same replica."),
            causes=cpu_causes, verify=verify, mitigations=cause_mitigations(cpu_causes))
    # No CPU source on the target: the score cannot exist, but request timings can still point at the CPU.
    rng = duration(o.thresholds["alert_smoothing_seconds"])
    expr = (f'avg_over_time(vllm_diag_cause_active{{layer="cpu"}}[{rng}]) >= '
            f"{fmt(o.thresholds['alert_symptom_active_share'])}\n"
            f'unless {_on()}\nvllm_diag_input_available{{input="cpu_source"}} == 1')
    return Alert(
        name="VLLMCPUStarvationSuspected", expr=expr, severity="warning", symptom="C", layer="cpu",
        for_=FOR_SYMPTOM["warning"],  # after VLLMCPUStarvation, which inhibits it where a source reads
        summary="Request timings point at the CPU, and the sidecar has no CPU source to confirm it.",
        description=("On {{ $labels.target }} (model {{ $labels.model_name }}) the sidecar names cause "
                     "{{ $labels.cause }} (layer cpu) from request timings alone ({{ $value | humanizePercentage }} "
                     f"of {rng}): no host CPU source (run-queue, throttling, PSI) is configured or readable."),
        meaning=("The time requests spend outside the engine (tokenization, chat templates, IPC) is a large share "
                 "of their latency, which is how CPU starvation shows from vLLM's own metrics; a slow tokenizer "
                 "reads the same. Without a CPU source the sidecar cannot confirm it. Configure one on the target "
                 "(`cpu: {match: \"vllm serve\"}` with the sidecar in vLLM's PID namespace) so the CPU-starvation "
                 "score and VLLMCPUStarvation can work."),
        causes=cpu_causes, verify=verify, mitigations=cause_mitigations(cpu_causes))


def root_cause_alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    t = o.thresholds
    ppr, kv_high, rate_min = t["preemptions_per_request"], t["kv_usage_high"], t["kv_pressure_preemption_rate"]
    rng = smoothing(o)
    shortage = (f"avg_over_time(vllm_diag_preemptions_per_request[{rng}]) > {fmt(ppr)}\n"
                f"and {_on('model_name')}\n"
                f'max_over_time(vllm_diag_kv_cache_usage_ratio{{stat="max"}}[{rng}]) > {fmt(kv_high)}\n'
                f"and {_on('model_name')}\n"
                f"avg_over_time(vllm_diag_preemption_rate[{rng}]) >= {fmt(rate_min)}")
    return [
        Alert(
            name="VLLMKVCachePressure", expr=shortage, severity="warning", symptom="D", layer="kv_cache",
            for_=FOR_ROOT_CAUSE,
            summary="vLLM is short of KV cache: requests are preempted and recomputed.",
            description=(f"{{{{ $labels.target }}}} (model {{{{ $labels.model_name }}}}) preempts "
                         f"{{{{ $value | printf \"%.2f\" }}}} times per finished request "
                         f"(threshold {fmt(ppr)}) while KV usage peaked above {fmt(kv_high)}, at "
                         f"{fmt(rate_min)} preemptions/s or more: latency rises and GPU work is wasted."),
            meaning=("Root cause, not a symptom: KV cache space is the bottleneck. Preemption is frequent "
                     f"(over {fmt(ppr)} per finished request, at least {fmt(rate_min)} per second) and KV usage "
                     f"reached {fmt(kv_high)} in the same {rng}. A warning: when it hurts users the "
                     "model's error budget burns and VLLMErrorBudgetBurn pages with cause D (layer kv_cache), once "
                     "for the model however many replicas are short. The same shortage also caps concurrency "
                     f"(cause C3, {CAUSE_BY_ID['C3'].title.lower()})."),
            causes=(CAUSE_BY_ID["D"],),
            verify=SYMPTOM_VERIFY["D"],
            mitigations=cause_mitigations((CAUSE_BY_ID["D"],)),
        ),
        _cpu_alert(o, with_evidence=True),
        _cpu_alert(o, with_evidence=False),
    ]


