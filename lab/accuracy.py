"""``python -m lab.accuracy``: how often the diagnosis is right, at the defaults users get.

Every built-in scenario is simulated once (5 s of simulated time between renders) and fed to
four sidecar configurations at the same time, each a live :class:`TargetPipeline`:

* ``defaults``: the shipped settings (window, 5 s scrapes, no DCGM), with the CPU source the
  shipped deployments configure (``cpu: {match: "vllm serve"}``), read here from the simulated
  engine's run-queue wait;
* ``15s`` and ``30s``: the same with slower scrapes (every third or sixth render);
* ``dcgm``: the defaults plus DCGM GPU utilisation.

A cell is the share of steady-state evaluations (those after the first full window that follows
the warm-up) whose verdict is the scenario's expected one, and the share with a *false symptom*:
an active, non-informational symptom outside the scenario's expected and "may also fire" sets.

A scenario's expected verdict describes its cause *while users feel it*. A draw can leave a whole
window in which every first token and token gap met the deployment's objectives (a peak that stayed
within the error budget); there the product's rule "no symptom without a user-visible effect" makes
``none`` the right answer too. Each cell therefore has two shares: ``strict`` (the scenario's verdict
in every evaluation) and ``effect`` (the scenario's verdict, or ``none`` in an evaluation whose window
met every objective by the simulator's own counts: :class:`UserEffect`, exact because every objective's
threshold sits on a bucket edge, and independent of the sidecar's window and rules). The effect share
never credits another layer, and a window with too few events to judge is not "unhurt".

The acceptance is >= 90 % expected verdict per cell (the ``effect`` share), and 100 % ``none`` with
no false symptom for the healthy-like scenarios. Exit status 0 either way (the table says MISS); 2 on
a harness error.
"""

from __future__ import annotations

import argparse
import bisect
import math
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from exporter.config import Settings, load_settings
from exporter.dcgm import gpu_utilization
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.signals import HostInputs
from exporter.simulator import SCENARIOS
from exporter.simulator.dataparallel import DataParallelEngine
from exporter.simulator.engine import Engine, Histogram
from exporter.simulator.exposition import render_dcgm, render_vllm
from exporter.simulator.hostcpu import simulated_host_inputs
from exporter.simulator.scenarios import Scenario
from lab import transitions
from lab.common import write_json
from lab.transitions import parse_seeds

RENDER_STEP_S = 5.0
START_UNIX = 1_800_000_000.0


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    every: int  # use every n-th render (scrape interval = every * RENDER_STEP_S)
    dcgm: bool


COLUMNS: tuple[Column, ...] = (
    Column("defaults", 1, False),
    Column("15s", 3, False),
    Column("30s", 6, False),
    Column("dcgm", 1, True),
)


class UserEffect:
    """Whether users missed a stated objective over the last window, from the engine's own histograms.

    Each render appends (time, (events, over the threshold)) per objective; a window is *unhurt* when
    every objective, over it, either has at least ``min_events`` events and a share over its threshold
    within its error budget, or has fewer events (but some) of which fewer than ``min_misses`` went over:
    the product's own objective for a handful of events (``evidence_min_misses``: "one stray slow request
    is not an effect"), taken without its chance test, so never looser than the sidecar's judgement. An
    objective without any event in the window is not judged. The thresholds sit on vLLM's bucket edges
    (the scenarios' objectives and the defaults), so the counts are exact; an objective off an edge is
    never judged unhurt.
    """

    def __init__(self, objectives: dict[str, tuple[float, float]], min_events: float, min_misses: float) -> None:
        self.objectives = objectives  # name -> (threshold seconds, error budget)
        self.min_events = min_events
        self.min_misses = min_misses
        self.history: deque[tuple[float, dict[str, tuple[int, int] | None]]] = deque()

    @staticmethod
    def _histograms(engine: Engine | DataParallelEngine, name: str) -> list[Histogram]:
        engines = engine.engines if isinstance(engine, DataParallelEngine) else [engine]
        return [e.stats.time_to_first_token if name == "ttft" else e.stats.inter_token_latency for e in engines]

    def record(self, t: float, engine: Engine | DataParallelEngine, keep_s: float) -> None:
        counts: dict[str, tuple[int, int] | None] = {}
        for name, (threshold, _) in self.objectives.items():
            total = over = 0
            on_edge = True
            for hist in self._histograms(engine, name):
                i = bisect.bisect_left(hist.bounds, threshold)
                on_edge = on_edge and i < len(hist.bounds) and math.isclose(hist.bounds[i], threshold)
                total += hist.count
                over += hist.count - sum(hist.counts[: i + 1])
            counts[name] = (total, over) if on_edge else None
        self.history.append((t, counts))
        while self.history and self.history[0][0] < t - keep_s:
            self.history.popleft()

    def unhurt(self, t: float, window_s: float) -> bool:
        """Every objective judged and met over (t - window_s, t]."""
        start = next((h for h in self.history if h[0] >= t - window_s), None)
        end = self.history[-1] if self.history and self.history[-1][0] == t else None
        if start is None or end is None or start[0] >= t:
            return False
        for name, (_, budget) in self.objectives.items():
            a, b = start[1][name], end[1][name]
            if a is None or b is None:
                return False
            events, over = b[0] - a[0], b[1] - a[1]
            if events >= self.min_events:
                if over > budget * events:
                    return False
            elif events == 0 or over >= self.min_misses:
                return False
        return True


@dataclass
class Cell:
    evaluations: int = 0
    expected_verdict: int = 0
    expected_with_effect: int = 0  # expected, or `none` in a window where users met every objective
    false_symptom: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    false_symptoms: dict[str, int] = field(default_factory=dict)

    @property
    def strict_share(self) -> float:
        return self.expected_verdict / self.evaluations if self.evaluations else 0.0

    @property
    def verdict_share(self) -> float:
        return self.expected_with_effect / self.evaluations if self.evaluations else 0.0

    @property
    def false_share(self) -> float:
        return self.false_symptom / self.evaluations if self.evaluations else 0.0


def healthy_like(scenario: Scenario) -> bool:
    return scenario.expected.verdict == "none" and not scenario.expected.symptoms


def _settings(scenario: Scenario, column: Column, base: Settings) -> Settings:
    """The shipped settings for this scenario's target, as an operator would configure it."""
    interval = RENDER_STEP_S * column.every
    target = {"name": scenario.name, "url": "http://127.0.0.1:8000/metrics", "scrape_interval": interval,
              "timeout": min(3.0, interval), "engine": scenario.engine_facts()}
    overrides: dict = {"targets": [target], "window_seconds": base.window_seconds,
                       "thresholds": dict(base.thresholds)}
    if scenario.slo is not None:
        target["slo"] = scenario.slo  # the deployment's own objectives
    if base.window_seconds < 2 * interval:
        overrides["window_seconds"] = 2 * interval
    return load_settings(overrides=overrides)


def _host_of(host_now: dict[str, HostInputs], column: str, _now: float) -> HostInputs:
    """The column's host inputs at this step (the scenario's CPU share, set before each evaluation)."""
    return host_now[column]


def run_scenario(name: str, duration_s: float, warmup_s: float, seed: int | None = None,
                 base_overrides: dict | None = None) -> dict[str, dict]:
    """Simulate one scenario and score every column on it."""
    scenario = SCENARIOS[name]
    base = load_settings(overrides=base_overrides or {})
    engine = scenario.build(seed)
    engine.advance_to(warmup_s)
    pipelines: dict[str, TargetPipeline] = {}
    host_now: dict[str, HostInputs] = {}
    for column in COLUMNS:
        settings = _settings(scenario, column, base)
        pipelines[column.name] = TargetPipeline(settings.targets[0], settings,
                                                host_probe=partial(_host_of, host_now, column.name))
    cells = {column.name: Cell() for column in COLUMNS}
    expected = scenario.expected
    allowed = set(expected.symptoms) | {x for x in expected.also_possible if len(x) == 1}
    first = next(iter(pipelines.values())).settings
    effect = UserEffect({name: (o.threshold_seconds, o.error_budget)
                         for name, o in first.slo_for(first.targets[0]).objectives().items()},
                        first.resolved_thresholds().evidence_min_requests,
                        first.resolved_thresholds().evidence_min_misses)
    keep_s = max(p.settings.window_seconds for p in pipelines.values()) + RENDER_STEP_S
    effect.record(warmup_s, engine, keep_s)
    steps = int(duration_s // RENDER_STEP_S)
    for i in range(1, steps + 1):
        t = warmup_s + i * RENDER_STEP_S
        engine.advance_to(t)
        effect.record(t, engine, keep_s)
        body = render_vllm(engine, start_unix=START_UNIX).encode()
        dcgm = None
        host = simulated_host_inputs(engine)
        for column in COLUMNS:
            if i % column.every:
                continue
            pipeline = pipelines[column.name]
            if column.dcgm:
                if dcgm is None:
                    dcgm = gpu_utilization(render_dcgm(engine))
                pipeline.observe_gpu(START_UNIX + t, dcgm)
            host_now[column.name] = host
            state = pipeline.ingest(ScrapeResult(started_at=START_UNIX + t, duration=0.0, body=body))
            window = pipeline.settings.window_seconds
            if t < warmup_s + max(window, base.window_seconds) or state.status in ("insufficient_evidence", "down"):
                continue
            cell = cells[column.name]
            cell.evaluations += 1
            verdict = state.diagnosis.verdict.layer
            cell.verdicts[verdict] = cell.verdicts.get(verdict, 0) + 1
            # Right only in the expected state too: a sleeping engine reads `sleeping`, judged by no rule.
            if verdict == expected.verdict and state.status == scenario.expected_state:
                cell.expected_verdict += 1
                cell.expected_with_effect += 1
            elif verdict == "none" and state.status == scenario.expected_state and effect.unhurt(t, window):
                cell.expected_with_effect += 1
            active = {s.id for s in state.diagnosis.symptoms if not getattr(s, "informational", False)}
            false = active - allowed
            if false:
                cell.false_symptom += 1
                for sid in false:
                    cell.false_symptoms[sid] = cell.false_symptoms.get(sid, 0) + 1
    return {c: {"evaluations": cell.evaluations, "verdict_share": cell.verdict_share,
                "strict_share": cell.strict_share, "false_share": cell.false_share, "verdicts": cell.verdicts,
                "false_symptoms": cell.false_symptoms}
            for c, cell in cells.items()}


def _run(args: tuple[str, float, float, int | None, dict]) -> tuple[str, dict]:
    name, duration, warmup, seed, base = args
    return name, run_scenario(name, duration, warmup, seed, base)


def passes(scenario: Scenario, cell: dict) -> bool:
    if healthy_like(scenario):
        return cell["verdict_share"] >= 1.0 and cell["false_share"] == 0.0
    return cell["verdict_share"] >= 0.9


def render_table(results: dict[str, dict]) -> str:
    head = "| scenario | expected | " + " | ".join(c.name for c in COLUMNS) + " |"
    rule = "|---|---|" + "---|" * len(COLUMNS)
    rows = [head, rule]
    for name, cells in results.items():
        scenario = SCENARIOS[name]
        parts = []
        for column in COLUMNS:
            cell = cells[column.name]
            mark = "" if passes(scenario, cell) else " **MISS**"
            strict = cell.get("strict_share", cell["verdict_share"])
            shown = f"{cell['verdict_share'] * 100:.0f} %"
            if round(strict * 100) != round(cell["verdict_share"] * 100):
                shown += f" ({strict * 100:.0f} % strict)"
            parts.append(f"{shown} / {cell['false_share'] * 100:.0f} %{mark}")
        rows.append(f"| {name} | {scenario.expected.verdict} | " + " | ".join(parts) + " |")
    return "\n".join(rows)


def _one_seed(args: argparse.Namespace, names: list[str], seed: int | None) -> None:
    started = time.monotonic()
    base: dict = {"window_seconds": args.window} if args.window else {}
    work = [(n, args.duration, args.warmup, seed, base) for n in names]
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = dict(pool.map(_run, work))
    else:
        results = dict(map(_run, work))
    results = {n: results[n] for n in names}
    print(f"seed {seed if seed is not None else 'default'}: expected verdict (strict: without `none` in windows "
          "that met every objective, where it differs) / false symptom, share of steady-state evaluations "
          f"({args.duration:.0f} simulated s per scenario after {args.warmup:.0f} s warm-up; "
          f"window {load_settings(overrides=base).window_seconds:.0f} s)\n")
    print(render_table(results))
    misses = [(n, c.name) for n in names for c in COLUMNS if not passes(SCENARIOS[n], results[n][c.name])]
    print(f"\n{len(names) * len(COLUMNS) - len(misses)}/{len(names) * len(COLUMNS)} cells meet the target "
          f"({time.monotonic() - started:.0f} s)")
    if args.detail:
        for n in names:
            for c in COLUMNS:
                cell = results[n][c.name]
                print(f"  {n:28s} {c.name:9s} verdicts {cell['verdicts']} false {cell['false_symptoms']}")
    if args.json:
        several = args.seed is not None and len(parse_seeds(args.seed)) > 1
        path = args.json.with_name(args.json.name.replace(".json", f".seed{seed}.json", 1)) if several else args.json
        write_json(path, results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.accuracy", description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", action="append", help="only these scenarios (default: all)")
    parser.add_argument("--duration", type=float, default=900.0, help="simulated seconds scored per scenario")
    parser.add_argument("--warmup", type=float, default=120.0, help="simulated seconds before the first scrape")
    parser.add_argument("--seed", default=None,
                        help="one seed (3), a range (5..9) or a list (0,2); each gets its table")
    parser.add_argument("--transitions", action="store_true",
                        help="the transition matrix instead (none -> cause -> none): lab.transitions")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--window", type=float, help="measure another window_seconds than the shipped default")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--detail", action="store_true", help="print verdict and false-symptom counts per cell")
    args = parser.parse_args(argv)
    if args.transitions:
        forwarded = ["--jobs", str(args.jobs)] + (["--seed", args.seed] if args.seed is not None else [])
        forwarded += ["--window", str(args.window)] if args.window else []
        forwarded += ["--json", str(args.json)] if args.json else []
        return transitions.main(forwarded + (["--detail"] if args.detail else []))
    names = args.scenario or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"lab.accuracy: unknown scenario(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    seeds: list[int | None] = list(parse_seeds(args.seed)) if args.seed is not None else [None]
    for seed in seeds:
        _one_seed(args, names, seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
