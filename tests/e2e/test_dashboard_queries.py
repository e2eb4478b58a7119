"""Every dashboard panel query returns series from a real Prometheus.

That Prometheus (tests/e2e/conftest.py) scrapes the sidecar (job ``vllm-diag``) and the three
simulated vLLM ``/metrics`` directly (job ``vllm``), since dashboards read raw ``vllm:`` series
next to the ``vllm_diag_*`` ones, and has the generated recording and alerting rules loaded.
Grafana variables are resolved by ``exporter.render.dashboards.all_queries()``: ``$cluster``,
``$namespace``, ``$target`` and ``$model`` to ``.*`` (the dashboards' "All", which also matches
series without the label: this Prometheus adds no cluster or namespace), ``$__rate_interval`` to
``1m``, ``$__range`` to ``1h``.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

import pytest
import yaml

from exporter.render.dashboards import (
    ALERT_ANNOTATION_EXPR,
    all_queries,
    dashboard_data,
    iter_panels,
    resolve,
    variable_queries,
)
from tests.e2e.components import RULES_DIR, get_json, poll
from tests.e2e.conftest import SCENARIOS, Stack

pytestmark = pytest.mark.prometheus

QUERIES = all_queries()
RECORDS = [rule["record"] for path in sorted(RULES_DIR.glob("*.yml"))
           for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"] if "record" in rule]
# Rate windows need two samples; a query that is still empty this long after the rules were
# loaded (and every target scraped for seconds) cannot return data.
DEADLINE_S = 20.0


def test_there_are_queries_to_check() -> None:
    assert len(QUERIES) >= 30, QUERIES
    assert RECORDS, "no recording rules in alert_rules/"


@pytest.mark.parametrize("expr", QUERIES, ids=[f"q{i:02d}" for i in range(len(QUERIES))])
def test_dashboard_query_returns_series(e2e_stack: Stack, expr: str) -> None:
    result = poll(lambda: e2e_stack.query(expr), timeout=DEADLINE_S, interval=1.0,
                  what=f"a series from dashboard query:\n{expr}", diagnostics=e2e_stack.report)
    assert all("value" in r or "values" in r for r in result), result


def test_dashboard_variables_have_values(e2e_stack: Stack) -> None:
    """$target lists the three sidecar targets; $model the model they serve (label_values queries);
    $cluster and $namespace list nothing here (no such labels) and "All" still matches."""
    values = {}
    for query in variable_queries():
        m = re.fullmatch(r"label_values\((?P<match>.+), (?P<label>\w+)\)", query)
        assert m, f"unexpected variable query {query}"
        match = resolve(m.group("match"))
        url = (f"{e2e_stack.prometheus_url}/api/v1/label/{m.group('label')}/values?"
               + urllib.parse.urlencode({"match[]": match}))
        values[m.group("label")] = get_json(url)["data"]
    assert set(values["target"]) == set(SCENARIOS), json.dumps(values)
    served = sorted({t["model_name"] for t in e2e_stack.diagnosis().values()})
    assert served and values["model_name"] == served, json.dumps(values)
    assert values["cluster"] == [] and values["namespace"] == [], json.dumps(values)


def test_alert_annotation_query_is_valid(e2e_stack: Stack) -> None:
    """The annotation's ALERTS query parses (it returns series only while a vLLM alert fires)."""
    query = urllib.parse.urlencode({"query": resolve(ALERT_ANNOTATION_EXPR)})
    assert get_json(f"{e2e_stack.prometheus_url}/api/v1/query?{query}")["status"] == "success"


@pytest.mark.parametrize("record", RECORDS)
def test_recording_rule_yields_series(e2e_stack: Stack, record: str) -> None:
    """Each recording rule produces series from the simulated vLLM scrape (what dashboards and rules build on)."""
    poll(lambda: e2e_stack.query(record), timeout=DEADLINE_S, interval=1.0,
         what=f"a series recorded as {record}", diagnostics=e2e_stack.report)


MERGED_TABLES = [p for data in dashboard_data().values() for p in iter_panels(data["panels"])
                 if p["type"] == "table" and len(p.get("targets", [])) > 1]


@pytest.mark.parametrize("panel", MERGED_TABLES, ids=[p["title"] for p in MERGED_TABLES])
def test_merged_table_columns_share_their_rows(e2e_stack: Stack, panel: dict[str, Any]) -> None:
    """Grafana's merge joins a table's queries on identical label sets: every query returns the
    same ones (no __name__ on some of them), else a row splits into half-empty rows."""
    label_sets = []
    for target in panel["targets"]:
        expr = resolve(target["expr"])
        result = poll(lambda: e2e_stack.query(expr), timeout=DEADLINE_S, interval=1.0,  # noqa: B023
                      what=f"a series from table query:\n{expr}", diagnostics=e2e_stack.report)
        label_sets.append({frozenset(r["metric"].items()) for r in result})
    assert all("__name__" not in dict(labels) for rows in label_sets for labels in rows), label_sets
    assert all(rows == label_sets[0] for rows in label_sets), label_sets
