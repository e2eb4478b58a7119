"""The docker-compose stack, run for real: profile `demo` up, checked through the services' own APIs, down.

`docker-compose.yml` plus the test override `tests/deploy/stack/docker-compose.test.yml` come up with
Debian's docker-compose on the private dockerd of tests/deploy/conftest.py (no default bridge, no
iptables, no IP forwarding): compose's own project network joins the services, which reach nothing
outside it, and every host port is published on 127.0.0.1 only (the shipped file's *_PORT variables
set to 127.0.0.1:<free port>). Nothing can be pulled: the sidecar and the simulator run the image
built from the repository's Dockerfile, Prometheus and Alertmanager run stand-ins built here from the
Debian packages installed on the machine (tests/deploy/stack/*.Dockerfile, on the same debootstrap
base), and a webhook receiver inside the stack records what Alertmanager delivers.

Only timings differ from the shipped configuration (in copies under a temporary directory): scrape
and evaluation every 1 s, every alert's `for:` divided by 60 (tests/e2e/components.py's write_rules),
Alertmanager grouping within seconds, the sidecar's scrape every 1 s over a 30 s window.

Which alerts to expect is read, never hard-coded: the scenario is the demo's default (the shipped
`vllm-sim` command), its expected symptoms come from the scenario catalog, the alerts that carry
those symptoms and their severities from alert_rules/, and the receiver a severity goes to from
deploy/alertmanager/alertmanager.yml. The sidecar-down alert is the rule that watches `up` of the
sidecar's job.

Grafana cannot run here (no registry has it): its provisioning files are checked against the shapes
Grafana reads, as is the `gpu` profile's wiring, in tests/deploy/test_compose_files.py (no Docker needed).

Run time (2 cores, measured): about 2 minutes after tests/deploy/test_image.py in the same session
(stand-in images ~12 s, `up` ~5 s, the demo's first KV alert ~55 s after `up`, sidecar down/up ~25 s,
`down` ~15 s); about 2 min 45 s alone, which adds the sidecar image build, with a warm cache (base
image tarball and wheelhouse). Timings in test-artifacts/compose-stack-timings.json.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import subprocess
import tarfile
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import DEFAULT_PORT
from exporter.simulator import get_scenario
from tests.deploy.dockerd import (
    COMPOSE_FILE,
    PROMETHEUS_YML,
    ROOT,
    SIDECAR_JOB,
    TEST_LABEL,
    Docker,
    http_get,
    need,
    wait_for,
    write_timings,
)
from tests.e2e.components import alertmanager_config, write_rules
from tests.helpers import free_port

STACK_DIR = Path(__file__).resolve().parent / "stack"
OVERRIDE_FILE = STACK_DIR / "docker-compose.test.yml"
ALERTMANAGER_YML = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
DEMO_CONFIG = ROOT / "deploy" / "compose" / "vllm-diag-demo.yaml"
RULES_DIR = ROOT / "alert_rules"

# Stand-in images: tag -> (Dockerfile, Debian package whose installed files it carries).
STAND_INS = {
    "vllm-diag-test/prometheus:debian": ("prometheus.Dockerfile", "prometheus"),
    "vllm-diag-test/alertmanager:debian": ("alertmanager.Dockerfile", "prometheus-alertmanager"),
}
# Parts of a Debian package a container does not need (init scripts, units, docs).
PACKAGE_PATHS_LEFT_OUT = ("/etc/init.d/", "/etc/default/", "/etc/logrotate.d/", "/lib/systemd/",
                          "/usr/share/doc/", "/usr/share/man/", "/usr/share/lintian/", "/usr/share/bash-completion/")
WEBHOOK_SERVICE = "webhook"
WEBHOOK_PORT_IN_STACK = 5001
# The test's timings (the copies only): see the module docstring.
FAST_PROMETHEUS = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
FAST_SIDECAR = {"window_seconds": 30, "scrape_interval": 1, "timeout": 1}

DEADLINE_UP_S = 90.0
DEADLINE_ALERT_S = 150.0  # the demo's simulator starts cold: preemptions begin ~40 s in
DEADLINE_SIDECAR_DOWN_S = 60.0

TIMINGS: dict[str, float | str] = {}

pytestmark = [pytest.mark.timeout(900)]


# ---------------------------------------------------------------------------------------------
# What the repository says (read, not hard-coded)


def alert_rules() -> list[dict[str, Any]]:
    return [rule for path in sorted(RULES_DIR.glob("*.yml")) for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"] if "alert" in rule]


def recording_rules() -> list[str]:
    return [rule["record"] for path in sorted(RULES_DIR.glob("*.yml"))
            for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"] if "record" in rule]


def rule_groups() -> list[str]:
    return [group["name"] for path in sorted(RULES_DIR.glob("*.yml"))
            for group in yaml.safe_load(path.read_text())["groups"]]


def sidecar_down_alert() -> str:
    """The alert on the sidecar's scrape health: `up{job="JOB"}` (or `up{job=~RE}`) for the sidecar's job."""
    names = []
    for rule in alert_rules():
        for op, pattern in re.findall(r'\bup\{job(=~?)"([^"]+)"\}', rule["expr"]):
            if (re.fullmatch(pattern, SIDECAR_JOB) if op == "=~" else pattern == SIDECAR_JOB):
                names.append(rule["alert"])
    assert len(set(names)) == 1, f"expected one alert on up{{job={SIDECAR_JOB}}}, found {names}"
    return names[0]


def _matches(route: dict[str, Any], labels: dict[str, str]) -> bool:
    for matcher in route.get("matchers", []):
        m = re.fullmatch(r'(\w+)(=~|=)"([^"]*)"', matcher)
        assert m, route
        value = labels.get(m.group(1), "")
        if not (re.fullmatch(m.group(3), value) if m.group(2) == "=~" else value == m.group(3)):
            return False
    return True


def route_for(labels: dict[str, str]) -> tuple[str, str]:
    """(receiver, webhook path) the example Alertmanager routing tree sends an alert with these labels
    to: the first matching route at each level, its receiver inherited unless it names one."""
    config = yaml.safe_load(ALERTMANAGER_YML.read_text())
    route, receiver = config["route"], config["route"]["receiver"]
    while True:
        child = next((r for r in route.get("routes", []) if _matches(r, labels)), None)
        if child is None:
            break
        route, receiver = child, child.get("receiver", receiver)
    # the test copy keeps each receiver's URL path (a receiver without a webhook gets /vllm-diag/<name>)
    (spec,) = [r for r in config["receivers"] if r["name"] == receiver]
    hooks = spec.get("webhook_configs") or [{"url": f"http://x/vllm-diag/{receiver}"}]
    return receiver, urllib.parse.urlsplit(hooks[0]["url"]).path


def demo_scenario(resolved: dict[str, Any]) -> str:
    (arg,) = [a for a in resolved["services"]["vllm-sim"]["command"] if a.startswith("--scenario=")]
    return arg.split("=", 1)[1]


# ---------------------------------------------------------------------------------------------
# Images and configuration copies


def package_tarball(package: str, dest: Path) -> Path:
    """The files of an installed Debian package (as dpkg lists them), for ADD into an image."""
    listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, timeout=60)
    if listed.returncode != 0:
        pytest.fail(f"Debian package {package} is not installed (scripts/install-test-infra.sh): {listed.stderr}")
    files = [p for p in listed.stdout.splitlines()
             if p.startswith("/") and not p.startswith(PACKAGE_PATHS_LEFT_OUT)
             and (Path(p).is_symlink() or Path(p).is_file())]
    assert any(p.startswith("/usr/bin/") for p in files), files
    with tarfile.open(dest, "w") as tar:
        for path in files:
            tar.add(path, arcname=path.lstrip("/"), recursive=False)
    return dest


def build_stand_ins(docker: Docker, base_image: str, workdir: Path) -> None:
    for tag, (dockerfile, package) in STAND_INS.items():
        context = workdir / dockerfile.split(".")[0]
        context.mkdir()
        (context / "Dockerfile").write_text((STACK_DIR / dockerfile).read_text())
        package_tarball(package, context / "package-files.tar")
        version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                                 text=True, timeout=30).stdout
        docker("build", "--network", "none", "--build-arg", f"BASE_IMAGE={base_image}", "--label", TEST_LABEL,
               "--label", f"debian.package={package}={version}", "-t", tag, str(context), timeout=300)


def write_stack_configs(directory: Path) -> None:
    """The shipped configuration with the test's timings; the webhook receiver inside the stack."""
    directory.mkdir(mode=0o755)
    prometheus = yaml.safe_load(PROMETHEUS_YML.read_text())
    prometheus["global"].update(FAST_PROMETHEUS)
    (directory / "prometheus.yml").write_text(yaml.safe_dump(prometheus, sort_keys=False))

    write_rules(directory / "alert_rules")

    alertmanager, _ = alertmanager_config(f"http://{WEBHOOK_SERVICE}:{WEBHOOK_PORT_IN_STACK}")
    (directory / "alertmanager.yml").write_text(yaml.safe_dump(alertmanager, sort_keys=False))

    sidecar = yaml.safe_load(DEMO_CONFIG.read_text())
    sidecar["window_seconds"] = FAST_SIDECAR["window_seconds"]
    for target in sidecar["targets"]:
        target["scrape_interval"], target["timeout"] = FAST_SIDECAR["scrape_interval"], FAST_SIDECAR["timeout"]
    (directory / "vllm-diag-demo.yaml").write_text(yaml.safe_dump(sidecar, sort_keys=False))

    # The containers run as nobody (Prometheus, Alertmanager, webhook) or 10001 (sidecar).
    for path in [directory, *directory.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


# ---------------------------------------------------------------------------------------------
# The stack


@dataclass
class Stack:
    docker: Docker
    compose: str
    project: str
    env: dict[str, str]
    ports: dict[str, int]
    up_at: float = 0.0  # time.monotonic() when `up -d` returned
    down_done: bool = False

    def argv(self, *args: str) -> list[str]:
        return [self.compose, "-p", self.project, "-f", str(COMPOSE_FILE), "-f", str(OVERRIDE_FILE),
                "--profile", "demo", *args]

    def __call__(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = self.argv(*args)
        proc = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"{shlex.join(argv[1:])} exited {proc.returncode}\n{proc.stdout[-3000:]}\n"
                        f"{proc.stderr[-3000:]}\n{self.report()}")
        return proc

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def get_json(self, name: str, path: str) -> Any:
        status, body = http_get(self.url(name) + path, timeout=5)
        if status != 200:
            raise ValueError(f"GET {name}{path} -> {status}: {body[:300]}")
        return json.loads(body)

    def query(self, expr: str) -> list[dict[str, Any]]:
        doc = self.get_json("prometheus", "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        return doc["data"]["result"]

    def deliveries(self) -> list[dict[str, Any]]:
        return self.get_json("webhook", "/deliveries")["deliveries"]

    def report(self) -> str:
        """What helps when a test fails: compose ps, each service's log tail, the webhook deliveries."""
        out = []
        for args in (("ps",), ("logs", "--no-color", "--tail=25")):
            proc = subprocess.run(self.argv(*args), cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60)
            out.append(proc.stdout[-8000:] + proc.stderr[-2000:])
        try:
            out.append("webhook deliveries: " + json.dumps([(d["status"], d["path"], d["labels"].get("alertname"))
                                                            for d in self.deliveries()]))
        except (OSError, ValueError, KeyError) as exc:
            out.append(f"webhook deliveries unavailable: {exc!r}")
        return "\n".join(out)

    def owned(self, kind: str) -> list[str]:
        """Names of this project's containers / networks / volumes still present in the daemon."""
        label = f"label=com.docker.compose.project={self.project}"
        if kind == "container":
            args = ["ps", "-a", "--filter", label, "--format", "{{.Names}}"]
        else:
            args = [kind, "ls", "--filter", label, "--format", "{{.Name}}"]
        return self.docker(*args).stdout.split()


@pytest.fixture(scope="module")
def stack(docker: Docker, image: str, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    compose = need("docker-compose", "apt-get install -y docker-compose")
    # The daemon runs without NAT and does not turn forwarding on; with forwarding already on, the
    # host would route the stack's network onward: refuse rather than let a container reach out.
    if Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() != "0":
        pytest.fail("net.ipv4.ip_forward is on: the stack's containers could route beyond this machine")
    workdir = Path(str(tmp_path_factory.mktemp("compose-stack")))
    workdir.chmod(0o755)
    started = time.monotonic()
    build_stand_ins(docker, base_image, workdir)
    TIMINGS["stand_in_images_s"] = round(time.monotonic() - started, 1)
    write_stack_configs(workdir / "config")

    ports = {name: free_port() for name in ("vllm", "sidecar", "prometheus", "alertmanager", "grafana", "webhook")}
    env = {**docker.env,
           "VLLM_DIAG_IMAGE": image, "VLLM_DIAG_TEST_BASE_IMAGE": base_image,
           "VLLM_DIAG_TEST_STACK_DIR": str(workdir / "config"),
           "VLLM_PORT": f"127.0.0.1:{ports['vllm']}", "VLLM_DIAG_PORT": f"127.0.0.1:{ports['sidecar']}",
           "PROMETHEUS_PORT": f"127.0.0.1:{ports['prometheus']}",
           "ALERTMANAGER_PORT": f"127.0.0.1:{ports['alertmanager']}",
           "GRAFANA_PORT": f"127.0.0.1:{ports['grafana']}",
           "VLLM_DIAG_TEST_WEBHOOK_PORT": f"127.0.0.1:{ports['webhook']}",
           "COMPOSE_HTTP_TIMEOUT": "180"}
    for var in ("VLLM_DIAG_DEMO_SCENARIO", "VLLM_DIAG_LOG_LEVEL"):  # the shipped defaults, not this shell's
        env.pop(var, None)
    s = Stack(docker, compose, f"vdstack{uuid.uuid4().hex[:6]}", env, ports)
    try:
        started = time.monotonic()
        s("up", "-d", "--no-build")
        s.up_at = time.monotonic()
        TIMINGS["compose_up_s"] = round(s.up_at - started, 1)
        yield s
    finally:
        if not s.down_done:
            s("down", "--volumes", "--remove-orphans", "--timeout", "10", check=False)
        for tag in STAND_INS:
            docker("rmi", "-f", tag, check=False)
        write_timings("compose-stack-timings.json", TIMINGS)


@pytest.fixture(scope="module")
def resolved(stack: Stack) -> dict[str, Any]:
    """The merged configuration compose ran (shipped file + override + the test's variables)."""
    return yaml.safe_load(stack("config").stdout)


# ---------------------------------------------------------------------------------------------
# The running stack, through its own APIs


@pytest.mark.docker
def test_every_scrape_target_is_up_by_service_name(stack: Stack, resolved: dict[str, Any]) -> None:
    shipped = yaml.safe_load(PROMETHEUS_YML.read_text())
    expected = {(job["job_name"], t) for job in shipped["scrape_configs"]
                for sc in job["static_configs"] for t in sc["targets"]}

    def all_up() -> list[dict[str, Any]] | None:
        active = stack.get_json("prometheus", "/api/v1/targets")["data"]["activeTargets"]
        seen = {(t["labels"]["job"], t["labels"]["instance"]) for t in active}
        return active if seen == expected and all(t["health"] == "up" for t in active) else None

    active = wait_for(all_up, DEADLINE_UP_S, f"every target of {PROMETHEUS_YML.name} up: {sorted(expected)}",
                      interval=1, diagnostics=stack.report)
    TIMINGS["targets_up_s"] = round(time.monotonic() - stack.up_at, 1)
    # the sidecar and the simulated engine answer under the service names the shipped config uses
    hosts = {urllib.parse.urlsplit(t["scrapeUrl"]).netloc for t in active}
    assert {"vllm:8000", f"vllm-diag:{DEFAULT_PORT}"} <= hosts, hosts

    # every container of the demo profile runs, on the project's network only, published on 127.0.0.1 only
    running = {name: svc for name, svc in resolved["services"].items()
               if not svc.get("profiles") or "demo" in svc["profiles"]}
    assert {"vllm-sim", "vllm-diag-demo", "prometheus", "alertmanager", WEBHOOK_SERVICE} == set(running)
    for container in stack.owned("container"):
        info = json.loads(stack.docker("inspect", container).stdout)[0]
        assert info["State"]["Running"], (container, info["State"])
        networks = set(info["NetworkSettings"]["Networks"])
        assert networks == {f"{stack.project}_default"} or info["HostConfig"]["NetworkMode"].startswith("container:"), (
            container, networks)
        for bindings in (info["HostConfig"]["PortBindings"] or {}).values():
            assert all(b["HostIp"] == "127.0.0.1" for b in bindings), (container, bindings)
    # the sidecar's own page and the simulator answer on their published ports
    assert http_get(stack.url("sidecar") + "/healthz")[0] == 200
    assert "vllm:num_requests_running" in http_get(stack.url("vllm") + "/metrics")[1]


@pytest.mark.docker
def test_generated_rule_files_are_loaded_without_errors(stack: Stack) -> None:
    def loaded() -> list[dict[str, Any]] | None:
        groups = stack.get_json("prometheus", "/api/v1/rules")["data"]["groups"]
        evaluated = all(r.get("lastEvaluation", "").startswith("2") and not r["lastEvaluation"].startswith("0001")
                        for g in groups for r in g["rules"])
        return groups if groups and evaluated else None

    groups = wait_for(loaded, 30, "the rule groups evaluated once", interval=1, diagnostics=stack.report)
    assert sorted(g["name"] for g in groups) == sorted(rule_groups())
    assert all(g["file"].startswith("/alert_rules/") for g in groups), [g["file"] for g in groups]
    rules = [r for g in groups for r in g["rules"]]
    assert sorted(r["name"] for r in rules) == sorted([r["alert"] for r in alert_rules()] + recording_rules())
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok" or r.get("lastError")]
    assert not broken, broken
    # the shipped rule_files line (relative to the config file) found every generated file in the container
    assert {posixpath.basename(g["file"]) for g in groups} == {p.name for p in RULES_DIR.glob("*.yml")}


@pytest.mark.docker
def test_recording_rules_return_series(stack: Stack) -> None:
    records = recording_rules()
    assert records
    for record in records:
        wait_for(lambda record=record: stack.query(record), 90, f"a series recorded as {record}", interval=1,
                 diagnostics=stack.report)
    TIMINGS["recording_rules_s"] = round(time.monotonic() - stack.up_at, 1)


@pytest.mark.docker
def test_faulty_scenario_alert_reaches_alertmanager_and_the_webhook(stack: Stack, resolved: dict[str, Any]) -> None:
    scenario = get_scenario(demo_scenario(resolved))
    assert scenario.expected.symptoms, f"the demo scenario {scenario.name} is not a faulty one"
    # the alerts of the scenario's verdict layer that carry one of its expected symptoms (an alert of
    # another layer, e.g. CPU starvation from this busy 2-core machine, would not be the scenario's)
    candidates = {r["alert"]: r["labels"] for r in alert_rules()
                  if r["labels"].get("symptom") in scenario.expected.symptoms
                  and r["labels"].get("layer") == scenario.expected.verdict}
    assert candidates, (f"no alert in {RULES_DIR.name}/ carries layer {scenario.expected.verdict} and one of "
                        f"the symptoms {scenario.expected.symptoms}")

    def delivered() -> list[dict[str, Any]]:
        return [d for d in stack.deliveries() if d["status"] == "firing" and d["labels"].get("alertname") in candidates]

    first = wait_for(delivered, DEADLINE_ALERT_S, f"one of {sorted(candidates)} ({scenario.name}) at the webhook",
                     interval=1, diagnostics=stack.report)[0]
    TIMINGS["faulty_alert_delivered_s"] = round(time.monotonic() - stack.up_at, 1)
    name = first["labels"]["alertname"]
    TIMINGS["faulty_alert"] = f"{scenario.name}: {name}"
    # Alertmanager routed it by its severity to the receiver the example config names for it
    assert (first["receiver"], first["path"]) == route_for({**candidates[name], "alertname": name}), (
        first, candidates[name])
    assert {k: first["labels"].get(k) for k in candidates[name]} == candidates[name], first["labels"]
    # ... for the demo's target, as the sidecar names it
    assert first["labels"]["target"] == yaml.safe_load(DEMO_CONFIG.read_text())["targets"][0]["name"]


@pytest.mark.docker
def test_stopping_the_sidecar_fires_sidecar_down_and_starting_it_resolves(stack: Stack) -> None:
    alert = sidecar_down_alert()
    (rule,) = [r for r in alert_rules() if r["alert"] == alert]
    receiver, path = route_for({**rule["labels"], "alertname": alert})

    def prometheus_state() -> set[str]:
        return {a["state"] for a in stack.get_json("prometheus", "/api/v1/alerts")["data"]["alerts"]
                if a["labels"].get("alertname") == alert}

    wait_for(lambda: not prometheus_state(), 30, f"{alert} inactive while the sidecar runs", interval=1,
             diagnostics=stack.report)
    stopped_at = time.time()
    t0 = time.monotonic()
    stack("stop", "vllm-diag-demo")
    fired = wait_for(lambda: [d for d in stack.deliveries() if d["labels"].get("alertname") == alert
                              and d["status"] == "firing" and d["received_at"] >= stopped_at],
                     DEADLINE_SIDECAR_DOWN_S, f"{alert} firing at the webhook after the sidecar stopped",
                     interval=1, diagnostics=stack.report)
    TIMINGS["sidecar_down_delivered_s"] = round(time.monotonic() - t0, 1)
    assert {(d["receiver"], d["path"]) for d in fired} == {(receiver, path)}
    assert fired[0]["labels"].get("job") == SIDECAR_JOB

    started_at = time.time()
    t0 = time.monotonic()
    stack("start", "vllm-diag-demo")
    wait_for(lambda: [d for d in stack.deliveries() if d["labels"].get("alertname") == alert
                      and d["status"] == "resolved" and d["received_at"] >= started_at],
             DEADLINE_SIDECAR_DOWN_S, f"{alert} resolved at the webhook after the sidecar started",
             interval=1, diagnostics=stack.report)
    TIMINGS["sidecar_down_resolved_s"] = round(time.monotonic() - t0, 1)
    # The rule has two branches (the sidecar's `up` at 0; engines running with no sidecar up), each its own
    # alert instance, evaluated every second here: the webhook may hear one resolve a second or two before
    # Prometheus drops the other. What must hold: every instance goes, and no new firing reaches the webhook.
    wait_for(lambda: not prometheus_state(), 30, f"{alert} inactive in Prometheus after the sidecar started",
             interval=1, diagnostics=stack.report)
    assert not [d for d in stack.deliveries() if d["labels"].get("alertname") == alert
                and d["status"] == "firing" and d["received_at"] >= started_at]
    assert http_get(stack.url("sidecar") + "/healthz")[0] == 200


@pytest.mark.docker
def test_down_leaves_no_container_network_or_volume(stack: Stack) -> None:
    kinds = ("container", "network", "volume")
    before = {kind: stack.owned(kind) for kind in kinds}
    assert before["container"] and before["network"] and before["volume"], before
    t0 = time.monotonic()
    stack("down", "--volumes", "--remove-orphans", "--timeout", "10")
    stack.down_done = True
    TIMINGS["compose_down_s"] = round(time.monotonic() - t0, 1)
    left = {kind: stack.owned(kind) for kind in kinds}
    assert left == {kind: [] for kind in kinds}, left
    assert not stack.docker("ps", "-aq").stdout.split()
