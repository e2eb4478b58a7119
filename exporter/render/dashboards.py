"""Grafana dashboards (grafanalib), generated from the catalog: ``vllm-diag render dashboards``.

The JSON in ``dashboards/`` is generated: edit this file, not the JSON. ``render all --check``
compares the committed files byte for byte (stable ``json.dumps``, trailing newline) and flags
files no builder produced. Layout follows vLLM's ``tools/generate_grafana_dashboards.py``:
selectors and constants, PromQL, panel builders (small pure functions), layout, one function
per dashboard, the ``DASHBOARDS`` dict, then the query walk used by the lint and later tests.

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
from dataclasses import dataclass
from typing import Any

import grafanalib.core as g
from grafanalib._gen import DashboardEncoder

from exporter.catalog import metrics as vllm
from exporter.catalog.symptoms import LAYERS
from exporter.catalog.thresholds import BY_KEY, DEFAULTS
from exporter.config import SLO_PERIOD_DAYS
from exporter.publish.exported import PREFIX, exported
from exporter.render import slo as slo_rules
from exporter.render.promql import PromQL, fmt

# ---------------------------------------------------------------------------------------------
# Selectors and constants
# ---------------------------------------------------------------------------------------------

DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
# Every series is filtered on the cluster and namespace variables. Their "All" is `.*`, which also
# matches a series without the label: `cluster` is the external or target label multi-cluster
# setups add (absent elsewhere), `namespace` the one Kubernetes discovery (and the sidecar's
# ServiceMonitor) adds. vllm_diag_* series carry the sidecar's target name; raw vllm: series carry
# model_name and the `pod` label Prometheus' Kubernetes discovery adds. The sidecar names its target
# after its pod by default (downward API, deploy/kubernetes), so `pod=~"$target"` selects the same
# replica's raw series: no fleet-wide line next to one target's. (Outside Kubernetes, set a `pod`
# label equal to the target name on the vLLM scrape job; series without one match only the
# all-targets selection.)
PLACE_SEL = 'cluster=~"$cluster", namespace=~"$namespace"'
DIAG_SEL = f'{PLACE_SEL}, target=~"$target", model_name=~"$model"'
RAW_SEL = f'{PLACE_SEL}, model_name=~"$model", pod=~"$target"'
# Per-model series (namespace_model:* SLI recordings) carry no pod: the model is the unit.
MODEL_SEL = f'{PLACE_SEL}, model_name=~"$model"'
RAW = PromQL(RAW_SEL)


def recorded(record: str, extra: str = "") -> str:
    """A recording rule of alert_rules/vllm-diag-recording.yml, for the selected model and target."""
    return f"{record}{{{RAW_SEL}{', ' + extra if extra else ''}}}"


RATE = "$__rate_interval"
RANGE = "$__range"

# Values the variables take in all_queries(): match everything, a short rate window, a 1 h range.
QUERY_DEFAULTS: Mapping[str, str] = {"$cluster": ".*", "$namespace": ".*", "$target": ".*", "$model": ".*",
                                     "$spec_model": ".*", "$kv_model": ".*", "$lora_target": ".*", "$dp_model": ".*",
                                     "$__rate_interval": "1m", "$__range": "1h"}

GREEN, RED, NEUTRAL = "green", "red", "blue"


def diag(metric: str, extra: str = "") -> str:
    """A vllm_diag_* selector restricted to the dashboard's target and model (the name from the catalog)."""
    return f"{exported(metric).sample_name}{{{DIAG_SEL}{', ' + extra if extra else ''}}}"


def diag_target(metric: str) -> str:
    """A per-target vllm_diag_* family without model_name (vllm_diag_up): filtered on the target only."""
    return f'{exported(metric).sample_name}{{{PLACE_SEL}, target=~"$target"}}'


# ---------------------------------------------------------------------------------------------
# Threshold steps from the catalog
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Judgement:
    """A colour step: the catalog value, and whether crossing it upwards is bad."""

    value: float
    high_is_bad: bool = True
    source: str = ""  # catalog key, quoted in the panel description


def catalog(key: str, high_is_bad: bool = True) -> Judgement:
    return Judgement(DEFAULTS[key], high_is_bad, f"catalog threshold `{key}` ({BY_KEY[key].controls})")


def _steps(j: Judgement | None) -> list[g.Threshold]:
    if j is None:  # no judgement: one neutral colour
        return [g.Threshold(NEUTRAL, 0, 0.0)]
    below, above = (GREEN, RED) if j.high_is_bad else (RED, GREEN)
    return [g.Threshold(below, 0, 0.0), g.Threshold(above, 1, float(j.value))]


# Burn-rate colours: the factors of the multiwindow alerts (exporter.render.slo.BURN_ALERTS), so a
# tile turns the colour of the alert that a sustained burn at that rate would raise.
BURN_COLOURS: tuple[str, ...] = ("yellow", "orange", "dark-orange", "red")


def _burn_steps() -> list[g.Threshold]:
    factors = sorted({a.factor for a in slo_rules.BURN_ALERTS})
    assert len(factors) <= len(BURN_COLOURS), "one colour per burn factor"
    return [g.Threshold(GREEN, 0, 0.0),
            *(g.Threshold(colour, i + 1, float(f)) for i, (f, colour) in enumerate(zip(factors, BURN_COLOURS)))]


def _burn_source() -> str:
    pairs = ", ".join(f"{fmt(a.factor)} ({a.severity}, {a.long_window}/{a.short_window})"
                      for a in slo_rules.BURN_ALERTS)
    return f"Colour steps at the burn-rate alerts' factors: {pairs}."


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


def timeseries(title: str, text: str, queries: Sequence[Query], *, metrics: Sequence[str], unit: str,
               judgement: Judgement | None = None, max_value: float | None = None,
               overrides: Sequence[Mapping[str, Any]] = (), links: Sequence[Mapping[str, Any]] = ()) -> g.Panel:
    panel = g.TimeSeries(
        title=title, description=_describe(text, metrics, judgement), dataSource=DATASOURCE,
        targets=_targets(queries), unit=unit, thresholds=_steps(judgement),
        thresholdsStyleMode="line" if judgement else "off", valueMin=0, valueMax=max_value,
        legendDisplayMode="table", legendPlacement="right" if len(queries) > 2 else "bottom",
        overrides=list(overrides),
    )
    if links:  # data links: on every point of every series
        panel.extraJson = {"fieldConfig": {"defaults": {"links": list(links)}}}
    return panel


def stat(title: str, text: str, query: Query | Sequence[Query], *, metrics: Sequence[str], text_mode: str = "auto",
         unit: str = "none", no_value: str = "No data", judgement: Judgement | None = None,
         steps: list[g.Threshold] | None = None, decimals: int | None = None) -> g.Panel:
    queries = [query] if isinstance(query, tuple) else list(query)
    return g.Stat(
        title=title, description=_describe(text, metrics, judgement), dataSource=DATASOURCE,
        targets=_targets(queries, instant=True), textMode=text_mode, format=unit, noValue=no_value,
        graphMode="none", reduceCalc="lastNotNull", colorMode="value" if judgement or steps else "none",
        thresholds=steps if steps is not None else _steps(judgement), decimals=decimals,
    )


def state_timeline(title: str, text: str, query: Query, *, metrics: Sequence[str]) -> g.Panel:
    return g.StateTimeline(title=title, description=_describe(text, metrics, None), dataSource=DATASOURCE,
                           targets=_targets([query]), thresholds=_steps(None), mergeValues=True)


def table(title: str, text: str, query: Query | Sequence[Query], *, metrics: Sequence[str],
          columns: Mapping[str, str] | None = None, overrides: Sequence[Mapping[str, Any]] = ()) -> g.Panel:
    """An instant table. Several queries are merged into one row per label set; ``columns`` names
    their value columns (refId order), which Grafana otherwise calls "Value #A"."""
    queries = [query] if isinstance(query, tuple) else list(query)
    hidden = {"Time": True, "__name__": True}
    if columns is None:
        hidden["Value"] = True
    transformations: list[dict[str, Any]] = [{"id": "merge", "options": {}}] if len(queries) > 1 else []
    renames = {f"Value #{chr(ord('A') + i)}": name for i, name in enumerate((columns or {}).values())}
    transformations.append({"id": "organize", "options": {"excludeByName": hidden, "renameByName": renames}})
    return g.Table(title=title, description=_describe(text, metrics, None), dataSource=DATASOURCE,
                   targets=_targets(queries, instant=True, table=True), transformations=transformations,
                   overrides=list(overrides))


# ---------------------------------------------------------------------------------------------
# Field overrides and links
# ---------------------------------------------------------------------------------------------


def _by_name(field: str, *properties: tuple[str, Any]) -> dict[str, Any]:
    return {"matcher": {"id": "byName", "options": field},
            "properties": [{"id": key, "value": value} for key, value in properties]}


def _threshold_line(ref_id: str) -> dict[str, Any]:
    """The objective's threshold drawn as a dashed red series (query ``ref_id``), never filled, and
    without the panel's per-target data links (the constant has no target to open)."""
    return {"matcher": {"id": "byFrameRefID", "options": ref_id}, "properties": [
        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        {"id": "color", "value": {"mode": "fixed", "fixedColor": RED}},
        {"id": "custom.fillOpacity", "value": 0},
        {"id": "links", "value": []},
    ]}


OVERVIEW_UID = "vllm-diag-overview"
FLEET_UID = "vllm-diag-fleet"
# Carried on every cross-dashboard link: the data source, the place selection and the time range.
_KEEP = "${datasource:queryparam}&${cluster:queryparam}&${__url_time_range}"


def overview_url(*, target: str | None = None, model: str | None = None, namespace: str | None = None) -> str:
    """The overview for one clicked target/model; unset parts keep the current selection.

    Values are Grafana interpolations such as ``${__data.fields.target}``, percent-encoded."""
    def param(var: str, value: str | None) -> str:
        return f"var-{var}=${{{value}:percentencode}}" if value else f"${{{var}:queryparam}}"

    parts = [param("namespace", namespace), param("target", target), param("model", model), _KEEP]
    return f"/d/{OVERVIEW_UID}/{OVERVIEW_UID}?" + "&".join(parts)


def _link(title: str, url: str) -> dict[str, Any]:
    return {"title": title, "url": url, "targetBlank": False}


def _table_links(*, with_model: bool = True) -> list[dict[str, Any]]:
    """Data links of a per-target table: the target cell opens that target's overview in the current
    namespace selection; the namespace cell (a column only where series carry the label, so the
    link never names a missing field) pins the namespace too, for pod names reused across namespaces.
    ``with_model``: the rows carry model_name (vllm_diag_up does not)."""
    target, ns = "__data.fields.target", "__data.fields.namespace"
    model = "__data.fields.model_name" if with_model else None
    return [
        _by_name("target", ("links", [_link("Overview of ${__data.fields.target}",
                                            overview_url(target=target, model=model))])),
        _by_name("namespace", ("links", [_link("Overview of ${__data.fields.target} in ${__data.fields.namespace}",
                                               overview_url(target=target, model=model, namespace=ns))])),
    ]


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

    def feature_row(self, title: str, variable: str, panels: Sequence[g.Panel], *, h: int = 8) -> None:
        """A collapsed row repeated once per value of ``variable`` (the models where a feature is on):
        collapsed, it queries nothing until opened. Grafana cannot repeat a row zero times, so with the
        feature off everywhere one collapsed header stays, its variable empty."""
        self._newline()
        w = GRID_WIDTH // len(panels)
        for i, panel in enumerate(panels):
            panel.gridPos = g.GridPos(h=h, w=w, x=i * w, y=self._y + 1)
        self.panels.append(g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=GRID_WIDTH, x=0, y=self._y),
                                      collapsed=True, panels=list(panels), repeat=g.Repeat(variable=variable)))
        self._y += 1

    def add_row(self, panels: Sequence[g.Panel], *, h: int = 8) -> None:
        """Panels side by side, sharing the full width."""
        w = GRID_WIDTH // len(panels)
        for p in panels:
            self.add(p, w=w, h=h)


# ---------------------------------------------------------------------------------------------
# Shared panels
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


# ---------------------------------------------------------------------------------------------
# Objectives (SLO): attainment, burn rate and error budget from the SLI recording rules
# ---------------------------------------------------------------------------------------------

# A model is (cluster, namespace, model_name), as in the per-model recordings (exporter.render.slo).
SLI_BY = ", ".join((*slo_rules.MODEL_LABELS, "objective"))
SHORT_WINDOW = slo_rules.SLI_WINDOWS[0]  # the finest recording: sums over the dashboard range
LONG_WINDOW = slo_rules.SLI_WINDOWS[-1]  # the longest: the budget estimate
BURN_WINDOWS: tuple[str, ...] = ("1h", "6h", LONG_WINDOW)
assert set(BURN_WINDOWS) <= set(slo_rules.SLI_WINDOWS) and LONG_WINDOW.endswith("d")
LONG_WINDOW_DAYS = int(LONG_WINDOW[:-1])
TOKENS_PER_S, TOKENS, EVENTS_PER_S, TIMES = "suffix:tok/s", "suffix:tok", "suffix:events/s", "suffix:×"
ALL_OBJECTIVES = ""  # objective matcher value that selects every objective


@dataclass(frozen=True, slots=True)
class Sli:
    """SLI queries at one level: per replica (summed over the selected targets, overview) or per
    model (the namespace_model recordings, fleet); ``objective`` empty selects all three."""

    per_model: bool
    objective: str = ALL_OBJECTIVES

    def _series(self, record: str) -> str:
        sel = MODEL_SEL if self.per_model else RAW_SEL
        if self.objective:
            sel += f', objective="{self.objective}"'
        return f"{record}{{{sel}}}"

    def _sum(self, record: str, *, over_range: bool = False) -> str:
        series = self._series(record)
        return f"sum by ({SLI_BY}) ({f'sum_over_time({series}[{RANGE}])' if over_range else series})"

    def events(self, window: str, *, over_range: bool = False) -> str:
        rec = slo_rules.model_events(window) if self.per_model else slo_rules.pod_events(window)
        return self._sum(rec, over_range=over_range)

    def bad(self, window: str, *, over_range: bool = False) -> str:
        rec = slo_rules.model_bad_events(window) if self.per_model else slo_rules.pod_bad_events(window)
        return self._sum(rec, over_range=over_range)

    def good(self, window: str) -> str:
        return f"{self.events(window)}\n-\n{self.bad(window)}"

    def attainment(self) -> str:
        """Good share over the dashboard range: the 5m recordings summed over the range (each
        evaluation weighs the same, so the ratio is that of the events in the range)."""
        ratio = PromQL.divide(self.bad(SHORT_WINDOW, over_range=True), self.events(SHORT_WINDOW, over_range=True))
        return f"1 - (\n{ratio}\n)"

    def burn(self, window: str) -> str:
        if self.per_model:  # the recorded per-model burn rate; the sum drops __name__, so a table
            return self._sum(slo_rules.model_burn(window))  # merges it with the computed columns
        # Replicas summed first: the burn of the selected targets together, not an average of rates.
        return (f"{PromQL.divide(self.bad(window), self.events(window))}\n"
                f"/ on (objective) group_left ()\n{slo_rules.ERROR_BUDGET_RECORD}")

    def budget_left(self) -> str:
        """1 - the share of the period's budget that the longest window spent."""
        return f"1 - (\n{self.burn(LONG_WINDOW)}\n) * {LONG_WINDOW_DAYS} / {SLO_PERIOD_DAYS}"


def objective_target(objective: str) -> Query:
    """The objective's target (1 - its error budget), a constant recording: not filtered."""
    return f'1 - {slo_rules.ERROR_BUDGET_RECORD}{{objective="{objective}"}}', "objective"


SLI_METRICS = (slo_rules.pod_events(SHORT_WINDOW), slo_rules.pod_bad_events(SHORT_WINDOW))
BUDGET_TEXT = (f"Error budget left, counting only the last {LONG_WINDOW_DAYS} days: 1 - burn rate "
               f"({LONG_WINDOW}) x {LONG_WINDOW_DAYS}/{SLO_PERIOD_DAYS}, i.e. the {SLO_PERIOD_DAYS}-day budget minus "
               f"what the last {LONG_WINDOW_DAYS} days spent. Prometheus keeps no {SLO_PERIOD_DAYS}-day SLI here, "
               f"so budget spent earlier in the period is not subtracted: an upper bound on what is left.")


def _attainment_stat(objective: str) -> g.Panel:
    sli = Sli(per_model=False, objective=objective)
    title = slo_rules.OBJECTIVE_TITLE[objective]
    return stat(f"{title} attainment", f"Share of good {title} events over the dashboard's time range for the "
                "selected targets (per model), next to the objective's target. Set the range to "
                f"{SLO_PERIOD_DAYS} days for the period's attainment.",
                [(sli.attainment(), "{{namespace}} {{model_name}}"), objective_target(objective)],
                metrics=[*SLI_METRICS, slo_rules.ERROR_BUDGET_RECORD], unit="percentunit", decimals=3)


def _burn_stat(objective: str) -> g.Panel:
    sli = Sli(per_model=False, objective=objective)
    title = slo_rules.OBJECTIVE_TITLE[objective]
    return stat(f"{title} burn rate", f"Error-budget burn rate of the selected targets over {', '.join(BURN_WINDOWS)}"
                f": 1 spends the budget exactly over {SLO_PERIOD_DAYS} days. {_burn_source()}",
                [(sli.burn(w), f"{{{{model_name}}}} {w}") for w in BURN_WINDOWS],
                metrics=[slo_rules.pod_events(w) for w in BURN_WINDOWS] + [slo_rules.ERROR_BUDGET_RECORD],
                unit=TIMES, steps=_burn_steps(), decimals=2)


def _budget_stat() -> g.Panel:
    queries = [(Sli(per_model=False, objective=o).budget_left(), f"{slo_rules.OBJECTIVE_TITLE[o]} {{{{model_name}}}}")
               for o in slo_rules.OBJECTIVES]
    return stat("Error budget left (estimate)", BUDGET_TEXT + " Red: the budget is spent.", queries,
                metrics=[slo_rules.pod_bad_events(LONG_WINDOW), slo_rules.ERROR_BUDGET_RECORD], unit="percentunit",
                steps=[g.Threshold(RED, 0, 0.0), g.Threshold(GREEN, 1, 0.0)], decimals=1)


def _good_bad(objective: str) -> g.Panel:
    sli = Sli(per_model=False, objective=objective)
    title = slo_rules.OBJECTIVE_TITLE[objective]
    what = {"ttft": "first tokens", "itl": "token gaps", "availability": "finished requests"}[objective]
    return timeseries(f"{title}: good and bad events", f"{what.capitalize()} per second within and outside the "
                      f"objective ({SHORT_WINDOW} rates), for the selected targets.",
                      [(sli.good(SHORT_WINDOW), "{{model_name}} good"), (sli.bad(SHORT_WINDOW), "{{model_name}} bad")],
                      metrics=SLI_METRICS, unit=EVENTS_PER_S,
                      overrides=[{"matcher": {"id": "byFrameRefID", "options": ref},
                                  "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": colour}}]}
                                 for ref, colour in (("A", GREEN), ("B", RED))])


def _objectives_row(lay: Layout) -> None:
    lay.row("Objectives (SLO)")
    lay.add_row([_attainment_stat(o) for o in slo_rules.OBJECTIVES], h=5)
    lay.add_row([*(_burn_stat(o) for o in slo_rules.OBJECTIVES), _budget_stat()], h=5)
    lay.add_row([_good_bad(o) for o in slo_rules.OBJECTIVES], h=7)


def _model_slo_table() -> g.Panel:
    """Per model and objective: attainment over the range, burn rates and the budget estimate."""
    sli = Sli(per_model=True)
    columns = {"attainment": "Attainment (range)", **{w: f"Burn {w}" for w in BURN_WINDOWS},
               "budget": f"Budget left (last {LONG_WINDOW} only)"}
    queries = [(sli.attainment(), ""), *((sli.burn(w), "") for w in BURN_WINDOWS), (sli.budget_left(), "")]
    model, ns = "__data.fields.model_name", "__data.fields.namespace"
    burn_cells = [("unit", TIMES), ("decimals", 2), ("custom.cellOptions", {"type": "color-background"}),
                  ("thresholds", {"mode": "absolute", "steps": [
                      {"color": t.color, "value": None if t.index == 0 else t.value} for t in _burn_steps()]})]
    return table("Objectives by model", "Each model's objectives (replicas summed): attainment over the dashboard "
                 f"range, burn rates ({', '.join(BURN_WINDOWS)}; 1 spends the budget exactly over {SLO_PERIOD_DAYS} "
                 f"days; {_burn_source()}) and the budget estimate. {BUDGET_TEXT} The model cell opens the overview.",
                 queries, columns=columns,
                 metrics=[slo_rules.model_events(SHORT_WINDOW), slo_rules.model_bad_events(SHORT_WINDOW),
                          *(slo_rules.model_burn(w) for w in BURN_WINDOWS)],
                 overrides=[
                     _by_name(columns["attainment"], ("unit", "percentunit"), ("decimals", 3)),
                     *(_by_name(columns[w], *burn_cells) for w in BURN_WINDOWS),
                     _by_name(columns["budget"], ("unit", "percentunit"), ("decimals", 1)),
                     _by_name("model_name", ("links", [_link("Overview of ${__data.fields.model_name}",
                                                            overview_url(model=model))])),
                     _by_name("namespace", ("links", [_link(
                         "Overview of ${__data.fields.model_name} in ${__data.fields.namespace}",
                         overview_url(model=model, namespace=ns))])),
                 ])


GENERATION_THROUGHPUT = diag("vllm_diag_throughput_tokens_per_second", 'kind="generation"')

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
        "kv_cache": [_kv_usage(), _preemptions(), _prefix_hits()],
        "gpu_compute": [
            timeseries("Tokens per engine step", "Mean tokens per engine output batch (about one per step).",
                       [(diag("vllm_diag_tokens_per_step"), "{{target}}")],
                       metrics=["vllm_diag_tokens_per_step"], unit=TOKENS),
            timeseries("Engine steps per second", "Engine output batches per second (sidecar and raw).",
                       [(diag("vllm_diag_engine_steps_per_second"), "{{target}}"),
                        (RAW.sum_rate(vllm.ITERATION_TOKENS_TOTAL + "_count", RATE), "raw {{model_name}}")],
                       metrics=["vllm_diag_engine_steps_per_second", vllm.ITERATION_TOKENS_TOTAL + "_count"],
                       unit="ops"),
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
