"""Every runbook's "how to verify" query runs in the real promtool against series as the sidecar and vLLM
export them, with the notification's values in its variables, and returns data.

The series are built from the queries themselves: each selector becomes one series with the labels its
family carries (the exported catalog for the sidecar's, vLLM's own for the raw ones) and the values its
matchers ask for. A query that filters on a label its family does not carry (`vllm_diag_up` has no
`model_name`) or reads a recording rule nobody writes returns nothing, and the test fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.publish.exported import exported
from exporter.render import rules, runbooks

REPO = Path(__file__).resolve().parents[2]
STEPS = 30  # one-minute samples
# The values a notification fills in (runbooks.scoped's variables).
VARIABLES = {"$namespace": "ns", "$target": "t-0", "$pod": "t-0", "$model_name": "m", "$objective": "ttft"}
SIDECAR = {"namespace": "ns", "pod": "t-0", "instance": "t-0:9863", "job": rules.SIDECAR_JOB}
RAW = {"namespace": "ns", "pod": "t-0", "instance": "t-0:8000", "job": "vllm", "model_name": "m", "engine": "0"}
# A value for each label a sidecar family carries, where no matcher asks for one.
LABEL_VALUES = {"target": "t-0", "model_name": "m", "objective": "ttft", "symptom": "A", "cause": "A2",
                "layer": "scheduler", "stat": "max", "signal": "run_queue_wait_share", "input": "kv_usage",
                "kind": "generation", "state": "running", "quantile": "0.95", "reason": "timeout",
                "source": "hostcpu:schedstat"}
_SELECTOR = re.compile(r"\b(vllm_diag_[a-z0-9_]+|vllm:[a-z0-9_:]+|up)(\{([^}]*)\})?")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: run scripts/install-test-infra.sh")
    return path


def queries() -> list[str]:
    out = []
    for expr in runbooks.verify_expressions():
        for var, value in VARIABLES.items():
            expr = expr.replace(var, value)
        out.append(expr)
    return out


def _value(op: str, text: str) -> str | None:
    """A label value that satisfies one matcher (None: the matcher wants the label absent or is negative)."""
    if op == "=":
        return text or None
    if op == "=~":
        first = text.split("|")[0]
        return first.replace("\\\\.", ".").replace("\\.", ".") or None
    return None


def _series_for(name: str, inner: str) -> list[dict[str, str]]:
    wanted = {k: _value(op, v) for k, op, v in _MATCHER.findall(inner)}
    if name == "up":
        labels = {**SIDECAR, **{k: v for k, v in wanted.items() if v}}
    elif name.startswith("vllm_diag_"):
        family = exported(name)
        labels = {**SIDECAR, **{k: LABEL_VALUES.get(k, "x") for k in family.labels}}
        # only the labels the family carries: a matcher on another one must find nothing
        labels.update({k: v for k, v in wanted.items() if v and k in labels})
    else:
        labels = {**RAW, **{k: v for k, v in wanted.items() if v}}
    counter = name.endswith(("_total", "_count", "_sum", "_bucket"))
    values = f"0+1x{STEPS}" if counter else f"1x{STEPS}"
    if name.endswith("_bucket") and "le" not in labels:  # a histogram_quantile needs its edges
        return [_one(name, {**labels, "le": le}, values) for le in ("1", "+Inf")]
    return [_one(name, labels, values)]


def _one(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{body}}}", "values": values}


def input_series(exprs: list[str]) -> list[dict[str, str]]:
    """One series per selector in the queries, plus what the SLI and inventory recording rules read."""
    base = ['vllm:num_requests_running', 'vllm:time_to_first_token_seconds_count',
            'vllm:time_to_first_token_seconds_bucket{le="2.5"}', 'vllm:inter_token_latency_seconds_count',
            'vllm:inter_token_latency_seconds_bucket{le="0.1"}', 'vllm:request_success_total{finished_reason="stop"}',
            'vllm:request_success_total{finished_reason="error"}', 'vllm_diag_requests{state="running"}',
            'vllm_diag_up', 'vllm_diag_cause_active{symptom="A", cause="A2", layer="scheduler"}']
    out: dict[str, dict[str, str]] = {}
    for text in [*base, *exprs]:
        for m in _SELECTOR.finditer(text):
            for s in _series_for(m.group(1), m.group(3) or ""):
                out.setdefault(s["series"], s)
    return list(out.values())


def test_every_runbook_query_returns_data(tmp_path: Path) -> None:
    exprs = queries()
    assert len(exprs) > 50
    spec: dict[str, Any] = {
        "rule_files": [str(REPO / rules.RECORDING_FILE)],
        "evaluation_interval": "1m",
        "group_eval_order": list(rules.RECORDING_GROUPS),
        "tests": [{"name": "runbook queries", "interval": "1m", "input_series": input_series(exprs),
                   "promql_expr_test": [{"expr": f"clamp_max(count(\n{e}\n), 1)", "eval_time": f"{STEPS - 1}m",
                                         "exp_samples": [{"labels": "{}", "value": 1}]} for e in exprs]}],
    }
    path = tmp_path / "runbook_queries_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_a_query_on_a_label_the_family_lacks_returns_nothing(tmp_path: Path) -> None:
    """Guard against a vacuous pass: the query the runbooks once printed (vllm_diag_up filtered on
    model_name) must fail here."""
    bad = 'vllm_diag_up{namespace="ns", model_name="m"}'
    spec = {"evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": input_series([*queries(), bad]),
                       "promql_expr_test": [{"expr": f"clamp_max(count({bad}), 1)", "eval_time": f"{STEPS - 1}m",
                                             "exp_samples": [{"labels": "{}", "value": 1}]}]}]}
    path = tmp_path / "bad_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
