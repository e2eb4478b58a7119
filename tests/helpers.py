"""Builders the tests share that the product never calls (kept out of exporter/ so its API is what it uses)."""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import replace
from typing import Any

import pytest

from exporter.advisor.calibrate import Empirical
from exporter.signals import FLAT_FIELDS, Signals
from exporter.simulator.scenarios import Scenario


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (every server a test starts binds there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 20.0) -> None:
    """Return once something listens on ``port``; fail the test when ``proc`` exits first or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"nothing listens on {port} after {seconds} s")


def signals_with(signals: Signals, **values: Any) -> Signals:
    """A copy with fields replaced by their flat (JSON) names, e.g. ``kv_cache_usage_mean=0.9``.

    Group fields that have no flat key of their own (the quantile maps) go by their field name; an
    unknown name raises TypeError, as ``dataclasses.replace`` does.
    """
    groups: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for key, value in values.items():
        if key in FLAT_FIELDS:
            attribute, name = FLAT_FIELDS[key]
            groups.setdefault(attribute, {})[name] = value
        else:
            top[key] = value
    for attribute, changes in groups.items():
        top[attribute] = replace(getattr(signals, attribute), **changes)
    return replace(signals, **top)


def scenario_with_engine(scenario: Scenario, **changes: Any) -> Scenario:
    """The same scenario with engine settings changed (physics tests, what-ifs)."""
    return replace(scenario, engine=replace(scenario.engine, **changes))


def capped_mean(dist: Empirical, cap: int) -> float:
    """E[min(length, cap)] of the advisor's length distribution: each bucket a uniform range around its point."""
    total, acc = sum(dist.weights), 0.0
    for i, (value, weight) in enumerate(zip(dist.values, dist.weights)):
        spread = dist.spreads[i] if dist.spreads else 0.0
        lo, hi = value - spread, value + spread
        if cap >= hi:
            part = value
        elif cap <= lo:
            part = float(cap)
        else:  # E[min(U, cap)] for U uniform on [lo, hi]
            part = ((cap * cap - lo * lo) / 2.0 + cap * (hi - cap)) / (hi - lo)
        acc += part * weight
    return acc / total
