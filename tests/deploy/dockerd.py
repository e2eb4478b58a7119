"""A private Docker daemon and the images the deployment tests build on it, without any registry.

Shared by tests/deploy/test_image.py (the sidecar image alone) and tests/deploy/test_compose_stack.py
(the docker-compose stack); the fixtures that use it live in tests/deploy/conftest.py.

The daemon (Debian docker.io) runs with no default bridge, no iptables and no IP forwarding, its
socket, data and exec roots under a temporary directory; it is stopped by its PID. Without
iptables there is no NAT, and without forwarding the host routes nothing from a container network
onward: containers reach each other on their own network and the host's loopback-published ports,
nothing outside. Nothing can be pulled, so every image starts from the debootstrap base of
scripts/build-base-image.sh (cached as a tarball under /var/cache/vllm-diag).
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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("VLLM_DIAG_CACHE", "/var/cache/vllm-diag"))
BASE_IMAGE = "vllm-diag-base:bookworm"
TEST_LABEL = "vllm-diag.test=1"
# The shipped compose stack's files, read by the stack test and the file checks beside it.
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"
SIDECAR_JOB = "vllm-diag"  # Prometheus' job for the sidecar in deploy/prometheus/prometheus.yml

T = TypeVar("T")


def need(name: str, hint: str) -> str:
    """The tool on PATH; a missing one fails the test (it never skips)."""
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed ({hint}); the deployment tests need it")
    return found


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.3,
             diagnostics: Callable[[], str] | None = None) -> T:
    """Call ``check`` until it returns something truthy; connection errors count as "not yet"."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
            last = result
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last = exc
        time.sleep(interval)
    extra = f"\n{diagnostics()}" if diagnostics else ""
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){extra}")


class Docker:
    """The docker client bound to one daemon socket; remembers the containers it started."""

    def __init__(self, client: str, host: str) -> None:
        self.client, self.host = client, host
        self.env = {**os.environ, "DOCKER_HOST": host, "DOCKER_BUILDKIT": "0"}
        self.containers: list[str] = []

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.client, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"docker {' '.join(args)} exited {proc.returncode}\n"
                        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def run(self, *args: str) -> str:
        name = f"vllm-diag-test-{uuid.uuid4().hex[:8]}"
        self.containers.append(name)
        self("run", "-d", "--name", name, *args)
        return name

    def remove_containers(self) -> None:
        for name in self.containers:
            self("rm", "-f", "-v", name, check=False, timeout=60)
        self.containers.clear()

    def logs(self, name: str) -> str:
        proc = self("logs", name, check=False)
        return proc.stdout + proc.stderr

    def exec_python(self, name: str, code: str) -> str:
        return self("exec", name, "python3", "-c", code).stdout


@contextmanager
def private_dockerd(root: Path, timings: dict[str, float | bool]) -> Iterator[Docker]:
    """dockerd on a socket under ``root``; stopped by its PID, its mounts and files removed after."""
    dockerd = need("dockerd", "apt-get install -y docker.io")
    client = need("docker", "apt-get install -y docker.io")
    sock = root / "docker.sock"
    log_path = root / "dockerd.log"
    log = log_path.open("w")
    started = time.monotonic()
    proc = subprocess.Popen(
        [dockerd, "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false",
         f"--host=unix://{sock}", f"--data-root={root / 'data'}", f"--exec-root={root / 'exec'}",
         f"--pidfile={root / 'dockerd.pid'}", "--log-level=warn"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    d = Docker(client, f"unix://{sock}")
    try:
        wait_for(lambda: proc.poll() is not None or d("version", check=False).returncode == 0, 60, "dockerd")
        if proc.poll() is not None:
            pytest.fail(f"dockerd exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        timings["dockerd_start_s"] = round(time.monotonic() - started, 1)
        yield d
    finally:
        d.remove_containers()
        proc.send_signal(signal.SIGTERM)  # dockerd by its PID; it stops its own containerd
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        unmount_below(root)  # dockerd leaves its exec-root/netns/default bind mount behind
        shutil.rmtree(root, ignore_errors=True)


def unmount_below(root: Path) -> None:
    prefix = str(root.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)


def write_timings(name: str, timings: Mapping[str, float | bool | str]) -> None:
    out = ROOT / "test-artifacts"
    out.mkdir(exist_ok=True)
    (out / name).write_text(json.dumps(timings, indent=2) + "\n")


def build_base_image(docker: Docker, timings: dict[str, float | bool]) -> str:
    """The debootstrap bookworm + python3 image (scripts/build-base-image.sh), tagged BASE_IMAGE."""
    need("debootstrap", "apt-get install -y debootstrap")
    started = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "scripts/build-base-image.sh"), BASE_IMAGE], env=docker.env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"scripts/build-base-image.sh failed:\n{proc.stdout}\n{proc.stderr}")
    timings["base_image_s"] = round(time.monotonic() - started, 1)
    timings["base_image_debootstrapped"] = "debootstrap took" in proc.stderr
    return BASE_IMAGE


@contextmanager
def served_wheelhouse(timings: dict[str, float | bool]) -> Iterator[str]:
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
    timings["wheelhouse_s"] = round(time.monotonic() - started, 1)

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


def build_sidecar_image(docker: Docker, base_image: str, wheelhouse_url: str,
                        timings: dict[str, float | bool]) -> str:
    """The project's Dockerfile built on the local base, pip reading only the local wheelhouse."""
    tag = f"vllm-diag:test-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    docker("build", "--network", "host", "--build-arg", f"BASE_IMAGE={base_image}",
           "--build-arg", "PIP_NO_INDEX=1", "--build-arg", f"PIP_FIND_LINKS={wheelhouse_url}",
           "--label", TEST_LABEL, "-t", tag, str(ROOT), timeout=600)
    timings["image_build_s"] = round(time.monotonic() - started, 1)
    timings["image_size_mb"] = round(int(docker("image", "inspect", "--format", "{{.Size}}", tag).stdout) / 1e6, 1)
    return tag


def remove_image(docker: Docker, tag: str) -> None:
    docker("rmi", "-f", tag, check=False)
    docker("image", "prune", "-f", "--filter", f"label={TEST_LABEL}", check=False)
