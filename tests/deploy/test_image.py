"""The Docker image, built and run for real.

A private dockerd (Debian docker.io) runs with no bridge, no iptables and no IP forwarding, its
socket, data and exec roots under a temporary directory; it is stopped by its PID at the end (the
daemon and the image are session fixtures in tests/deploy/conftest.py, shared with the compose stack
test; the machinery is tests/deploy/dockerd.py). Nothing can be pulled,
so the base image is made by scripts/build-base-image.sh (debootstrap bookworm + python3, cached
as a tarball under /var/cache/vllm-diag). pip inside the build reaches no index either: the test
serves a wheelhouse (downloaded once with the host's pip, cached by pyproject.toml's hash) on
127.0.0.1 and builds with --network host, PIP_NO_INDEX=1 and PIP_FIND_LINKS.

Containers run with --network host and bind 127.0.0.1 on a free port, or in a network namespace of
their own (--network none) where they talk over that namespace's loopback only.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.conftest import TIMINGS
from tests.deploy.dockerd import Docker, http_get, wait_for
from tests.helpers import free_port

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _remove_this_modules_containers(docker: Docker) -> Iterator[None]:
    """The daemon and the image are shared with the compose stack test: leave no container running."""
    yield
    docker.remove_containers()


@pytest.fixture(scope="module")
def fake_vllm(fixtures_dir: Path) -> Iterator[str]:
    """A real vLLM 0.32 /metrics capture served on 127.0.0.1 (host network reaches it)."""
    body = (fixtures_dir / "snapshot-steady.txt").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------------------------------------


def test_image_runs_as_non_root_and_answers_healthz(docker: Docker, image: str, fake_vllm: str) -> None:
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "10001:10001"
    assert config["Healthcheck"]["Test"][0] == "CMD"  # exec form, no shell in the check
    assert config["Entrypoint"] == ["vllm-diag"]

    port = free_port()
    targets = json.dumps([{"name": "fixture", "url": fake_vllm, "scrape_interval": 1, "timeout": 1}])
    started = time.monotonic()
    name = docker.run("--network", "host", "--read-only", "--cap-drop", "ALL",
                      "--security-opt", "no-new-privileges", "--health-interval", "1s",
                      "-e", f"VLLM_DIAG_LISTEN=127.0.0.1:{port}", "-e", f"VLLM_DIAG_TARGETS={targets}", image)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(base + "/healthz")[0] == 200, 90, "/healthz")
        TIMINGS["container_healthz_s"] = round(time.monotonic() - started, 2)
        assert http_get(base + "/healthz") == (200, "ok\n")
        wait_for(lambda: http_get(base + "/readyz")[0] == 200, 20, "/readyz")
        wait_for(lambda: 'vllm_diag_up{target="fixture"} 1.0' in http_get(base + "/metrics")[1], 20,
                 "a successful scrape of the fixture")
        status = wait_for(
            lambda: (s := docker("inspect", "--format", "{{.State.Health.Status}}", name).stdout.strip()) == "healthy"
            and s, 30, "the image's HEALTHCHECK to report healthy")
        assert status == "healthy"
        assert docker("exec", name, "id", "-u").stdout.strip() == "10001"
        doc = json.loads(http_get(base + "/api/v1/diagnosis")[1])
        assert [t["target"] for t in doc["targets"]] == ["fixture"]
    except BaseException:
        print(docker.logs(name))
        raise


def test_image_reads_a_mounted_config_file_and_env_overrides_it(
        docker: Docker, image: str, fake_vllm: str, tmp_path: Path) -> None:
    default = json.loads(docker.exec_python(
        docker.run("--network", "none", "--entrypoint", "sleep", image, "60"),
        "import json; from exporter.config import load_settings; "
        "s = load_settings('/etc/vllm-diag/config.yaml'); print(json.dumps(s.model_dump(mode='json')))"))
    assert default["listen"] == "0.0.0.0:9863"
    assert [t["url"] for t in default["targets"]] == ["http://127.0.0.1:8000/metrics"]

    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f'listen: "127.0.0.1:{port}"\nwindow_seconds: 30\n'
                      f"targets:\n  - name: from-file\n    url: {fake_vllm}\n    scrape_interval: 1\n    timeout: 1\n")
    config.chmod(0o644)
    name = docker.run("--network", "host", "--read-only", "-v", f"{config}:/etc/vllm-diag/config.yaml:ro",
                      "-e", "VLLM_DIAG_SLO__TTFT_P95_SECONDS=1.25", image)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: 'vllm_diag_up{target="from-file"} 1.0' in http_get(base + "/metrics")[1], 30,
                 "the target of the mounted file")
        code = ("import json; from exporter.config import load_settings; "
                "print(json.dumps(load_settings('/etc/vllm-diag/config.yaml').model_dump(mode='json')))")
        seen = json.loads(docker.exec_python(name, code))  # the container's own environment applies
        assert seen["slo"]["ttft"]["threshold_seconds"] == 1.25 and seen["window_seconds"] == 30
    except BaseException:
        print(docker.logs(name))
        raise


def test_sidecar_sees_the_engine_processes_through_a_shared_pid_namespace(
        docker: Docker, image: str, fake_vllm: str, tmp_path: Path) -> None:
    """compose's pid: "service:vllm" / Kubernetes' shareProcessNamespace, as a non-root sidecar."""
    engine = docker.run("--network", "none", "--entrypoint", "python3", image, "-c",
                        "import time\nend = time.time() + 45\nwhile time.time() < end: pass",
                        "vllm", "serve", "fake-model")  # root, busy, and its command line says vllm serve
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f'listen: "127.0.0.1:{port}"\ntargets:\n  - name: engine\n    url: {fake_vllm}\n'
                      '    scrape_interval: 1\n    timeout: 1\n    cpu: {match: "vllm serve"}\n')
    config.chmod(0o644)
    name = docker.run("--network", "host", "--pid", f"container:{engine}", "--read-only", "--cap-drop", "ALL",
                      "--security-opt", "no-new-privileges", "-v", f"{config}:/etc/vllm-diag/config.yaml:ro", image)
    try:
        metrics = wait_for(
            lambda: (body := http_get(f"http://127.0.0.1:{port}/metrics")[1]) and
            'signal="run_queue_wait_share"' in body and body, 30, "run-queue wait of the engine processes")
        assert 'vllm_diag_cpu_signal{model_name="tiny",signal="run_queue_wait_share",target="engine"}' in metrics
    except BaseException:
        print(docker.logs(name))
        raise
    finally:
        docker("rm", "-f", engine, check=False)


def test_compose_demo_wiring_runs_in_the_image(docker: Docker, image: str) -> None:
    """The demo profile's two containers, as compose wires them: the simulator answers as vllm:8000,
    the sidecar uses deploy/compose/vllm-diag-demo.yaml unchanged and shares the simulator's PIDs.
    Both live in one private network namespace (loopback only): no port is opened on the host."""
    # "vllm" resolves to the namespace's loopback (containers joining it share its /etc/hosts)
    sim = docker.run("--network", "none", "--add-host", "vllm:127.0.0.1", "--read-only", "--cap-drop", "ALL", image,
                     "simulate", "--scenario=kv-pressure", "--host=0.0.0.0", "--port=8000")
    config = ROOT / "deploy/compose/vllm-diag-demo.yaml"
    sidecar = docker.run("--network", f"container:{sim}", "--pid", f"container:{sim}", "--read-only",
                         "--cap-drop", "ALL", "-v", f"{config}:/etc/vllm-diag/config.yaml:ro", image)
    probe = ("import json, sys, urllib.request\n"
             "def get(p):\n"
             "    try:\n"
             "        return urllib.request.urlopen('http://127.0.0.1:' + p, timeout=3).read().decode()\n"
             "    except Exception as e:\n"
             "        return 'ERR %r' % e\n"
             "print(json.dumps({'sim': get('8000/metrics')[:20000], 'dcgm': get('8000/dcgm/metrics')[:2000],"
             " 'ready': get('9863/readyz'), 'metrics': get('9863/metrics')}))")
    try:
        def scraped():
            seen = json.loads(docker.exec_python(sidecar, probe))
            return 'vllm_diag_up{target="vllm-0"} 1.0' in seen["metrics"] and seen
        seen = wait_for(scraped, 40, "the demo sidecar to scrape the simulator", interval=1)
        assert "vllm:num_requests_running" in seen["sim"]
        assert "DCGM_FI" in seen["dcgm"]
        assert seen["ready"] == "ready\n"
    except BaseException:
        print(docker.logs(sim), docker.logs(sidecar))
        raise
