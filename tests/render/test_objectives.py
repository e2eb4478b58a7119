"""What the generated rules read from the sidecar: per-target objectives, scrape intervals, target names."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import ConfigError, load_settings
from exporter.publish.exposition import Exposition


def _samples(settings) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(Exposition(settings).render([]).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_each_target_exports_its_own_objectives_and_interval() -> None:
    settings = load_settings(overrides={"slo": {"ttft_p95_seconds": 2.5, "itl_p95_seconds": 0.08}, "targets": [
        {"name": "chat", "url": "http://a:8000/metrics", "scrape_interval": 10, "slo": {"ttft_p95_seconds": 0.8}},
        {"name": "batch", "url": "http://b:8000/metrics"}]})
    got = _samples(settings)

    def slo(target: str, objective: str) -> float:
        return got[("vllm_diag_slo_seconds", (("objective", objective), ("target", target)))]

    def target_ratio(target: str, objective: str) -> float:
        return got[("vllm_diag_slo_target_ratio", (("objective", objective), ("target", target)))]

    assert slo("chat", "ttft") == 0.8  # its own
    assert slo("chat", "itl") == 0.08  # the fields a target leaves out come from the global slo
    assert slo("batch", "ttft") == 2.5 and slo("batch", "itl") == 0.08  # the global one
    assert target_ratio("chat", "ttft") == 0.95  # the p95 keys are a 95 % target
    assert got[("vllm_diag_scrape_interval_seconds", (("target", "chat"),))] == 10
    assert got[("vllm_diag_scrape_interval_seconds", (("target", "batch"),))] == 5


def test_a_bad_target_objective_fails_with_its_field() -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings(overrides={"targets": [{"name": "a", "url": "http://a:1/metrics",
                                              "slo": {"ttft_p95_seconds": -1}}]})
    assert any(line.startswith("targets.0.slo.ttft.threshold_seconds:") for line in exc.value.lines), exc.value.lines


def test_target_name_defaults_to_the_pod_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes replicas share one ConfigMap; the downward API's pod name keeps their targets apart."""
    target = {"url": "http://127.0.0.1:8000/metrics"}
    monkeypatch.setenv("POD_NAME", "vllm-7d9f-abcde")
    assert load_settings(overrides={"targets": [target]}).targets[0].name == "vllm-7d9f-abcde"
    monkeypatch.setenv("POD_NAME", "vllm-7d9f-xyz12")
    assert load_settings(overrides={"targets": [target]}).targets[0].name == "vllm-7d9f-xyz12"
    monkeypatch.delenv("POD_NAME")
    assert load_settings(overrides={"targets": [target]}).targets[0].name == "127.0.0.1:8000"
    # an explicit name always wins
    monkeypatch.setenv("POD_NAME", "p")
    assert load_settings(overrides={"targets": [{**target, "name": "vllm-0"}]}).targets[0].name == "vllm-0"
