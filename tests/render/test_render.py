"""Generated artefacts: drift check, runbooks, catalog-only numbers, name lint, dashboard structure."""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.catalog.symptoms import RUNBOOK_BASE_URL, SYMPTOMS
from exporter.catalog.thresholds import DEFAULTS
from exporter.config import Settings, Slo
from exporter.render import dashboards, lint, rules, slo
from exporter.render.cli import register
from exporter.render.generate import check, render, write

REPO = Path(__file__).resolve().parents[2]
SEVERITIES = {"critical", "warning", "info"}


def _used_names() -> frozenset[str]:
    """Every series name a generated expression reads."""
    return frozenset(n for exprs in lint.all_expressions().values() for e in exprs for n in lint.metric_names(e))


def _alert_rules(files: tuple[str, ...] = (rules.ALERTS_FILE,)) -> list[dict[str, Any]]:
    """The alert rules as deployed: parsed from the committed file, not from the generator."""
    docs = [yaml.safe_load((REPO / f).read_text()) for f in files]
    return [r for doc in docs for g in doc["groups"] for r in g["rules"] if "alert" in r]


ALL_ALERT_FILES = (rules.ALERTS_FILE, rules.RAW_ALERTS_FILE)


def _all_rules() -> list[dict[str, Any]]:
    out = []
    for path in sorted((REPO / "alert_rules").glob("*.yml")):
        out += [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]
    return out


def _run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="vllm-diag")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


# ------------------------------------------------------------------ render / check


def test_committed_files_match_the_generators() -> None:
    assert check(REPO, render("all"), "all") == []


def test_check_passes_on_a_fresh_render(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_cli(["render", "all", "--root", str(tmp_path)]) == 0
    assert _run_cli(["render", "all", "--check", "--root", str(tmp_path)]) == 0


def test_check_lists_every_drift_and_orphan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outputs = render("all")
    write(tmp_path, outputs, "all")
    (tmp_path / rules.ALERTS_FILE).write_text((tmp_path / rules.ALERTS_FILE).read_text().replace("for: 5m", "for: 1m"))
    (tmp_path / "dashboards/vllm-diag-fleet.json").unlink()
    (tmp_path / "alert_rules/hand-written.yml").write_text("groups: []\n")
    (tmp_path / "docs/runbooks/old-alert.md").write_text("# gone\n")
    capsys.readouterr()

    assert _run_cli(["render", "all", "--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{rules.ALERTS_FILE}: differs" in err
    assert "dashboards/vllm-diag-fleet.json: missing" in err
    assert "alert_rules/hand-written.yml: orphan" in err
    assert "docs/runbooks/old-alert.md: orphan" in err
    assert "vllm-diag render all" in err  # the command that fixes it

    # a partial check only looks at its own outputs
    assert _run_cli(["render", "dashboards", "--check", "--root", str(tmp_path)]) == 1
    assert "alert_rules" not in capsys.readouterr().err


def test_check_detects_a_one_byte_change(tmp_path: Path) -> None:
    write(tmp_path, render("dashboards"), "dashboards")
    path = tmp_path / "dashboards/vllm-diag-overview.json"
    path.write_text(path.read_text()[:-1])  # drop the trailing newline
    assert check(tmp_path, render("dashboards"), "dashboards") == [
        "dashboards/vllm-diag-overview.json: differs from the generated output (run `vllm-diag render dashboards`)"]


def test_rendering_is_deterministic() -> None:
    assert render("all") == render("all")


# ------------------------------------------------------------------ alerts


def test_one_alert_per_symptom_class_firing_on_the_sidecar_gauge() -> None:
    by_name = {r["alert"]: r for r in _alert_rules()}
    for s in SYMPTOMS:
        rule = by_name[s.alert]
        # Smoothed: the share of the range the 0/1 gauge was active, never the raw gauge itself.
        assert rule["expr"].strip() == rules.symptom_condition(s.id).strip()
        assert rule["expr"].startswith(f'avg_over_time(vllm_diag_symptom_active{{symptom="{s.id}"}}[')
        assert rule["labels"]["severity"] == s.severity
        assert rule["labels"]["symptom"] == s.id


def test_every_alert_has_labels_annotations_and_for() -> None:
    names = [r["alert"] for r in _alert_rules()]
    assert len(names) == len(set(names))
    expected = {s.alert for s in SYMPTOMS} | {"VLLMKVCachePressure", "VLLMCPUStarvation", "VLLMCPUStarvationSuspected",
                                               "VLLMTargetDown", "VLLMTargetsDown",
                                               "VLLMTargetNeverUp", "VLLMDiagSidecarDown", "VLLMDiagnosisStale",
                                               "VLLMDiagInputMissing", "VLLMDiagSourceErrors", "VLLMDiagRuleErrors"}
    assert set(names) == expected
    slo_alerts = {r["alert"] for r in _alert_rules((rules.RAW_ALERTS_FILE,))}
    assert slo_alerts == {"VLLMErrorBudgetBurn", "VLLMReplicaErrorBudgetBurn", "VLLMErrorBudgetBurnSlow",
                          "VLLMEngineStalled", "VLLMLowTrafficBurn", "VLLMModelUnavailable",
                          "VLLMCorruptedRequests", "VLLMKVTransferFailing"}
    for rule in _alert_rules(ALL_ALERT_FILES):
        assert rule["for"], rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES
        # A burn's cause, symptom and layer are annotations read from the majority-cause record, never
        # labels: the page's identity must not change with them.
        burns = {"VLLMErrorBudgetBurn", "VLLMErrorBudgetBurnSlow", "VLLMLowTrafficBurn"}
        static = {"severity"} if rule["alert"] in burns else {"severity", "layer"}
        if rule["alert"] in burns:
            assert not {"cause", "layer", "symptom"} & set(rule["labels"]), rule["alert"]
            assert {"cause", "layer", "symptom"} <= set(rule["annotations"]), rule["alert"]
        assert static <= set(rule["labels"]), rule["alert"]
        ann = rule["annotations"]
        assert {"summary", "description", "runbook_url", "action", "tradeoff"} <= set(ann), rule["alert"]
        assert "{{" not in ann["summary"], "summary is static"
        assert "$value" in ann["description"], rule["alert"]
        assert all(ann[k].strip() for k in ("action", "tradeoff")), rule["alert"]
    # What wakes someone: a model's budget burning, a model with no replica up, a hung engine, wrong answers,
    # failing KV transfers.
    pages = {r["alert"] for r in _alert_rules(ALL_ALERT_FILES) if r["labels"]["severity"] == "critical"}
    assert pages == {"VLLMErrorBudgetBurn", "VLLMModelUnavailable", "VLLMEngineStalled", "VLLMLowTrafficBurn",
                     "VLLMCorruptedRequests", "VLLMKVTransferFailing"}
    # No rule leans on keep_firing_for (older Prometheus Operator CRDs drop it silently).
    assert all("keep_firing_for" not in r for r in _alert_rules(ALL_ALERT_FILES))
    # Cause alerts outlast a burst.
    assert all(_seconds(r["for"]) >= 300 for r in _alert_rules()
               if r["alert"] in {"VLLMKVCachePressure", "VLLMCPUStarvation", "VLLMCPUStarvationSuspected"})


def _seconds(duration: str) -> float:
    return float(duration[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[duration[-1]]


def test_runbook_urls_point_at_existing_runbooks_and_back() -> None:
    alerts = {r["alert"]: r["annotations"]["runbook_url"] for r in _alert_rules(ALL_ALERT_FILES)}
    for name, url in alerts.items():
        assert url == f"{RUNBOOK_BASE_URL}/{name.lower()}.md"
        assert (REPO / rules.RUNBOOK_DIR / f"{name.lower()}.md").is_file(), name
    pages = {p.stem for p in (REPO / rules.RUNBOOK_DIR).glob("*.md") if p.name != "README.md"}
    assert pages == {n.lower() for n in alerts}, "every runbook page has an alert"


def test_the_page_reads_which_classes_explain_an_objective_from_the_catalog() -> None:
    """One table (the catalog's EXPLAINED_BY) for the page's cause and the diagnosis's A0/B0."""
    from exporter.catalog.symptoms import EXPLAINED_BY
    from exporter.render.rules.slo_pages import CAUSE_RECORD

    [record] = [r for r in _all_rules() if r.get("record") == CAUSE_RECORD]
    page = next(r for r in _alert_rules(ALL_ALERT_FILES) if r["alert"] == "VLLMErrorBudgetBurn")
    assert CAUSE_RECORD in page["annotations"]["cause"]
    for objective, classes in EXPLAINED_BY.items():
        assert f'symptom=~"{"|".join(classes)}"' in record["expr"], objective
        assert f'"objective", "{objective}"' in record["expr"], objective


def test_runbooks_carry_catalog_actions_and_costs() -> None:
    text = (REPO / rules.runbook_file("VLLMKVCachePressure")).read_text()
    from exporter.catalog.symptoms import CAUSE_BY_ID

    for action in CAUSE_BY_ID["D"].actions:
        assert f"| {action.action} | {action.gain} | {action.cost} |" in text


# Allowed comparison literals: catalog thresholds, SLO and config defaults. Two structural
# exceptions: `== 0/1` on 0/1 state series, and the `> 0` guard on a ratio's denominator.
SLO_NUMBERS = {v for o in Slo().model_dump().values() for v in o.values()}
CATALOG_NUMBERS = {*DEFAULTS.values(), *SLO_NUMBERS, Settings.model_fields["window_seconds"].default}
STATE_SERIES = {"vllm_diag_symptom_active", "vllm_diag_up", "up", "vllm_diag_input_available"}
# The burn-rate factors are the SRE workbook's, declared once in exporter/render/slo.py.
BURN_FACTORS = {a.factor for a in slo.BURN_ALERTS}
_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)")
_LHS = re.compile(r"([A-Za-z_:][\w:]*)(?:\{[^{}]*\})?\s*$")


def _comparisons(expr: str) -> Iterator[tuple[str, str, float]]:
    for match in _COMPARISON.finditer(expr):
        lhs = _LHS.search(expr[:match.start()])
        # `(denominator > 0)`: the guard closes its parenthesis right away; reported with lhs ")".
        guard = expr[match.end():].lstrip().startswith(")") and match.group(1) == ">" and match.group(2) == "0"
        yield (")" if guard else lhs.group(1) if lhs else expr[:match.start()].rstrip()[-1:]), match.group(1), \
            float(match.group(2))


def test_no_comparison_literal_outside_the_catalog() -> None:
    seen = 0
    for rule in _all_rules():
        for lhs, op, value in _comparisons(rule["expr"]):
            seen += 1
            if value in CATALOG_NUMBERS or (value in BURN_FACTORS and "burn" in lhs):
                continue
            if op in ("==", ">") and value in (0, 1) and lhs == ")":  # count/max of 0/1 states, rate == 0
                continue
            if op == "==" and value in (0, 1) and lhs in STATE_SERIES:
                continue
            if op == ">" and value == 0 and lhs == ")":  # (denominator) > 0, count(...) > 0
                continue
            if op == ">" and value == 1 and lhs == "vllm_diag_slo_seconds":  # p95 / objective > 1
                continue
            pytest.fail(f"{rule.get('alert') or rule.get('record')}: literal {op} {value:g} is not a catalog value")
    assert seen > len(SYMPTOMS)


def test_literal_check_catches_a_hand_typed_threshold() -> None:
    assert [c for c in _comparisons("vllm_diag_cpu_starvation_score >= 0.42") if c[2] not in CATALOG_NUMBERS]


def test_thresholds_follow_the_catalog() -> None:
    """Overriding the catalog default moves the alert: the number is read, not typed."""
    exprs = {r["alert"]: r["expr"] for r in _alert_rules()}
    assert f"> {DEFAULTS['preemptions_per_request']:g}" in exprs["VLLMKVCachePressure"]
    assert f"> {DEFAULTS['kv_usage_high']:g}" in exprs["VLLMKVCachePressure"]
    assert f">= {DEFAULTS['cpu_starvation_score']:g}" in exprs["VLLMCPUStarvation"]
    assert f"> {DEFAULTS['cpu_psi_floor']:g}" in exprs["VLLMCPUStarvation"], "evidence starts at the calm floor"
    assert f"for: {rules.duration(DEFAULTS['target_startup_grace_seconds'])}" in (
        REPO / rules.ALERTS_FILE).read_text()
    recording = (REPO / rules.RECORDING_FILE).read_text()
    assert 'le=~"2\\\\.5"' in recording and 'le=~"0\\\\.1"' in recording, "thresholds at the bucket edges"
    assert f"vector({1 - Slo().ttft.target:g})" in recording


def test_render_rules_config_renders_the_deployments_objectives(tmp_path: Path) -> None:
    """`render rules --config FILE`: raw-series rules compare with the deployment's SLO and thresholds."""
    config = tmp_path / "vllm-diag.yaml"
    config.write_text("slo: {ttft: {threshold_seconds: 0.75, target: 0.995}, itl_p95_seconds: 0.05}\n"
                      "thresholds: {target_startup_grace_seconds: 1800}\n")
    out = tmp_path / "out"
    assert _run_cli(["render", "rules", "--root", str(out), "--config", str(config), "--sidecar-job", "diag",
                     "--severity-labels", "critical=P1,warning=P3"]) == 0
    recording = (out / rules.RECORDING_FILE).read_text()
    assert 'le=~"0\\\\.75"' in recording and 'le=~"0\\\\.05"' in recording
    assert "vector(0.005)" in recording and "vector(0.05)" in recording  # 1 - 0.995; the p95 key is target 0.95
    alerts = (out / rules.ALERTS_FILE).read_text() + (out / rules.RAW_ALERTS_FILE).read_text()
    assert "for: 30m" in alerts and 'up{job="diag"}' in alerts and 'severity: "P1"' in alerts
    assert 'severity: "critical"' not in alerts
    am = yaml.safe_load((out / rules.ALERTMANAGER_FILE).read_text())
    vllm_routes = am["route"]["routes"][0]["routes"]
    assert {r["matchers"][0] for r in vllm_routes} == {'severity="P1"', 'severity="P3"', 'severity="info"'}
    # and the committed files are not what a custom config renders
    assert (REPO / rules.RECORDING_FILE).read_text() != recording


def test_render_refuses_a_threshold_between_bucket_edges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The SLIs count good events at a bucket edge: a threshold between edges is refused with the nearest
    edges, unless the deployment's own buckets (vLLM's --custom-histogram-buckets) have it."""
    config = tmp_path / "vllm-diag.yaml"
    config.write_text("slo: {ttft: {threshold_seconds: 2.0}}\n")
    assert _run_cli(["render", "rules", "--root", str(tmp_path / "a"), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "slo.ttft.threshold_seconds 2 is not an edge" in err and "1 s or 2.5 s" in err
    custom = '{"time_to_first_token": [0.5, 1.0, 2.0, 4.0]}'
    assert _run_cli(["render", "rules", "--root", str(tmp_path / "b"), "--config", str(config),
                     "--histogram-buckets", custom]) in (0, 1)  # 1: only lint findings of other work in flight
    assert 'le=~"2\\\\.0|2"' in (tmp_path / "b" / rules.RECORDING_FILE).read_text()


def test_recording_rules_follow_level_metric_operations() -> None:
    records = [r["record"] for r in _all_rules() if "record" in r]
    # level:metric:operations, the level naming what a series is aggregated to.
    name = re.compile(r"(model|pod|namespace_model):vllm_[a-z0-9_]+:[a-z0-9_]+|vllm_slo:[a-z_]+:[a-z_]+")
    assert records and all(name.fullmatch(r) for r in records), records
    for rule in _all_rules():
        if "record" in rule and "/" in rule["expr"]:
            assert "> 0)" in rule["expr"], f"{rule['record']}: guard the denominator"


def test_alertmanager_inhibitions_name_real_alerts() -> None:
    config = yaml.safe_load((REPO / rules.ALERTMANAGER_FILE).read_text())
    names = {r["alert"] for r in _alert_rules()}
    names |= {r["alert"] for r in _alert_rules((rules.RAW_ALERTS_FILE,))}
    # Only vllm-diag's alerts enter the subtree: a cluster's other critical alerts keep their routes.
    [vllm] = config["route"]["routes"]
    assert vllm["matchers"] == ['alertname=~"VLLM.*"']
    routes = {r["matchers"][0]: r for r in vllm["routes"]}
    assert set(routes) == {f'severity="{s}"' for s in SEVERITIES}
    # One notification per model for pages, never per replica.
    assert routes['severity="critical"']["group_by"] == ["cluster", "namespace", "model_name"]
    assert not {"pod", "instance", "target"} & set(vllm["group_by"])
    sources = {}
    for rule in config["inhibit_rules"]:
        source = re.fullmatch(r'alertname="(\w+)"', rule["source_matchers"][0]).group(1)
        targets = re.fullmatch(r'alertname=~"([\w|]+)"', rule["target_matchers"][0]).group(1).split("|")
        assert source in names and set(targets) <= names
        assert rule["equal"] in (["namespace", "pod", "instance", "target"], ["cluster", "namespace", "model_name"])
        sources[source] = set(targets)
    alert = {s.id: s.alert for s in SYMPTOMS}
    assert sources["VLLMKVCachePressure"] == {alert[s] for s in "ACDEF"}
    assert sources["VLLMCPUStarvation"] == {alert[s] for s in "ABC"} | {"VLLMCPUStarvationSuspected"}
    assert sources["VLLMTargetDown"] >= set(alert.values()) | {"VLLMKVCachePressure", "VLLMCPUStarvation"}
    # The replica outlier stays named while the model pages: it says which pod to drain.
    assert sources["VLLMErrorBudgetBurn"] == {"VLLMErrorBudgetBurnSlow"}


def test_promtool_tests_cover_every_alert_and_recording_rule() -> None:
    """Every non-symptom alert is asserted by name in alerts_test.yml (symptom alerts share one
    generator: one of them is tested for the smoothing); every recording rule in the recording or
    the fallback tests."""
    text = (REPO / "tests/render/promtool/alerts_test.yml").read_text()
    named = set(re.findall(r'alertname(?:="|: )(\w+)', text))
    named |= set(re.findall(r'"(VLLM\w+)"', (REPO / "tests/render/test_slo_alerts.py").read_text()))
    symptom_alerts = {s.alert for s in SYMPTOMS}
    assert {r["alert"] for r in _alert_rules()} - symptom_alerts <= named
    assert named & symptom_alerts
    tested = set()
    for name in ("recording_test.yml", "fallbacks_test.yml", "slo_recording_test.yml"):
        doc = yaml.safe_load((REPO / "tests/render/promtool" / name).read_text())
        # A record checked as itself, or rounded (`round(record, 1e-6)`: rates are float divisions),
        # or one of its series (`record{objective="itl"}`).
        tested |= {re.sub(r"\{[^}]*\}$", "", re.sub(r"^round\((\S+), [\d.e-]+\)$", r"\1", case["expr"]))
                   for t in doc["tests"] for case in t["promql_expr_test"]}
    assert tested == {r["record"] for r in _all_rules() if "record" in r}


# ------------------------------------------------------------------ lint


def test_every_generated_query_names_existing_series() -> None:
    assert lint.lint() == []


def test_lint_flags_an_unknown_series() -> None:
    problems = lint.lint({"dashboards": ['sum(rate(vllm:num_preemption_total{model_name=~"$model"}[5m]))',
                                         "vllm_diag_kv_usage > 0.9"]})
    assert len(problems) == 2
    assert "vllm:num_preemption_total" in problems[0] and "vllm_diag_kv_usage" in problems[1]


def test_lint_parser_skips_functions_labels_and_keywords() -> None:
    expr = ('histogram_quantile(0.95, sum without (engine, le) (rate(vllm:x_bucket{a="b:c"}[$__rate_interval])))'
            ' / ignoring (quantile) group_left (layer) (time() - y offset 5m) and on (target) absent(up)')
    assert lint.metric_names(expr) == {"vllm:x_bucket", "y", "up"}


def _capture_names(path: Path) -> set[str]:
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in path.read_text().splitlines()
            if line and not line.startswith("#")}


def test_every_vllm_name_used_is_in_a_real_capture(fixtures_dir: Path) -> None:
    on_wire = _capture_names(fixtures_dir / "snapshot-pressure-during.txt")
    # Speculative decoding's families exist only on an engine started with --speculative-config.
    on_wire |= _capture_names(fixtures_dir / "snapshot-speculative-end.txt")
    # The KV fetch-stage gauge only on a KV consumer; NIXL's and the offload families never on the CPU build.
    on_wire |= _capture_names(fixtures_dir / "snapshot-kv-consumer.txt")
    # LoRA's only with --enable-lora.
    on_wire |= _capture_names(fixtures_dir / "snapshot-lora.txt")
    # The block residency families only with --kv-cache-metrics (the witness captures).
    witness = sorted((fixtures_dir.parent / "vllm-0.32-witnesses" / "kv-template").glob("*.txt.gz"))[-1]
    on_wire |= {re.split(r"[{ ]", line, maxsplit=1)[0] for line in gzip.decompress(witness.read_bytes()).decode()
                .splitlines() if line and not line.startswith("#")}
    from exporter.catalog.metrics import FROM_SOURCE_ONLY, HISTOGRAM_PARTS, METRICS

    on_wire |= {n + suffix for n in FROM_SOURCE_ONLY for suffix in ("", *(p for p, _ in HISTOGRAM_PARTS))}

    # Older names appear only as fallbacks (tests/render/promtool/fallbacks_test.yml covers them).
    aliases = {a + suffix for m in METRICS for a in m.aliases for suffix in ("", *(p for p, _ in HISTOGRAM_PARTS))}
    used = {n for n in _used_names() if n.startswith("vllm:")} | set(lint.EXTRA_VLLM_NAMES)
    assert used, "the generators read raw vLLM series"
    assert used - on_wire - aliases == set()


def test_every_diag_name_used_is_emitted_by_the_collector() -> None:
    used = {n for n in _used_names() if n.startswith("vllm_diag_")}
    assert used and used <= lint.diag_names()


# ------------------------------------------------------------------ dashboards


def _dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted((REPO / "dashboards").glob("*.json"))}


def test_dashboards_are_stable_json() -> None:
    for path in sorted((REPO / "dashboards").glob("*.json")):
        text = path.read_text()
        assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n", path.name


def test_dashboard_structure() -> None:
    assert set(_dashboards()) == set(dashboards.DASHBOARDS)
    for name, data in _dashboards().items():
        panels = list(dashboards.iter_panels(data["panels"]))
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)) and None not in ids, name
        boxes = []
        for p in data["panels"]:
            pos = p["gridPos"]
            assert 0 < pos["w"] <= 24 and pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, p["title"]
            box = (pos["x"], pos["y"], pos["x"] + pos["w"], pos["y"] + pos["h"])
            for other in boxes:
                overlap = box[0] < other[2] and other[0] < box[2] and box[1] < other[3] and other[1] < box[3]
                assert not overlap, f"{name}: {p['title']} overlaps another panel"
            boxes.append(box)
            for target in p.get("targets", []):
                assert target["refId"] and target["expr"], p["title"]
                assert isinstance(target["datasource"], dict) and target["datasource"]["uid"], p["title"]
            ref_ids = [t["refId"] for t in p.get("targets", [])]
            assert len(ref_ids) == len(set(ref_ids))
            if p["type"] != "row":
                assert p.get("targets"), f"{name}: {p['title']} has no query"
                assert "Reads:" in (p.get("description") or ""), f"{name}: {p['title']} must name its metrics"


def test_dashboard_variables_exist_and_are_used() -> None:
    for name, data in _dashboards().items():
        variables = [v["name"] for v in data["templating"]["list"]]
        assert {"datasource", "cluster", "namespace", "target", "model"} <= set(variables), name
        body = json.dumps(data["panels"])
        for var in variables:
            assert f"${var}" in body or f"${{{var}}}" in body, f"{name}: variable {var} is never used"


def test_overview_rows_follow_the_layer_order() -> None:
    from exporter.catalog.symptoms import LAYERS

    data = _dashboards()["vllm-diag-overview.json"]
    rows = [p["title"] for p in data["panels"] if p["type"] == "row"]
    assert rows == ["Objectives (SLO)", "Diagnosis", *(f"Layer: {layer}" for layer in LAYERS),
                    "Speculative decoding: $spec_model", "KV transfer: $kv_model", "LoRA adapters: $lora_target",
                    "Data-parallel engines: $dp_model"]
    feature = next(p for p in data["panels"] if p["title"] == "Speculative decoding: $spec_model")
    assert feature["collapsed"] and feature["repeat"] == "spec_model" and len(feature["panels"]) == 4
    for title, variable in (("LoRA adapters: $lora_target", "lora_target"), ("Data-parallel engines: $dp_model",
                                                                              "dp_model")):
        row = next(p for p in data["panels"] if p["title"] == title)
        assert row["collapsed"] and row["repeat"] == variable and row["panels"], title
    types = {p["type"] for p in data["panels"]}
    assert {"stat", "timeseries", "state-timeline", "table"} <= types
    verdict = next(p for p in data["panels"] if p["title"] == "Bottleneck layer")
    assert "vllm_diag_layer_verdict" in verdict["targets"][0]["expr"]


def test_dashboard_threshold_steps_come_from_the_catalog() -> None:
    from exporter.render.slo import BURN_ALERTS

    allowed = {*DEFAULTS.values(), *SLO_NUMBERS, *(a.factor for a in BURN_ALERTS), 0.0}
    steps = 0
    for data in _dashboards().values():
        for p in dashboards.iter_panels(data["panels"]):
            for step in p.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", []):
                if step["value"] is not None:
                    steps += 1
                    assert step["value"] in allowed, f"{p['title']}: threshold {step['value']} is not a catalog value"
    assert steps > 5


def test_all_queries_are_runnable_promql() -> None:
    queries = dashboards.all_queries()
    assert len(queries) >= 20
    assert len(queries) == len(set(queries))
    for q in queries:
        assert "$" not in q, q
        assert q.count("(") == q.count(")") and q.count("{") == q.count("}"), q


def test_every_raw_series_panel_is_filtered_by_the_selected_target() -> None:
    """No fleet-wide raw line next to one target's: every raw `vllm:` selector and every per-replica
    recording rule a panel reads carries `pod=~"$target"` (the target is named after its pod).
    Per-model SLI recordings (namespace_model:*) have no pod: tests/render/test_dashboards_slo.py."""
    selector = re.compile(r"(?<![\w:])((?:vllm:|pod:vllm_|pod:vllm_)[\w:]*)(\{[^{}]*\})?")
    checked = 0
    for query in dashboards.raw_queries():
        for name, labels in selector.findall(query):
            checked += 1
            assert labels and 'pod=~"$target"' in labels, f"{name} unfiltered in: {query}"
    assert checked > 10


def test_panels_read_recording_rules_where_one_exists() -> None:
    """Panels read the recorded series instead of recomputing them from raw histograms/counters."""
    raw = "\n".join(dashboards.raw_queries())
    for record in ("pod:vllm_kv_cache_usage:max", "pod:vllm_preemptions_per_request:ratio_rate5m",
                   "pod:vllm_prefix_cache_hit:ratio_rate5m", "pod:vllm_ttft_seconds:p95_rate5m",
                   "pod:vllm_itl_seconds:p95_rate5m", "pod:vllm_frontend_overhead_seconds:mean_rate5m",
                   "pod:vllm_requests_finished:rate5m"):
        assert record in rules.recording_names() and record in raw, record
    for recomputed in ("time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket",
                       "prefix_cache_hits_total", "kv_cache_usage_perc", "request_inference_time_seconds"):
        assert f"vllm:{recomputed}" not in raw, f"a panel recomputes {recomputed}"


def test_alertmanagerconfig_mirrors_the_plain_example() -> None:
    """kube-prometheus-stack's AlertmanagerConfig routes and inhibits exactly as the plain example does."""
    plain = yaml.safe_load((REPO / rules.ALERTMANAGER_FILE).read_text())
    crd = yaml.safe_load((REPO / rules.ALERTMANAGER_CONFIG_FILE).read_text())
    assert crd["kind"] == "AlertmanagerConfig" and crd["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    [vllm] = plain["route"]["routes"]
    route = crd["spec"]["route"]
    assert route["matchers"] == [{"name": "alertname", "matchType": "=~", "value": "VLLM.*"}]
    assert route["groupBy"] == vllm["group_by"]
    by_severity = {r["matchers"][0]["value"]: r for r in route["routes"]}
    for sub in vllm["routes"]:
        severity = re.fullmatch(r'severity="(\w+)"', sub["matchers"][0]).group(1)
        assert by_severity[severity].get("groupBy", route["groupBy"]) == sub.get("group_by", vllm["group_by"])
    assert [(r["sourceMatch"][0]["value"], r["targetMatch"][0]["value"], r["equal"]) for r in
            crd["spec"]["inhibitRules"]] == [
        (re.fullmatch(r'alertname="(\w+)"', r["source_matchers"][0]).group(1),
         re.fullmatch(r'alertname=~"([\w|]+)"', r["target_matchers"][0]).group(1), r["equal"])
        for r in plain["inhibit_rules"]]
    kust = yaml.safe_load((REPO / "deploy/kubernetes/kustomization.yaml").read_text())
    assert kust["labels"][0]["pairs"]["release"], "the release label kube-prometheus-stack selects on is set"


def test_every_flag_a_runbook_names_has_its_vllm_versions() -> None:
    """An action that names a vLLM flag says which releases have it; none names a removed flag."""
    from exporter.catalog.flags import FLAGS
    from exporter.catalog.symptoms import CAUSES

    named = {f for c in CAUSES for a in c.actions for f in re.findall(r"--[a-z][a-z0-9-]+", a.action)}
    named |= {f for p in (REPO / rules.RUNBOOK_DIR).glob("*.md")
              for f in re.findall(r"`(--[a-z][a-z0-9-]+)", p.read_text())}
    assert named and named <= set(FLAGS), sorted(named - set(FLAGS))
    assert not [f for f in named if FLAGS[f].removed], "a runbook names a flag vLLM removed"
    text = (REPO / rules.runbook_file("VLLMKVCachePressure")).read_text()
    assert "`--kv-cache-dtype` 0.3.0+ (the value fp8 since 0.4.1)" in text


def test_the_docs_for_values_are_the_rules() -> None:
    """Every rule's `for:` is listed in the generated runbook index; docs/alerting.md's tables quote none."""
    index = {line.split("](")[0].lstrip("| ["): line for line in
             (REPO / "docs/runbooks/README.md").read_text().splitlines() if line.startswith("| [VLLM")}
    for rule in _alert_rules(ALL_ALERT_FILES):
        assert f"`{rule['for']}`" in index[rule["alert"]], rule["alert"]
    headers = [line for line in (REPO / "docs/alerting.md").read_text().splitlines() if line.startswith("| alert |")]
    assert headers and not any("for" in h for h in headers), headers


def test_render_raw_only_and_runbook_url(tmp_path: Path) -> None:
    """`--raw-only`: rules for a fleet without sidecars, no sidecar-down alert (the default keeps it);
    `--runbook-url`: every alert links to the deployment's own runbooks."""
    out = tmp_path / "out"
    assert _run_cli(["render", "rules", "--root", str(out), "--raw-only",
                     "--runbook-url", "https://runbooks.example/vllm/"]) == 0
    rendered = yaml.safe_load((out / rules.ALERTS_FILE).read_text())
    names = {r["alert"] for g in rendered["groups"] for r in g["rules"]}
    assert "VLLMDiagSidecarDown" not in names and "VLLMTargetDown" in names
    urls = {r["annotations"]["runbook_url"] for f in (rules.ALERTS_FILE, rules.RAW_ALERTS_FILE)
            for g in yaml.safe_load((out / f).read_text())["groups"] for r in g["rules"]}
    assert urls and all(u.startswith("https://runbooks.example/vllm/vllm") and u.endswith(".md") for u in urls)
    assert "https://runbooks.example/vllm/vllmmodelunavailable.md" in urls
    committed = yaml.safe_load((REPO / rules.ALERTS_FILE).read_text())
    assert "VLLMDiagSidecarDown" in {r["alert"] for g in committed["groups"] for r in g["rules"]}
    assert _run_cli(["render", "rules", "--root", str(out), "--runbook-url", "runbooks.example"]) == 2
