"""End-to-end stack: simulator -> sidecar -> real Prometheus (generated rules) -> real Alertmanager -> webhook.

One stack per test session of ``tests/e2e`` (package scope), read by the dashboard-query tests (the
alert path is measured by test_alert_matrix.py and test_fleet_pages.py on replays, and the live
sidecar's delivery to a webhook by tests/deploy/test_compose_stack.py):

* the simulator (``exporter.simulator.server.build_app``) serving ``kv-pressure``,
  ``cpu-starved``, ``healthy`` and one scenario per feature row (SCENARIOS) with ``warmup_s`` 360,
  so every scenario is developed at once (per-scenario seeds: see SCENARIO_SEEDS);
* the sidecar (``exporter.server.create_app``) with one target per scenario, scrape interval 1 s,
  window 30 s, engine facts and DCGM source as an operator would configure them;
* a webhook receiver recording every alert Alertmanager POSTs;
* ``/usr/bin/prometheus-alertmanager`` with a tmp copy of ``deploy/alertmanager/alertmanager.yml``
  (receivers pointed at the webhook, group_wait/group_interval/repeat_interval shortened; routes and
  inhibit_rules byte-for-byte the example's);
* ``/usr/bin/prometheus`` scraping the sidecar (job ``vllm-diag``) and each simulated vLLM
  ``/metrics`` (job ``vllm``), with tmp copies of ``alert_rules/*.yml`` in which only ``for:`` is
  shortened, divided by 60 (5m -> 5s, 15m -> 15s; ranges too; see ``components.shorten_for``).

The aiohttp apps run in event loops on background threads (one each) so that they keep serving
while the (synchronous) tests poll Prometheus and Alertmanager. Prometheus and Alertmanager are
subprocesses on free 127.0.0.1 ports with tmp storage, stopped by PID (SIGTERM, then SIGKILL).
Their logs, the webhook deliveries and the sidecar's verdicts are attached to any failing test's
report. A missing binary fails, never skips: scripts/install-test-infra.sh installs them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import load_settings
from exporter.server import create_app
from exporter.simulator import get_scenario
from exporter.simulator.hostcpu import host_probes_for
from exporter.simulator.server import SIMS, build_app
from tests.e2e.components import (
    Process,
    Servers,
    Webhook,
    alertmanager_config,
    duration_seconds,
    get_json,
    http,
    poll,
    start_alertmanager,
    start_prometheus,
    wait_alertmanager_discovered,
    wait_ready,
    write_rules,
)
from tests.helpers import free_port

# The feature rows' series, which vLLM exports only with the feature on: speculative-healthy (speculative
# decoding), pd-decode-failing-transfer (a KV consumer with NIXL, failures included), lora-slots (LoRA
# adapters), dp-slow-engine (data-parallel engines, an outlier among them); healthy-witnessed (vLLM 0.34 with
# --kv-cache-metrics: the witness panels' block residency and render time).
SCENARIOS = ("kv-pressure", "cpu-starved", "healthy", "speculative-healthy", "pd-decode-failing-transfer",
             "lora-slots", "dp-slow-engine", "healthy-witnessed")
# Seeds and warm-up under which each scenario's signals hold steadily over a short window from the
# start (kv-pressure preempts, cpu-starved starves), so the series the dashboards read exist at once.
SCENARIO_SEEDS = {"kv-pressure": 0, "cpu-starved": 6, "healthy": 0, "speculative-healthy": 0,
                  "pd-decode-failing-transfer": 0, "lora-slots": 0, "dp-slow-engine": 0, "healthy-witnessed": 0}
WARMUP_S = 360.0
WINDOW_S = 30.0
SIDECAR_INTERVAL_S = 1.0
SIDECAR_JOB = "vllm-diag"
VLLM_JOB = "vllm"


def prometheus_config(*, sidecar: str, simulator: str, alertmanager: str, rule_files: list[Path]) -> dict[str, Any]:
    """Scrape the sidecar and each simulated vLLM the way a deployment would.

    The scenarios stand for vLLM deployments (one pod each); the simulator serves them on one address,
    so the scenario name (from the metrics path) gives the ``instance``, ``service`` and ``pod`` labels
    a Kubernetes ServiceMonitor would set.
    Dashboards and recording rules select raw ``vllm:`` series by ``model_name`` (which vLLM itself
    exports) and aggregate ``engine``, ``instance`` and ``pod`` away; ``service`` keeps the
    deployments apart (without it, those of one model would merge into one series).
    """
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": SIDECAR_JOB, "static_configs": [{"targets": [sidecar]}]},
            {
                "job_name": VLLM_JOB,
                "static_configs": [
                    {"targets": [simulator], "labels": {"__metrics_path__": f"/scenarios/{name}/metrics"}}
                    for name in SCENARIOS
                ],
                "relabel_configs": [
                    {"source_labels": ["__metrics_path__"], "regex": "/scenarios/([^/]+)/metrics",
                     "target_label": label, "replacement": replacement}
                    # pod = the sidecar's target name, as the downward API makes it in Kubernetes
                    for label, replacement in (("instance", "vllm-$1:8000"), ("service", "vllm-$1"),
                                               ("pod", "$1"))
                ],
            },
        ],
    }


# ---------------------------------------------------------------------------------------------
# The stack
# ---------------------------------------------------------------------------------------------


@dataclass
class Stack:
    tmp: Path
    simulator_url: str
    sidecar_url: str
    prometheus_url: str
    alertmanager_url: str
    webhook: Webhook
    processes: list[Process] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    rules_loaded_at: float = 0.0  # time.monotonic() when Prometheus had loaded the rules
    max_for_s: float = 0.0  # the longest (shortened) `for:` of any alert

    # --- Prometheus
    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        status, body = http(url)
        doc = json.loads(body) if body[:1] == b"{" else {}
        if status != 200 or doc.get("status") != "success":
            raise AssertionError(f"query failed ({status}): {expr}\n{body[:1000]!r}")
        return doc["data"]["result"]

    def prometheus_alerts(self) -> list[dict[str, Any]]:
        return get_json(f"{self.prometheus_url}/api/v1/alerts")["data"]["alerts"]

    def targets(self) -> list[dict[str, Any]]:
        return get_json(f"{self.prometheus_url}/api/v1/targets")["data"]["activeTargets"]

    # --- Alertmanager
    def am_alerts(self) -> list[dict[str, Any]]:
        return get_json(f"{self.alertmanager_url}/api/v2/alerts")

    # --- Sidecar
    def diagnosis(self) -> dict[str, dict[str, Any]]:
        return {t["target"]: t for t in get_json(f"{self.sidecar_url}/api/v1/diagnosis")["targets"]}

    def report(self) -> str:
        """Everything useful when a test fails."""
        parts = []
        try:
            parts.append("sidecar verdicts: " + json.dumps(
                {n: {"state": t["state"], "verdict": t["verdict"]["layer"],
                     "symptoms": [s["id"] for s in t["symptoms"]]} for n, t in self.diagnosis().items()}))
        except Exception as exc:  # noqa: BLE001
            parts.append(f"sidecar verdicts: unavailable ({exc})")
        try:
            parts.append("prometheus alerts: " + json.dumps(sorted(
                (a["labels"].get("alertname"), a["labels"].get("target"), a["state"])
                for a in self.prometheus_alerts())))
        except Exception as exc:  # noqa: BLE001
            parts.append(f"prometheus alerts: unavailable ({exc})")
        try:
            parts.append("alertmanager alerts: " + json.dumps(sorted(
                (a["labels"].get("alertname"), a["labels"].get("target"), a["status"]["state"],
                 a["status"].get("inhibitedBy")) for a in self.am_alerts())))
        except Exception as exc:  # noqa: BLE001
            parts.append(f"alertmanager alerts: unavailable ({exc})")
        parts.append("webhook deliveries: " + json.dumps(
            [(d.path, d.status, d.alertname, d.target) for d in self.webhook.deliveries()]))
        if self.webhook.bad_posts:
            parts.append(f"webhook bad posts: {self.webhook.bad_posts}")
        parts.append(f"timings: {self.timings}")
        for proc in self.processes:
            parts.append(f"--- {proc.name} (pid {proc.pid}, alive {proc.alive()}) log tail:\n{proc.log_tail()}")
        return "\n".join(parts)


_ACTIVE: list[Stack] = []


def _sidecar_settings(simulator: str, port: int):
    targets = []
    for name in SCENARIOS:
        scenario = get_scenario(name)
        base = f"{simulator}/scenarios/{name}"
        targets.append({
            "name": name, "url": f"{base}/metrics", "scrape_interval": SIDECAR_INTERVAL_S, "timeout": 1.0,
            "engine": scenario.engine_facts(), **({"dcgm_url": f"{base}/dcgm/metrics"} if scenario.dcgm else {}),
        })
    return load_settings(overrides={"listen": f"127.0.0.1:{port}", "window_seconds": WINDOW_S, "targets": targets})


@pytest.fixture(scope="package")
def e2e_stack(tmp_path_factory: pytest.TempPathFactory):
    t0 = time.monotonic()
    tmp = tmp_path_factory.mktemp("e2e")
    servers = Servers()
    webhook = Webhook()
    sim_port, sidecar_port, hook_port, am_port, prom_port = (free_port() for _ in range(5))
    stack = Stack(tmp, f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{sidecar_port}",
                  f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}", webhook, servers.processes)
    _ACTIVE.append(stack)
    try:
        # Simulator, webhook, sidecar (in that order: the sidecar polls the simulator at once).
        scenarios = [dataclasses.replace(get_scenario(n), seed=SCENARIO_SEEDS[n]) for n in SCENARIOS]
        simulator = build_app(scenarios, speed=1.0, warmup_s=WARMUP_S)
        # The CPU source the shipped deployments configure, read from the simulated engines.
        probes = host_probes_for({n: (lambda live=live: live.engine) for n, live in simulator[SIMS].items()})
        servers.serve(simulator, sim_port)
        servers.serve(webhook.app(), hook_port)
        servers.serve(create_app(_sidecar_settings(stack.simulator_url, sidecar_port), host_probes=probes),
                      sidecar_port)
        poll(lambda: all(t["state"] == "ok" for t in stack.diagnosis().values())
             and len(stack.diagnosis()) == len(SCENARIOS),
             timeout=30, what="the sidecar's first diagnosis of every target", diagnostics=stack.report)
        stack.timings["sidecar_ready_s"] = round(time.monotonic() - t0, 1)

        alertmanager = start_alertmanager(servers, tmp, alertmanager_config(f"http://127.0.0.1:{hook_port}")[0],
                                          am_port)
        # Prometheus, first without rules: the rule files are loaded once every target has been
        # scraped, as in a long-running Prometheus. With shortened `for:` (VLLMDiagSidecarDown 10m ->
        # 10s) the 5-7 s of target discovery at start would otherwise come close to firing
        # absent(up{job=~".*vllm-diag.*"}) before the sidecar's first scrape.
        rules = write_rules(tmp / "rules")
        stack.max_for_s = max(duration_seconds(v) for p in rules
                              for v in re.findall(r"^\s+for: (\S+)$", p.read_text(), re.M))
        common = {"sidecar": f"127.0.0.1:{sidecar_port}", "simulator": f"127.0.0.1:{sim_port}",
                  "alertmanager": f"127.0.0.1:{am_port}"}
        prometheus = start_prometheus(servers, tmp, prometheus_config(rule_files=[], **common), prom_port,
                                      "--web.enable-lifecycle")
        wait_ready(alertmanager, stack.alertmanager_url, stack.report)
        wait_ready(prometheus, stack.prometheus_url, stack.report)
        stack.timings["servers_ready_s"] = round(time.monotonic() - t0, 1)

        def all_targets_up() -> bool:
            active = stack.targets()
            return len(active) == 1 + len(SCENARIOS) and all(t["health"] == "up" for t in active)

        poll(all_targets_up, timeout=30, what="Prometheus scraping the sidecar and every vLLM target",
             diagnostics=stack.report)
        stack.timings["targets_up_s"] = round(time.monotonic() - t0, 1)

        (tmp / "prometheus.yml").write_text(
            yaml.safe_dump(prometheus_config(rule_files=rules, **common), sort_keys=False))
        status, body = http(f"{stack.prometheus_url}/-/reload", method="POST", data=b"")
        assert status == 200, f"reload failed: {status} {body!r}\n{stack.report()}"
        expected_groups = sum(len(yaml.safe_load(p.read_text())["groups"]) for p in rules)
        poll(lambda: len(get_json(f"{stack.prometheus_url}/api/v1/rules")["data"]["groups"]) == expected_groups,
             timeout=15, what=f"{expected_groups} rule groups loaded", diagnostics=stack.report)
        wait_alertmanager_discovered(stack.prometheus_url, stack.report)
        stack.rules_loaded_at = time.monotonic()
        stack.timings["rules_loaded_s"] = round(stack.rules_loaded_at - t0, 1)
        yield stack
    finally:
        servers.stop()
        _ACTIVE.remove(stack)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if report.failed and _ACTIVE and report.when in ("setup", "call"):
        try:
            report.sections.append(("e2e stack", _ACTIVE[-1].report()))
        except Exception as exc:  # noqa: BLE001
            report.sections.append(("e2e stack", f"report failed: {exc}"))
