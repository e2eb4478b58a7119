"""Grafana dashboards (grafanalib), generated from the catalog: ``vllm-diag render dashboards``.

The JSON in ``dashboards/`` is generated: edit this file, not the JSON. ``render all --check``
compares the committed files byte for byte (stable ``json.dumps``, trailing newline) and flags
files no builder produced. Layout follows vLLM's ``tools/generate_grafana_dashboards.py``:
selectors and constants, PromQL, panel builders (small pure functions), layout, one function
per dashboard, the ``DASHBOARDS`` dict, then the query walk used by the lint and later tests
(building blocks in ``panels``, shared rows in ``rows``, the objectives in ``objectives``).

Colour thresholds are never invented here: a panel that carries a judgement names its catalog
threshold key, and the step is read from ``exporter.catalog.thresholds``. The objectives (SLO) are
never rendered into a dashboard: thresholds, targets and error budgets are read from Prometheus
(the constant recordings ``vllm_slo:threshold:seconds`` and ``vllm_slo:error_budget:ratio`` that
``render rules`` writes from the configuration), so a dashboard follows the deployment's objectives;
burn-rate colours are the factors of the burn-rate alerts (``exporter.render.slo.BURN_ALERTS``).

Variables: ``cluster`` and ``namespace`` (their "All" also matches series without the label),
``target`` and ``model``; every series selector filters on them where the series carries the label.
Both dashboards show firing ``VLLM*`` alerts as annotations and link to each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import grafanalib.core as g
from grafanalib._gen import DashboardEncoder

from exporter.catalog import metrics as vllm
from exporter.catalog.symptoms import LAYERS
from exporter.render.dashboards.objectives import (
    GENERATION_THROUGHPUT,
    _model_slo_table,
    _objectives_row,
)
from exporter.render.dashboards.panels import (
    DATASOURCE,
    FLEET_UID,
    OVERVIEW_UID,
    PLACE_SEL,
    QUERY_DEFAULTS,
    RATE,
    RAW,
    RED,
    TIMES,
    TOKENS,
    TOKENS_PER_S,
    Layout,
    _link,
    _table_links,
    catalog,
    diag,
    diag_target,
    overview_url,
    recorded,
    stat,
    state_timeline,
    table,
    timeseries,
)
from exporter.render.dashboards.rows import (
    DP_VAR,
    KV_VAR,
    LORA_VAR,
    SPEC_VAR,
    _block_residency,
    _cpu_score,
    _frontend_overhead,
    _itl,
    _itl_tail_ratio,
    _kv_usage,
    _layer_row,
    _preemptions,
    _prefix_hits,
    _render_time,
    _step_tokens,
    _templating,
    _ttft,
    data_parallel_panels,
    disaggregation_panels,
    kv_transfer_panels,
    latency,
    lora_panels,
    speculative_panels,
)

# ---------------------------------------------------------------------------------------------
# Dashboards
# ---------------------------------------------------------------------------------------------


def overview() -> g.Dashboard:
    lay = Layout()
    _objectives_row(lay)
    lay.row("Diagnosis")
    lay.add(stat("Bottleneck layer", "The sidecar's verdict per target (one-hot vllm_diag_layer_verdict): one of "
                 f"{', '.join(LAYERS)}, none (healthy) or unknown (insufficient evidence).",
                 (diag("vllm_diag_layer_verdict") + " == 1", "{{target}}: {{layer}}"),
                 metrics=["vllm_diag_layer_verdict"], text_mode="name"), w=12, h=5)
    lay.add(stat("Targets up", "vLLM targets the sidecar scraped successfully at its last attempt.",
                 (f"sum({diag_target('vllm_diag_up')})", "up"), metrics=["vllm_diag_up"]), w=6, h=5)
    lay.add(stat("Active symptoms", "Symptom classes (A-G) active across the selected targets.",
                 (f"sum({diag('vllm_diag_symptom_active')})", "active"),
                 metrics=["vllm_diag_symptom_active"]), w=6, h=5)
    lay.add(timeseries("Layer scores", "Bottleneck score 0..1 per layer; the verdict needs the entry score.",
                       [(diag("vllm_diag_layer_score"), "{{target}} {{layer}}")],
                       metrics=["vllm_diag_layer_score"], unit="percentunit",
                       judgement=catalog("verdict_enter_score"), max_value=1), w=12, h=9)
    lay.add(state_timeline("Active symptoms over time", "1 while a symptom class is active.",
                           (diag("vllm_diag_symptom_active"), "{{target}} {{symptom}}"),
                           metrics=["vllm_diag_symptom_active"]), w=12, h=9)
    lay.add(table("Active causes", "Each active cause with its symptom and layer; the runbooks list the actions.",
                  (diag("vllm_diag_cause_active") + " == 1", ""), metrics=["vllm_diag_cause_active"]), w=24, h=6)

    # One row per layer, in the method's order.
    rows: dict[str, list[g.Panel]] = {
        "request": [
            timeseries("Throughput", "Prompt and generation tokens per second over the sidecar window.",
                       [(diag("vllm_diag_throughput_tokens_per_second"), "{{target}} {{kind}}"),
                        (RAW.sum_rate(vllm.GENERATION_TOKENS_TOTAL, RATE), "raw {{model_name}} generation")],
                       metrics=["vllm_diag_throughput_tokens_per_second", vllm.GENERATION_TOKENS_TOTAL],
                       unit=TOKENS_PER_S),
            timeseries("Finished requests per second", "Client disconnects are not counted by vLLM.",
                       [(diag("vllm_diag_requests_per_second"), "{{target}}"),
                        (recorded("pod:vllm_requests_finished:rate5m"), "raw {{pod}}")],
                       metrics=["vllm_diag_requests_per_second", "pod:vllm_requests_finished:rate5m"], unit="reqps"),
            timeseries("Mean prompt and output length", "Tokens per finished request; long prompts make "
                       "prefill cost intrinsic (A1).",
                       [(RAW.mean(vllm.REQUEST_PROMPT_TOKENS, RATE), "{{model_name}} prompt"),
                        (RAW.mean(vllm.REQUEST_GENERATION_TOKENS, RATE), "{{model_name}} output")],
                       metrics=[vllm.REQUEST_PROMPT_TOKENS + "_sum", vllm.REQUEST_GENERATION_TOKENS + "_sum"],
                       unit=TOKENS, judgement=catalog("long_prompt_tokens")),
        ],
        "scheduler": [
            timeseries("Running and waiting requests", "At the sidecar's last scrape, and the raw reasons.",
                       [(diag("vllm_diag_requests"), "{{target}} {{state}}"),
                        (RAW.agg("sum", vllm.NUM_REQUESTS_WAITING_BY_REASON), "raw {{model_name}} {{reason}}")],
                       metrics=["vllm_diag_requests", vllm.NUM_REQUESTS_WAITING_BY_REASON], unit="none"),
            timeseries("TTFT breakdown", "Mean time to first token per request by phase.",
                       [(diag("vllm_diag_ttft_breakdown_seconds"), "{{target}} {{phase}}")],
                       metrics=["vllm_diag_ttft_breakdown_seconds"], unit="s"),
            _ttft(),
        ],
        "kv_cache": [_kv_usage(), _preemptions(), _prefix_hits(), _block_residency()],
        "gpu_compute": [
            timeseries("Tokens per engine step", "Mean tokens per engine output batch (about one per step).",
                       [(diag("vllm_diag_tokens_per_step"), "{{target}}")],
                       metrics=["vllm_diag_tokens_per_step"], unit=TOKENS),
            timeseries("Engine steps per second", "Engine output batches per second (sidecar and raw).",
                       [(diag("vllm_diag_engine_steps_per_second"), "{{target}}"),
                        (RAW.sum_rate(vllm.ITERATION_TOKENS_TOTAL + "_count", RATE), "raw {{model_name}}")],
                       metrics=["vllm_diag_engine_steps_per_second", vllm.ITERATION_TOKENS_TOTAL + "_count"],
                       unit="ops"),
            _step_tokens(),
            _itl(),
        ],
        "cpu": [
            _cpu_score(),
            timeseries("API-server CPU", "Rate of the API server's process_cpu_seconds_total; its event loop "
                       "saturates near one core.",
                       [(diag("vllm_diag_api_server_cpu_cores"), "{{target}}")],
                       metrics=["vllm_diag_api_server_cpu_cores"], unit="suffix:cores",
                       judgement=catalog("api_server_busy_cores")),
            _frontend_overhead(),
            _render_time(),
        ],
        "distributed": [
            timeseries("Distributed layer score", "Score of the multi-GPU layer (symptom G).",
                       [(diag("vllm_diag_layer_score", 'layer="distributed"'), "{{target}}")],
                       metrics=["vllm_diag_layer_score"], unit="percentunit",
                       judgement=catalog("verdict_enter_score"), max_value=1),
            timeseries("ITL tail ratio (p99 / p50)", "Uniformly slow ITL (low ratio) with KV to spare points at "
                       "parallelism overhead; a high ratio at stutter (B1/B2).",
                       [(_itl_tail_ratio(), "{{target}}")],
                       metrics=["vllm_diag_itl_seconds"], unit=TIMES, judgement=catalog("itl_tail_ratio")),
            timeseries("Mean KV usage", "Low mean KV usage under TP/PP means the extra GPUs buy no memory relief.",
                       [(diag("vllm_diag_kv_cache_usage_ratio", 'stat="mean"'), "{{target}}")],
                       metrics=["vllm_diag_kv_cache_usage_ratio"], unit="percentunit",
                       judgement=catalog("kv_relief_usage", high_is_bad=False), max_value=1),
        ],
    }
    assert tuple(rows) == LAYERS, "rows follow the method's layer order"
    for layer, panels in rows.items():
        _layer_row(lay, layer, panels)
    lay.feature_row(f"Speculative decoding: ${SPEC_VAR}", SPEC_VAR, speculative_panels())
    lay.feature_row(f"KV transfer: ${KV_VAR}", KV_VAR, kv_transfer_panels())
    lay.feature_row(f"LoRA adapters: ${LORA_VAR}", LORA_VAR, lora_panels())
    lay.feature_row(f"Data-parallel engines: ${DP_VAR}", DP_VAR, data_parallel_panels())
    return _dashboard("vLLM layered diagnosis", OVERVIEW_UID, lay,
                      "Whether the objectives hold, which layer holds vLLM back, the active symptoms, and each "
                      "layer's core signals.",
                      links=[g.DashboardLink(title="Fleet", type="link", uri=f"/d/{FLEET_UID}/{FLEET_UID}",
                                             keepTime=True, includeVars=True, icon="dashboard",
                                             tooltip="Every target and model")],
                      speculative=True, operations=True)


def fleet() -> g.Dashboard:
    lay = Layout()
    lay.add(_model_slo_table(), w=24, h=7)
    lay.add(table("Verdict by target", "The current bottleneck layer of every target and model. The target cell "
                  "opens its overview.", (diag("vllm_diag_layer_verdict") + " == 1", ""),
                  metrics=["vllm_diag_layer_verdict"], overrides=_table_links()), w=12, h=8)
    lay.add(table("Scrape health by target", "1 = the last scrape succeeded. The target cell opens its overview.",
                  (diag_target("vllm_diag_up"), ""), metrics=["vllm_diag_up"],
                  overrides=_table_links(with_model=False)), w=12, h=8)
    lay.add_row([
        timeseries("Targets per verdict layer", "How many targets each layer holds back.",
                   [(f"count by (layer) ({diag('vllm_diag_layer_verdict')} == 1)", "{{layer}}")],
                   metrics=["vllm_diag_layer_verdict"], unit="none"),
        timeseries("Targets per active symptom", "How many targets show each symptom class.",
                   [(f"sum by (symptom) ({diag('vllm_diag_symptom_active')})", "{{symptom}}")],
                   metrics=["vllm_diag_symptom_active"], unit="none"),
    ])
    # Per-target series: a click on a line opens that target's overview.
    to_target = [_link("Overview of ${__field.labels.target}",
                       overview_url(target="__field.labels.target", model="__field.labels.model_name"))]
    lay.add_row([
        timeseries("Max KV usage by target", "Window max per target.",
                   [(diag("vllm_diag_kv_cache_usage_ratio", 'stat="max"'), "{{target}}")],
                   metrics=["vllm_diag_kv_cache_usage_ratio"], unit="percentunit",
                   judgement=catalog("kv_usage_high"), max_value=1, links=to_target),
        timeseries("Preemptions per request by target", "Over the sidecar window.",
                   [(diag("vllm_diag_preemptions_per_request"), "{{target}}")],
                   metrics=["vllm_diag_preemptions_per_request"], unit="none",
                   judgement=catalog("preemptions_per_request"), links=to_target),
        timeseries("CPU-starvation score by target", "0..1.",
                   [(diag("vllm_diag_cpu_starvation_score"), "{{target}}")],
                   metrics=["vllm_diag_cpu_starvation_score"], unit="percentunit",
                   judgement=catalog("cpu_starvation_score"), max_value=1, links=to_target),
    ])
    lay.add_row([
        latency("TTFT p95 by target", "Sidecar p95 per target.", "ttft",
                [(diag("vllm_diag_ttft_seconds", 'quantile="0.95"'), "{{target}}")],
                metrics=["vllm_diag_ttft_seconds"], links=to_target),
        latency("ITL p95 by target", "Sidecar p95 per target.", "itl",
                [(diag("vllm_diag_itl_seconds", 'quantile="0.95"'), "{{target}}")],
                metrics=["vllm_diag_itl_seconds"], links=to_target),
        timeseries("Generation throughput by model", "Tokens per second per model: sidecar sum and raw.",
                   [(f"sum by (model_name) ({GENERATION_THROUGHPUT})", "{{model_name}}"),
                    (f"sum by (model_name) ({RAW.rate(vllm.GENERATION_TOKENS_TOTAL, RATE)})",
                     "raw {{model_name}}")],
                   metrics=["vllm_diag_throughput_tokens_per_second", vllm.GENERATION_TOKENS_TOTAL],
                   unit=TOKENS_PER_S),
    ])
    lay.row("Disaggregated prefill/decode")
    lay.add_row(disaggregation_panels())
    return _dashboard("vLLM fleet diagnosis", FLEET_UID, lay,
                      "Objectives, verdicts, symptoms and core signals across every target and model.",
                      links=[g.DashboardLink(title="Layered diagnosis (overview)", type="link",
                                             uri=f"/d/{OVERVIEW_UID}/{OVERVIEW_UID}", keepTime=True, includeVars=True,
                                             icon="dashboard", tooltip="The selected targets' overview")])


# Firing vLLM alerts as annotations. ALERTS carries the alert's labels: namespace and model_name
# where the alert's expression keeps them (`=~".*"` also matches alerts without the label).
ALERT_ANNOTATION_EXPR = f'ALERTS{{alertstate="firing", alertname=~"VLLM.*", {PLACE_SEL}, model_name=~"$model"}}'


def _alert_annotation() -> dict[str, Any]:
    return {"name": "Firing vLLM alerts", "datasource": DATASOURCE, "enable": True, "hide": False,
            "iconColor": RED, "expr": ALERT_ANNOTATION_EXPR, "step": "1m", "titleFormat": "{{alertname}}",
            "textFormat": "{{severity}}: {{alertname}} {{target}} {{model_name}}",
            "tagKeys": "severity,namespace,model_name", "useValueForTime": False}


def _dashboard(title: str, uid: str, layout: Layout, description: str, *,
               links: Sequence[g.DashboardLink], speculative: bool = False,
               operations: bool = False) -> g.Dashboard:
    return g.Dashboard(
        title=title, uid=uid, description=description + " Generated by `vllm-diag render dashboards`.",
        tags=["vllm", "vllm-diag"], panels=layout.panels,
        templating=_templating(speculative=speculative, operations=operations),
        annotations=g.Annotations(list=[_alert_annotation()]), links=list(links),
        time=g.Time("now-1h", "now"), refresh="30s", timezone="browser",
    ).auto_panel_ids()


DASHBOARDS: Mapping[str, Callable[[], g.Dashboard]] = {
    "vllm-diag-overview.json": overview,
    "vllm-diag-fleet.json": fleet,
}
OUTPUT_DIR = "dashboards"

# ---------------------------------------------------------------------------------------------
# JSON and the query walk
# ---------------------------------------------------------------------------------------------


def _fix_steps(node: Any) -> Any:
    """grafanalib writes the base threshold step's value as the string "null"; Grafana wants null."""
    if isinstance(node, dict):
        if node.get("value") == "null" and "color" in node:
            node = {**node, "value": None}
        return {k: _fix_steps(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_fix_steps(v) for v in node]
    return node


def to_data(dashboard: g.Dashboard) -> dict[str, Any]:
    return _fix_steps(json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder)))


def render_files() -> dict[str, str]:
    return {f"{OUTPUT_DIR}/{name}": json.dumps(to_data(build()), indent=2, sort_keys=True) + "\n"
            for name, build in DASHBOARDS.items()}


def iter_panels(panels: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """Every panel, including those inside collapsed rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def dashboard_data() -> dict[str, dict[str, Any]]:
    return {name: to_data(build()) for name, build in DASHBOARDS.items()}


def raw_queries() -> list[str]:
    """Every panel target expression as written in the dashboards (with Grafana variables)."""
    return [t["expr"] for data in dashboard_data().values() for p in iter_panels(data["panels"])
            for t in p.get("targets", []) if t.get("expr")]


def variable_queries() -> list[str]:
    return [v["query"] for data in dashboard_data().values() for v in data["templating"]["list"]
            if v.get("type") == "query"]


def annotation_queries() -> list[str]:
    """Every annotation query of every dashboard (with Grafana variables)."""
    return [a["expr"] for data in dashboard_data().values() for a in data["annotations"]["list"] if a.get("expr")]


def resolve(expr: str, values: Mapping[str, str] = QUERY_DEFAULTS) -> str:
    """Substitute Grafana variables so the expression runs against Prometheus directly."""
    for var in sorted(values, key=len, reverse=True):  # $__rate_interval before shorter names
        expr = expr.replace(var, values[var])
    return expr


def all_queries() -> list[str]:
    """Every PromQL expression of every dashboard panel, variables resolved to match-all, deduplicated."""
    return list(dict.fromkeys(resolve(q) for q in raw_queries()))


__all__ = ["DASHBOARDS", "all_queries", "annotation_queries", "raw_queries", "render_files", "variable_queries"]
