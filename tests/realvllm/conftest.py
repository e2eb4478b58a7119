"""Fixtures for end-to-end tests against a real vLLM (CPU build) serving a tiny local model.

`real_vllm` is session-scoped: one server (~25-30 s startup) serves every test in the session.
Install first with `bash tests/realvllm/install.sh` (CI does this before pytest). A missing
install FAILS the tests loudly; set VLLM_DIAG_SKIP_REAL_VLLM=1 to skip them on purpose, or
VLLM_DIAG_AUTO_INSTALL=1 to let the fixture run install.sh itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .harness import RealVLLM, ensure_installed, unavailable_reason, vllm_available


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "realvllm: end-to-end tests against a real vLLM (CPU build) started by tests/realvllm"
    )


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


@pytest.fixture(scope="session")
def real_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealVLLM]:
    """A started RealVLLM with the default flags, shared by the session; stopped at the end."""
    _require_real_vllm()
    server = _start(RealVLLM(log_dir=tmp_path_factory.mktemp("realvllm")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def real_vllm_factory(tmp_path: Any) -> Iterator[Callable[..., RealVLLM]]:
    """Start extra servers with other flags (RealVLLM kwargs); each is stopped after the test."""
    _require_real_vllm()
    started: list[RealVLLM] = []

    def factory(**kwargs: Any) -> RealVLLM:
        kwargs.setdefault("log_dir", tmp_path)
        server = RealVLLM(**kwargs)
        started.append(server)
        return _start(server)

    try:
        yield factory
    finally:
        for server in started:
            server.stop()
