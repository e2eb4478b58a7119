"""The what-if advisor against a real vLLM (CPU build, tiny model): before/after runs per change.

``python -m lab.advisor [--runs DIR] [--reuse] [--write docs/data/advisor-kept-run.json]`` (about 8 minutes on
2 cores; needs ``bash tests/realvllm/install.sh`` first) prints the validation table of
docs/advisor.md. The suite keeps the kept run's score (lab/tests/integration/test_advisor_kept_run.py) on
this module's code; a live pair in the suite was tried and left out (lab/HISTORY-advisor.md says why).

Each case changes one thing (an engine flag or the gateway's max_tokens). Its "before" run is
recorded as sidecar-style captures; the advisor sees only those (``vllm-diag advise DIR
--what-if KNOB=VALUE``) and predicts the "after"; the "after" run on the real engine says what
actually happened. Engine configurations are shared between cases so the whole suite needs
three engine starts:

=========  ===========================  ===========================================
engine     flags                        runs
=========  ===========================  ===========================================
small      max_num_batched_tokens 32    long prompts (A4 before, B after)
big        max_num_batched_tokens 1024  long prompts (A4 after, B before), pressure
                                        (D before), long outputs (cap before/after)
bigkv      big, KV cache 8 MiB (not 3)  pressure (D after)
=========  ===========================  ===========================================

Traffic is open (Poisson arrivals) for the long-prompt runs and closed (a fixed set of clients,
next request on the last response) for the pressure and output-cap runs, so both arrival models
are validated. ``collect`` runs everything and writes the captures; ``evaluate`` runs the advisor
and scores it (direction for every metric that moved by more than 15 %, magnitude within
+/-35 % for TTFT p95, ITL p95 and preemption rate).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import subprocess
import sys
import time
from bisect import bisect_left
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from exporter.parse import parse
from exporter.record import compress, read_capture
from tests.realvllm.engine import (
    MODEL_NAME,
    RealVLLM,
    fetch_metrics_async,
    make_text,
    one_request,
    tokens_per_word,
)

REPO = Path(__file__).resolve().parents[1]
SCRAPE_INTERVAL_S = 2.0
WARMUP_S = 6.0  # traffic before the first capture: the window starts in steady state
# Captured seconds per run. The open long-prompt runs are longer: their TTFT p95 rests on the slowest
# twentieth of about 100 requests, where a closed run finishes several hundred.
OPEN_RUN_S = 60.0
CLOSED_RUN_S = 36.0
MOVED = 0.15  # a metric "moved" when before -> after changed by more than this share
MAGNITUDE = 0.35  # predicted after within +/- this share of the real after
GROSS = 2.0  # predicted after within this factor of the real after: the bound a working model never misses
PREEMPTION_FLOOR = 0.05  # preemptions/s below which two rates count as equal (none to speak of)
METRICS = ("ttft_p95_seconds", "itl_p95_seconds", "preemption_rate", "generation_tokens_per_second")
MAGNITUDE_METRICS = ("ttft_p95_seconds", "itl_p95_seconds", "preemption_rate")
# The machine's own speed, measured around every run: one request decoding alone on the idle engine.
# This shared 2-core VM changes speed by up to 2x from one minute to the next; a case whose "before"
# and "after" ran at speeds further apart than this cannot tell the model's error from the machine's.
PROBE_REQUESTS = 3
PROBE_TOKENS = 48
SPEED_TOLERANCE = 0.2
LARGE = 0.5  # a move by more than half (TTFT and preemptions under these changes: -75 % to +600 %)

KV_BYTES = 3 * 1024 * 1024  # the harness default: 96 blocks of 32 tokens for the tiny model
ENGINES: dict[str, dict[str, Any]] = {
    "small": {"max_num_batched_tokens": 32, "max_num_seqs": 16, "kv_cache_memory_bytes": KV_BYTES},
    "big": {"max_num_batched_tokens": 1024, "max_num_seqs": 16, "kv_cache_memory_bytes": KV_BYTES},
    "bigkv": {"max_num_batched_tokens": 1024, "max_num_seqs": 16, "kv_cache_memory_bytes": 8 * 1024 * 1024},
}


TEMPLATE_BLOCK_TOKENS = 32  # RealVLLM's block size: the prefix cache serves whole blocks
TEMPLATE_SEED = 4242  # the one template's words, the same in every run


@dataclass(frozen=True)
class Traffic:
    """One run's load: open (``rate`` req/s, Poisson) or closed (``clients``, no think time)."""

    prompt_tokens: tuple[int, int]
    max_tokens: tuple[tuple[int, float], ...]  # (max_tokens, probability)
    rate: float = 0.0
    clients: int = 0
    cap: int | None = None  # the gateway's max_tokens cap
    # Share of the mean prompt that is one template every prompt starts with (rounded to whole KV
    # blocks): the prefix cache can serve it. 0 is prompts with nothing in common.
    prefix_share: float = 0.0

    def capped(self, cap: int) -> Traffic:
        return replace(self, cap=cap)

    def with_prefix(self, share: float) -> Traffic:
        return replace(self, prefix_share=share)

    def prefix_tokens(self, block_size: int = TEMPLATE_BLOCK_TOKENS) -> int:
        mean = sum(self.prompt_tokens) / 2
        return round(self.prefix_share * mean / block_size) * block_size

    def draw(self, rng: random.Random) -> tuple[int, int]:
        prompt = rng.randint(*self.prompt_tokens)
        values, weights = zip(*self.max_tokens)
        out = rng.choices(values, weights)[0]
        return prompt, min(out, self.cap) if self.cap else out


# 1.6 req/s: about one arrival in ten lands on another's 60 ms prefill step at the big budget, so the
# "after" TTFT p95 usually sits inside its 100-250 ms bucket; at one in twenty (1.2 req/s) it sat on
# the 100 ms bound, where one request more or less above it moved the interpolated p95 by half.
LONG_PROMPTS = Traffic(prompt_tokens=(820, 900), max_tokens=((24, 1.0),), rate=1.6)
# Output lengths spread over 260-340: with one fixed length, clients that start together finish together,
# and without preemption to shuffle them they stay in lockstep (bursts of 12 prefills, then none), a
# load-generator artefact that made the "after" run's TTFT and ITL swing 3x between repeats.
PRESSURE = Traffic(prompt_tokens=(150, 250), max_tokens=((260, 0.2), (280, 0.2), (300, 0.2), (320, 0.2), (340, 0.2)),
                   clients=12)
# Output lengths with a long tail (a few requests run to 480 tokens): the tail holds the KV cache.
LONG_OUTPUTS = Traffic(prompt_tokens=(60, 120), max_tokens=((16, 0.3), (32, 0.25), (64, 0.2), (128, 0.12), (256, 0.08),
                                                           (480, 0.05)), clients=14)


@dataclass(frozen=True)
class RunSpec:
    name: str
    engine: str
    traffic: Traffic


RUNS: tuple[RunSpec, ...] = (
    RunSpec("long-small", "small", LONG_PROMPTS),
    RunSpec("long-big", "big", LONG_PROMPTS),
    RunSpec("pressure-big", "big", PRESSURE),
    RunSpec("outputs-big", "big", LONG_OUTPUTS),
    RunSpec("outputs-big-capped", "big", LONG_OUTPUTS.capped(64)),
    RunSpec("pressure-bigkv", "bigkv", PRESSURE),
)


@dataclass(frozen=True)
class Case:
    name: str
    cause: str
    before: str
    after: str
    what_if: str


CASES: tuple[Case, ...] = (
    Case("A4 raise the token budget", "A4", "long-small", "long-big", "max_num_batched_tokens=1024"),
    Case("B lower the token budget under long-prompt stutter", "B1/B2", "long-big", "long-small",
         "max_num_batched_tokens=32"),
    Case("D more KV cache under preemption", "D", "pressure-big", "pressure-bigkv", "kv_cache_memory_bytes=8MiB"),
    Case("max_tokens cap at the gateway", "D/E", "outputs-big", "outputs-big-capped", "max_tokens=64"),
)


# --------------------------------------------------------------------------------------------
# Load and capture
# --------------------------------------------------------------------------------------------


async def _drive(base_url: str, traffic: Traffic, stop_at: float, seed: int) -> int:
    """Send the run's traffic until ``stop_at`` (monotonic); returns the requests that failed."""
    rng = random.Random(seed)
    gaps = random.Random(seed + 1000)  # arrivals on their own stream: prompt drawing never shifts them
    failures = 0
    connector = aiohttp.TCPConnector(limit=64, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        ratio = await tokens_per_word(base_url, session)
        shared = traffic.prefix_tokens()
        template = make_text(shared, random.Random(TEMPLATE_SEED), ratio) if shared else ""

        async def one(prompt_len: int, max_tokens: int) -> None:
            nonlocal failures
            text = template + make_text(max(1, prompt_len - shared), rng, ratio)
            res = await one_request(session, base_url, text, max_tokens)
            failures += 0 if res.ok else 1

        if traffic.clients:
            async def client() -> None:
                while time.monotonic() < stop_at:
                    await one(*traffic.draw(rng))

            await asyncio.gather(*(client() for _ in range(traffic.clients)))
        else:
            tasks: set[asyncio.Task[None]] = set()
            t = time.monotonic()
            while True:
                t += gaps.expovariate(traffic.rate)
                if t >= stop_at:
                    break
                await asyncio.sleep(max(0.0, t - time.monotonic()))
                task = asyncio.create_task(one(*traffic.draw(rng)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
    return failures


async def _warm_up(base_url: str) -> None:
    """A few requests first: a fresh engine's first steps are slow, and the runs measure steady state."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        rng = random.Random(7)
        ratio = await tokens_per_word(base_url, session)
        for prompt_len in (100, 900, 100, 500):
            await one_request(session, base_url, make_text(prompt_len, rng, ratio), 8)


def _facts(server: RealVLLM) -> dict[str, Any]:
    return {"max_num_batched_tokens": server.max_num_batched_tokens, "max_num_seqs": server.max_num_seqs,
            "max_model_len": server.max_model_len, "tensor_parallel_size": 1, "pipeline_parallel_size": 1}


async def probe_step_seconds(base_url: str) -> float:
    """Median gap between streamed tokens of one request decoding alone: the machine's speed now."""
    gaps: list[float] = []
    payload = {"model": MODEL_NAME, "prompt": "speed probe " * 8, "max_tokens": PROBE_TOKENS, "stream": True,
               "ignore_eos": True, "temperature": 0.0}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for _ in range(PROBE_REQUESTS):
            last: float | None = None
            async with session.post(f"{base_url}/v1/completions", json=payload) as resp:
                resp.raise_for_status()
                async for raw in resp.content:
                    line = raw.decode("utf-8", "replace").strip()
                    if not line.startswith("data:") or line == "data: [DONE]":
                        continue
                    now = time.monotonic()
                    if last is not None:
                        gaps.append(now - last)
                    last = now
    return statistics.median(gaps)


async def record_run(server: RealVLLM, spec: RunSpec, out: Path, seed: int = 0,
                     seconds: float | None = None, interval: float = SCRAPE_INTERVAL_S) -> dict[str, Any]:
    """Run the traffic, capturing /metrics every ``interval`` seconds after the warm-up for ``seconds``
    (default: CLOSED_RUN_S or OPEN_RUN_S by the traffic); probe the machine's speed on the idle
    engine just before and just after."""
    out.mkdir(parents=True, exist_ok=True)
    probe_before = await probe_step_seconds(server.base_url)
    t0 = time.monotonic()
    captured = seconds if seconds is not None else (CLOSED_RUN_S if spec.traffic.clients else OPEN_RUN_S)
    stop_at = t0 + WARMUP_S + captured
    load = asyncio.create_task(_drive(server.base_url, spec.traffic, stop_at, seed))
    await asyncio.sleep(WARMUP_S)
    index = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        next_at = time.monotonic()
        while next_at <= stop_at + 0.01:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            text = await fetch_metrics_async(server.metrics_url, session)
            stamp = time.time()
            header = f"# vllm-diag capture target={spec.name} scraped_at={stamp!r}\n"
            (out / f"{spec.name}-{index:03d}.txt.gz").write_bytes(compress((header + text).encode("utf-8")))
            index += 1
            next_at += interval
    failures = await load
    probe_after = await probe_step_seconds(server.base_url)
    config = {"targets": [{"name": spec.name, "url": server.metrics_url, "scrape_interval": interval,
                           "timeout": 1.0, "engine": _facts(server)}]}
    (out / "vllm-diag.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    meta = {"run": spec.name, "engine": spec.engine, "traffic": asdict(spec.traffic), "captures": index,
            "failed_requests": failures, "seconds": time.monotonic() - t0,
            "probe_step_seconds": [probe_before, probe_after]}
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def collect(out: Path, log_dir: Path | None = None) -> dict[str, float]:
    """Every run of RUNS on its engine (one start per engine); returns seconds per phase."""
    timings: dict[str, float] = {}
    for engine in ENGINES:
        runs = [r for r in RUNS if r.engine == engine]
        t0 = time.monotonic()
        with RealVLLM(**ENGINES[engine], log_dir=log_dir) as server:
            asyncio.run(_warm_up(server.base_url))
            timings[f"start {engine}"] = time.monotonic() - t0
            for i, spec in enumerate(runs):
                t1 = time.monotonic()
                asyncio.run(record_run(server, spec, out / spec.name, seed=i))
                timings[f"run {spec.name}"] = time.monotonic() - t1
    timings["engines and runs"] = sum(timings.values())
    (out / "timings.json").write_text(json.dumps(timings, indent=1) + "\n", encoding="utf-8")
    return timings


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------


def advise(run_dir: Path, what_if: str | None = None) -> dict[str, Any]:
    """`vllm-diag advise DIR [--what-if ...] --format json`, the first target of the document."""
    cmd = [sys.executable, "-m", "exporter.cli", "advise", str(run_dir), "--format", "json"]
    if what_if:
        cmd += ["--what-if", what_if]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return dict(json.loads(proc.stdout)["targets"][0])


def _close(predicted: float | None, actual: float | None, floor: float) -> bool:
    if predicted is None or actual is None:
        return False
    if predicted <= floor and actual <= floor:
        return True
    return actual > 0 and abs(predicted - actual) / actual <= MAGNITUDE


def _change(before: float | None, after: float | None, floor: float) -> float | None:
    """Relative change; None when unknown; 0 when both sit at or under the floor."""
    if before is None or after is None:
        return None
    if before <= floor and after <= floor:
        return 0.0
    if before <= 0:
        return math.inf
    return (after - before) / before


@dataclass
class Score:
    case: str
    what_if: str
    before: dict[str, float | None]
    actual: dict[str, float | None]
    predicted: dict[str, float | None]
    interval: dict[str, list[float] | None]
    calibration: dict[str, float | None]
    reason: str
    direction_ok: dict[str, bool | None]  # None: the metric did not move > 15 %
    magnitude_ok: dict[str, bool]
    moved: dict[str, float | None]  # before -> after on the real engine, relative
    probes: tuple[float, ...] = ()  # the machine's decode step (s), around the before and the after run
    bounds: dict[str, tuple[float, ...]] = field(default_factory=dict)  # the latency histograms' bucket bounds

    @property
    def speed_spread(self) -> float | None:
        """How far apart the machine's speeds around the two runs were (slowest / fastest - 1)."""
        return max(self.probes) / min(self.probes) - 1.0 if self.probes else None

    @property
    def comparable(self) -> bool:
        """Both runs at about one machine speed: a miss is then the model's, not the machine's.
        Captures without probes (made before the probe existed) say nothing, so they are not."""
        spread = self.speed_spread
        return spread is not None and spread <= SPEED_TOLERANCE

    def wrong_way(self) -> list[str]:
        """Metrics that moved by more than 15 % and were predicted to move the other way (or not)."""
        return [k for k, ok in self.direction_ok.items() if ok is False]

    def resolved(self, key: str, a: float | None, b: float | None) -> bool:
        """Whether a histogram's quantiles ``a`` and ``b`` differ by more than its resolution: at least
        one whole bucket between them. A p95 of 9.9 ms (in the first ITL bucket, read as an
        interpolation from 0) and one of 16.9 ms (in the next) differ by 4 % against 10 % of the
        observations above 10 ms, not by 71 %. Counters (preemptions, tokens) always resolve."""
        bounds = self.bounds.get(key)
        if not bounds or a is None or b is None:
            return True
        return abs(bisect_left(bounds, a) - bisect_left(bounds, b)) >= 2

    def large_moves(self, beyond_machine: bool = True) -> list[str]:
        """Metrics whose before -> after factor is above 1 + LARGE and (``beyond_machine``) above
        what the machine's own change of speed could make of it ((1 + speed spread)^2: a queue
        amplifies a slower step), and that moved across more than a bucket bound of their histogram
        (``resolved``)."""
        machine = (1.0 + (self.speed_spread or 0.0)) ** 2 if beyond_machine else 1.0
        out = []
        for key, moved in self.moved.items():
            if moved is None or not self.resolved(key, self.before.get(key), self.actual.get(key)):
                continue
            factor = 1.0 + moved if moved >= 0 else (1.0 / (1.0 + moved) if moved > -1.0 else math.inf)
            if factor > max(1.0 + LARGE, machine):
                out.append(key)
        return out

    def gross_errors(self) -> list[str]:
        """Magnitude metrics predicted off by more than a factor of GROSS either way and by more than
        their histogram resolves (``resolved``), or not predicted."""
        out = []
        for key in MAGNITUDE_METRICS:
            predicted, actual = self.predicted.get(key), self.actual.get(key)
            floor = PREEMPTION_FLOOR if key == "preemption_rate" else 0.0
            if predicted is None or actual is None:
                out.append(key)
            elif (predicted <= floor and actual <= floor) or not self.resolved(key, predicted, actual):
                continue
            elif min(predicted, actual) <= 0 or max(predicted / actual, actual / predicted) > GROSS:
                out.append(key)
        return out

    @property
    def passed(self) -> bool:
        return not self.reason and all(v is not False for v in self.direction_ok.values()) and all(
            self.magnitude_ok.values())


def _probes(run_dir: Path) -> tuple[float, ...]:
    meta = run_dir / "run.json"
    if not meta.exists():
        return ()
    return tuple(json.loads(meta.read_text(encoding="utf-8")).get("probe_step_seconds") or ())


def _bounds(run_dir: Path) -> dict[str, tuple[float, ...]]:
    """The TTFT and ITL histograms' finite bucket bounds, from the run's first capture."""
    first = min((*run_dir.glob("*-[0-9][0-9][0-9].txt"), *run_dir.glob("*-[0-9][0-9][0-9].txt.gz")), default=None)
    if first is None:
        return {}
    snapshot = parse(read_capture(first).decode("utf-8"), 0.0)
    out = {}
    for key, name in (("ttft_p95_seconds", "vllm:time_to_first_token_seconds"),
                      ("itl_p95_seconds", "vllm:inter_token_latency_seconds")):
        series = list(snapshot.histograms.get(name, {}).values())
        if series:
            out[key] = tuple(b for b in series[0].bounds if math.isfinite(b))
    return out


def observed(run_dir: Path) -> dict[str, float | None]:
    """What a run's window shows, read exactly as ``vllm-diag advise`` reads its ``observed`` (the same
    window from the same captures), without calibrating a model to it: the "after" needs only this."""
    from exporter import cli
    from exporter.advisor.calibrate import observe

    args = cli.build_parser().parse_args(["advise", str(run_dir)])
    return observe(cli._diagnosed(args).window).to_dict()


def score(case: Case, runs: Path) -> Score:
    target = advise(runs / case.before, case.what_if)
    before, actual = target["observed"], observed(runs / case.after)
    item = target["advice"][0] if target["advice"] else None
    predicted = item["predicted"] if item else {k: None for k in METRICS}
    interval = item["interval"] if item else {k: None for k in METRICS}
    direction: dict[str, bool | None] = {}
    magnitude: dict[str, bool] = {}
    changes: dict[str, float | None] = {}
    for key in METRICS:
        floor = PREEMPTION_FLOOR if key == "preemption_rate" else 0.0
        moved = changes[key] = _change(before[key], actual[key], floor)
        if moved is None or abs(moved) <= MOVED:
            direction[key] = None
        else:
            guess = _change(before[key], predicted[key], floor)
            direction[key] = guess is not None and guess * moved > 0
        if key in MAGNITUDE_METRICS:
            magnitude[key] = _close(predicted[key], actual[key], floor)
    return Score(case.name, case.what_if, before, actual, predicted, interval,
                 target.get("calibration", {}).get("errors", {}), target.get("reason", ""), direction, magnitude,
                 changes, _probes(runs / case.before) + _probes(runs / case.after), _bounds(runs / case.before))


def _fmt(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    if key.endswith("_seconds"):
        return f"{value * 1000:.1f} ms"
    return f"{value:.2f}"


def _machine(s: Score) -> str:
    """The machine's decode step around both runs, and whether the case is comparable."""
    if not s.probes:
        return ""
    text = f"machine {min(s.probes) * 1000:.1f}-{max(s.probes) * 1000:.1f} ms/token ({s.speed_spread or 0:.0%} apart)"
    return text if s.comparable else f"{text}, **not comparable**"


def table(scores: list[Score]) -> str:
    """The markdown table docs/advisor.md carries."""
    short = {"ttft_p95_seconds": "TTFT p95", "itl_p95_seconds": "ITL p95", "preemption_rate": "preempt/s",
             "generation_tokens_per_second": "gen tok/s"}
    lines = ["| case | what-if | metric | before | predicted (interval) | after (real) | moved | direction | "
             "within 35 % |", "|---|---|---|---|---|---|---|---|---|"]
    for s in scores:
        for i, key in enumerate(METRICS):
            floor = PREEMPTION_FLOOR if key == "preemption_rate" else 0.0
            moved = _change(s.before[key], s.actual[key], floor)
            iv = s.interval.get(key) if s.interval else None
            pred = _fmt(key, s.predicted.get(key)) + (f" ({_fmt(key, iv[0])}-{_fmt(key, iv[1])})" if iv else "")
            d = s.direction_ok.get(key)
            m = s.magnitude_ok.get(key)
            first = s.case if i == 0 else (_machine(s) if i == 1 else "")
            lines.append("| " + " | ".join([
                first, f"`{s.what_if}`" if i == 0 else "", short[key], _fmt(key, s.before[key]),
                pred, _fmt(key, s.actual[key]),
                "-" if moved is None else ("inf" if math.isinf(moved) else f"{moved:+.0%}"),
                "n/a (< 15 %)" if d is None else ("yes" if d else "**no**"),
                "" if m is None else ("yes" if m else "**no**"),
            ]) + " |")
    return "\n".join(lines)


def write_docs(scores: list[Score], timings: dict[str, float], path: Path) -> None:
    """Write the validation table and its summary as the block docs/advisor.md's kept-run table is rendered
    from (``path``: docs/data/advisor-kept-run.json; then ``vllm-diag render docs``)."""
    passed = sum(s.passed for s in scores)
    steady = [s for s in scores if s.comparable]
    phases = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items())
    lines = [
        *table(scores).split("\n"), "",
        f"{passed} of {len(scores)} changes pass (direction right for every metric that moved by more than 15 %, "
        "TTFT p95, ITL p95 and preemptions/s within +/-35 %); "
        + (f"{sum(s.passed for s in steady)} of the {len(steady)} whose runs had the machine at one speed"
           if steady else "no case had both its runs with the machine at one speed")
        + f" (decode step within {SPEED_TOLERANCE:.0%}).", "",
        f"Measured on {time.strftime('%Y-%m-%d', time.gmtime())}: {phases}.",
    ]
    by = f"python -m lab.advisor --write {path}"
    path.write_text(json.dumps({"generated_by": by, "lines": lines}, indent=1, sort_keys=True) + "\n",
                    encoding="utf-8")


def checks(s: Score) -> str:
    """What the live run says beyond the acceptance, the bounds a working model never misses
    (docs/advisor.md): a prediction; the predicted direction for every move of more than LARGE that
    the machine's change of speed cannot explain; for a comparable case, no error above GROSS."""
    if s.reason:
        return f"{s.case}: **no prediction** ({s.reason})"
    parts = []
    if not s.large_moves(beyond_machine=False):
        parts.append(f"nothing moved by more than {LARGE:.0%}: the change did not change this load")
    large = s.large_moves()
    wrong = [key for key in large if s.direction_ok.get(key) is False]
    parts.append(f"large moves {', '.join(large) or 'none beyond the machine'}: "
                 + (f"**direction wrong for {', '.join(wrong)}**" if wrong else "direction right"))
    if not s.probes:
        parts.append("no machine-speed probe")
    elif s.comparable:
        gross = s.gross_errors()
        parts.append(f"**off by more than {GROSS:g}x for {', '.join(gross)}**" if gross
                     else f"within {GROSS:g}x")
    else:
        parts.append(f"not comparable (machine {s.speed_spread or 0:.0%} apart)")
    return f"{s.case}: " + "; ".join(parts)
