"""Dashboards an on-call SRE trusts (issue 25): place variables on every selector, objectives read
from Prometheus instead of rendered numbers, the SLO row and table, units, alert annotations, links.

Checked on the committed JSON (what Grafana loads); test_render.py checks it equals the generator's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.config import Slo
from exporter.render import dashboards, lint, rules
from exporter.render import slo as slo_rules

REPO = Path(__file__).resolve().parents[2]
OVERVIEW, FLEET = "vllm-diag-overview.json", "vllm-diag-fleet.json"
PLACE = ('cluster=~"$cluster"', 'namespace=~"$namespace"')
# A series selector: a metric name not preceded by a name character, then its optional matchers.
SELECTOR = re.compile(r"(?<![\w:])((?:vllm:|vllm_diag_|vllm_slo:|model:|pod:|namespace_model:)[\w:]*)(\{[^{}]*\})?")


def _load(name: str) -> dict[str, Any]:
    return json.loads((REPO / "dashboards" / name).read_text())


DASHBOARDS = {name: _load(name) for name in (OVERVIEW, FLEET)}


def _panels(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(p) for p in dashboards.iter_panels(data["panels"])]


def _exprs(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for p in _panels(data):
        for t in p.get("targets", []):
            yield p["title"], t["expr"]


def _panel(data: dict[str, Any], title: str) -> dict[str, Any]:
    return next(p for p in _panels(data) if p["title"] == title)


# ------------------------------------------------------------------ variables


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_place_variables_come_first_and_match_missing_labels(name: str) -> None:
    variables = {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}
    # then the hidden feature variables a feature row repeats over (the overview's speculative decoding, KV
    # transfer, LoRA, data parallel)
    feature = ["spec_model", "kv_model", "lora_target", "dp_model"] if name == "vllm-diag-overview.json" else []
    assert list(variables) == ["datasource", "cluster", "namespace", "target", "model", *feature]
    for var in feature:
        assert variables[var]["hide"] == 2 and all(m in variables[var]["query"] for m in PLACE), var
    for var in ("cluster", "namespace", "target", "model"):
        v = variables[var]
        # "All" is `.*`: it also matches series without the label (one cluster, outside Kubernetes).
        assert v["includeAll"] and v["allValue"] == ".*" and v["multi"], var
    assert variables["cluster"]["query"] == "label_values(vllm:num_requests_running, cluster)"
    assert 'cluster=~"$cluster"' in variables["namespace"]["query"]
    for var in ("target", "model"):
        assert all(m in variables[var]["query"] for m in PLACE), var


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_selector_filters_on_the_variables(name: str) -> None:
    checked = 0
    for title, expr in _exprs(DASHBOARDS[name]):
        for metric, labels in SELECTOR.findall(expr):
            checked += 1
            where = f"{name} / {title}: {metric}{labels}"
            if metric.startswith("vllm_slo:"):
                # Constants rendered from the configuration: no place labels to filter on.
                assert re.fullmatch(r'\{objective="\w+"\}', labels or "{}") or not labels, where
                continue
            assert labels and all(m in labels for m in PLACE), where
            if metric.startswith("vllm_diag_"):
                assert 'target=~"$target"' in labels, where
            elif metric.startswith("namespace_model:"):
                assert 'model_name=~"$model"' in labels, where  # per model: no pod label to filter on
            else:  # raw vLLM series and per-replica recordings
                assert 'pod=~"$target"' in labels and 'model_name=~"$model"' in labels, where
    assert checked > 15


# ------------------------------------------------------------------ objectives are read, not rendered

SLO = Slo()
SLO_VALUES = {*(o.threshold_seconds for o in SLO.objectives().values()),
              *(o.target for o in SLO.objectives().values()), SLO.availability.target}
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")


def _literals(expr: str) -> set[float]:
    """Numbers a query compares or computes with (label values and range durations excluded)."""
    text = lint._RANGE.sub("", lint._BRACES.sub("", lint._STRING.sub('""', expr)))
    return {float(n) for n in _NUMBER.findall(text)}


def test_literal_scan_sees_a_typed_objective() -> None:
    assert 2.5 in _literals('pod:vllm_ttft_seconds:p95_rate5m{pod=~"$target"} > 2.5')
    assert not _literals('vllm_diag_itl_seconds{quantile="0.99"}[5m]')


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_no_objective_number_in_a_dashboard(name: str) -> None:
    data = DASHBOARDS[name]
    for title, expr in _exprs(data):
        assert not _literals(expr) & SLO_VALUES, f"{title}: an objective typed into {expr}"
    for p in _panels(data):
        if p.get("fieldConfig", {}).get("defaults", {}).get("unit") != "s":
            continue
        steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [s["value"] for s in steps] == [None], f"{p['title']}: a latency colour step pretends to know the SLO"
        assert "threshold_seconds" not in p["description"], p["title"]


@pytest.mark.parametrize(("name", "title", "objective"), [
    (OVERVIEW, "TTFT quantiles", "ttft"), (OVERVIEW, "ITL quantiles", "itl"),
    (FLEET, "TTFT p95 by target", "ttft"), (FLEET, "ITL p95 by target", "itl"),
])
def test_latency_panels_draw_the_objective_as_a_dashed_series(name: str, title: str, objective: str) -> None:
    panel = _panel(DASHBOARDS[name], title)
    line = next(t for t in panel["targets"] if t["expr"].startswith(slo_rules.THRESHOLD_RECORD))
    assert line["expr"] == f'{slo_rules.THRESHOLD_RECORD}{{objective="{objective}"}}'
    override = next(o for o in panel["fieldConfig"]["overrides"]
                    if o["matcher"] == {"id": "byFrameRefID", "options": line["refId"]})
    props = {p["id"]: p["value"] for p in override["properties"]}
    assert props["custom.lineStyle"]["fill"] == "dash"
    assert slo_rules.THRESHOLD_RECORD in rules.recording_names()


def test_dashboards_do_not_depend_on_the_rendered_objectives() -> None:
    """The objectives live in Prometheus: the dashboard module reads no Slo configuration."""
    source = "".join(p.read_text() for p in (REPO / "exporter/render/dashboards").glob("*.py"))
    assert "Slo()" not in source and "threshold_seconds" not in source


# ------------------------------------------------------------------ the SLO row and table


def _row_panels(data: dict[str, Any], row: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    inside = False
    for p in data["panels"]:
        if p["type"] == "row":
            inside = p["title"] == row
        elif inside:
            out.append(p)
    return out


def test_the_overview_opens_with_the_objectives_row() -> None:
    data = DASHBOARDS[OVERVIEW]
    assert data["panels"][0]["type"] == "row" and data["panels"][0]["title"] == "Objectives (SLO)"
    panels = {p["title"]: p for p in _row_panels(data, "Objectives (SLO)")}
    burn_factors = sorted({a.factor for a in slo_rules.BURN_ALERTS})
    for objective in slo_rules.OBJECTIVES:
        title = slo_rules.OBJECTIVE_TITLE[objective]
        attained = panels[f"{title} attainment"]
        exprs = [t["expr"] for t in attained["targets"]]
        assert f"sum_over_time({slo_rules.pod_bad_events('5m')}{{" in exprs[0] and "[$__range]" in exprs[0]
        assert f'objective="{objective}"' in exprs[0]
        assert exprs[1] == f'1 - {slo_rules.ERROR_BUDGET_RECORD}{{objective="{objective}"}}'
        assert attained["fieldConfig"]["defaults"]["unit"] == "percentunit"

        burn = panels[f"{title} burn rate"]
        windows = [re.search(r":rate(\w+)\{", t["expr"]).group(1) for t in burn["targets"]]  # type: ignore[union-attr]
        assert windows == ["1h", "6h", "3d"]
        assert all(slo_rules.ERROR_BUDGET_RECORD in t["expr"] for t in burn["targets"])
        steps = [s["value"] for s in burn["fieldConfig"]["defaults"]["thresholds"]["steps"]]
        assert steps == [None, *burn_factors]

        good_bad = panels[f"{title}: good and bad events"]
        assert [t["legendFormat"].split()[-1] for t in good_bad["targets"]] == ["good", "bad"]
    budget = panels["Error budget left (estimate)"]
    assert len(budget["targets"]) == len(slo_rules.OBJECTIVES)
    assert all(t["expr"].endswith(f"* 3 / {30}") and "rate3d" in t["expr"] for t in budget["targets"])
    assert "upper bound" in budget["description"], "the estimate says what it leaves out"


def test_the_fleet_has_a_per_model_objectives_table() -> None:
    table = _panel(DASHBOARDS[FLEET], "Objectives by model")
    exprs = [t["expr"] for t in table["targets"]]
    assert any(slo_rules.model_bad_events("5m") in e and "[$__range]" in e for e in exprs)
    for w in ("1h", "6h", "3d"):
        assert f"{slo_rules.model_burn(w)}{{" in "\n".join(exprs), w
    assert all(t["instant"] and t["format"] == "table" for t in table["targets"])
    assert table["transformations"][0]["id"] == "merge"
    renamed = table["transformations"][-1]["options"]["renameByName"]
    assert list(renamed) == [f"Value #{c}" for c in "ABCDE"]
    by_field = {o["matcher"]["options"]: {p["id"]: p["value"] for p in o["properties"]}
                for o in table["fieldConfig"]["overrides"]}
    assert by_field["Burn 1h"]["thresholds"]["steps"][-1]["value"] == max(a.factor for a in slo_rules.BURN_ALERTS)
    assert "var-model=${__data.fields.model_name:percentencode}" in by_field["model_name"]["links"][0]["url"]


def test_every_slo_query_is_linted_and_uses_recordings() -> None:
    used = {n for e in dashboards.raw_queries() for n in lint.metric_names(e)}
    sli = {n for n in used if n.startswith(("pod:vllm_sli", "pod:vllm_slo", "namespace_model:", "vllm_slo:"))}
    assert sli and sli <= rules.recording_names()
    assert lint.lint() == []


# ------------------------------------------------------------------ units

@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_units_are_real_units(name: str) -> None:
    for p in _panels(DASHBOARDS[name]):
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        assert unit != "short", f"{p['title']}: unit short"
        if "throughput" in p["title"].lower():
            assert unit == "suffix:tok/s", p["title"]
        if p["title"].startswith("Finished requests"):
            assert unit == "reqps"


# ------------------------------------------------------------------ annotations and links


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_firing_vllm_alerts_are_annotations(name: str) -> None:
    annotations = [a for a in DASHBOARDS[name]["annotations"]["list"] if "ALERTS{" in a.get("expr", "")]
    assert len(annotations) == 1
    a = annotations[0]
    assert a["enable"] and a["datasource"]["uid"] == "${datasource}"
    assert 'alertstate="firing"' in a["expr"] and 'alertname=~"VLLM.*"' in a["expr"]
    assert 'namespace=~"$namespace"' in a["expr"] and 'model_name=~"$model"' in a["expr"]
    assert "{{alertname}}" in a["titleFormat"] and "severity" in (a["textFormat"] + a["tagKeys"])
    assert a["expr"] in dashboards.annotation_queries()


def test_the_dashboards_link_to_each_other() -> None:
    for name, other in ((OVERVIEW, "vllm-diag-fleet"), (FLEET, "vllm-diag-overview")):
        links = DASHBOARDS[name]["links"]
        link = next(link for link in links if link["url"].startswith(f"/d/{other}"))
        assert link["type"] == "link" and link["keepTime"] and link["includeVars"], name


def _links(panel: dict[str, Any]) -> list[dict[str, Any]]:
    field = panel["fieldConfig"]
    found = list(field["defaults"].get("links", []))
    for o in field.get("overrides", []):
        found += [link for p in o["properties"] if p["id"] == "links" for link in p["value"]]
    return found


def test_fleet_rows_open_the_clicked_targets_overview() -> None:
    fleet = DASHBOARDS[FLEET]
    overview_vars = {v["name"] for v in DASHBOARDS[OVERVIEW]["templating"]["list"]}
    verdict = _links(_panel(fleet, "Verdict by target"))
    urls = [link["url"] for link in verdict]
    assert any("var-target=${__data.fields.target:percentencode}" in u
               and "var-model=${__data.fields.model_name:percentencode}" in u for u in urls)
    assert any("var-namespace=${__data.fields.namespace:percentencode}" in u for u in urls)
    # Scrape health rows carry no model_name: its link must not name the missing field.
    assert all("model_name" not in link["url"] for link in _links(_panel(fleet, "Scrape health by target")))
    per_target = [p for p in _panels(fleet) if p["title"].endswith("by target") and p["type"] == "timeseries"]
    assert per_target and all("${__field.labels.target:percentencode}" in _links(p)[0]["url"] for p in per_target)
    for p in _panels(fleet):
        for link in _links(p) if "fieldConfig" in p else []:
            assert link["url"].startswith("/d/vllm-diag-overview/"), p["title"]
            assert "${__url_time_range}" in link["url"] and "${datasource:queryparam}" in link["url"]
            named = {*re.findall(r"var-(\w+)=", link["url"]), *re.findall(r"\$\{(\w+):queryparam\}", link["url"])}
            assert named <= overview_vars and {"namespace", "target", "model"} <= named, link["url"]


def test_links_name_only_labels_their_series_carry() -> None:
    """A data link naming a missing field would open the overview with a literal `${__data...}`:
    every field a link reads (namespace aside: its link sits on the namespace column, which exists
    only where the series carry it) is a label of every sidecar family the panel queries."""
    from exporter.publish.exported import exported

    checked = 0
    for p in _panels(DASHBOARDS[FLEET]):
        links = _links(p) if "fieldConfig" in p else []
        fields = {f for link in links for f in re.findall(r"__(?:data\.fields|field\.labels)\.(\w+)", link["url"])}
        fields -= {"namespace"}
        for _, expr in _exprs({"panels": [p]}):
            for metric, _labels in SELECTOR.findall(expr):
                if metric.startswith("vllm_diag_"):
                    checked += 1
                    assert fields <= set(exported(metric).labels), f"{p['title']}: {metric} lacks {fields}"
    assert checked >= 5
