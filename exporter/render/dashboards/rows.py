"""Rows and panels the dashboards share: variables, the feature rows repeated where a feature is on
(speculative decoding, P/D disaggregation, LoRA, data-parallel engines) and the layer panels."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grafanalib.core as g

from exporter.catalog import metrics as vllm
from exporter.publish.exported import exported
from exporter.render import slo as slo_rules
from exporter.render.dashboards.panels import (
    DATASOURCE,
    MODEL_SEL,
    PLACE_SEL,
    RATE,
    RAW,
    RAW_SEL,
    TIMES,
    TOKENS,
    Layout,
    Query,
    _table_links,
    _threshold_line,
    catalog,
    diag,
    recorded,
    table,
    timeseries,
)
from exporter.render.promql import PromQL

# ---------------------------------------------------------------------------------------------


def _templating(*, speculative: bool = False, operations: bool = False) -> g.Templating:
    # "All" is `.*`, which matches series without the label too: a single cluster (no `cluster`
    # label) or a setup outside Kubernetes (no `namespace`) sees everything under "All".
    query_var: Callable[..., g.Template] = lambda name, label, query: g.Template(  # noqa: E731
        name=name, label=label, query=query, dataSource=DATASOURCE, includeAll=True, multi=True,
        allValue=".*", refresh=2, default="All")
    return g.Templating(list=[
        g.Template(name="datasource", label="Data source", query="prometheus", type="datasource"),
        query_var("cluster", "Cluster", f"label_values({vllm.NUM_REQUESTS_RUNNING}, cluster)"),
        query_var("namespace", "Namespace",
                  f'label_values({vllm.NUM_REQUESTS_RUNNING}{{cluster=~"$cluster"}}, namespace)'),
        query_var("target", "Target", f"label_values(vllm_diag_up{{{PLACE_SEL}}}, target)"),
        query_var("model", "Model",
                  f'label_values(vllm_diag_evidence_ready{{{PLACE_SEL}, target=~"$target"}}, model_name)'),
        # Hidden: the models whose engines run speculative decoding (vLLM registers these counters only
        # with --speculative-config); the speculative-decoding row repeats over it.
        *([g.Template(name=SPEC_VAR, label="Speculative decoding", dataSource=DATASOURCE, includeAll=True,
                      multi=True, allValue=".*", refresh=2, default="All", hide=2,
                      query=f'label_values({vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL}{{{MODEL_SEL}}}, model_name)')]
          if speculative else []),
        # Hidden: the models with a KV connector or offload on some target (the sidecar's role gauge); the KV
        # transfer row repeats over it.
        *([g.Template(name=KV_VAR, label="KV transfer", dataSource=DATASOURCE, includeAll=True,
                      multi=True, allValue=".*", refresh=2, default="All", hide=2,
                      query=f'label_values({exported("vllm_diag_kv_transfer_role").sample_name}'
                            f'{{{PLACE_SEL}, model_name=~"$model"}}, model_name)')]
          if speculative else []),
        # Hidden: the targets serving LoRA adapters (vllm:lora_requests_info exists only with --enable-lora and
        # carries no model_name), and the models with data-parallel engines (a series with engine="1").
        *([g.Template(name=LORA_VAR, label="LoRA", dataSource=DATASOURCE, includeAll=True, multi=True,
                      allValue=".*", refresh=2, default="All", hide=2,
                      query=f'label_values({vllm.LORA_REQUESTS_INFO}{{{PLACE_SEL}, pod=~"$target"}}, pod)'),
           g.Template(name=DP_VAR, label="Data parallel", dataSource=DATASOURCE, includeAll=True, multi=True,
                      allValue=".*", refresh=2, default="All", hide=2,
                      query=f'label_values({vllm.NUM_REQUESTS_RUNNING}{{{MODEL_SEL}, engine="1"}}, model_name)')]
          if operations else []),
    ])


SPEC_VAR = "spec_model"
SPEC = PromQL(f'{RAW_SEL}, model_name=~"${SPEC_VAR}"')  # the row's model among the selected ones


def speculative_panels() -> list[g.Panel]:
    """Speculative decoding, from vLLM's own counters (the formulas of vllm/v1/spec_decode/metrics.py)."""
    accepted, drafts = vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL, vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL
    draft_tokens, per_pos = vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL, vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL
    per_position = (f"{SPEC.sum_rate(per_pos, RATE)}\n/ ignoring (position) group_left ()\n"
                    f"({SPEC.sum_rate(drafts, RATE)} > 0)")
    itl_count = vllm.INTER_TOKEN_LATENCY_SECONDS + "_count"
    first_tokens = vllm.TIME_TO_FIRST_TOKEN_SECONDS + "_count"
    later_tokens = f"{SPEC.sum_rate(vllm.GENERATION_TOKENS_TOTAL, RATE)}\n- {SPEC.sum_rate(first_tokens, RATE)}"
    # Output events per second under every name vLLM gave the histogram (time_per_output_token_seconds
    # through 0.10.1), the current one first: `or` keeps it where a scrape carries both.
    itl_events = "\nor\n".join(SPEC.sum_rate(name + "_count", RATE)
                                for name in slo_rules.wire_names(vllm.INTER_TOKEN_LATENCY_SECONDS))
    per_event = SPEC.divide(later_tokens, f"({itl_events})")
    return [
        timeseries("Draft acceptance rate", "Accepted / proposed draft tokens. Below the low mark the drafts are "
                   "mostly rejected (cause B5): each verify step pays for draft positions it throws away.",
                   [(diag("vllm_diag_spec_decode_acceptance_ratio", f'model_name=~"${SPEC_VAR}"'),
                     "{{target}} (sidecar window)"),
                    (SPEC.ratio(accepted, draft_tokens, RATE), "raw {{model_name}}")],
                   metrics=["vllm_diag_spec_decode_acceptance_ratio", accepted, draft_tokens], unit="percentunit",
                   judgement=catalog("spec_acceptance_low", high_is_bad=False), max_value=1),
        timeseries("Mean accepted length", "1 + accepted / drafts: tokens a verify step emits per request, the "
                   "bonus token included (1 = no gain from speculation).",
                   [(diag("vllm_diag_spec_decode_mean_accepted_tokens", f'model_name=~"${SPEC_VAR}"'),
                     "{{target}} (sidecar window)"),
                    (f"1 + {SPEC.ratio(accepted, drafts, RATE)}", "raw {{model_name}}")],
                   metrics=["vllm_diag_spec_decode_mean_accepted_tokens", accepted, drafts], unit=TOKENS),
        timeseries("Acceptance per draft position", "Share of drafts whose token at each position was accepted: "
                   "a steep fall says fewer speculative tokens would do.",
                   [(per_position, "{{model_name}} position {{position}}")],
                   metrics=[per_pos, drafts], unit="percentunit", max_value=1),
        timeseries("Tokens per output event", "Generated tokens after each request's first over vLLM's "
                   "inter-token observations: what one output event carries. The sidecar judges the ITL "
                   "objective per token (each event's gap divided by it), so its ITL quantiles are per token.",
                   [(diag("vllm_diag_tokens_per_output_event", f'model_name=~"${SPEC_VAR}"'),
                     "{{target}} (sidecar window)"),
                    (per_event, "raw {{model_name}}")],
                   metrics=["vllm_diag_tokens_per_output_event", vllm.GENERATION_TOKENS_TOTAL, first_tokens,
                            itl_count], unit=TOKENS),
    ]


KV_VAR = "kv_model"
KV = PromQL(f'{RAW_SEL}, model_name=~"${KV_VAR}"')


def kv_transfer_panels() -> list[g.Panel]:
    """Disaggregated prefill/decode and KV offload: the sidecar's window beside the connector's raw families."""
    sel = f'model_name=~"${KV_VAR}"'
    xfer = vllm.NIXL_XFER_TIME_SECONDS
    fetch = vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE
    by_source = vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL
    transferred = KV.divide(KV.sum_rate(by_source, RATE, extra='source="external_kv_transfer"', drop=("source",)),
                            KV.sum_rate(by_source, RATE, drop=("source",)))
    return [
        timeseries("TTFT share waiting for KV", "Mean wait of a request for its KV (the deferred share of its queue "
                   "time) over mean TTFT. Above the mark a missed first-token objective is put on the transfer (A7); "
                   "the raw line is the requests whose KV load is in progress.",
                   [(diag("vllm_diag_kv_deferred_ttft_share", sel), "{{target}} (sidecar window)"),
                    (KV.agg("sum", fetch, 'stage="in_progress"', drop=("stage",)), "raw loading {{model_name}}")],
                   metrics=["vllm_diag_kv_deferred_ttft_share", fetch], unit="percentunit",
                   judgement=catalog("kv_transfer_ttft_share"), max_value=1),
        timeseries("KV transfer time", "Mean time of one NIXL transfer (sidecar window) and the raw p95.",
                   [(diag("vllm_diag_kv_transfer_time_seconds", sel), "{{target}} mean (sidecar window)"),
                    (KV.quantile(0.95, xfer, RATE), "raw p95 {{model_name}}")],
                   metrics=["vllm_diag_kv_transfer_time_seconds", xfer], unit="s"),
        timeseries("Prompt tokens by transfer", "Share of prompt tokens whose KV came from another instance or an "
                   "offload tier (prompt tokens by source external_kv_transfer): about 1 on a decode instance.",
                   [(diag("vllm_diag_kv_transferred_prompt_share", sel), "{{target}} (sidecar window)"),
                    (transferred, "raw {{model_name}}")],
                   metrics=["vllm_diag_kv_transferred_prompt_share", by_source], unit="percentunit", max_value=1),
        timeseries("KV transfer failures", "Failed NIXL transfers over all transfers (A8 at the mark), and the raw "
                   "failure rate.",
                   [(diag("vllm_diag_kv_transfer_failure_ratio", sel), "{{target}} (sidecar window)"),
                    (KV.sum_rate(vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL, RATE), "raw failures/s {{model_name}}")],
                   metrics=["vllm_diag_kv_transfer_failure_ratio", vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL],
                   unit="percentunit", judgement=catalog("kv_transfer_failure_share")),
        timeseries("Connector / offload hit ratio", "Tokens the connector supplied over those offered to it (what "
                   "the GPU prefix cache missed): with offload, a miss served here costs a copy, not a prefill.",
                   [(diag("vllm_diag_external_prefix_cache_hit_ratio", sel), "{{target}} (sidecar window)"),
                    (KV.ratio(vllm.EXTERNAL_PREFIX_CACHE_HITS_TOTAL, vllm.EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL, RATE),
                     "raw {{model_name}}")],
                   metrics=["vllm_diag_external_prefix_cache_hit_ratio", vllm.EXTERNAL_PREFIX_CACHE_HITS_TOTAL,
                            vllm.EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL], unit="percentunit", max_value=1),
    ]


def disaggregation_panels() -> list[g.Panel]:
    """The fleet's prefill and decode instances, paired by model (the sidecar's role gauge)."""
    role = diag("vllm_diag_kv_transfer_role")
    return [
        table("Prefill and decode instances by model", "Every target with a KV connector, its model and role "
              "(kv_producer: prefill, kv_consumer: decode, kv_both: either or offload), one row per target: "
              "a model's prefill and decode instances side by side.",
              (f"{role} == 1", ""), metrics=["vllm_diag_kv_transfer_role"], overrides=_table_links()),
        timeseries("Instances per role by model", "How many prefill and decode instances each model has.",
                   [(f"count by (model_name, role) ({role})", "{{model_name}} {{role}}")],
                   metrics=["vllm_diag_kv_transfer_role"], unit="none"),
        timeseries("Decode instances: TTFT share waiting for KV", "Per decode target; above the mark a missed "
                   "first-token objective is the transfer's (A7).",
                   [(diag("vllm_diag_kv_deferred_ttft_share"), "{{target}}")],
                   metrics=["vllm_diag_kv_deferred_ttft_share"], unit="percentunit",
                   judgement=catalog("kv_transfer_ttft_share"), max_value=1),
    ]


# LoRA and data-parallel engines (issue 29): rows repeated only where the feature is on.
LORA_VAR = "lora_target"
ADAPTERS, REQUESTS = "suffix:adapters", "suffix:req"
DP_VAR = "dp_model"
LORA = PromQL(f'{RAW_SEL}, pod=~"${LORA_VAR}"')  # the row's target among the selected ones
DP = PromQL(f'{RAW_SEL}, model_name=~"${DP_VAR}"', without=("instance",))  # keeps pod and engine


def lora_panels() -> list[g.Panel]:
    """LoRA adapter slots: the sidecar's reading of lora_requests_info, and vLLM's deferred waits."""
    return [
        timeseries("Adapter slots", "Adapters with requests in flight now (running) and over the sidecar's window "
                   "(seen) against the slots one batch holds (max, --max-loras). Seen above max with deferred "
                   "waits: requests wait for a slot (cause A6).",
                   [(diag("vllm_diag_lora_adapters"), "{{target}} {{kind}}")],
                   metrics=["vllm_diag_lora_adapters"], unit=ADAPTERS),
        timeseries("Requests waiting deferred", "Waiting requests the scheduler skipped (a LoRA slot, a KV transfer), "
                   "beside those waiting for capacity.",
                   [(f'sum by (pod, reason) ({LORA.sel(vllm.NUM_REQUESTS_WAITING_BY_REASON)})',
                     "{{pod}} {{reason}}")],
                   metrics=[vllm.NUM_REQUESTS_WAITING_BY_REASON], unit=REQUESTS),
        timeseries("Queue time (mean)", "Mean time requests waited in the engine queue: a slot wait is queue time.",
                   [(f"sum by (pod) (rate({LORA.sel(vllm.REQUEST_QUEUE_TIME_SECONDS + '_sum')}[{RATE}]))\n/\n"
                     f"(sum by (pod) (rate({LORA.sel(vllm.REQUEST_QUEUE_TIME_SECONDS + '_count')}[{RATE}])) > 0)",
                     "{{pod}}")],
                   metrics=[vllm.REQUEST_QUEUE_TIME_SECONDS], unit="s"),
    ]


def data_parallel_panels() -> list[g.Panel]:
    """Per data-parallel engine (the engine label): load and latency side by side, and the sidecar's outlier."""
    load = (f"sum by (pod, engine) ({DP.sel(vllm.NUM_REQUESTS_RUNNING)})\n+\n"
            f"sum by (pod, engine) ({DP.sel(vllm.NUM_REQUESTS_WAITING)})")

    def mean(histogram: str) -> str:
        # Under every name vLLM gave the histogram, the current one first (`or` keeps it where both exist).
        return "\nor\n".join(
            f"(\nsum by (pod, engine) (rate({DP.sel(name + '_sum')}[{RATE}]))\n/\n"
            f"(sum by (pod, engine) (rate({DP.sel(name + '_count')}[{RATE}])) > 0)\n)"
            for name in slo_rules.wire_names(histogram))

    return [
        timeseries("Load per engine", "Running + waiting requests per data-parallel engine: siblings should match.",
                   [(load, "{{pod}} engine {{engine}}")],
                   metrics=[vllm.NUM_REQUESTS_RUNNING, vllm.NUM_REQUESTS_WAITING], unit=REQUESTS),
        timeseries("Mean TTFT per engine", "One engine far above its siblings is slow or overloaded (cause G2).",
                   [(mean(vllm.TIME_TO_FIRST_TOKEN_SECONDS), "{{pod}} engine {{engine}}")],
                   metrics=[vllm.TIME_TO_FIRST_TOKEN_SECONDS], unit="s"),
        timeseries("Mean ITL per engine", "Per output event, per engine.",
                   [(mean(vllm.INTER_TOKEN_LATENCY_SECONDS), "{{pod}} engine {{engine}}")],
                   metrics=[vllm.INTER_TOKEN_LATENCY_SECONDS], unit="s"),
        timeseries("Outlier engine / siblings", "The sidecar's most outlying engine: its load and latency over the "
                   "median of its siblings'. Above the mark it stands out (G2).",
                   [(diag("vllm_diag_engine_imbalance_ratio", f'model_name=~"${DP_VAR}"'),
                     "{{target}} engine {{engine}} {{kind}}")],
                   metrics=["vllm_diag_engine_imbalance_ratio"], unit=TIMES, judgement=catalog("dp_imbalance_ratio")),
    ]


def _layer_row(layout: Layout, layer: str, panels: Sequence[g.Panel]) -> None:
    layout.row(f"Layer: {layer}")
    layout.add_row(panels)


def _kv_usage() -> g.Panel:
    return timeseries(
        "KV cache usage", "Latest, window max and window mean per target (sidecar), and the raw engine gauge.",
        [(diag("vllm_diag_kv_cache_usage_ratio"), "{{target}} {{stat}}"),
         (recorded("pod:vllm_kv_cache_usage:max"), "raw {{pod}} max")],
        metrics=["vllm_diag_kv_cache_usage_ratio", "pod:vllm_kv_cache_usage:max"], unit="percentunit",
        judgement=catalog("kv_usage_high"), max_value=1)


def _preemptions() -> g.Panel:
    return timeseries(
        "Preemptions per finished request", "Frequent preemption means the KV cache is short (symptom D).",
        [(diag("vllm_diag_preemptions_per_request"), "{{target}}"),
         (recorded("pod:vllm_preemptions_per_request:ratio_rate5m"), "raw {{pod}}")],
        metrics=["vllm_diag_preemptions_per_request", "pod:vllm_preemptions_per_request:ratio_rate5m"],
        unit="none", judgement=catalog("preemptions_per_request"))


def _prefix_hits() -> g.Panel:
    return timeseries(
        "Prefix-cache hit ratio", "Cached / queried prompt tokens; low with long prompts = symptom F.",
        [(diag("vllm_diag_prefix_cache_hit_ratio"), "{{target}}"),
         (recorded("pod:vllm_prefix_cache_hit:ratio_rate5m"), "raw {{pod}}")],
        metrics=["vllm_diag_prefix_cache_hit_ratio", "pod:vllm_prefix_cache_hit:ratio_rate5m"],
        unit="percentunit", judgement=catalog("prefix_hit_ratio_low", high_is_bad=False), max_value=1)


def threshold_query(objective: str) -> Query:
    """The objective's threshold as Prometheus holds it (a constant recording rendered from the
    configuration): a constant carries no cluster/namespace/pod labels, so it is not filtered."""
    expr = f'{slo_rules.THRESHOLD_RECORD}{{objective="{objective}"}}'
    return expr, f"{slo_rules.OBJECTIVE_TITLE[objective]} threshold"


def latency(title: str, text: str, objective: str, queries: Sequence[Query], *, metrics: Sequence[str],
            links: Sequence[Mapping[str, Any]] = ()) -> g.Panel:
    """A latency panel with the objective's threshold as a dashed series read from Prometheus, so the
    line moves with the deployment's objective (no colour step: the dashboard does not know it)."""
    line = threshold_query(objective)
    note = (f" Dashed: the {slo_rules.OBJECTIVE_TITLE[objective]} objective's threshold "
            f"(`{slo_rules.THRESHOLD_RECORD}`); the objective holds while the share of events above it stays "
            "within the error budget (row Objectives).")
    return timeseries(title, text + note, [*queries, line], metrics=[*metrics, slo_rules.THRESHOLD_RECORD], unit="s",
                      overrides=[_threshold_line(chr(ord("A") + len(queries)))], links=links)


def _ttft() -> g.Panel:
    return latency(
        "TTFT quantiles", "Time to first token over the sidecar window, and the raw p95.", "ttft",
        [(diag("vllm_diag_ttft_seconds"), "{{target}} p{{quantile}}"),
         (recorded("pod:vllm_ttft_seconds:p95_rate5m"), "raw {{pod}} p0.95")],
        metrics=["vllm_diag_ttft_seconds", "pod:vllm_ttft_seconds:p95_rate5m"])


def _itl() -> g.Panel:
    return latency(
        "ITL quantiles", "Inter-token latency over the sidecar window, and the raw p95.", "itl",
        [(diag("vllm_diag_itl_seconds"), "{{target}} p{{quantile}}"),
         (recorded("pod:vllm_itl_seconds:p95_rate5m"), "raw {{pod}} p0.95")],
        metrics=["vllm_diag_itl_seconds", "pod:vllm_itl_seconds:p95_rate5m"])


def _cpu_score() -> g.Panel:
    return timeseries(
        "CPU-starvation score", "0..1 from run-queue wait, CFS throttling, PSI and API-server CPU, whichever exist.",
        [(diag("vllm_diag_cpu_starvation_score"), "{{target}}")],
        metrics=["vllm_diag_cpu_starvation_score"], unit="percentunit",
        judgement=catalog("cpu_starvation_score"), max_value=1)


def _frontend_overhead() -> g.Panel:
    return timeseries(
        "Time outside the engine per request", "Mean TTFT spent in the frontend (sidecar) and raw "
        "mean(e2e) - mean(queue) - mean(inference): tokenization, templates, IPC, output handling.",
        [(diag("vllm_diag_ttft_breakdown_seconds", 'phase="frontend"'), "{{target}} frontend (TTFT)"),
         (recorded("pod:vllm_frontend_overhead_seconds:mean_rate5m"), "raw {{pod}} e2e - queue - inference")],
        metrics=["vllm_diag_ttft_breakdown_seconds", "pod:vllm_frontend_overhead_seconds:mean_rate5m"], unit="s")


def _itl_tail_ratio() -> str:
    p99 = diag("vllm_diag_itl_seconds", 'quantile="0.99"')
    p50 = diag("vllm_diag_itl_seconds", 'quantile="0.5"')
    return f"{p99}\n/ ignoring (quantile)\n({p50} > 0)"




# The engine's own witnesses (exporter/signals/witnesses.py), from vLLM's raw series: the sidecar reads them
# into its evidence but does not publish them as gauges of their own.
def _block_residency() -> g.Panel:
    # Not the reuse gaps: vLLM observes one only for a block hit twice, so a pool without reuse has no series.
    families = (vllm.KV_BLOCK_LIFETIME_SECONDS, vllm.KV_BLOCK_IDLE_BEFORE_EVICT_SECONDS)
    return timeseries("KV block residency", "Sampled KV blocks at their eviction (--kv-cache-metrics): mean "
                      "lifetime and idle time since their last prefix-cache hit (or allocation). Idle as long as "
                      "the lifetime: evicted blocks were never reused (prompts that do not repeat, an unstable "
                      "template). Idle far shorter than the lifetime while the prefix cache misses: blocks were "
                      "still being reused when evicted (the pool is smaller than the working set).",
                      [(RAW.mean(name, RATE), f"{{{{model_name}}}} {label}") for name, label in
                       zip(families, ("lifetime", "idle before eviction"), strict=True)],
                      metrics=list(families), unit="s")


def _step_tokens() -> g.Panel:
    steps = vllm.ITERATION_TOKENS_TOTAL
    return timeseries("Tokens per step (raw)", "Tokens per engine output batch, prompt chunks and generated tokens "
                      f"together ({steps}). Compare with the token budget "
                      "(--max-num-batched-tokens, not on /metrics): steps at the budget mean it binds (A1/B1); "
                      "steps far below it while requests queue point away from the budget.",
                      [(RAW.mean(steps, RATE), "{{model_name}} mean"),
                       (RAW.quantile(0.9, steps, RATE), "{{model_name}} p90")],
                      metrics=[steps], unit=TOKENS)


def _render_time() -> g.Panel:
    render = vllm.REQUEST_RENDER_DURATION_SECONDS
    return timeseries("Request render time", "The API server's chat template and tokenisation per request "
                      "(vLLM 0.34+): part of the time before the first token spent outside the engine, on the "
                      "frontend's CPU.",
                      [(RAW.mean(render, RATE), "{{model_name}} mean"),
                       (RAW.quantile(0.95, render, RATE), "{{model_name}} p95")],
                      metrics=[render], unit="s")
