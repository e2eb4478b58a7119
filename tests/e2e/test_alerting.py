"""Alert delivery end to end: simulator -> sidecar -> Prometheus (generated rules) -> Alertmanager -> webhook.

The rules are ``alert_rules/*.yml`` as generated, except that every alert's ``for:`` is shortened
(3-15 minutes cannot be waited for in CI): divided by 60, so minutes become seconds and a root
cause still fires no later than the symptoms it explains (with one short value for all, the
15m prefix-cache symptom would race the 5m KV alert, which production never does). The fixture
checks that the copy differs in nothing else. The Alertmanager config is
``deploy/alertmanager/alertmanager.yml`` with its receivers pointed at a local webhook (the
catch-all ``default`` receiver gets one too, so a misrouted alert shows) and its
group_wait/group_interval/repeat_interval shortened; routes and inhibit_rules are the example's,
unchanged: the inhibition is what is under test.

Assertions are per ``target`` (the label the inhibition's ``equal`` uses):

* ``kv-pressure``: ``VLLMKVCachePressure`` (critical) is delivered to the page receiver; ``VLLMFrequentPreemption``
  (symptom D) is in Alertmanager as ``suppressed`` with ``inhibitedBy`` naming the KV alert, and
  neither it nor any other symptom alert the KV alert explains (A, C, E, F) that fires for this
  target ever reaches the webhook.
* ``cpu-starved``: ``VLLMCPUStarvation`` (critical: the sidecar reads the simulated engines'
  run-queue wait, as the shipped deployments read vLLM's through schedstat) is delivered to the page
  receiver; ``VLLMIdleEngine`` (symptom C) is suppressed by it, and no symptom alert it explains
  (A, B, C) is delivered.
* ``healthy``: no alert at all, in Prometheus, Alertmanager or the webhook; and no operational
  alert (sidecar down, diagnosis stale, target down) for anyone.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

import pytest
import yaml

from exporter.config import load_settings
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.render import rules
from exporter.simulator import get_scenario
from exporter.simulator.exposition import render_vllm
from exporter.simulator.hostcpu import simulated_host_inputs
from tests.e2e.conftest import (
    ALERTMANAGER_EXAMPLE,
    AM_GROUP_INTERVAL,
    AM_GROUP_WAIT,
    SCENARIO_SEEDS,
    SIDECAR_INTERVAL_S,
    WARMUP_S,
    WINDOW_S,
    Stack,
    poll,
)

pytestmark = pytest.mark.prometheus

DEADLINE_S = 60.0
# After an alert reaches Alertmanager, a notification (if it were not inhibited) leaves within
# group_wait, or group_interval for a group that already flushed; watch one more interval and a margin.
SETTLE_S = float(AM_GROUP_WAIT.rstrip("s")) + 2 * float(AM_GROUP_INTERVAL.rstrip("s")) + 2.0
OPERATIONAL = ("VLLMDiagSidecarDown", "VLLMDiagnosisStale", "VLLMTargetDown", "VLLMTargetNeverUp")


def _replay(name: str, seconds: int = 90) -> list:
    """The sidecar's states for a scenario as the fixture runs it (seed, warm-up, window), offline."""
    scenario = dataclasses.replace(get_scenario(name), seed=SCENARIO_SEEDS[name])
    settings = load_settings(overrides={"listen": "127.0.0.1:9863", "window_seconds": WINDOW_S, "targets": [
        {"name": name, "url": "http://127.0.0.1:8000/metrics", "scrape_interval": SIDECAR_INTERVAL_S,
         "timeout": 1.0, "engine": scenario.engine_facts()}]})
    engine, start = scenario.build(), 1.8e9
    # The CPU source the stack gives the sidecar (exporter.simulator.hostcpu), as in conftest.
    pipeline = TargetPipeline(settings.targets[0], settings, host_probe=lambda now: simulated_host_inputs(engine))
    states = []
    for k in range(seconds):
        engine.advance_to(WARMUP_S + k * SIDECAR_INTERVAL_S)
        text = render_vllm(engine, start_unix=start - WARMUP_S)
        states.append(pipeline.ingest(ScrapeResult(start + k * SIDECAR_INTERVAL_S, 0.01, text.encode())))
    return states[3:]  # the first scrapes hold too little to judge; rules are loaded ~10 s in


def test_the_fixture_scenarios_hold_their_conditions_with_margin() -> None:
    """Guard for the seeds/warm-up in conftest: if the simulator changes, this says why the e2e flakes.

    Replays the first 90 s offline (no servers) and requires every alert condition of the test to
    hold throughout with margin: kv-pressure preemptions/request > 0.2 (alert 0.1) and KV max > 0.95
    (alert 0.9); cpu-starved starvation score >= 0.55 (alert 0.5) with symptom C on; healthy no symptom.
    """
    kv = _replay("kv-pressure")
    assert min(s.signals.kv.preemptions_per_request or 0 for s in kv) > 0.2
    assert min(s.signals.kv.usage_max or 0 for s in kv) > 0.95
    assert all("D" in {x.id for x in s.diagnosis.symptoms} for s in kv)
    cpu = _replay("cpu-starved")
    assert min(s.signals.cpu.starvation_score or 0 for s in cpu) >= 0.55
    assert all("C" in {x.id for x in s.diagnosis.symptoms} for s in cpu)
    healthy = _replay("healthy")
    assert not {x.id for s in healthy for x in s.diagnosis.symptoms}
    assert all(s.diagnosis.verdict.layer == "none" for s in healthy)


def _inhibited_by(source: str) -> set[str]:
    """Alert names the example config's inhibit rule for ``source`` silences (equal: [target])."""
    config = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text())
    for rule in config["inhibit_rules"]:
        if rule["source_matchers"] == [f'alertname="{source}"']:
            assert rule["equal"] == list(rules.INHIBIT_EQUAL), rule
            (matcher,) = rule["target_matchers"]
            m = re.fullmatch(r'alertname=~"([A-Za-z|]+)"', matcher)
            assert m, matcher
            return set(m.group(1).split("|"))
    raise AssertionError(f"no inhibit rule with source {source} in {ALERTMANAGER_EXAMPLE}")


def _am(stack: Stack, target: str, alertname: str | None = None) -> list[dict[str, Any]]:
    return [a for a in stack.am_alerts() if a["labels"].get("target") == target
            and (alertname is None or a["labels"].get("alertname") == alertname)]


def _delivered(stack: Stack, target: str | None, alertname: str):
    return [d for d in stack.webhook.deliveries() if d.alertname == alertname and d.status == "firing"
            and (target is None or d.target == target)]


def _suppressed(alert: dict[str, Any]) -> bool:
    return alert["status"]["state"] == "suppressed" and bool(alert["status"]["inhibitedBy"])


def _assert_root_cause_inhibits(stack: Stack, target: str, source: str, symptoms: list[str],
                                receiver: str = "/vllm-diag/ticket") -> None:
    explained = _inhibited_by(source)
    missing = set(symptoms) - explained
    assert not missing, f"the example config's {source} inhibition does not cover {missing}"

    # The root cause is delivered, as a ticket (severity warning): the page is the model's burn.
    poll(lambda: _delivered(stack, target, source), timeout=DEADLINE_S,
         what=f"{source} for target {target} at the webhook", diagnostics=stack.report)
    paths = {d.path for d in _delivered(stack, target, source)}
    assert paths == {receiver}, f"{source} routed to {paths}"

    # The symptom alerts it explains reach Alertmanager and are held there by the inhibition.
    def symptoms_suppressed() -> bool:
        for name in symptoms:
            alerts = _am(stack, target, name)
            if not alerts or not all(_suppressed(a) for a in alerts):
                return False
        return True

    poll(symptoms_suppressed, timeout=DEADLINE_S,
         what=f"{symptoms} for target {target} suppressed (inhibitedBy non-empty) in Alertmanager",
         diagnostics=stack.report)
    source_fps = {a["fingerprint"] for a in _am(stack, target, source)}
    for name in symptoms:
        for alert in _am(stack, target, name):
            assert set(alert["status"]["inhibitedBy"]) <= source_fps, (
                f"{name} on {target} inhibited by {alert['status']['inhibitedBy']}, not by {source} {source_fps}")

    # ... and none of them, nor any other alert the root cause explains, is ever delivered for this target.
    until = time.monotonic() + SETTLE_S
    while True:
        leaked = [(d.alertname, d.path) for d in stack.webhook.deliveries()
                  if d.target == target and d.alertname in explained]
        assert not leaked, f"inhibited alerts delivered for {target}: {leaked}\n{stack.report()}"
        for alert in _am(stack, target):
            if alert["labels"]["alertname"] in explained:
                assert _suppressed(alert), f"{alert['labels']['alertname']} on {target} is not inhibited: {alert}"
        if time.monotonic() >= until:
            break
        time.sleep(0.5)


def test_kv_pressure_delivers_the_kv_alert_and_inhibits_its_symptoms(e2e_stack: Stack) -> None:
    """kv-pressure: VLLMKVCachePressure is delivered; VLLMFrequentPreemption (D) is inhibited, never delivered."""
    _assert_root_cause_inhibits(e2e_stack, "kv-pressure", "VLLMKVCachePressure", ["VLLMFrequentPreemption"])


def test_cpu_starved_delivers_the_cpu_alert_and_inhibits_its_symptoms(e2e_stack: Stack) -> None:
    """cpu-starved: run-queue wait is CPU evidence, so VLLMCPUStarvation is delivered; VLLMIdleEngine (C)
    is inhibited by it."""
    _assert_root_cause_inhibits(e2e_stack, "cpu-starved", "VLLMCPUStarvation", ["VLLMIdleEngine"])


# Alerts about a whole model (cluster, namespace, model_name), with no target label.
MODEL_LEVEL = frozenset({"VLLMErrorBudgetBurn", "VLLMErrorBudgetBurnSlow"})


def test_healthy_delivers_nothing_and_no_operational_alert_fires(e2e_stack: Stack) -> None:
    """healthy: nothing pending, firing, held or delivered; no sidecar-down / stale / target-down anywhere.

    "Nothing" is only meaningful once the pipeline has proven it delivers: wait for the
    kv-pressure alert first, then watch a full Alertmanager grouping cycle more. Model-level alerts
    (the error-budget burn of the model the three simulated replicas share) carry no target: they
    are the kv-pressure and cpu-starved replicas' burn, not the healthy one's.
    """
    stack = e2e_stack
    poll(lambda: _delivered(stack, "kv-pressure", "VLLMKVCachePressure"), timeout=DEADLINE_S,
         what="the pipeline's first delivery (kv-pressure)", diagnostics=stack.report)
    assert stack.diagnosis()["healthy"]["verdict"]["layer"] == "none", stack.report()

    # Watch until every rule has had its full `for:` plus a grouping cycle since the rules were loaded.
    until = max(time.monotonic(), stack.rules_loaded_at + stack.max_for_s) + SETTLE_S
    while True:
        prom = [(a["labels"].get("alertname"), a["labels"].get("target"), a["state"])
                for a in stack.prometheus_alerts()
                if a["labels"].get("target") == "healthy" or a["labels"].get("alertname") in OPERATIONAL]
        assert not prom, f"alerts pending/firing in Prometheus: {prom}\n{stack.report()}"
        held = [(a["labels"].get("alertname"), a["labels"].get("target")) for a in stack.am_alerts()
                if a["labels"].get("target") == "healthy" or a["labels"].get("alertname") in OPERATIONAL]
        assert not held, f"alerts in Alertmanager: {held}\n{stack.report()}"
        sent = [(d.alertname, d.target, d.path) for d in stack.webhook.deliveries()
                if d.target == "healthy" or d.alertname in OPERATIONAL
                or (d.target is None and d.alertname not in MODEL_LEVEL)]
        assert not sent, f"alerts delivered: {sent}\n{stack.report()}"
        if time.monotonic() >= until:
            break
        time.sleep(0.5)
    assert not stack.webhook.bad_posts, stack.webhook.bad_posts
