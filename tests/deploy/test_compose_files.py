"""The compose stack's files, checked without Docker: Grafana's provisioning against the shapes Grafana reads
(Grafana cannot run here: no registry has it), and the `gpu` profile's wiring as `docker-compose config`
resolves it (no GPU here either)."""

from __future__ import annotations

import json
import os
import posixpath
import re
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import DEFAULT_PORT, load_settings
from tests.deploy.dockerd import COMPOSE_FILE, PROMETHEUS_YML, ROOT, SIDECAR_JOB, need

GPU_CONFIG = ROOT / "deploy" / "compose" / "vllm-diag.yaml"
PROVISIONING = ROOT / "deploy" / "compose" / "grafana" / "provisioning"


# ---------------------------------------------------------------------------------------------
# Grafana provisioning, by the shapes Grafana reads (pkg/services/provisioning in Grafana 11)

# Keys Grafana's provisioning readers accept (apiVersion 1); any other key is silently ignored by
# Grafana, which is how a typo goes unnoticed: here it fails.
DATASOURCE_FILE_KEYS = {"apiVersion", "datasources", "deleteDatasources", "prune"}
DATASOURCE_KEYS = {"orgId", "version", "uid", "name", "type", "access", "url", "user", "database", "basicAuth",
                   "basicAuthUser", "withCredentials", "isDefault", "jsonData", "secureJsonData", "editable",
                   "correlations"}
PROVIDER_FILE_KEYS = {"apiVersion", "providers"}
PROVIDER_KEYS = {"name", "type", "orgId", "folder", "folderUid", "editable", "options", "disableDeletion",
                 "updateIntervalSeconds", "allowUiUpdates"}
PROVIDER_OPTION_KEYS = {"path", "foldersFromFilesStructure"}
UID = re.compile(r"[A-Za-z0-9_-]{1,40}")  # Grafana's uid rule: at most 40 of these characters


def _provisioning(kind: str) -> list[dict[str, Any]]:
    files = sorted((PROVISIONING / kind).glob("*.y*ml"))
    assert files, f"no {kind} provisioning file in {PROVISIONING}"
    return [yaml.safe_load(p.read_text()) for p in files]


def _grafana_service() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]["grafana"]


def _container_path_to_host(svc: dict[str, Any], container_path: str) -> Path:
    """The host path behind a container path, through the service's ./ bind mounts."""
    for vol in svc["volumes"]:
        source, target = vol.split(":")[:2]
        if source.startswith("./") and (container_path == target or container_path.startswith(target + "/")):
            return ROOT / source / posixpath.relpath(container_path, target)
    raise AssertionError(f"{container_path} is not under a bind mount of {svc['volumes']}")


def test_grafana_datasource_provisioning_has_grafanas_shape() -> None:
    datasources = []
    for doc in _provisioning("datasources"):
        assert doc["apiVersion"] == 1 and set(doc) <= DATASOURCE_FILE_KEYS, doc
        for ds in doc["datasources"]:
            unknown = set(ds) - DATASOURCE_KEYS
            assert not unknown, f"keys Grafana does not read in datasource {ds.get('name')}: {unknown}"
            assert isinstance(ds["name"], str) and ds["name"] and isinstance(ds["type"], str) and ds["type"]
            assert ds.get("access", "proxy") in ("proxy", "direct")
            assert UID.fullmatch(ds["uid"]), ds["uid"]
            assert isinstance(ds.get("jsonData", {}), dict) and isinstance(ds.get("isDefault", False), bool)
            datasources.append(ds)
    # Grafana refuses two defaults in one organisation; the dashboards need a default Prometheus
    assert sum(bool(ds.get("isDefault")) for ds in datasources) == 1
    (prom,) = [ds for ds in datasources if ds["type"] == "prometheus"]
    # the URL names the compose service and the port Prometheus listens on in the container
    url = urllib.parse.urlsplit(prom["url"])
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    assert url.hostname == "prometheus" and url.hostname in services
    assert any(p.endswith(f":{url.port}") for p in services["prometheus"]["ports"])
    assert prom.get("access", "proxy") == "proxy"  # the browser cannot resolve "prometheus"


def test_grafana_dashboard_provider_has_grafanas_shape_and_points_at_the_dashboards() -> None:
    grafana = _grafana_service()
    names = []
    for doc in _provisioning("dashboards"):
        assert doc["apiVersion"] == 1 and set(doc) <= PROVIDER_FILE_KEYS, doc
        for provider in doc["providers"]:
            unknown = set(provider) - PROVIDER_KEYS
            assert not unknown, f"keys Grafana does not read in provider {provider.get('name')}: {unknown}"
            assert provider.get("type", "file") == "file"
            assert set(provider["options"]) <= PROVIDER_OPTION_KEYS, provider["options"]
            assert isinstance(provider.get("updateIntervalSeconds", 10), int)
            assert "folderUid" not in provider or UID.fullmatch(provider["folderUid"])
            names.append(provider["name"])
            host_dir = _container_path_to_host(grafana, provider["options"]["path"])
            assert host_dir.resolve() == (ROOT / "dashboards").resolve(), host_dir
            dashboards = sorted(host_dir.glob("*.json"))
            assert dashboards, f"the provider {provider['name']} points at an empty directory"
    assert len(names) == len(set(names)), f"Grafana needs unique provider names: {names}"
    # the home dashboard Grafana is told to open is one of the provisioned files
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert _container_path_to_host(grafana, home).is_file(), home


def _datasource_refs(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        if "datasource" in node:
            yield node["datasource"]
        for value in node.values():
            yield from _datasource_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _datasource_refs(value)


def test_every_provisioned_dashboard_resolves_to_the_provisioned_datasource() -> None:
    """Each dashboard's datasource references name the provisioned datasource: by its uid, or through a
    datasource variable of its type (Grafana then picks the default one, which the provisioning sets)."""
    datasources = [ds for doc in _provisioning("datasources") for ds in doc["datasources"]]
    by_uid = {ds["uid"]: ds for ds in datasources}
    default = next(ds for ds in datasources if ds.get("isDefault"))
    dashboards = sorted((ROOT / "dashboards").glob("*.json"))
    uids = []
    for path in dashboards:
        board = json.loads(path.read_text())
        assert board.get("title"), f"{path.name}: Grafana rejects a dashboard without a title"
        assert UID.fullmatch(board["uid"]), f"{path.name}: uid {board.get('uid')!r}"
        uids.append(board["uid"])
        variables = {v["name"]: v for v in board.get("templating", {}).get("list", [])}
        refs = list(_datasource_refs(board))
        assert refs, path.name
        for ref in refs:
            if ref is None:  # Grafana's default datasource
                continue
            assert isinstance(ref, dict), f"{path.name}: datasource given as {ref!r}, not a {{type, uid}} ref"
            uid = ref["uid"]
            var = re.fullmatch(r"\$\{?(\w+)\}?", uid)
            if var:
                variable = variables[var.group(1)]
                assert variable["type"] == "datasource", (path.name, variable)
                # the variable lists datasources of this plugin type; unset, it takes the default one
                assert variable["query"] == default["type"] == ref["type"], (path.name, variable["query"], ref)
                current = (variable.get("current") or {}).get("value")
                assert current in (None, "", default["uid"], default["name"]), (path.name, current)
            else:
                assert uid in by_uid and by_uid[uid]["type"] == ref["type"], (path.name, ref, sorted(by_uid))
    assert len(uids) == len(set(uids)), f"dashboard uids collide: {uids}"


# ---------------------------------------------------------------------------------------------
# The gpu profile as far as it goes without a GPU


def _flag(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def test_gpu_profile_renders_and_vllm_flags_agree_with_the_sidecar_target(monkeypatch: pytest.MonkeyPatch) -> None:
    compose = need("docker-compose", "apt-get install -y docker-compose")
    # the shipped defaults, not this shell's settings
    for var in [v for v in os.environ if v.startswith(("VLLM", "PROMETHEUS_", "ALERTMANAGER_", "GRAFANA_"))]:
        monkeypatch.delenv(var)
    env = dict(os.environ)
    proc = subprocess.run([compose, "-f", str(COMPOSE_FILE), "--profile", "gpu", "config"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    vllm, sidecar = services["vllm"], services["vllm-diag"]
    assert vllm["profiles"] == ["gpu"] and sidecar["profiles"] == ["gpu"]
    args = [*vllm["entrypoint"], *vllm["command"]]
    assert args[:2] == ["vllm", "serve"]

    # the sidecar's mounted config (as compose resolved the bind mount) loads and aims at vLLM
    mounts = {v.split(":")[1]: Path(v.split(":")[0]) for v in sidecar["volumes"] if v.startswith("/")}
    config_file = mounts["/etc/vllm-diag/config.yaml"]
    assert config_file.resolve() == GPU_CONFIG.resolve()
    settings = load_settings(str(config_file))
    (target,) = settings.targets
    url = urllib.parse.urlsplit(target.url)
    # port: what vLLM listens on, and on all interfaces of its container (the sidecar is another container)
    assert _flag(args, "--host") == "0.0.0.0"
    assert url.hostname == "vllm" and str(url.port) == _flag(args, "--port")
    # metrics path: vLLM's OpenAI server serves Prometheus metrics at /metrics, as Prometheus' vllm job scrapes
    prometheus = yaml.safe_load(PROMETHEUS_YML.read_text())
    (vllm_job,) = [j for j in prometheus["scrape_configs"] if j["job_name"] == "vllm"]
    assert url.path == vllm_job.get("metrics_path", "/metrics") == "/metrics"
    assert [t for sc in vllm_job["static_configs"] for t in sc["targets"]] == [url.netloc]
    # the healthcheck probes the same port
    assert f"127.0.0.1:{url.port}/" in " ".join(vllm["healthcheck"]["test"])
    # shared PID namespace, and the process match finds vLLM's command line
    assert sidecar["pid"] == "service:vllm"
    assert target.cpu is not None and target.cpu.match and target.cpu.match in " ".join(args)
    # the engine facts the sidecar needs equal vLLM's flags
    assert str(target.engine.max_num_batched_tokens) == _flag(args, "--max-num-batched-tokens")
    assert str(target.engine.max_num_seqs) == _flag(args, "--max-num-seqs")
    assert target.engine.tensor_parallel_size == int(_flag(args, "--tensor-parallel-size") or 1)
    assert target.engine.pipeline_parallel_size == int(_flag(args, "--pipeline-parallel-size") or 1)
    # the sidecar listens where its published port and Prometheus' vllm-diag job expect it
    assert settings.listen_port == DEFAULT_PORT
    assert any(str(p.get("target") if isinstance(p, dict) else p).endswith(str(DEFAULT_PORT)) for p in sidecar["ports"])
    (diag_job,) = [j for j in prometheus["scrape_configs"] if j["job_name"] == SIDECAR_JOB]
    assert [t for sc in diag_job["static_configs"] for t in sc["targets"]] == [f"vllm-diag:{DEFAULT_PORT}"]
    assert "vllm-diag" in sidecar["networks"]["default"]["aliases"] or "vllm-diag" in services
