"""The real components the end-to-end tests start and read, one of each kind: small HTTP helpers, a
webhook receiver, Prometheus and Alertmanager as subprocesses stopped by PID, and their configuration
files (the shipped rules with `for:` shortened, the shipped Alertmanager routes with short timings).

Shared by the package stack of tests/e2e/conftest.py, the replays of test_alert_matrix.py and
test_fleet_pages.py, and the compose stack of tests/deploy/test_compose_stack.py.
"""

from __future__ import annotations

import asyncio
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from aiohttp import web

REPO = Path(__file__).resolve().parents[2]
RULES_DIR = REPO / "alert_rules"
ALERTMANAGER_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.yml"

PROMETHEUS_BIN = "/usr/bin/prometheus"
ALERTMANAGER_BIN = "/usr/bin/prometheus-alertmanager"

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


def duration_seconds(duration: str) -> float:
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"unexpected duration {duration!r}"
    return sum(int(n) * _UNITS[u] for n, u in parts)


def _short(duration: str) -> str:
    return f"{max(1.0, duration_seconds(duration) / FOR_SCALE):g}s"


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
