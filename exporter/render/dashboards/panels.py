"""Dashboard building blocks: selectors and constants, catalog threshold steps, panel builders
(small pure functions), field overrides and links, and the grid layout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grafanalib.core as g

from exporter.catalog.thresholds import BY_KEY, DEFAULTS
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
# Grafana unit suffixes the panels share.
TOKENS_PER_S, TOKENS, EVENTS_PER_S, TIMES = "suffix:tok/s", "suffix:tok", "suffix:events/s", "suffix:×"


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
