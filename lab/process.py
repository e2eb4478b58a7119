"""Whole-process figures of the real ``vllm-diag serve``: RSS, CPU share, targets per core.

Everything runs on loopback: a local target server (``lab.target_server``) serves the
steady sequence of real captures; ``vllm-diag serve`` polls it (``/s/metrics?t=i``) and, at the
same time and against the same server, the baseline process ``lab.minimal_poller``
(aiohttp + prometheus_client parse, nothing else) polls ``/b/metrics?t=i``. Both ``/metrics``
endpoints are scraped every 15 s, as Prometheus would. RSS is read from /proc/<pid>/status and
CPU from /proc/<pid>/stat (utime + stime) over the measured period, after the window has filled.
Processes are stopped by PID.

``run_recording`` measures the cost of ``record_dir`` (exporter/record.py): two sidecars of 50
targets at 5 s poll the same server at the same time, one recording and one not, so whatever
else loads a shared machine weighs on both alike; CPU per scrape is compared over four rounds
(each starting the other sidecar first: the one started first measured up to 30 % more in a
round, either way), and the figure is the median of the rounds' on/off ratios.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from lab.common import (
    SHIPPED_INTERVAL,
    SHIPPED_WINDOW,
    Figure,
    free_port,
    proc_cpu_ns,
    proc_cpu_seconds,
    proc_status_kb,
)

ROOT = Path(__file__).resolve().parent.parent
VLLM_DIAG = str(Path(sys.executable).parent / "vllm-diag")
PROM_SCRAPE_EVERY = 15.0
QUICK_WINDOW = 15.0  # --quick: a window that fills in 3 scrapes instead of the shipped 36
PER_CORE_MIN = 1000  # targets per core at 15 s
PER_CORE_VS_BASELINE = 1.5  # ... and at least this many times the minimal poller's
METRICS_REQUEST_MS_MAX = 1000.0  # one /metrics of the cross-check run (1000 targets)


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except OSError:
        return 0, b""


def _wait(url: str, deadline_s: float, proc: subprocess.Popen) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{list(cast(Sequence[str], proc.args))[:3]} exited with {proc.returncode}")
        if _get(url, 2.0)[0] == 200:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {deadline_s:g}s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


class Bench:
    """The target server, plus the sidecar and baseline processes of one scenario."""

    def __init__(self, tmp: Path, hosts: int, captures: dict[str, Path] | None = None) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.hosts = hosts
        self.procs: list[subprocess.Popen] = []
        served = [f"--captures={prefix}={folder}" for prefix, folder in (captures or {}).items()]
        self.server = self._spawn([sys.executable, "-m", "lab.target_server", "--port", str(self.port),
                                   "--hosts", str(hosts), *served], "target-server")
        _wait(f"http://127.0.0.1:{self.port}/stats", 60, self.server)

    def _spawn(self, argv: list[str], name: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def url(self, prefix: str, i: int) -> str:
        return f"http://127.0.0.{i % self.hosts + 1}:{self.port}/{prefix}/metrics?t={i}"

    def served(self) -> dict[str, int]:
        return json.loads(_get(f"http://127.0.0.1:{self.port}/stats")[1] or b"{}")

    def sidecar(self, n: int, interval: float, window: float, tag: str,
                record_root: Path | None = None, prefix: str = "s", engine: dict[str, object] | None = None,
                advisor: dict[str, object] | None = None) -> tuple[subprocess.Popen, int]:
        port = free_port()
        config = self.tmp / f"sidecar-{tag}.yaml"
        targets: list[dict[str, object]] = [
            {"name": f"t{i:04d}", "url": self.url(prefix, i), "scrape_interval": interval,
             "timeout": min(3.0, interval)} for i in range(n)]
        for target in targets:
            if record_root is not None:
                target["record_dir"] = str(record_root / str(target["name"]))
            if engine is not None:  # the engine facts a real deployment discovers from vLLM's command line
                target.update(engine=engine, discover=False)
        settings: dict[str, object] = {"listen": f"127.0.0.1:{port}", "window_seconds": window,
                                       "log_level": "WARNING", "targets": targets}
        if advisor is not None:
            settings["advisor"] = advisor
        config.write_text(json.dumps(settings))  # JSON is YAML
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_DIAG_")}
        log = open(self.tmp / f"sidecar-{tag}.log", "ab")
        proc = subprocess.Popen([VLLM_DIAG, "serve", "--config", str(config)], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        _wait(f"http://127.0.0.1:{port}/readyz", 120, proc)
        return proc, port

    def baseline(self, n: int, interval: float, tag: str) -> tuple[subprocess.Popen, int]:
        port = free_port()
        proc = self._spawn([sys.executable, "-m", "lab.minimal_poller", "--listen", str(port),
                            "--interval", str(interval), *[self.url("b", i) for i in range(n)]], f"baseline-{tag}")
        _wait(f"http://127.0.0.1:{port}/readyz", 60, proc)
        return proc, port

    def close(self) -> None:
        for proc in reversed(self.procs):
            _stop(proc)


def _measure(procs: dict[str, tuple[subprocess.Popen, int]], seconds: float) -> dict[str, dict[str, float]]:
    """CPU seconds of each process over ``seconds``, scraping each /metrics every 15 s."""
    start = {k: (proc_cpu_ns(p.pid), proc_cpu_seconds(p.pid), time.monotonic()) for k, (p, _) in procs.items()}
    end_at = time.monotonic() + seconds
    next_scrape = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_scrape:
            for _, port in procs.values():
                _get(f"http://127.0.0.1:{port}/metrics")
            next_scrape += PROM_SCRAPE_EVERY
        if now >= end_at:
            break
        time.sleep(max(0.0, min(next_scrape, end_at) - time.monotonic()))
    out = {}
    for k, (p, _) in procs.items():
        ns0, ticks0, t0 = start[k]
        cpu, wall = (proc_cpu_ns(p.pid) - ns0) / 1e9, time.monotonic() - t0
        ticks = proc_cpu_seconds(p.pid) - ticks0
        out[k] = {"cpu_seconds": cpu, "cpu_seconds_utime_stime": ticks, "wall_seconds": wall,
                  "core_share_pct": 100.0 * cpu / wall,
                  "rss_mb": proc_status_kb(p.pid, "VmRSS") / 1024, "hwm_mb": proc_status_kb(p.pid, "VmHWM") / 1024}
    return out


def _freshness(port: int, interval: float) -> dict:
    """From the sidecar's own /metrics: targets up, with a good scrape within two intervals."""
    w = time.perf_counter()
    body = _get(f"http://127.0.0.1:{port}/metrics", 30)[1].decode()
    render_ms = (time.perf_counter() - w) * 1e3
    now, up, fresh, total = time.time(), 0, 0, 0
    errors: dict[str, float] = {}
    record_errors: dict[str, float] = {}
    record_bytes = 0.0
    for line in body.splitlines():
        if line.startswith("vllm_diag_up{"):
            total += 1
            up += line.endswith(" 1.0")
        elif line.startswith("vllm_diag_last_success_timestamp_seconds{"):
            fresh += float(line.rsplit(" ", 1)[1]) > now - 2 * interval
        elif line.startswith("vllm_diag_scrape_errors_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            errors[reason] = errors.get(reason, 0.0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm_diag_record_errors_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            record_errors[reason] = record_errors.get(reason, 0.0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm_diag_record_bytes{"):
            record_bytes += float(line.rsplit(" ", 1)[1])
    return {"targets": total, "up": up, "fresh": fresh, "scrape_errors": {k: v for k, v in errors.items() if v},
            "record_errors": {k: v for k, v in record_errors.items() if v}, "record_bytes": record_bytes,
            "metrics_request_ms": render_ms, "metrics_bytes": len(body)}


def _scenario(bench: Bench, n: int, interval: float, window: float, warm: float, seconds: float,
              baseline: bool, tag: str, record_root: Path | None = None) -> dict:
    procs = {"sidecar": bench.sidecar(n, interval, window, tag, record_root)}
    if baseline:
        procs["baseline"] = bench.baseline(n, interval, tag)
    time.sleep(warm)
    before = _freshness(procs["sidecar"][1], interval)
    served0 = bench.served()
    result = _measure(procs, seconds)
    served1 = bench.served()
    result["sidecar"]["scrapes"] = served1.get("s", 0) - served0.get("s", 0)
    if baseline:
        result["baseline"]["scrapes"] = served1.get("b", 0) - served0.get("b", 0)
    after = _freshness(procs["sidecar"][1], interval)
    after["scrape_errors_during_measurement"] = {
        k: v - before["scrape_errors"].get(k, 0.0) for k, v in after["scrape_errors"].items()
        if v - before["scrape_errors"].get(k, 0.0)}
    after["scrape_errors_since_start"] = after.pop("scrape_errors")
    result["sidecar"].update(after)
    result["config"] = {"targets": n, "interval": interval, "window": window, "warm": warm, "seconds": seconds,
                        "recording": record_root is not None}
    for p, _ in procs.values():
        _stop(p)
    return result


def run(
    quick: bool, cpu_seconds: float | None = None, crosscheck_targets: int | None = None
) -> tuple[list[Figure], dict]:
    window = QUICK_WINDOW if quick else SHIPPED_WINDOW
    seconds = cpu_seconds or (20.0 if quick else 60.0)
    raw: dict = {}
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="vllm-diag-bench-") as tmp:
        bench = Bench(Path(tmp), hosts=16)
        try:
            step = SHIPPED_INTERVAL
            one = raw["one_target_5s"] = _scenario(bench, 1, step, window, window + 2, seconds, True, "one")
            hundred = raw["hundred_targets_5s"] = _scenario(bench, 100, step, window, window + 2,
                                                              seconds / 2, True, "hundred")
            # Cost of one scrape cycle in the live process (fetch, parse, window, signals, diagnosis,
            # scheduler), from the 100-target run; targets per core at 15 s = 15 / cost.
            per_scrape = hundred["sidecar"]["cpu_seconds"] / max(1, hundred["sidecar"]["scrapes"])
            per_scrape_base = hundred["baseline"]["cpu_seconds"] / max(1, hundred["baseline"]["scrapes"])
            per_core, per_core_base = 15.0 / per_scrape, 15.0 / per_scrape_base
            n = crosscheck_targets or min(1000, int(per_core // 100 * 100) or 100)
            # Warmed until the window has filled at 15 s too, so the cross-check judges full windows;
            # a window holds at least two scrapes (the configuration refuses less: --quick's 15 s).
            cross_window = max(window, 2 * 15.0)
            cross = raw["crosscheck_15s"] = _scenario(bench, n, 15.0, cross_window, cross_window + 5.0,
                                                       30.0 if quick else 45.0, False, "cross")
            cross["predicted_core_share_pct"] = 100.0 * n * per_scrape / 15.0
        finally:
            bench.close()
    s, b = one["sidecar"], one["baseline"]
    figures.append(Figure("RSS, serve, 1 target", s["rss_mb"], "MB", b["rss_mb"], "minimal poller, 1 target",
                          s["rss_mb"] / b["rss_mb"], "of baseline", "<= 60 MB", s["rss_mb"] <= 60.0, one))
    s100, b100 = hundred["sidecar"], hundred["baseline"]
    figures.append(Figure("RSS, serve, 100 targets", s100["rss_mb"], "MB", b100["rss_mb"],
                          "minimal poller, 100 targets", s100["rss_mb"] / b100["rss_mb"], "of baseline", "(info)",
                          None, hundred))
    figures.append(Figure("CPU, 1 target at 5 s", s["core_share_pct"], "%", b["core_share_pct"],
                          "minimal poller, 1 target", s["core_share_pct"] / max(b["core_share_pct"], 1e-9),
                          "of baseline", "<= 0.2 % of a core", s["core_share_pct"] <= 0.2, one))
    # The figure is the lower of the prediction and what the cross-check run actually used
    # (both hold the shipped window, 12 scrapes at 15 s and 36 at 5 s; 15 s with --quick).
    observed = cross["config"]["targets"] * 100.0 / max(cross["sidecar"]["core_share_pct"], 1e-9)
    figure = min(per_core, observed)
    ratio = figure / per_core_base
    figures.append(Figure("targets per core at 15 s", figure, "targets", per_core_base,
                          "minimal poller", ratio, "of baseline",
                          f">= {PER_CORE_MIN} and >= {PER_CORE_VS_BASELINE:g}x baseline",
                          figure >= PER_CORE_MIN and ratio >= PER_CORE_VS_BASELINE,
                          {"cpu_ms_per_scrape": per_scrape * 1e3, "baseline_cpu_ms_per_scrape": per_scrape_base * 1e3,
                           "predicted_per_core": per_core, "crosscheck_per_core": observed, "crosscheck": cross}))
    c = cross["sidecar"]
    figures.append(Figure(f"one /metrics, {n} targets", c["metrics_request_ms"], "ms", None,
                          f"{c['metrics_bytes'] / 1e6:.1f} MB", None, "", f"< {METRICS_REQUEST_MS_MAX:g} ms",
                          c["metrics_request_ms"] < METRICS_REQUEST_MS_MAX, cross))
    return figures, raw


RECORD_TARGETS = 50  # per sidecar; two sidecars run at once
RECORD_BUDGET = 1.10  # recording may cost at most 10 % more CPU per scrape than recording off


def _recording_pair(bench: Bench, window: float, seconds: float, index: int, root: Path) -> dict[str, dict]:
    """Two sidecars polling the same server at the same time, recording off (/s/) and on (/r/):
    whatever else loads the machine weighs on both alike."""
    order = ("off", "on") if index % 2 == 0 else ("on", "off")  # each round starts the other one first
    procs = {mode: bench.sidecar(RECORD_TARGETS, SHIPPED_INTERVAL, window, f"record-{mode}-{index}",
                                 root if mode == "on" else None, prefix="s" if mode == "off" else "r")
             for mode in order}
    time.sleep(window + 2)
    served0 = bench.served()
    measured: dict[str, dict[str, Any]] = {k: dict(v) for k, v in _measure(procs, seconds).items()}
    served1 = bench.served()
    for mode, prefix in (("off", "s"), ("on", "r")):
        measured[mode]["scrapes"] = served1.get(prefix, 0) - served0.get(prefix, 0)
        measured[mode].update(_freshness(procs[mode][1], SHIPPED_INTERVAL))
        measured[mode]["round"] = index
    files = [p for p in root.rglob("*") if p.is_file()]
    measured["on"]["recorded"] = {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    for proc, _ in procs.values():
        _stop(proc)
    return measured


def run_recording(quick: bool, cpu_seconds: float | None = None, rounds: int = 4) -> tuple[list[Figure], dict]:
    """CPU per scrape at 5 s with recording off and on (record_dir per target), side by side."""
    window = QUICK_WINDOW if quick else SHIPPED_WINDOW
    seconds = cpu_seconds or (20.0 if quick else 60.0)
    runs: list[dict[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="vllm-diag-bench-") as tmp:
        bench = Bench(Path(tmp), hosts=16)
        try:
            for index in range(rounds):
                runs.append(_recording_pair(bench, window, seconds, index, Path(tmp) / f"record-{index}"))
        finally:
            bench.close()
    per_scrape = {mode: 1e3 * sum(r[mode]["cpu_seconds"] for r in runs) / max(1, sum(r[mode]["scrapes"] for r in runs))
                  for mode in ("off", "on")}
    pooled = per_scrape["on"] / per_scrape["off"]
    # The figure is the median of the rounds' ratios: one round where the loaded machine starved a
    # sidecar (targets not fresh, scrapes missed while CPU was spent) must not decide it alone.
    ratios = [(r["on"]["cpu_seconds"] / max(1, r["on"]["scrapes"]))
              / (r["off"]["cpu_seconds"] / max(1, r["off"]["scrapes"])) for r in runs]
    ratio = statistics.median(ratios)
    rows = [f"{'round':<7}{'recording':>10}{'CPU s':>9}{'scrapes':>9}{'ms/scrape':>11}{'fresh':>7}"
            f"{'record errors':>15}{'recorded':>18}"]
    for r in runs:
        for mode in ("off", "on"):
            m = r[mode]
            recorded = m.get("recorded")
            stored = f"{recorded['files']} / {recorded['bytes'] / 1e6:.1f} MB" if recorded else "-"
            errors = ",".join(f"{k}={v:g}" for k, v in m["record_errors"].items()) or "none"
            per = 1e3 * m["cpu_seconds"] / max(1, m["scrapes"])
            rows.append(f"{m['round']:<7}{mode:>10}{m['cpu_seconds']:>9.2f}{m['scrapes']:>9}{per:>11.2f}"
                        f"{m['fresh']:>7}{errors:>15}{stored:>18}")
    rows.append(f"CPU per scrape, all rounds pooled: recording off {per_scrape['off']:.2f} ms, "
                f"on {per_scrape['on']:.2f} ms ({100 * (pooled - 1):+.1f} %)")
    rows.append(f"on / off per round: {', '.join(f'{x:.3f}' for x in ratios)}; median {ratio:.3f} "
                f"({100 * (ratio - 1):+.1f} %)")
    print("\n".join(rows))
    figure = Figure(f"CPU per scrape at 5 s, recording on ({RECORD_TARGETS} targets)", per_scrape["on"], "ms",
                    per_scrape["off"], "recording off, same time", ratio, "of off (median of rounds)",
                    f"<= {RECORD_BUDGET:.2f}x of off", ratio <= RECORD_BUDGET,
                    {"runs": runs, "table": rows, "ratios": ratios, "pooled_ratio": pooled})
    return [figure], {"recording": runs}


# -- the advisor (exporter/advisor/worker.py) as shipped: on, idle while healthy ----------------------

ADVISOR_TARGETS = 4  # symptomatic targets, advised in turn by the sidecar's one worker process
ADVISOR_MCORES_MAX = 10.0  # millicores per symptomatic target, on average at the shipped interval
ADVISOR_SCENARIOS = {"h": "healthy", "k": "kv-pressure"}  # prefix -> simulated scenario served there
ADVISOR_FIRST_RUNS_SECONDS = 60.0  # after the window has filled: a tick, then each target's first run


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (the advisor's worker process and what multiprocessing starts)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids = [int(k) for k in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
        for kid in kids:
            out += [kid, *_children(kid)]
    return out


def _descendants_cpu_ns(pid: int) -> dict[int, int]:
    out = {}
    for kid in _children(pid):
        try:
            out[kid] = proc_cpu_ns(kid)
        except OSError:
            pass
    return out


def _advice_runs(port: int) -> dict[str, tuple[object, ...]]:
    """Each target's published advice, by the end of the window it was computed from."""
    body = _get(f"http://127.0.0.1:{port}/api/v1/diagnosis", 30)[1] or b"{}"
    out: dict[str, tuple[object, ...]] = {}
    for target in json.loads(body).get("targets", []):
        calibration = target.get("calibration") or {}
        if "window_end" in calibration:
            out[target["target"]] = (calibration["window_end"], calibration.get("cpu_seconds"),
                                   calibration.get("step_cost_reused"), len(target.get("advice") or []),
                                   calibration.get("left_out"))
    return out


def _advisor_phase(bench: Bench, prefix: str, n: int, window: float, warm: float, seconds: float,
                   engine: dict[str, object], advisor: dict[str, object] | None, tag: str) -> dict:
    """One sidecar on ``prefix``'s targets: its own CPU and its descendants' over ``seconds`` after
    ``warm`` seconds, and every advice run published meanwhile (polled every 5 s)."""
    proc, port = bench.sidecar(n, SHIPPED_INTERVAL, window, tag, prefix=prefix, engine=engine, advisor=advisor)
    time.sleep(warm)
    own0, kids0, t0 = proc_cpu_ns(proc.pid), _descendants_cpu_ns(proc.pid), time.monotonic()
    served0 = bench.served().get(prefix, 0)
    runs: dict[tuple[str, object], tuple[object, ...]] = {}
    first = _advice_runs(port)  # published during the warm-up
    seen_before = {(name, run[0]) for name, run in first.items()}
    while time.monotonic() - t0 < seconds:
        time.sleep(5.0)
        for name, run in _advice_runs(port).items():
            if (name, run[0]) not in seen_before:
                runs[(name, run[0])] = run
    wall = time.monotonic() - t0
    kids1 = _descendants_cpu_ns(proc.pid)
    own = (proc_cpu_ns(proc.pid) - own0) / 1e9
    advisor_cpu = sum(ns - kids0.get(pid, 0) for pid, ns in kids1.items()) / 1e9
    scrapes = bench.served().get(prefix, 0) - served0
    status = {name: symptoms for name, symptoms in _symptoms(port).items()}
    _stop(proc)
    return {"targets": n, "wall_seconds": wall, "sidecar_cpu_seconds": own, "advisor_cpu_seconds": advisor_cpu,
            "advisor_processes": len(kids1), "scrapes": scrapes,
            "advice_runs": [[name, *run] for (name, _), run in sorted(runs.items(), key=lambda kv: str(kv[0]))],
            "warm_up_runs": [[name, *run] for name, run in sorted(first.items())],
            "symptoms": status, "advisor": advisor}


def _symptoms(port: int) -> dict[str, list[str]]:
    body = _get(f"http://127.0.0.1:{port}/api/v1/diagnosis", 30)[1] or b"{}"
    return {t["target"]: [s["id"] for s in t.get("symptoms", []) if not s.get("informational")]
            for t in json.loads(body).get("targets", [])}


def run_advisor(quick: bool, cpu_seconds: float | None = None) -> tuple[list[Figure], dict]:
    """The advisor's cost in the sidecar as shipped (180 s window at 5 s, the advisor's shipped
    configuration): healthy targets (the simulator's healthy scenario), then symptomatic ones
    (kv-pressure: KV pressure and preemptions, the advisor's most expensive engine model).

    Each is measured after the window has filled. Healthy: the CPU of the sidecar's descendants (the
    advisor's worker) per target. Symptomatic: over one advisor interval and two ticks more, so every
    target is advised once (its first run, once its window has filled, falls in the warm-up; this one
    reuses the step cost when it still fits): the worker's CPU over the period per target is the
    average share of a symptom that lasts. The first runs' own cost is in the sidecar's JSON
    (``calibration.cpu_seconds``) and printed.
    """
    from exporter.config import ADVISOR_TICK_SECONDS, Advisor
    from exporter.simulator.capture import write_captures
    from exporter.simulator.scenarios import SCENARIOS

    window = QUICK_WINDOW if quick else SHIPPED_WINDOW
    shipped = Advisor()
    healthy_seconds = cpu_seconds or (20.0 if quick else 60.0)
    symptomatic_seconds = 60.0 if quick else shipped.interval + 2 * ADVISOR_TICK_SECONDS
    raw: dict = {}
    with tempfile.TemporaryDirectory(prefix="vllm-diag-bench-") as tmp:
        folders = {}
        for prefix, name in ADVISOR_SCENARIOS.items():
            folders[prefix] = Path(tmp) / name
            # at the shipped scrape interval, as long as the run: the sequence does not wrap (a wrap would
            # replay the scenario's start-up under the window)
            write_captures(SCENARIOS[name], folders[prefix], window + symptomatic_seconds + 60.0, SHIPPED_INTERVAL,
                           None)
        bench = Bench(Path(tmp), hosts=16, captures=folders)
        try:
            healthy = raw["healthy"] = _advisor_phase(
                bench, "h", 100, window, window + 2, healthy_seconds, SCENARIOS["healthy"].engine_facts(), None,
                "advisor-healthy")
            # The first runs (a whole fit each, the targets one after the other) fall in the warm-up.
            symptomatic = raw["symptomatic"] = _advisor_phase(
                bench, "k", ADVISOR_TARGETS, window, window + ADVISOR_FIRST_RUNS_SECONDS, symptomatic_seconds,
                SCENARIOS["kv-pressure"].engine_facts(), None, "advisor-symptomatic")
        finally:
            bench.close()
    healthy_mcores = 1e3 * healthy["advisor_cpu_seconds"] / healthy["wall_seconds"] / healthy["targets"]
    runs = symptomatic["advice_runs"]
    symptomatic_mcores = 1e3 * symptomatic["advisor_cpu_seconds"] / symptomatic["wall_seconds"] / ADVISOR_TARGETS
    per_run = symptomatic["advisor_cpu_seconds"] / max(1, len(runs))
    pipeline_per_scrape = symptomatic["sidecar_cpu_seconds"] / max(1, symptomatic["scrapes"])
    healthy_per_scrape = healthy["sidecar_cpu_seconds"] / max(1, healthy["scrapes"])
    # Targets per core at the shipped scrape interval: the pipeline's cost per target, plus the advisor's.
    per_core_healthy = 1.0 / (healthy_per_scrape / SHIPPED_INTERVAL + healthy_mcores / 1e3)
    per_core_symptomatic = 1.0 / (pipeline_per_scrape / SHIPPED_INTERVAL + symptomatic_mcores / 1e3)
    details = {"healthy": healthy, "symptomatic": symptomatic, "cpu_seconds_per_run": per_run,
               "shipped_interval": shipped.interval, "shipped_budget_seconds": shipped.cpu_budget_seconds,
               "pipeline_ms_per_scrape_healthy": healthy_per_scrape * 1e3,
               "pipeline_ms_per_scrape_symptomatic": pipeline_per_scrape * 1e3,
               "targets_per_core_healthy": per_core_healthy, "targets_per_core_symptomatic": per_core_symptomatic}
    print(f"advisor while healthy: {healthy['advisor_processes']} advisor processes, "
          f"{healthy['advisor_cpu_seconds']:.2f} CPU s over {healthy['wall_seconds']:.0f} s at {healthy['targets']} "
          f"targets ({healthy_mcores:.3f} mcores per target)")
    print(f"advisor while symptomatic: {len(runs)} runs on {ADVISOR_TARGETS} targets in "
          f"{symptomatic['wall_seconds']:.0f} s, {symptomatic['advisor_cpu_seconds']:.1f} CPU s "
          f"({per_run:.2f} s per run; budget {shipped.cpu_budget_seconds:.1f} s every {shipped.interval:g} s): "
          f"{symptomatic_mcores:.2f} mcores per target")
    for run in symptomatic["warm_up_runs"]:
        print("  first run, in the warm-up (target, window_end, cpu_seconds, step_cost_reused, proposals, left_out):",
              run)
    for run in runs:
        print("  measured run (target, window_end, cpu_seconds, step_cost_reused, proposals, left_out):", run)
    print(f"targets per core at {SHIPPED_INTERVAL:g} s with the advisor: {per_core_healthy:,.0f} healthy, "
          f"{per_core_symptomatic:,.0f} symptomatic (pipeline {healthy_per_scrape * 1e3:.2f} / "
          f"{pipeline_per_scrape * 1e3:.2f} ms per scrape)")
    figures = [
        Figure("advisor, healthy targets", healthy_mcores, "mcores/target", None, "", None, "", "0",
               healthy["advisor_cpu_seconds"] == 0.0 and healthy["advisor_processes"] == 0, details),
        Figure("advisor, symptomatic targets", symptomatic_mcores, "mcores/target", None, "", None, "",
               f"<= {ADVISOR_MCORES_MAX:g}", symptomatic_mcores <= ADVISOR_MCORES_MAX and bool(runs), details),
        Figure(f"targets per core at {SHIPPED_INTERVAL:g} s, all symptomatic, advisor on", per_core_symptomatic,
               "targets", per_core_healthy, "all healthy", per_core_symptomatic / per_core_healthy, "of healthy",
               "(info)", None, details),
    ]
    return figures, {"advisor": raw}
