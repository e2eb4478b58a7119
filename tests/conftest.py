"""Shared fixtures: the real vLLM 0.32 captures and small builders for crafted windows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# Real vLLM 0.32 CPU captures live in the repository, so a clone anywhere runs the suite;
# VLLM_DIAG_FIXTURES points the tests at another set of captures.
FIXTURES = Path(os.environ.get("VLLM_DIAG_FIXTURES", Path(__file__).resolve().parent / "fixtures" / "vllm-0.32-cpu"))


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"real vLLM captures not found at {FIXTURES} (set VLLM_DIAG_FIXTURES)")
    return FIXTURES


@pytest.fixture(scope="session")
def capture_times(fixtures_dir: Path) -> dict[str, float]:
    summary = json.loads((fixtures_dir / "load-summary.json").read_text())
    return {s["snapshot"]: s["unix_time"] for s in summary["snapshots"]}


def read_capture(fixtures_dir: Path, phase: str) -> str:
    return (fixtures_dir / f"snapshot-{phase}.txt").read_text()


# The slow tier, left out by `pytest -m "not slow"` (the fast tier, under a minute), is one thing: the
# `slow` marker. A test module or test carries it (`pytestmark = pytest.mark.slow`), or carries the
# marker of a heavy part it starts, which implies it: a real vLLM, Prometheus/Alertmanager, Chromium,
# docker (tests/e2e marks its modules `prometheus` only).
SLOW_MARKERS = ("realvllm", "prometheus", "browser", "docker")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/* from the current code instead of comparing (review the diff)")


# Slow modules whose work is deterministic CPU (simulated traffic, promtool, backfilled Prometheus
# queries) and measures no wall-clock time: `scripts/test.sh` runs them with the fast tier, beside the
# modules that mostly wait (docker, Prometheus/Alertmanager playback, Chromium, live servers), at
# a low priority (nice 10). The real vLLM runs afterwards, alone: its latencies and CPU scores are what
# it measures. The lanes are marker expressions (LANES), so `pytest -m` reproduces any of them.
CPU_BOUND = (  # modules, or single tests by node id; heaviest first (measured alone, 2 workers)
    "tests/simulator/test_scenarios.py", "tests/promsource/test_agreement.py", "tests/render/test_slo_alerts.py",
    "tests/simulator/test_advisor.py", "tests/simulator/test_physics.py", "tests/simulator/test_advisor_track.py",
    "tests/promsource/test_advise_prometheus.py", "tests/simulator/test_format.py",
    # Reads the installed vLLM's code (an import in a subprocess); starts no engine.
    "tests/realvllm/test_engine_facts.py::test_defaults_table_matches_the_installed_vllm",
)
LANES = {
    "waiting": "slow and not cpu_bound and not realvllm",
    "cpu": "(not slow and not realvllm) or cpu_bound",
    "realvllm": "realvllm and not cpu_bound",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cpu_bound: a slow test of deterministic CPU work, run beside the waiting ones (CPU_BOUND)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank: dict[str, int] = {}
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)
        module = item.path.relative_to(config.rootpath).as_posix()
        entry = module if module in CPU_BOUND else f"{module}::{item.name}"
        rank[item.nodeid] = CPU_BOUND.index(entry) if entry in CPU_BOUND else len(CPU_BOUND)
        if entry in CPU_BOUND:
            item.add_marker(pytest.mark.cpu_bound)
    # The replay readers last (a stable sort): their background replays get every test before them.
    # The CPU-bound modules first, heaviest first: pytest-xdist hands out modules in this order, so the
    # lane's last minutes are short modules spread over both workers, not one long module on one.
    items.sort(key=lambda item: (item.path.name in REPLAY_READERS, rank[item.nodeid]))


# Modules that replay simulated timelines through Prometheus or promtool (tests/e2e/replay.py). Their
# replays (minutes of CPU) start in the background when the session starts, at a low priority (replay.PREFETCH_NICE):
# the tests that run before them mostly wait on servers and containers.
REPLAY_READERS = ("test_alert_matrix.py", "test_fleet_pages.py", "test_slo_long_horizon.py")


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.path.name in REPLAY_READERS for item in session.items):
        from tests.e2e import replay
        replay.prefetch(replay.all_timeline_names())


def pytest_sessionfinish(session: pytest.Session) -> None:
    import sys
    replay = sys.modules.get("tests.e2e.replay")
    if replay is not None:
        replay.shutdown()
