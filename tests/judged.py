"""A scenario captured and judged by the sidecar, as an operator would deploy it next to it.

One function for everything that asks "what does the sidecar say about this scenario": the scenario
suite, the golden files and the profile table in docs/scenarios.md. The target is configured with
the scenario's engine facts and objectives, and the CPU source the shipped deployments configure
(the simulated host's view of the engine processes).
"""

from __future__ import annotations

from pathlib import Path

from exporter.config import Settings, load_settings
from exporter.pipeline import TargetPipeline, replay
from exporter.simulator.capture import write_captures
from exporter.simulator.hostcpu import simulated_host_inputs
from exporter.simulator.scenarios import SCENARIOS
from exporter.state import TargetState


def scenario_settings(name: str, interval: float) -> Settings:
    """The shipped settings with one target for scenario ``name``, scraped every ``interval`` s."""
    scenario = SCENARIOS[name]
    target = {"name": name, "url": "http://127.0.0.1:8000/metrics", "scrape_interval": interval,
              "timeout": min(3.0, interval), "engine": scenario.engine_facts()}
    if scenario.slo:
        target["slo"] = scenario.slo  # the deployment's own objectives
    return load_settings(overrides={"targets": [target]})


def judge_scenario(name: str, out: Path, duration: float, interval: float, seed: int | None = None,
                   dcgm: bool = False) -> tuple[TargetState, Settings]:
    """Capture ``duration`` s of scenario ``name`` into ``out`` and replay it through the sidecar.

    Returns the last published state and the settings it was judged with; ``dcgm`` adds the
    simulated DCGM source (the shipped default has none).
    """
    files = write_captures(SCENARIOS[name], out, duration, interval, seed)
    return judge_captured(name, files, interval, seed, out / "dcgm" if dcgm else None)


def judge_captured(name: str, files: list[Path], interval: float, seed: int | None = None,
                   dcgm_dir: Path | None = None) -> tuple[TargetState, Settings]:
    """``judge_scenario`` on captures already written by ``write_captures`` (``files`` in time order,
    ``dcgm_dir`` their DCGM folder when the DCGM source is judged too)."""
    settings = scenario_settings(name, interval)
    host = simulated_host_inputs(SCENARIOS[name].build(seed))  # the CPU share is a property of the scenario
    pipeline = TargetPipeline(settings.targets[0], settings, host_probe=lambda now: host)
    state = replay(files, pipeline, interval, dcgm_dir=dcgm_dir)
    return state, settings
