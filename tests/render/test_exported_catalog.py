"""The catalog of exported metrics is the one list: the collector emits it, and every vllm_diag_* name
in the generated alert rules, dashboards and runbooks (and the docs) is in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.publish.exported import CENTRAL_EXPORTED, EXPORTED, PREFIX, exported, sample_names
from exporter.publish.exposition import Exposition
from exporter.render import dashboards, lint

REPO = Path(__file__).resolve().parents[2]
GENERATED = ("alert_rules", "dashboards", "docs/runbooks", "deploy/kubernetes/autoscaling")
NAME = re.compile(r"\bvllm_diag_[a-z0-9_]+")

# Exported for people and tools reading /metrics, with no rule, panel or runbook of their own (why not):
NOT_IN_GENERATED: dict[str, str] = {
    "vllm_diag_dropped_samples_total": "sidecar self-monitoring detail, read when vllm_diag_up misleads",
    "vllm_diag_target_restarts_total": "restarts show as KV-cache evidence (E) and in the JSON",
    "vllm_diag_e2e_latency_seconds": "no e2e objective: TTFT and ITL carry the SLOs",
    "vllm_diag_engine_fact": "what the rules assumed, for explaining a verdict",
    "vllm_diag_engine_fact_info": "what the rules assumed, for explaining a verdict",
    "vllm_diag_advice_info": "a suggestion with its predictions in the JSON and on the page, not a condition",
    "vllm_diag_advice_error_ratio": "the advisor's own error on a real knob change (one value per change, its "
                                    "history in the JSON): how far to trust its advice, not a condition",
    "vllm_diag_target_state": "the target's state (sleeping) for people and ad-hoc queries; the alerts gate on "
                              "vLLM's own engine_sleep_state",
    "vllm_diag_gpu_utilization_ratio": "present only with a DCGM source; evidence inside B4/C1",
    "vllm_diag_informational_finding": "information only, never an alert by design",
    "vllm_diag_verdict_pending": "hysteresis state, shown on the page",
    "vllm_diag_verdict_recovering": "a flag on the verdict (its cause has ended, its effect is still in the window), "
                                    "shown on the page; the symptom alerts smooth over it",
    "vllm_diag_window_span_seconds": "explains a young window; evidence_ready is what rules read",
    "vllm_diag_record_bytes": "recording is a side feature: its folder size is for capacity dashboards",
    "vllm_diag_record_pruned_total": "retention at work, expected while recording",
    "vllm_diag_record_errors_total": "counted and logged once; the diagnosis never depends on recording",
    # scaling on the diagnosis (issue 51): the autoscalers read vllm_diag_desired_replicas
    "vllm_diag_scale_helps": "why the desired replicas hold (the reason label), for people and ad-hoc queries",
    "vllm_diag_scale_utilization_ratio": "what the desired replicas are made of, for explaining a scaling decision",
}


def _names_in(folder: str) -> set[str]:
    return {n for f in (REPO / folder).rglob("*") if f.is_file() for n in NAME.findall(f.read_text())}


@pytest.mark.parametrize("folder", [*GENERATED, "docs"])
def test_every_vllm_diag_name_in_the_repository_files_is_in_the_catalog(folder):
    unknown = _names_in(folder) - sample_names()
    assert not unknown, f"{folder} reads series the sidecar does not export: {sorted(unknown)}"


def test_every_catalog_name_is_used_by_a_generated_file_or_says_why_not():
    used = set().union(*(_names_in(folder) for folder in GENERATED))
    unused = {m.sample_name for m in EXPORTED} - used  # the per-target families (not the central diagnoser's)
    assert unused == set(NOT_IN_GENERATED), (
        f"used nowhere and not explained: {sorted(unused - set(NOT_IN_GENERATED))}; "
        f"explained but used after all: {sorted(set(NOT_IN_GENERATED) - unused)}")


def test_catalog_entries_are_well_formed():
    assert len({m.name for m in EXPORTED}) == len(EXPORTED)
    for m in EXPORTED:
        assert m.name.startswith(PREFIX) and not m.name.endswith("_total"), m.name
        assert m.help.strip() and m.labels and m.labels[0] == "target", m.name
        if m.name.endswith("_seconds"):
            assert m.unit == "seconds", m.name
        if m.name.endswith("_ratio"):
            assert m.unit == "ratio", m.name


def test_central_diagnoser_families_are_unlabelled_and_prefixed():
    assert {m.name for m in CENTRAL_EXPORTED}.isdisjoint(m.name for m in EXPORTED)
    assert all(m.name.startswith(PREFIX + "prometheus_") and m.labels == () for m in CENTRAL_EXPORTED)


def test_metrics_emits_exactly_the_catalog():
    text = Exposition(None).render([]).decode()  # what /metrics serves, before its process metrics
    helps = re.findall(r"^# HELP (\S+) (.*)$", text, re.M)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert [name for name, _ in helps] == [m.sample_name for m in EXPORTED]  # the text format adds _total
    for (name, help_text), m in zip(helps, EXPORTED):
        assert help_text == m.help and types[name] == m.type


def test_lint_and_dashboards_read_the_catalog():
    assert lint.diag_names() == sample_names()
    assert dashboards.diag("vllm_diag_up").startswith("vllm_diag_up{")
    with pytest.raises(KeyError):
        dashboards.diag("vllm_diag_no_such_metric")
    with pytest.raises(KeyError):
        exported("vllm_diag_scrape_errors")  # counters are read with _total
