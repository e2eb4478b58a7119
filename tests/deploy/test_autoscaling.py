"""The generated autoscaling manifests (exporter/render/scaling.py): valid for their consumers, one source.

The HPA and the adapter's ConfigMap against Kubernetes' own schemas (kubernetes-validate, strict); the KEDA
ScaledObject, a CRD kubernetes-validate has no schema for, against the fields KEDA documents
(tests/deploy/schemas/keda-scaledobject.schema.json), and its HPA behaviour inside an autoscaling/v2 HPA;
both queries (KEDA's, and the adapter's template as the adapter fills it) run by promtool against test series
of the sidecars' desired replicas.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from exporter.render import scaling
from tests.deploy.test_lint import ROOT, run, tool

DIR = ROOT / scaling.DIR
SCHEMA = Path(__file__).parent / "schemas" / "keda-scaledobject.schema.json"


def _load(rel: str) -> dict:
    return yaml.safe_load((ROOT / rel).read_text(encoding="utf-8"))


def test_hpa_and_adapter_configmap_pass_kubernetes_schemas_strictly() -> None:
    proc = run(tool("kubernetes-validate"), "--strict", scaling.HPA, scaling.ADAPTER)
    out = proc.stdout + proc.stderr
    assert "horizontalpodautoscaler/vllm against" in out and "configmap/prometheus-adapter against" in out, out
    assert not any(line.startswith(("WARN", "ERROR")) for line in out.splitlines()), out


def test_keda_scaled_object_matches_kedas_fields_and_its_behaviour_is_an_hpa_behaviour(tmp_path: Path) -> None:
    run(tool("check-jsonschema"), "--schemafile", str(SCHEMA), scaling.KEDA)
    keda = _load(scaling.KEDA)
    # The schema bites: KEDA wants every trigger metadata value as a string.
    broken = json.loads(json.dumps(keda))
    broken["spec"]["triggers"][0]["metadata"]["threshold"] = 1
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken), encoding="utf-8")
    proc = run(tool("check-jsonschema"), "--schemafile", str(SCHEMA), str(tmp_path / "broken.yaml"), ok=(1,))
    assert "threshold" in proc.stdout + proc.stderr
    # KEDA hands advanced.horizontalPodAutoscalerConfig.behavior to the HPA it creates, unchanged.
    hpa = _load(scaling.HPA)
    hpa["spec"]["behavior"] = keda["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    (tmp_path / "keda-hpa.yaml").write_text(yaml.safe_dump(hpa), encoding="utf-8")
    out = run(tool("kubernetes-validate"), "--strict", str(tmp_path / "keda-hpa.yaml")).stdout
    assert "passed for resource horizontalpodautoscaler/vllm" in out, out


def test_keda_and_hpa_come_from_one_source() -> None:
    keda, hpa = _load(scaling.KEDA)["spec"], _load(scaling.HPA)["spec"]
    adapter = yaml.safe_load(_load(scaling.ADAPTER)["data"]["config.yaml"])
    assert adapter == scaling.adapter_rules()
    assert keda["scaleTargetRef"] == hpa["scaleTargetRef"]
    assert (keda["minReplicaCount"], keda["maxReplicaCount"]) == (hpa["minReplicas"], hpa["maxReplicas"])
    assert keda["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["behavior"]
    metric = hpa["metrics"][0]["external"]
    assert metric["metric"]["name"] == adapter["externalRules"][0]["name"]["as"] == scaling.METRIC
    assert metric["target"] == {"type": "AverageValue", "averageValue": "1"}
    trigger = keda["triggers"][0]
    assert (trigger["metricType"], trigger["metadata"]["threshold"]) == ("AverageValue", "1")
    assert scaling.METRIC in trigger["metadata"]["query"]
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300  # the catalog's default


def test_both_queries_sum_the_models_sidecars_under_promtool(tmp_path: Path) -> None:
    """Three replicas of the model (one CPU-starved: it asks for itself), one of another model, one in
    another namespace: KEDA's query and the adapter's each read the model's 3.5 replicas, and follow the
    series as they move (the burst's replica asks for 2.5)."""
    a = scaling.DEFAULT
    sel = f'namespace="{a.namespace}",service="{a.service}"'
    series = [
        (f'{{{sel},target="vllm-0",model_name="{a.model_name}"}}', "1.25 1.25 2.5"),
        (f'{{{sel},target="vllm-1",model_name="{a.model_name}"}}', "1.25 1.25 1.25"),
        (f'{{{sel},target="vllm-2",model_name="{a.model_name}"}}', "1 1 1"),  # starved: 1, never more
        (f'{{{sel},target="other-0",model_name="other"}}', "5 5 5"),
        (f'{{namespace="elsewhere",service="{a.service}",target="vllm-0",model_name="{a.model_name}"}}', "7 7 7"),
    ]
    adapter = scaling.adapter_query({"namespace": a.namespace, "service": a.service, "model_name": a.model_name})
    seriesq = scaling.adapter_rules()["externalRules"][0]["seriesQuery"]
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": scaling.METRIC + labels, "values": values} for labels, values in series],
            "promql_expr_test": [
                {"expr": a.query(), "eval_time": "1m", "exp_samples": [{"labels": "{}", "value": 3.5}]},
                {"expr": a.query(), "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": 4.75}]},
                {"expr": adapter, "eval_time": "1m",
                 "exp_samples": [{"labels": f'{{namespace="{a.namespace}"}}', "value": 3.5}]},
                {"expr": f"count({seriesq})", "eval_time": "1m", "exp_samples": [{"labels": "{}", "value": 5}]},
            ],
        }],
    }
    path = tmp_path / "scaling_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    out = run(tool("promtool"), "test", "rules", str(path)).stdout
    assert "SUCCESS" in out, out


def test_adapter_query_is_the_template_filled_as_the_adapter_fills_it() -> None:
    assert scaling.adapter_query({"model_name": "m"}, ("namespace",)) == (
        f'sum by (namespace) ({scaling.METRIC}{{model_name="m"}})')
