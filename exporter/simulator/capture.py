"""Write a scenario's ``/metrics`` captures to disk, for offline replay with ``vllm-diag diagnose``.

Captures are taken every ``interval_s`` of *simulated* time: ten minutes of traffic take well
under a second to write, with no sleeping. The output is deterministic for a given scenario,
seed and ``start_unix``.

Layout of ``out_dir``:

* ``capture-0000.txt`` ... : vLLM exposition at simulated times ``interval_s``, ``2*interval_s``, ...
* ``dcgm/capture-0000.txt`` ... : dcgm-exporter exposition at the same instants (if the
  scenario serves DCGM series); kept in a subdirectory so a ``capture-*.txt`` glob of
  ``out_dir`` picks up only vLLM captures.
* ``scenario.json``: name, description, engine facts, interval and the expected diagnosis.
* ``vllm-diag.yaml``: a sidecar config whose first target carries the engine facts, for
  ``vllm-diag diagnose out_dir/capture-*.txt --config out_dir/vllm-diag.yaml``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import yaml

from exporter.simulator.exposition import render_dcgm, render_vllm
from exporter.simulator.scenarios import Scenario, get_scenario

DEFAULT_START_UNIX = 1_800_000_000.0  # fixed, so captures are byte-for-byte reproducible


def write_captures(
    scenario: Scenario | str,
    out_dir: str | Path,
    duration_s: float,
    interval_s: float,
    seed: int | None = None,
    *,
    start_unix: float = DEFAULT_START_UNIX,
) -> list[Path]:
    """Simulate ``duration_s`` seconds and write one capture per ``interval_s``.

    Returns the vLLM capture paths in time order (``floor(duration_s / interval_s)`` files).
    """
    if interval_s <= 0 or duration_s < interval_s:
        raise ValueError("need interval_s > 0 and duration_s >= interval_s")
    sc = get_scenario(scenario) if isinstance(scenario, str) else scenario
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dcgm_dir = out / "dcgm"
    if sc.dcgm:
        dcgm_dir.mkdir(exist_ok=True)
    engine = sc.build(seed)
    n = int(duration_s // interval_s + 1e-9)
    paths: list[Path] = []
    for i in range(n):
        engine.advance_to((i + 1) * interval_s)
        name = f"capture-{i:04d}.txt"
        path = out / name
        path.write_text(render_vllm(engine, start_unix=start_unix), encoding="utf-8")
        paths.append(path)
        if sc.dcgm:
            (dcgm_dir / name).write_text(render_dcgm(engine), encoding="utf-8")
    meta = {
        "scenario": sc.name,
        "description": sc.description,
        "case": sc.case,
        "seed": sc.seed if seed is None else seed,
        "interval_seconds": interval_s,
        "duration_seconds": n * interval_s,
        "start_unix": start_unix,
        "model_name": sc.engine.model_name,
        "engine_facts": sc.engine_facts(),
        "expected": asdict(sc.expected),
        "captures": [p.name for p in paths],
        "dcgm_captures": [f"dcgm/{p.name}" for p in paths] if sc.dcgm else [],
    }
    (out / "scenario.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    config = {
        "targets": [
            {
                "name": sc.name,
                "url": "http://127.0.0.1:8000/metrics",
                "scrape_interval": interval_s,
                "engine": sc.engine_facts(),
                # The deployment's own objectives, so `diagnose` judges the captures as the scenario means.
                **({"slo": sc.slo} if sc.slo else {}),
            }
        ]
    }
    (out / "vllm-diag.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return paths
