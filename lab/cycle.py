"""In-process figures: the full scrape cycle against prometheus_client's parser and promtool.

One cycle = ``TargetPipeline.ingest`` (UTF-8 decode, parse, window push, signals, diagnosis) and
``Sidecar.publish``, plus ``Sidecar.metrics()`` (the sidecar's own ``/metrics``, as a request gets it,
the target's new lines rendered), fed a sequence of
different captures with increasing counters, at the shipped scrape interval, after the shipped window
(``exporter.config``: 180 s at 5 s) has filled.
Baseline and measured runs are interleaved on the same bytes, so load on the machine hits both.
"""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import partial

from prometheus_client.parser import text_string_to_metric_families

from exporter.config import load_settings
from exporter.parse import parse
from exporter.poll import ScrapeResult
from exporter.server import Sidecar
from lab.common import SHIPPED_INTERVAL, SHIPPED_WINDOW, Figure, median
from lab.payloads import steady_sequence, synthetic
from lab.rounds import alternated

PROMTOOL = "/usr/bin/promtool"
INTERVAL = SHIPPED_INTERVAL
WINDOW = SHIPPED_WINDOW
WARM = int(WINDOW / INTERVAL) + 1  # scrapes that fill the window before the measured rounds
CYCLE_VS_PARSE = 3.0  # the 50 KB full cycle against prometheus_client's parse alone (the acceptance)


def prometheus_client_parse(body: bytes) -> int:
    """The baseline: prometheus_client's text parser, every sample materialised."""
    return sum(len(f.samples) for f in text_string_to_metric_families(body.decode("utf-8")))


class Cycle:
    """One sidecar with one target, fed in-process like ``Sidecar.scrape`` does after the fetch."""

    def __init__(self) -> None:
        settings = load_settings(overrides={
            "window_seconds": WINDOW,
            "targets": [{"name": "bench", "url": "http://127.0.0.1:9/metrics", "scrape_interval": INTERVAL}],
        })
        self.sidecar = Sidecar(settings)
        self.pipeline = self.sidecar.pipelines["bench"]
        self.clock = 1.7e9

    def ingest(self, body: bytes) -> None:
        self.clock += INTERVAL
        state = self.pipeline.ingest(ScrapeResult(started_at=self.clock, duration=0.01, body=body))
        self.sidecar.publish("bench", state)

    def render(self) -> int:
        return len(self.sidecar.metrics())


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - w, time.thread_time() - c


def full_cycle(bodies: list[bytes], rounds: int, per_round: int = 1) -> dict:
    """Alternated rounds of ``per_round`` bodies each: prometheus_client parse, then the full cycle, on each
    body in turn (the order swapped every other round); the ratio is the median of the rounds' ratios of
    their median CPU times (lab/rounds.py)."""
    cycle = Cycle()
    warm = WARM
    # Every round a new capture: wrapping around would take the counters back (a false restart).
    assert len(bodies) >= warm + rounds * per_round, (len(bodies), warm, rounds, per_round)
    for body in bodies[:warm]:  # fill the window: diagnosis runs from here on
        cycle.ingest(body)
        cycle.render()
    assert cycle.pipeline.state.status == "ok", cycle.pipeline.state.status
    base_w, base_c, full_w, full_c, parse_w, ingest_w, render_w = [], [], [], [], [], [], []

    def ours(round_: int) -> float:
        cpu = []
        for body in bodies[warm + round_ * per_round: warm + (round_ + 1) * per_round]:
            w1, c1 = _timed(partial(cycle.ingest, body))
            w2, c2 = _timed(cycle.render)
            full_w.append(w1 + w2)
            full_c.append(c1 + c2)
            cpu.append(c1 + c2)
            ingest_w.append(w1)
            render_w.append(w2)
        return median(cpu)

    def baseline(round_: int) -> float:
        cpu = []
        for body in bodies[warm + round_ * per_round: warm + (round_ + 1) * per_round]:
            # partial binds this round's body (_timed calls each at once anyway).
            w, c = _timed(partial(prometheus_client_parse, body))
            base_w.append(w)
            base_c.append(c)
            cpu.append(c)
            text = body.decode("utf-8")
            parse_w.append(_timed(partial(parse, text, 0.0))[0])  # breakdown only, not part of the cycle
        return median(cpu)

    measured = alternated(ours, baseline, rounds)
    state = cycle.pipeline.state
    return {
        "bytes_median": int(median([len(b) for b in bodies])),
        "rounds": rounds,
        "per_round": per_round,
        "alternated": measured.as_dict(),
        "ratio_cpu": measured.ratio,
        "ratio_note": measured.describe(),
        "baseline_ms": median(base_w) * 1e3,
        "baseline_cpu_ms": median(base_c) * 1e3,
        "cycle_ms": median(full_w) * 1e3,
        "cycle_cpu_ms": median(full_c) * 1e3,
        "breakdown_ms": {
            "parse": median(parse_w) * 1e3,
            "ingest (decode+parse+window+signals+diagnosis)": median(ingest_w) * 1e3,
            "render /metrics": median(render_w) * 1e3,
        },
        "status": state.status,
        "verdict": state.diagnosis.verdict.layer,
        "metrics_bytes": cycle.render(),
    }


def promtool_run(path: str) -> tuple[float, float, int]:
    """Wall seconds, child CPU seconds and exit code of ``promtool check metrics < path``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(path, "rb") as stdin:
        w = time.perf_counter()
        proc = subprocess.run([PROMTOOL, "check", "metrics"], stdin=stdin, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - w
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def run(quick: bool) -> list[Figure]:
    figures: list[Figure] = []
    rounds, per_round = (5, 8) if quick else (7, 30)
    seq = steady_sequence(rounds * per_round + WARM)
    small = [t.encode("utf-8") for t in seq]
    r = full_cycle(small, rounds, per_round)
    ratio = r["ratio_cpu"]
    figures.append(Figure(
        name="full cycle, real ~50 KB capture (CPU)", measured=r["cycle_cpu_ms"], unit="ms",
        baseline=r["baseline_cpu_ms"], baseline_name="prometheus_client parse alone",
        ratio=ratio, ratio_label=f"faster ({r['ratio_note'].split('(', 1)[1][:-1]})",
        target=f">= {CYCLE_VS_PARSE:g}x faster", passed=ratio >= CYCLE_VS_PARSE, details=r,
    ))

    # 1 MB: the same steady sequence, each capture replicated over engines, models and adapters.
    big_rounds, big_per_round = (5, 2) if quick else (5, 6)
    big = [synthetic(t).encode("utf-8") for t in seq[: big_rounds * big_per_round + WARM]]
    r = full_cycle(big, big_rounds, big_per_round)
    rounds_big = big_rounds * big_per_round
    with tempfile.TemporaryDirectory() as tmp:
        prom_w, prom_c, codes = [], [], set()
        empty = os.path.join(tmp, "empty.txt")
        open(empty, "wb").close()
        start_w = []
        for i in range(rounds_big):
            path = os.path.join(tmp, f"cap{i}.txt")
            with open(path, "wb") as f:
                f.write(big[WARM + i])
            w, c, code = promtool_run(path)
            prom_w.append(w)
            prom_c.append(c)
            codes.add(code)
            start_w.append(promtool_run(empty)[0])
    r["promtool_ms"] = median(prom_w) * 1e3
    r["promtool_cpu_ms"] = median(prom_c) * 1e3
    r["promtool_exit_codes"] = sorted(codes)
    r["promtool_empty_input_ms"] = median(start_w) * 1e3
    r["payload"] = "real capture families x (engine, model_name) pairs + vllm:lora_requests_info"
    ratio_pc = r["ratio_cpu"]
    figures.append(Figure(
        name="full cycle, synthetic 1 MB (CPU)", measured=r["cycle_cpu_ms"], unit="ms",
        baseline=r["baseline_cpu_ms"], baseline_name="prometheus_client parse alone",
        ratio=ratio_pc, ratio_label=f"faster ({r['ratio_note'].split('(', 1)[1][:-1]})", target="(info)",
        passed=None, details=r,
    ))
    ratio_pt = r["promtool_ms"] / r["cycle_ms"]
    figures.append(Figure(
        name="full cycle, synthetic 1 MB", measured=r["cycle_ms"], unit="ms",
        baseline=r["promtool_ms"], baseline_name="promtool check metrics",
        ratio=ratio_pt, ratio_label="faster", target="no slower (>= 1x)", passed=ratio_pt >= 1.0, details=r,
    ))
    return figures
