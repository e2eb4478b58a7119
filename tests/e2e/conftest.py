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
  shortened, divided by 60 (5m -> 5s, 15m -> 15s; ranges too; see ``shorten_for``).

The aiohttp apps run in event loops on background threads (one each) so that they keep serving
while the (synchronous) tests poll Prometheus and Alertmanager. Prometheus and Alertmanager are
subprocesses on free 127.0.0.1 ports with tmp storage, stopped by PID (SIGTERM, then SIGKILL).
Their logs, the webhook deliveries and the sidecar's verdicts are attached to any failing test's
report. A missing binary fails, never skips: scripts/install-test-infra.sh installs them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from aiohttp import web

from exporter.config import load_settings
from exporter.server import create_app
from exporter.simulator import get_scenario
from exporter.simulator.hostcpu import host_probes_for
from exporter.simulator.server import SIMS, build_app
from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[2]
RULES_DIR = REPO / "alert_rules"
ALERTMANAGER_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.yml"

PROMETHEUS_BIN = "/usr/bin/prometheus"
ALERTMANAGER_BIN = "/usr/bin/prometheus-alertmanager"

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
FOR_SCALE = 60  # alert `for:` durations are divided by this: 5m -> 5s
# Alertmanager timing for the test. group_wait is not 0: Prometheus evaluates the symptom and the
# root-cause rule groups independently (each at its own offset in the interval), so a symptom alert
# can reach Alertmanager a second or two before the root cause that inhibits it. The example's 30s
# group_wait absorbs that skew in production; 4s absorbs it here.
AM_GROUP_WAIT = "4s"
AM_GROUP_INTERVAL = "2s"
AM_REPEAT_INTERVAL = "1m"

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def http(url: str, *, method: str = "GET", data: bytes | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body); a refused connection or timeout is status 0."""
    req = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, str(exc).encode()


def get_json(url: str, timeout: float = 5.0) -> Any:
    status, body = http(url, timeout=timeout)
    if status != 200:
        raise AssertionError(f"GET {url} -> {status}: {body[:500]!r}")
    return json.loads(body)


def poll(check: Callable[[], T], *, timeout: float, what: str, interval: float = 0.5,
         diagnostics: Callable[[], str] | None = None) -> T:
    """Call ``check`` until it returns something truthy; fail with ``what`` after ``timeout`` s.

    Exceptions inside ``check`` count as "not yet" (the last one is quoted on failure).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as exc:  # noqa: BLE001 - reported below
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            extra = f"\n\n{diagnostics()}" if diagnostics is not None else ""
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}; last: {last!r}{extra}", pytrace=False)
        time.sleep(interval)


class LoopThread:
    """An asyncio loop running forever on a daemon thread; ``run`` executes a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="e2e-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


async def _serve(app: web.Application, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


# ---------------------------------------------------------------------------------------------
# Webhook receiver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    path: str
    receiver: str
    status: str  # firing | resolved
    labels: dict[str, str]
    received_at: float

    @property
    def alertname(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def target(self) -> str | None:
        return self.labels.get("target")


class Webhook:
    """Records every alert of every Alertmanager webhook POST (thread-safe reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deliveries: list[Delivery] = []
        self.bad_posts: list[str] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            alerts = body["alerts"]
            receiver = body.get("receiver", "")
        except (ValueError, KeyError, TypeError) as exc:
            with self._lock:
                self.bad_posts.append(f"{request.path}: {exc}")
            return web.Response(status=400)
        now = time.time()
        with self._lock:
            for alert in alerts:
                self._deliveries.append(Delivery(request.path, receiver, alert.get("status", ""),
                                                 dict(alert.get("labels", {})), now))
        return web.Response(text="ok")

    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return list(self._deliveries)


# ---------------------------------------------------------------------------------------------
# Subprocesses
# ---------------------------------------------------------------------------------------------


class Process:
    """A server binary with its output in a log file; stopped by its PID only."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])


class Servers:
    """What one fixture starts: aiohttp apps (each on an event loop of its own, so a slow one never
    delays another) and server binaries; ``stop`` ends them all, newest first, the binaries by PID."""

    def __init__(self) -> None:
        self.processes: list[Process] = []
        self._served: list[tuple[LoopThread, web.AppRunner]] = []

    def serve(self, app: web.Application, port: int) -> None:
        loop = LoopThread()
        try:
            self._served.append((loop, loop.run(_serve(app, port))))
        except BaseException:
            loop.stop()
            raise

    def start(self, process: Process) -> Process:
        self.processes.append(process)
        return process

    def report(self) -> str:
        return "\n".join(f"--- {p.name} (pid {p.pid}, alive {p.alive()}) log tail:\n{p.log_tail()}"
                         for p in self.processes)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()
        for loop, runner in reversed(self._served):
            try:
                loop.run(runner.cleanup(), timeout=15)
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
            loop.stop()


def start_alertmanager(servers: Servers, tmp: Path, config: dict[str, Any], port: int) -> Process:
    """A real Alertmanager with ``config`` on 127.0.0.1:``port``, tmp storage, no cluster."""
    config_file = tmp / "alertmanager.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp / "am-data").mkdir()
    return servers.start(Process("alertmanager", [
        require_binary(ALERTMANAGER_BIN), f"--config.file={config_file}", f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=", f"--storage.path={tmp / 'am-data'}", "--log.level=info",
    ], tmp / "alertmanager.log"))


def start_prometheus(servers: Servers, tmp: Path, config: dict[str, Any], port: int, *flags: str) -> Process:
    """A real Prometheus with ``config`` (written to tmp/prometheus.yml) on 127.0.0.1:``port``.

    A firing alert is re-sent every second (default 1m), so a notification dropped while Prometheus
    (re)discovers the Alertmanager is repeated at once.
    """
    config_file = tmp / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp / "prom-data").mkdir()
    return servers.start(Process("prometheus", [
        require_binary(PROMETHEUS_BIN), f"--config.file={config_file}", f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.path={tmp / 'prom-data'}", "--rules.alert.resend-delay=1s", "--log.level=info", *flags,
    ], tmp / "prometheus.log"))


def wait_ready(process: Process, url: str, diagnostics: Callable[[], str]) -> None:
    """Until ``url``/-/ready answers 200; fails at once (with the log) if the process exits."""
    poll(lambda: (process.alive() and http(f"{url}/-/ready")[0] == 200 or not process.alive() and "exited"),
         timeout=30, what=f"{process.name} /-/ready", diagnostics=diagnostics)
    if not process.alive():
        pytest.fail(f"{process.name} exited with {process.proc.returncode}\n{diagnostics()}", pytrace=False)


def wait_alertmanager_discovered(prometheus_url: str, diagnostics: Callable[[], str]) -> None:
    poll(lambda: get_json(f"{prometheus_url}/api/v1/alertmanagers")["data"]["activeAlertmanagers"],
         timeout=30, what="Prometheus discovering the Alertmanager", diagnostics=diagnostics)


def require_binary(path: str) -> str:
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        found = shutil.which(os.path.basename(path))
        if found is None:
            pytest.fail(f"{path} not found: run scripts/install-test-infra.sh (Debian packages prometheus, "
                        "prometheus-alertmanager)", pytrace=False)
        return found
    return path


# ---------------------------------------------------------------------------------------------
# Configuration files
# ---------------------------------------------------------------------------------------------

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = r"(?:\d+(?:ms|s|m|h|d))+"
_FOR_LINE = re.compile(rf"^(?P<key>[ \t]+(?:for|keep_firing_for):[ \t]*)(?P<value>{_DURATION})[ \t]*$", re.MULTILINE)
_RANGE = re.compile(rf"\[(?P<value>{_DURATION})\]")


def _seconds(duration: str) -> float:
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"unexpected duration {duration!r}"
    return sum(int(n) * _UNITS[u] for n, u in parts)


def _short(duration: str) -> str:
    return f"{max(1.0, _seconds(duration) / FOR_SCALE):g}s"


def shorten_for(text: str) -> tuple[str, int]:
    """The rule file with every duration divided by FOR_SCALE (minutes become seconds): ``for``,
    ``keep_firing_for`` and the range selectors, so a smoothed condition ("active 30 % of the last
    10m") keeps its meaning next to its `for`. Returns the text and the number of `for:` lines.

    Scaling, rather than one short value for all, keeps the order the generated file relies on:
    a root-cause alert never needs longer than the symptom alerts it inhibits, so it reaches
    Alertmanager first.
    """
    n = len([m for m in _FOR_LINE.finditer(text) if m.group("key").strip().startswith("for")])
    text = _FOR_LINE.sub(lambda m: m.group("key") + _short(m.group("value")), text)
    return _RANGE.sub(lambda m: f"[{_short(m.group('value'))}]", text), n


def _without_durations(text: str) -> Any:
    return yaml.safe_load(_RANGE.sub("[D]", _FOR_LINE.sub(lambda m: m.group("key") + "D", text)))


def write_rules(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for source in sorted(RULES_DIR.glob("*.yml")):
        text = source.read_text()
        shortened, n = shorten_for(text)
        alerts = len(re.findall(r"^\s*- alert:", text, re.MULTILINE))
        assert n == alerts, f"{source.name}: rewrote {n} `for:` lines for {alerts} alerts"
        # Only durations differ: the parsed rules are otherwise identical to the generated file.
        assert _without_durations(shortened) == _without_durations(text), f"{source.name}: rewrite touched more"
        path = directory / source.name
        path.write_text(shortened)
        out.append(path)
    assert out, "alert_rules/ is empty: run `vllm-diag render rules`"
    return out


def alertmanager_config(webhook_base: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(test config, example config): receivers -> webhook, timings shortened, routes/inhibitions untouched."""
    example = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text())
    config = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text())
    route = config["route"]
    route["group_wait"] = AM_GROUP_WAIT
    route["group_interval"] = AM_GROUP_INTERVAL
    route["repeat_interval"] = AM_REPEAT_INTERVAL
    for sub in route.get("routes", []):
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if key in sub:
                sub[key] = {"group_wait": AM_GROUP_WAIT, "group_interval": AM_GROUP_INTERVAL,
                            "repeat_interval": AM_REPEAT_INTERVAL}[key]
    for receiver in config["receivers"]:
        hooks = receiver.get("webhook_configs")
        if hooks:
            for hook in hooks:
                hook["url"] = webhook_base + urllib.parse.urlsplit(hook["url"]).path
        else:
            # The example's catch-all receiver sends nowhere; here it reports, so a misrouted alert shows.
            receiver["webhook_configs"] = [{"url": f"{webhook_base}/vllm-diag/{receiver['name']}"}]
        for hook in receiver["webhook_configs"]:
            hook["send_resolved"] = True
    assert config["inhibit_rules"] == example["inhibit_rules"]
    assert [(r.get("receiver"), r.get("matchers")) for r in route.get("routes", [])] == [
        (r.get("receiver"), r.get("matchers")) for r in example["route"].get("routes", [])]
    return config, example


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
        stack.max_for_s = max(_seconds(v) for p in rules for v in re.findall(r"^\s+for: (\S+)$", p.read_text(), re.M))
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
