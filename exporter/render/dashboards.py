"""Grafana dashboards (grafanalib), generated from the catalog: ``vllm-diag render dashboards``.

The JSON in ``dashboards/`` is generated: edit this file, not the JSON. ``render all --check``
compares the committed files byte for byte (stable ``json.dumps``, trailing newline) and flags
files no builder produced. Layout follows vLLM's ``tools/generate_grafana_dashboards.py``:
selectors and constants, PromQL, panel builders (small pure functions), layout, one function
per dashboard, the ``DASHBOARDS`` dict, then the query walk used by the lint and later tests.

Colour thresholds are never invented here: a panel that carries a judgement names its catalog
threshold key (or the SLO), and the step is read from ``exporter.catalog.thresholds``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grafanalib.core as g
from grafanalib._gen import DashboardEncoder

from exporter.catalog.exported import PREFIX, exported
from exporter.catalog.symptoms import LAYERS
from exporter.catalog.thresholds import BY_KEY, DEFAULTS
from exporter.config import Slo
from exporter.render import PromQL

# ---------------------------------------------------------------------------------------------
# Selectors and constants
# ---------------------------------------------------------------------------------------------

DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
# vllm_diag_* series carry the sidecar's target name; raw vllm: series carry model_name and the
# `pod` label Prometheus' Kubernetes discovery adds. The sidecar names its target after its pod by
# default (downward API, deploy/kubernetes), so `pod=~"$target"` selects the same replica's raw
# series: no fleet-wide line next to one target's. (Outside Kubernetes, set a `pod` label equal to
# the target name on the vLLM scrape job; series without one match only the all-targets selection.)
DIAG_SEL = 'target=~"$target", model_name=~"$model"'
RAW_SEL = 'model_name=~"$model", pod=~"$target"'
RAW = PromQL(RAW_SEL)


def recorded(record: str) -> str:
    """A recording rule of alert_rules/vllm-diag-recording.yml, for the selected model and target."""
    return f"{record}{{{RAW_SEL}}}"

RATE = "$__rate_interval"
SLO = Slo()

# Values the variables take in all_queries(): match everything, a short rate window.
QUERY_DEFAULTS: Mapping[str, str] = {"$target": ".*", "$model": ".*", "$__rate_interval": "1m"}

GREEN, RED, NEUTRAL = "green", "red", "blue"


def diag(metric: str, extra: str = "") -> str:
    """A vllm_diag_* selector restricted to the dashboard's target and model (the name from the catalog)."""
    return f"{exported(metric).sample_name}{{{DIAG_SEL}{', ' + extra if extra else ''}}}"


# ---------------------------------------------------------------------------------------------
# Threshold steps from the catalog
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Judgement:
    """A colour step: the catalog value, and whether crossing it upwards is bad."""

    value: float
    high_is_bad: bool = True
    source: str = ""  # catalog key or SLO field, quoted in the panel description


def catalog(key: str, high_is_bad: bool = True) -> Judgement:
    return Judgement(DEFAULTS[key], high_is_bad, f"catalog threshold `{key}` ({BY_KEY[key].controls})")


def slo(objective: str) -> Judgement:
    return Judgement(SLO.objectives()[objective].threshold_seconds, True,
                     f"SLO `{objective}.threshold_seconds` (exporter.config.Slo)")


def _steps(j: Judgement | None) -> list[g.Threshold]:
    if j is None:  # no judgement: one neutral colour
        return [g.Threshold(NEUTRAL, 0, 0.0)]
    below, above = (GREEN, RED) if j.high_is_bad else (RED, GREEN)
    return [g.Threshold(below, 0, 0.0), g.Threshold(above, 1, float(j.value))]


# ---------------------------------------------------------------------------------------------
# Panel builders (pure functions; keyword-only options)
# ---------------------------------------------------------------------------------------------

Query = tuple[str, str]  # (expr, legendFormat)


def _targets(queries: Sequence[Query], *, instant: bool = False, table: bool = False) -> list[g.Target]:
    return [g.Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + i), datasource=DATASOURCE,
                     instant=instant, format="table" if table else "time_series")
            for i, (expr, legend) in enumerate(queries)]


def _describe(text: str, metrics: Sequence[str], judgement: Judgement | None) -> str:
    for name in metrics:
        if name.startswith(PREFIX):
            exported(name)  # a panel names only series the sidecar exports
    parts = [text]
    if judgement is not None:
        parts.append(f"Threshold {judgement.value:g}: {judgement.source}.")
    parts.append("Reads: " + ", ".join(f"`{m}`" for m in metrics) + ".")
    return " ".join(parts)


def timeseries(title: str, text: str, queries: Sequence[Query], *, metrics: Sequence[str], unit: str = "short",
               judgement: Judgement | None = None, max_value: float | None = None) -> g.Panel:
    return g.TimeSeries(
        title=title, description=_describe(text, metrics, judgement), dataSource=DATASOURCE,
        targets=_targets(queries), unit=unit, thresholds=_steps(judgement),
        thresholdsStyleMode="line" if judgement else "off", valueMin=0, valueMax=max_value,
        legendDisplayMode="table", legendPlacement="right" if len(queries) > 2 else "bottom",
    )


def stat(title: str, text: str, query: Query, *, metrics: Sequence[str], text_mode: str = "auto",
         unit: str = "none", no_value: str = "No data", judgement: Judgement | None = None) -> g.Panel:
    return g.Stat(
        title=title, description=_describe(text, metrics, judgement), dataSource=DATASOURCE,
        targets=_targets([query], instant=True), textMode=text_mode, format=unit, noValue=no_value,
        graphMode="none", reduceCalc="lastNotNull", colorMode="value" if judgement else "none",
        thresholds=_steps(judgement),
    )


def state_timeline(title: str, text: str, query: Query, *, metrics: Sequence[str]) -> g.Panel:
    return g.StateTimeline(title=title, description=_describe(text, metrics, None), dataSource=DATASOURCE,
                           targets=_targets([query]), thresholds=_steps(None), mergeValues=True)


def table(title: str, text: str, query: Query, *, metrics: Sequence[str]) -> g.Panel:
    return g.Table(title=title, description=_describe(text, metrics, None), dataSource=DATASOURCE,
                   targets=_targets([query], instant=True, table=True),
                   transformations=[{"id": "organize", "options": {
                       "excludeByName": {"Time": True, "Value": True, "__name__": True}}}])


# ---------------------------------------------------------------------------------------------
# Layout: packs panels on the 24-column grid, so nobody writes gridPos by hand
# ---------------------------------------------------------------------------------------------

GRID_WIDTH = 24


class Layout:
    def __init__(self) -> None:
        self.panels: list[g.Panel] = []
        self._x = 0
        self._y = 0
        self._row_height = 0

    def _newline(self) -> None:
        self._y += self._row_height
        self._x, self._row_height = 0, 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=GRID_WIDTH, x=0, y=self._y)))
        self._y += 1

    def add(self, panel: g.Panel, *, w: int, h: int = 8) -> None:
        if self._x + w > GRID_WIDTH:
            self._newline()
        panel.gridPos = g.GridPos(h=h, w=w, x=self._x, y=self._y)
        self.panels.append(panel)
        self._x += w
        self._row_height = max(self._row_height, h)

    def add_row(self, panels: Sequence[g.Panel], *, h: int = 8) -> None:
        """Panels side by side, sharing the full width."""
        w = GRID_WIDTH // len(panels)
        for p in panels:
            self.add(p, w=w, h=h)


# ---------------------------------------------------------------------------------------------
# Shared panels
# ---------------------------------------------------------------------------------------------


def _templating() -> g.Templating:
    query_var: Callable[..., g.Template] = lambda name, label, query: g.Template(  # noqa: E731
        name=name, label=label, query=query, dataSource=DATASOURCE, includeAll=True, multi=True,
        allValue=".*", refresh=2, default="All")
    return g.Templating(list=[
        g.Template(name="datasource", label="Data source", query="prometheus", type="datasource"),
        query_var("target", "Target", "label_values(vllm_diag_up, target)"),
        query_var("model", "Model", 'label_values(vllm_diag_evidence_ready{target=~"$target"}, model_name)'),
    ])


def _layer_row(layout: Layout, layer: str, panels: Sequence[g.Panel]) -> None:
    layout.row(f"Layer: {layer}")
    layout.add_row(panels)


def _kv_usage() -> g.Panel:
    return timeseries(
        "KV cache usage", "Latest, window max and window mean per target (sidecar), and the raw engine gauge.",
        [(diag("vllm_diag_kv_cache_usage_ratio"), "{{target}} {{stat}}"),
         (recorded("model:vllm_kv_cache_usage:max"), "raw {{pod}} max")],
        metrics=["vllm_diag_kv_cache_usage_ratio", "model:vllm_kv_cache_usage:max"], unit="percentunit",
        judgement=catalog("kv_usage_high"), max_value=1)


def _preemptions() -> g.Panel:
    return timeseries(
        "Preemptions per finished request", "Frequent preemption means the KV cache is short (symptom D).",
        [(diag("vllm_diag_preemptions_per_request"), "{{target}}"),
         (recorded("model:vllm_preemptions_per_request:ratio_rate5m"), "raw {{pod}}")],
        metrics=["vllm_diag_preemptions_per_request", "model:vllm_preemptions_per_request:ratio_rate5m"],
        judgement=catalog("preemptions_per_request"))


def _prefix_hits() -> g.Panel:
    return timeseries(
        "Prefix-cache hit ratio", "Cached / queried prompt tokens; low with long prompts = symptom F.",
        [(diag("vllm_diag_prefix_cache_hit_ratio"), "{{target}}"),
         (recorded("model:vllm_prefix_cache_hit:ratio_rate5m"), "raw {{pod}}")],
        metrics=["vllm_diag_prefix_cache_hit_ratio", "model:vllm_prefix_cache_hit:ratio_rate5m"],
        unit="percentunit", judgement=catalog("prefix_hit_ratio_low", high_is_bad=False), max_value=1)


def _ttft() -> g.Panel:
    return timeseries(
        "TTFT quantiles", "Time to first token over the sidecar window, and the raw p95.",
        [(diag("vllm_diag_ttft_seconds"), "{{target}} p{{quantile}}"),
         (recorded("model:vllm_ttft_seconds:p95_rate5m"), "raw {{pod}} p0.95")],
        metrics=["vllm_diag_ttft_seconds", "model:vllm_ttft_seconds:p95_rate5m"], unit="s",
        judgement=slo("ttft"))


def _itl() -> g.Panel:
    return timeseries(
        "ITL quantiles", "Inter-token latency over the sidecar window, and the raw p95.",
        [(diag("vllm_diag_itl_seconds"), "{{target}} p{{quantile}}"),
         (recorded("model:vllm_itl_seconds:p95_rate5m"), "raw {{pod}} p0.95")],
        metrics=["vllm_diag_itl_seconds", "model:vllm_itl_seconds:p95_rate5m"], unit="s",
        judgement=slo("itl"))


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
         (recorded("model:vllm_frontend_overhead_seconds:mean_rate5m"), "raw {{pod}} e2e - queue - inference")],
        metrics=["vllm_diag_ttft_breakdown_seconds", "model:vllm_frontend_overhead_seconds:mean_rate5m"], unit="s")


def _itl_tail_ratio() -> str:
    p99 = diag("vllm_diag_itl_seconds", 'quantile="0.99"')
    p50 = diag("vllm_diag_itl_seconds", 'quantile="0.5"')
    return f"{p99}\n/ ignoring (quantile)\n({p50} > 0)"


GENERATION_THROUGHPUT = diag("vllm_diag_throughput_tokens_per_second", 'kind="generation"')

# ---------------------------------------------------------------------------------------------
# Dashboards
# ---------------------------------------------------------------------------------------------


def overview() -> g.Dashboard:
    lay = Layout()
    lay.add(stat("Bottleneck layer", "The sidecar's verdict per target (one-hot vllm_diag_layer_verdict): one of "
                 f"{', '.join(LAYERS)}, none (healthy) or unknown (insufficient evidence).",
                 (diag("vllm_diag_layer_verdict") + " == 1", "{{target}}: {{layer}}"),
                 metrics=["vllm_diag_layer_verdict"], text_mode="name"), w=12, h=5)
    lay.add(stat("Targets up", "vLLM targets the sidecar scraped successfully at its last attempt.",
                 ('sum(vllm_diag_up{target=~"$target"})', "up"), metrics=["vllm_diag_up"]), w=6, h=5)
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
                        (RAW.sum_rate("vllm:generation_tokens_total", RATE), "raw {{model_name}} generation")],
                       metrics=["vllm_diag_throughput_tokens_per_second", "vllm:generation_tokens_total"],
                       unit="short"),
            timeseries("Finished requests per second", "Client disconnects are not counted by vLLM.",
                       [(diag("vllm_diag_requests_per_second"), "{{target}}"),
                        (recorded("model:vllm_requests_finished:rate5m"), "raw {{pod}}")],
                       metrics=["vllm_diag_requests_per_second", "model:vllm_requests_finished:rate5m"], unit="reqps"),
            timeseries("Mean prompt and output length", "Tokens per finished request; long prompts make "
                       "prefill cost intrinsic (A1).",
                       [(RAW.mean("vllm:request_prompt_tokens", RATE), "{{model_name}} prompt"),
                        (RAW.mean("vllm:request_generation_tokens", RATE), "{{model_name}} output")],
                       metrics=["vllm:request_prompt_tokens_sum", "vllm:request_generation_tokens_sum"],
                       judgement=catalog("long_prompt_tokens")),
        ],
        "scheduler": [
            timeseries("Running and waiting requests", "At the sidecar's last scrape, and the raw reasons.",
                       [(diag("vllm_diag_requests"), "{{target}} {{state}}"),
                        (RAW.agg("sum", "vllm:num_requests_waiting_by_reason"), "raw {{model_name}} {{reason}}")],
                       metrics=["vllm_diag_requests", "vllm:num_requests_waiting_by_reason"]),
            timeseries("TTFT breakdown", "Mean time to first token per request by phase.",
                       [(diag("vllm_diag_ttft_breakdown_seconds"), "{{target}} {{phase}}")],
                       metrics=["vllm_diag_ttft_breakdown_seconds"], unit="s"),
            _ttft(),
        ],
        "kv_cache": [_kv_usage(), _preemptions(), _prefix_hits()],
        "gpu_compute": [
            timeseries("Tokens per engine step", "Mean tokens per engine output batch (about one per step).",
                       [(diag("vllm_diag_tokens_per_step"), "{{target}}")],
                       metrics=["vllm_diag_tokens_per_step"]),
            timeseries("Engine steps per second", "Engine output batches per second (sidecar and raw).",
                       [(diag("vllm_diag_engine_steps_per_second"), "{{target}}"),
                        (RAW.sum_rate("vllm:iteration_tokens_total_count", RATE), "raw {{model_name}}")],
                       metrics=["vllm_diag_engine_steps_per_second", "vllm:iteration_tokens_total_count"],
                       unit="ops"),
            _itl(),
        ],
        "cpu": [
            _cpu_score(),
            timeseries("API-server CPU", "Rate of the API server's process_cpu_seconds_total; its event loop "
                       "saturates near one core.",
                       [(diag("vllm_diag_api_server_cpu_cores"), "{{target}}")],
                       metrics=["vllm_diag_api_server_cpu_cores"], judgement=catalog("api_server_busy_cores")),
            _frontend_overhead(),
        ],
        "distributed": [
            timeseries("Distributed layer score", "Score of the multi-GPU layer (symptom G).",
                       [(diag("vllm_diag_layer_score", 'layer="distributed"'), "{{target}}")],
                       metrics=["vllm_diag_layer_score"], unit="percentunit",
                       judgement=catalog("verdict_enter_score"), max_value=1),
            timeseries("ITL tail ratio (p99 / p50)", "Uniformly slow ITL (low ratio) with KV to spare points at "
                       "parallelism overhead; a high ratio at stutter (B1/B2).",
                       [(_itl_tail_ratio(), "{{target}}")],
                       metrics=["vllm_diag_itl_seconds"], judgement=catalog("itl_tail_ratio")),
            timeseries("Mean KV usage", "Low mean KV usage under TP/PP means the extra GPUs buy no memory relief.",
                       [(diag("vllm_diag_kv_cache_usage_ratio", 'stat="mean"'), "{{target}}")],
                       metrics=["vllm_diag_kv_cache_usage_ratio"], unit="percentunit",
                       judgement=catalog("kv_relief_usage", high_is_bad=False), max_value=1),
        ],
    }
    assert tuple(rows) == LAYERS, "rows follow the method's layer order"
    for layer, panels in rows.items():
        _layer_row(lay, layer, panels)
    return _dashboard("vLLM layered diagnosis", "vllm-diag-overview", lay,
                      "Which layer holds vLLM back, the active symptoms, and each layer's core signals.")


def fleet() -> g.Dashboard:
    lay = Layout()
    lay.add(table("Verdict by target", "The current bottleneck layer of every target and model.",
                  (diag("vllm_diag_layer_verdict") + " == 1", ""), metrics=["vllm_diag_layer_verdict"]), w=12, h=8)
    lay.add(table("Scrape health by target", "1 = the last scrape succeeded.",
                  ('vllm_diag_up{target=~"$target"}', ""), metrics=["vllm_diag_up"]), w=12, h=8)
    lay.add_row([
        timeseries("Targets per verdict layer", "How many targets each layer holds back.",
                   [(f"count by (layer) ({diag('vllm_diag_layer_verdict')} == 1)", "{{layer}}")],
                   metrics=["vllm_diag_layer_verdict"]),
        timeseries("Targets per active symptom", "How many targets show each symptom class.",
                   [(f"sum by (symptom) ({diag('vllm_diag_symptom_active')})", "{{symptom}}")],
                   metrics=["vllm_diag_symptom_active"]),
    ])
    lay.add_row([
        timeseries("Max KV usage by target", "Window max per target.",
                   [(diag("vllm_diag_kv_cache_usage_ratio", 'stat="max"'), "{{target}}")],
                   metrics=["vllm_diag_kv_cache_usage_ratio"], unit="percentunit",
                   judgement=catalog("kv_usage_high"), max_value=1),
        timeseries("Preemptions per request by target", "Over the sidecar window.",
                   [(diag("vllm_diag_preemptions_per_request"), "{{target}}")],
                   metrics=["vllm_diag_preemptions_per_request"], judgement=catalog("preemptions_per_request")),
        timeseries("CPU-starvation score by target", "0..1.",
                   [(diag("vllm_diag_cpu_starvation_score"), "{{target}}")],
                   metrics=["vllm_diag_cpu_starvation_score"], unit="percentunit",
                   judgement=catalog("cpu_starvation_score"), max_value=1),
    ])
    lay.add_row([
        timeseries("TTFT p95 by target", "Against the TTFT SLO.",
                   [(diag("vllm_diag_ttft_seconds", 'quantile="0.95"'), "{{target}}")],
                   metrics=["vllm_diag_ttft_seconds"], unit="s", judgement=slo("ttft")),
        timeseries("ITL p95 by target", "Against the ITL SLO.",
                   [(diag("vllm_diag_itl_seconds", 'quantile="0.95"'), "{{target}}")],
                   metrics=["vllm_diag_itl_seconds"], unit="s", judgement=slo("itl")),
        timeseries("Generation throughput by model", "Tokens per second per model: sidecar sum and raw.",
                   [(f"sum by (model_name) ({GENERATION_THROUGHPUT})", "{{model_name}}"),
                    (f"sum by (model_name) ({RAW.rate('vllm:generation_tokens_total', RATE)})",
                     "raw {{model_name}}")],
                   metrics=["vllm_diag_throughput_tokens_per_second", "vllm:generation_tokens_total"]),
    ])
    return _dashboard("vLLM fleet diagnosis", "vllm-diag-fleet", lay,
                      "Verdicts, symptoms and core signals across every target and model.")


def _dashboard(title: str, uid: str, layout: Layout, description: str) -> g.Dashboard:
    return g.Dashboard(
        title=title, uid=uid, description=description + " Generated by `vllm-diag render dashboards`.",
        tags=["vllm", "vllm-diag"], panels=layout.panels, templating=_templating(),
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


def resolve(expr: str, values: Mapping[str, str] = QUERY_DEFAULTS) -> str:
    """Substitute Grafana variables so the expression runs against Prometheus directly."""
    for var in sorted(values, key=len, reverse=True):  # $__rate_interval before shorter names
        expr = expr.replace(var, values[var])
    return expr


def all_queries() -> list[str]:
    """Every PromQL expression of every dashboard panel, variables resolved to match-all, deduplicated."""
    return list(dict.fromkeys(resolve(q) for q in raw_queries()))


__all__ = ["DASHBOARDS", "all_queries", "raw_queries", "render_files", "variable_queries"]
