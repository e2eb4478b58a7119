"""Fixtures for end-to-end tests against a real vLLM (CPU build) serving a tiny local model.

An engine start costs 25-45 s on 2 cores, so engines are shared: `real_vllm_engines` starts each
distinct set of flags once per session (`real_vllm` is the one with the harness's defaults), and
the loads that two test files read run once (`light_load`, `storm_load`, `calm_cpu_load`; see
loads.py). A test that stops a shared engine carries the `stops_engine` marker and runs last.
Install first with `bash tests/realvllm/install.sh` (CI does this before pytest). A missing
install FAILS the tests loudly; set VLLM_DIAG_SKIP_REAL_VLLM=1 to skip them on purpose, or
VLLM_DIAG_AUTO_INSTALL=1 to let the fixture run install.sh itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realvllm.engine import descendant_pids

from . import loads
from .harness import RealVLLM, ensure_installed, unavailable_reason, vllm_available

# scripts/test.sh starts this lane beside the other two at the lowest priority: the session's engines
# start then (minutes of CPU that measure nothing), and the tests wait for this file, which the
# script writes once the other lanes are done; then the lane's processes return to normal priority.
START_AFTER_ENV = "VLLM_DIAG_REALVLLM_START_AFTER"
START_AFTER_TIMEOUT_S = 3600.0
EARLY_STARTUP_TIMEOUT_S = 900.0  # at the lowest priority beside two busy lanes a start takes minutes


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "realvllm: end-to-end tests against a real vLLM (CPU build) started by tests/realvllm"
    )
    config.addinivalue_line(
        "markers", "stops_engine: stops a shared engine; runs after every other test so the engine starts once"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("stops_engine") is not None)  # stable: order kept


def _require_real_vllm() -> None:
    if os.environ.get("VLLM_DIAG_SKIP_REAL_VLLM") == "1":
        pytest.skip("real vLLM tests skipped: VLLM_DIAG_SKIP_REAL_VLLM=1")
    if not vllm_available() and os.environ.get("VLLM_DIAG_AUTO_INSTALL") == "1":
        ensure_installed()
    if not vllm_available():
        # Loud on purpose: CI installs it before pytest, so absence means a broken setup.
        pytest.fail(
            f"real vLLM not installed: {unavailable_reason()}. "
            "Set VLLM_DIAG_SKIP_REAL_VLLM=1 to skip these tests deliberately.",
            pytrace=False,
        )


def _start(server: RealVLLM) -> RealVLLM:
    try:
        return server.start()
    except (RuntimeError, TimeoutError) as exc:
        pytest.fail(f"real vLLM failed to start: {exc}", pytrace=False)


def _flags(server: RealVLLM) -> tuple[object, ...]:
    """What makes two engines the same: the command line but its port, the extra environment and
    the OMP threads (not the log folder)."""
    cmd = server.command()
    at = cmd.index("--port")
    return (*cmd[:at], *cmd[at + 2:], tuple(sorted(server.extra_env.items())), server.omp_threads)


class Engines:
    """Started engines by their flags: one start per distinct set of flags in the session."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._started: dict[tuple[object, ...], RealVLLM] = {}

    def get(self, **kwargs: Any) -> RealVLLM:
        """The running engine with these RealVLLM kwargs (started on first use); do not stop it."""
        server = RealVLLM(log_dir=self.log_dir, **kwargs)
        key = _flags(server)
        shared = self._started.get(key)
        if shared is not None and shared.running:
            return shared
        self._started[key] = _start(server)
        return server

    def stop_all(self) -> None:
        for server in self._started.values():
            server.stop()
        self._started.clear()


def _normal_priority(pids: list[int]) -> None:
    """Every thread of these processes back to nice 0 (Linux keeps a nice value per thread)."""
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue  # gone
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, 0)
            except OSError:
                pass  # gone, or not ours to raise (then it keeps its priority)


def _start_early_then_wait(engines: Engines, path: str) -> None:
    """Start the session's engines now, then wait for the other lanes (see START_AFTER_ENV)."""
    for flags in ({}, loads.SMALL_ENGINE):
        try:
            engines.get(startup_timeout_s=EARLY_STARTUP_TIMEOUT_S, **flags)
        except pytest.fail.Exception as exc:
            # Not fatal here: the first test that needs the engine starts it again, at normal priority.
            print(f"early start of the engine {flags or 'with default flags'} failed: {exc}")
    deadline = time.monotonic() + START_AFTER_TIMEOUT_S
    while not Path(path).exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{path} not written within {START_AFTER_TIMEOUT_S:.0f} s: the other lanes did not end",
                        pytrace=False)
        time.sleep(0.5)
    _normal_priority(descendant_pids(os.getpid()))


@pytest.fixture(scope="session")
def real_vllm_engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    """The session's engines, each stopped at the end."""
    _require_real_vllm()
    engines = Engines(tmp_path_factory.mktemp("realvllm"))
    try:
        start_after = os.environ.get(START_AFTER_ENV)
        if start_after:
            _start_early_then_wait(engines, start_after)
        yield engines
    finally:
        engines.stop_all()


@pytest.fixture(scope="session", autouse=True)
def _after_the_other_lanes(real_vllm_engines: Engines) -> None:
    """Under scripts/test.sh no test here runs before the other lanes end (START_AFTER_ENV)."""


@pytest.fixture(scope="session")
def real_vllm(real_vllm_engines: Engines) -> RealVLLM:
    """A started RealVLLM with the default flags, shared by the session."""
    return real_vllm_engines.get()


@pytest.fixture(scope="session")
def light_load(real_vllm: RealVLLM) -> loads.WatchedLoad:
    return loads.light_load(real_vllm)


@pytest.fixture(scope="session")
def storm_load(real_vllm: RealVLLM, tmp_path_factory: pytest.TempPathFactory) -> loads.WatchedLoad:
    return loads.storm_load(real_vllm, tmp_path_factory.mktemp("storm-captures"))


@pytest.fixture(scope="session")
def calm_cpu_load(real_vllm: RealVLLM) -> loads.WatchedLoad:
    return loads.calm_cpu_load(real_vllm)
