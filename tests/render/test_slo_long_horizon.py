"""Healthy-like scenarios over a day and the 3-day ticket window: not one critical or warning alert.

The input series are the sidecar's own output and the vLLM exposition it scraped, from the real
pipeline run over the simulator's healthy-like scenarios (``tests/e2e/replay.py``), sampled every
5 minutes and looped for three days: gauges repeat their cycle, counters keep growing by the
increments they had. The rules are rendered with each scenario's own objectives (``render rules
--config``), as a deployment would, and evaluated by the real promtool.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import load_settings
from exporter.render import rules
from exporter.render.generate import render, write
from exporter.simulator import SCENARIOS
from tests.e2e import replay

pytestmark = pytest.mark.slow

HEALTHY_LIKE = tuple(n for n, s in SCENARIOS.items() if s.expected.verdict == "none" and not s.expected.symptoms)
STEP_S = 300  # promtool's input interval and evaluation interval
DAYS = 3
HORIZONS_MIN = (60, 24 * 60, DAYS * 24 * 60 - 5)
# Only what a rule reads: every vllm_diag_* family the alerts name and the raw families the recording
# rules read (histogram buckets only at the objectives' edges, to keep promtool's input small).
RAW_FAMILIES = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:request_success_total",
                "vllm:num_requests_running", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
                "vllm:kv_cache_usage_perc",
                # a speculative replica's ITL SLI counts no per-event bad gap (exporter/render/slo.py)
                "vllm:spec_decode_num_drafts_total")


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: run scripts/install-test-infra.sh")
    return path


def _edges(options: rules.Options) -> set[str]:
    return {f"{o.threshold_seconds:g}" for o in options.slo.objectives().values()}


def _samples(body: bytes, edges: set[str], read: set[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            wanted = s.name in read or any(s.name.startswith(f) for f in RAW_FAMILIES)
            if not wanted or s.name.endswith("_created"):
                continue
            if s.name.endswith("_bucket") and f"{float(s.labels.get('le', 'nan')):g}" not in edges:
                continue
            labels = ", ".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = float(s.value)
    return out


def _looped(timeline: replay.Timeline, edges: set[str], read: set[str], points: int) -> list[dict[str, str]]:
    """Each series over ``points`` steps of STEP_S: the timeline's 5-minute samples in a loop; counters
    grow by the increments they had (a reset counts from zero), the loop's wrap by their mean."""
    per_step = int(STEP_S // replay.SIM_INTERVAL_S)
    picks = list(range(per_step, len(timeline.bodies), per_step))  # skip the empty first window
    cycle = [{**_samples(timeline.bodies[i], edges, read), **_samples(timeline.raw[i] or b"", edges, read)}
             for i in picks]
    series = []
    for name in sorted(set().union(*cycle)):
        values = [c.get(name, math.nan) for c in cycle]
        if name.split("{")[0].endswith(("_total", "_count", "_bucket", "_sum")):
            known = [v for v in values if not math.isnan(v)]
            steps = [b - a if b >= a else b for a, b in zip(known, known[1:])] or [0.0]
            steps.append(sum(steps) / len(steps))
            out, v = [], known[0]
            for k in range(points):
                if k:
                    v += steps[(k - 1) % len(steps)]
                out.append(f"{v:.9g}")
        else:
            out = ["_" if math.isnan(values[k % len(values)]) else f"{values[k % len(values)]:.6g}"
                   for k in range(points)]
        series.append({"series": name, "values": " ".join(out)})
    return series


def _objective_groups() -> dict[str, list[str]]:
    """Healthy-like scenarios by the objectives they state (one rendering of the rules each)."""
    groups: dict[str, list[str]] = {}
    for name in HEALTHY_LIKE:
        groups.setdefault(json.dumps(SCENARIOS[name].slo or {}, sort_keys=True), []).append(name)
    return groups


@pytest.mark.parametrize("slo", list(_objective_groups()))
def test_healthy_like_scenarios_raise_nothing_in_three_days(tmp_path: Path, slo: str) -> None:
    """The healthy-like scenarios that state these objectives, in one promtool run, each under its own
    model and target name, with the rules rendered from their objectives."""
    names = _objective_groups()[slo]
    config = tmp_path / "vllm-diag.yaml"
    config.write_text(yaml.safe_dump({"slo": json.loads(slo)} if json.loads(slo) else {}))
    options = rules.Options.from_settings(load_settings(config))
    write(tmp_path, render("rules", options), "rules")
    rule_files = [tmp_path / f for f in (rules.RECORDING_FILE, rules.ALERTS_FILE, rules.RAW_ALERTS_FILE)]
    read = set(re.findall(r"vllm_diag_[a-z_]+", "".join(p.read_text() for p in rule_files)))
    points = DAYS * 24 * 3600 // STEP_S
    timelines = replay.run_all(names)
    series = [{"series": f'up{{job="{rules.SIDECAR_JOB}", instance="sidecar:9863"}}', "values": f"1x{points - 1}"}]
    for name, timeline in timelines.items():
        series += _looped(replay.renamed(timeline, name, name, model=name), _edges(options), read, points)
    spec: dict[str, Any] = {
        "rule_files": [str(p) for p in rule_files],
        "evaluation_interval": f"{STEP_S}s",
        "group_eval_order": list(rules.GROUP_EVAL_ORDER),
        "tests": [{
            "name": f"{', '.join(names)}: three days", "interval": f"{STEP_S}s", "input_series": series,
            "promql_expr_test": [{"expr": 'count by (alertname, severity, model_name, target) '
                                          '(ALERTS{severity=~"critical|warning"})',
                                  "eval_time": f"{m}m", "exp_samples": []} for m in HORIZONS_MIN],
        }],
    }
    path = tmp_path / "long_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
