"""The Docker image, built and run for real.

A private dockerd (Debian docker.io) runs with no bridge and no iptables, its socket, data and
exec roots under a temporary directory; it is stopped by its PID at the end. Nothing can be pulled,
so the base image is made by scripts/build-base-image.sh (debootstrap bookworm + python3, cached
as a tarball under /var/cache/vllm-diag). pip inside the build reaches no index either: the test
serves a wheelhouse (downloaded once with the host's pip, cached by pyproject.toml's hash) on
127.0.0.1 and builds with --network host, PIP_NO_INDEX=1 and PIP_FIND_LINKS.

Containers run with --network host and bind 127.0.0.1 on a free port, or in a network namespace of
their own (--network none) where they talk over that namespace's loopback only.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import free_port


pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("VLLM_DIAG_CACHE", "/var/cache/vllm-diag"))
BASE_IMAGE = "vllm-diag-base:bookworm"
TIMINGS: dict[str, float | bool] = {}


def _need(name: str, hint: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed ({hint}); the image test needs it")
    return found


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(check, timeout: float, what: str, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
            last = result
        except (OSError, urllib.error.URLError) as exc:
            last = exc
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


class Docker:
    def __init__(self, client: str, host: str) -> None:
        self.client, self.host = client, host
        self.env = {**os.environ, "DOCKER_HOST": host, "DOCKER_BUILDKIT": "0"}
        self.containers: list[str] = []

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.client, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"docker {' '.join(args)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def run(self, *args: str) -> str:
        name = f"vllm-diag-test-{uuid.uuid4().hex[:8]}"
        self.containers.append(name)
        self("run", "-d", "--name", name, *args)
        return name

    def logs(self, name: str) -> str:
        proc = self("logs", name, check=False)
        return proc.stdout + proc.stderr

    def exec_python(self, name: str, code: str) -> str:
        return self("exec", name, "python3", "-c", code).stdout


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    dockerd = _need("dockerd", "apt-get install -y docker.io")
    client = _need("docker", "apt-get install -y docker.io")
    root = Path(str(tmp_path_factory.mktemp("dockerd")))
    sock = root / "docker.sock"
    log = (root / "dockerd.log").open("w")
    started = time.monotonic()
    proc = subprocess.Popen(
        [dockerd, "--bridge=none", "--iptables=false", "--ip6tables=false", f"--host=unix://{sock}",
         f"--data-root={root / 'data'}", f"--exec-root={root / 'exec'}", f"--pidfile={root / 'dockerd.pid'}",
         "--log-level=warn"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    d = Docker(client, f"unix://{sock}")
    try:
        wait_for(lambda: proc.poll() is None and d("version", check=False).returncode == 0 or proc.poll() is not None,
                 60, "dockerd")
        if proc.poll() is not None:
            pytest.fail(f"dockerd exited {proc.returncode}:\n{(root / 'dockerd.log').read_text()[-3000:]}")
        TIMINGS["dockerd_start_s"] = round(time.monotonic() - started, 1)
        yield d
    finally:
        for name in d.containers:
            d("rm", "-f", "-v", name, check=False, timeout=60)
        proc.send_signal(signal.SIGTERM)  # dockerd by its PID; it stops its own containerd
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        _unmount_below(root)  # dockerd leaves its exec-root/netns/default bind mount behind
        shutil.rmtree(root, ignore_errors=True)
        _write_timings()


def _unmount_below(root: Path) -> None:
    prefix = str(root.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)


def _write_timings() -> None:
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    (out / "docker-image-timings.json").write_text(json.dumps(TIMINGS, indent=2) + "\n")


@pytest.fixture(scope="module")
def wheelhouse_url() -> Iterator[str]:
    """The project's dependencies (and its build backend) as wheels, served on 127.0.0.1."""
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    house = CACHE / f"wheels-{key}"
    started = time.monotonic()
    if not any(house.glob("*.whl")):
        tmp = CACHE / f"wheels-{key}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(tmp), str(ROOT),
             "setuptools>=68", "wheel"],
            capture_output=True, text=True, timeout=600,
        )
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.fail(f"pip download for the wheelhouse failed:\n{proc.stderr[-3000:]}")
        for project_sdist in tmp.glob("vllm_diag_exporter*"):
            project_sdist.unlink()  # the image builds the project from the context, not from here
        shutil.rmtree(house, ignore_errors=True)
        tmp.rename(house)
        for stale in CACHE.glob("wheels-*"):  # houses of older pyproject.toml versions
            if stale != house:
                shutil.rmtree(stale, ignore_errors=True)
    TIMINGS["wheelhouse_s"] = round(time.monotonic() - started, 1)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(house)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def image(docker: Docker, wheelhouse_url: str) -> Iterator[str]:
    _need("debootstrap", "apt-get install -y debootstrap")
    started = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "scripts/build-base-image.sh"), BASE_IMAGE], env=docker.env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"scripts/build-base-image.sh failed:\n{proc.stdout}\n{proc.stderr}")
    TIMINGS["base_image_s"] = round(time.monotonic() - started, 1)
    TIMINGS["base_image_debootstrapped"] = "debootstrap took" in proc.stderr

    tag = f"vllm-diag:test-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    docker("build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
           "--build-arg", "PIP_NO_INDEX=1", "--build-arg", f"PIP_FIND_LINKS={wheelhouse_url}",
           "--label", "vllm-diag.test=1", "-t", tag, str(ROOT), timeout=600)
    TIMINGS["image_build_s"] = round(time.monotonic() - started, 1)
    TIMINGS["image_size_mb"] = round(int(docker("image", "inspect", "--format", "{{.Size}}", tag).stdout) / 1e6, 1)
    try:
        yield tag
    finally:
        for name in docker.containers:
            docker("rm", "-f", "-v", name, check=False, timeout=60)
        docker.containers.clear()
        docker("rmi", "-f", tag, check=False)
        docker("image", "prune", "-f", "--filter", "label=vllm-diag.test=1", check=False)


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
        assert seen["slo"]["ttft_p95_seconds"] == 1.25 and seen["window_seconds"] == 30
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
