"""One target's path from a scrape result to a published :class:`TargetState`.

The live sidecar and ``vllm-diag diagnose FILE...`` both feed :meth:`TargetPipeline.ingest`,
so offline captures and live scrapes give the same numbers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from exporter import inputs, objectives
from exporter.catalog import metrics as vllm
from exporter.catalog.metrics import METRICS, Kind
from exporter.config import EngineFacts, Settings, Target
from exporter.dcgm import gpu_utilization
from exporter.diagnosis.engine import VerdictTracker, diagnose
from exporter.diagnosis.rules import Context
from exporter.facts import cache_info
from exporter.facts.base import METRICS as METRICS_SOURCE
from exporter.facts.base import Fact, FactValue
from exporter.facts.resolve import engine_facts, resolve
from exporter.frozen import replace
from exporter.parse import ParseError, parse
from exporter.poll import ScrapeResult
from exporter.record import CAPTURE_HEADER, Recorder, RecordStatus, capture_timestamp, read_capture, recorded_config
from exporter.scaling import HOLD, ScaleTracker
from exporter.signals import HostInputs, compute
from exporter.snapshot import Snapshot
from exporter.state import (
    SCRAPE_ERROR_REASONS,
    Advice,
    AdviceTrack,
    ScrapeHealth,
    TargetState,
    TargetStatus,
    Verdict,
    unknown_diagnosis,
)
from exporter.timebuffer import Readings, TimeBuffer
from exporter.window import Window

log = logging.getLogger(__name__)

COUNTERS = tuple(m.name for m in METRICS if m.kind is Kind.COUNTER)
# The capture format lives in exporter/record.py; its two names stay importable from here.
__all__ = ["CAPTURE_HEADER", "TargetPipeline", "capture_timestamp", "replay"]

HostProbe = Callable[[float], HostInputs]


class TargetPipeline:
    """parse -> window -> signals -> diagnosis for one target; keeps only the window and verdict."""

    def __init__(self, target: Target, settings: Settings, host_probe: HostProbe | None = None) -> None:
        self.target = target
        self.settings = settings
        self.thresholds = settings.resolved_thresholds()
        self.window = Window(settings.window_seconds, COUNTERS)
        self.tracker = VerdictTracker()
        self.host_probe = host_probe
        self._recent = int(self.thresholds.recent_evaluations)
        self.scale = ScaleTracker(settings.window_seconds, self._recent)  # scaling on the diagnosis (issue 51)
        # DCGM utilisation readings 0..1 over the window (point samples, no baseline): the rules read the mean of
        # the newest recent_evaluations, the window's mean is published beside it
        self._gpu = Readings(settings.window_seconds)
        # The CPU-starvation score of each evaluation (over its recent horizon), kept for the window: which
        # scrapes the window holds came while the host starved vLLM
        self._cpu_scores = Readings(settings.window_seconds)
        # Each evaluation's recent queued fraction, likewise: was a queue sustained at some time the window holds
        self._queued = Readings(settings.window_seconds)
        # Each evaluation's recent prefix hit ratio: was the prefix broken at some time the window holds
        self._prefix_hits = Readings(settings.window_seconds)
        # ... the long prompts' pace each evaluation measured, with the steps it was measured on: as a burst's
        # last prompts leave the window, the pace of the largest sample holds
        self._long_intervals: TimeBuffer[tuple[float, float]] = TimeBuffer(settings.window_seconds,
                                                                           keep_baseline=False)
        # ... and its recent GPU bytes read per second of stepping: were the kernels slow at some time it holds
        self._gpu_read = Readings(settings.window_seconds)
        self._observed_facts: dict[str, Mapping[str, FactValue]] = {}  # source -> facts (exporter/facts)
        self._errors = {reason: 0 for reason in SCRAPE_ERROR_REASONS}
        self.rule_errors_total: dict[str, int] = {}
        self.source_errors_total: dict[tuple[str, str], int] = {}
        self._failing: dict[str, str] = {}  # rule or source -> its last error, for logs on change only
        self._edge_warned: set[str] = set()  # objectives whose threshold off a bucket edge was logged
        self._health = ScrapeHealth(errors_total=dict(self._errors))
        self.advice: Advice | None = None  # set by the sidecar's advisor worker (exporter/advisor/worker.py)
        self.advice_track: AdviceTrack | None = None  # set by the same worker (exporter/advisor/track.py)
        self.recorder: Recorder | None = None  # set by the sidecar when the target has a record_dir
        # The engine facts of the last evaluation: what the sources said, resolved, as the rules read them
        self._resolved: tuple[dict[str, Mapping[str, FactValue]], dict[str, Fact], EngineFacts] | None = None
        self._cache_rows: tuple[Mapping[str, str], ...] | None = None  # the newest vllm:cache_config_info rows
        self._cache_facts: dict[str, FactValue] = {}  # ... and the facts they give
        self._recorded_facts: Mapping[str, Fact] | None = None  # the facts the recorder last wrote beside its captures
        self.state = TargetState(
            target=target.name, url=target.safe_url, status="insufficient_evidence",
            window_seconds=settings.window_seconds, evaluated_at=time.time(), health=self._health,
            diagnosis=unknown_diagnosis(time.time()),
        )

    def _fail(self, result: ScrapeResult, reason: str, message: str) -> TargetState:
        self._errors[reason] += 1
        log.warning("scrape of %s failed (%s): %s", self.target.name, reason, message)
        self._health = replace(
            self._health, up=False, last_duration_seconds=result.duration, last_error=f"{reason}: {message}",
            errors_total=dict(self._errors), scrapes_total=self._health.scrapes_total + 1,
        )
        # A target we cannot read gets no diagnosis: the last verdict is withdrawn, not repeated, and
        # its objectives are no longer judged (their thresholds and bucket edges stay known).
        unjudged = {name: objectives.ObjectiveStatus(
            name, status.threshold_seconds, status.target, threshold_on_bucket_edge=status.threshold_on_bucket_edge,
            nearest_bucket_edges=status.nearest_bucket_edges) for name, status in self.state.objectives.items()}
        self.state = replace(
            self.state, status="down", evaluated_at=result.started_at, health=self._health, recording=self._recording(),
            diagnosis=replace(unknown_diagnosis(result.started_at), verdict=self.tracker.reset(result.started_at)),
            objectives=unjudged, inputs=inputs.down(self.state.inputs), scaling=HOLD,
        )
        return self.state

    def ingest(self, result: ScrapeResult, evaluate_now: bool = True) -> TargetState:
        """Take one scrape; ``evaluate_now=False`` only fills the window (a batch of stored scrapes)."""
        if not result.ok:
            return self._fail(result, result.error_reason or "connect", result.error or "scrape failed")
        try:
            text = result.body.decode("utf-8")  # type: ignore[union-attr]
            snapshot = parse(text, result.started_at, max_series_per_family=self.target.max_series_per_family)
        except UnicodeDecodeError as exc:
            return self._fail(result, "parse", f"payload is not UTF-8 ({exc.reason} at byte {exc.start})")
        except ParseError as exc:
            return self._fail(result, "parse", str(exc))
        if self.recorder is not None:
            self.recorder.submit(result.started_at, text)  # a queue put: the writer thread does the I/O
        return self.take(snapshot, result.duration, evaluate_now)

    def take(self, snapshot: Snapshot, duration: float = 0.0, evaluate_now: bool = True) -> TargetState:
        """Take one scrape already parsed (the central diagnoser builds its snapshots from stored samples)."""
        step = self.window.push(snapshot)
        self._health = replace(
            self._health, up=True, last_duration_seconds=duration, last_success_timestamp=snapshot.timestamp,
            last_error=None, scrapes_total=self._health.scrapes_total + 1,
            dropped_samples_total=self._health.dropped_samples_total + snapshot.dropped_samples,
            restarts_total=self._health.restarts_total + (1 if step is not None and step.restarted else 0),
        )
        if not evaluate_now:
            self.state = replace(self.state, health=self._health, recording=self._recording())
            return self.state
        return self.evaluate(snapshot.timestamp)

    def _track_failures(self, kind: str, failing: dict[str, str]) -> None:
        """Log a rule or source when it starts failing, when its error changes, and when it recovers."""
        for name, error in failing.items():
            key = f"{kind} {name}"
            if self._failing.get(key) != error:
                log.warning("%s: %s %s failed: %s", self.target.name, kind, name, error)
                self._failing[key] = error
        for key in [k for k in self._failing if k.startswith(f"{kind} ") and k[len(kind) + 1:] not in failing]:
            log.info("%s: %s recovered", self.target.name, key)
            del self._failing[key]

    def source_error(self, source: str, reason: str) -> None:
        """Count a failed read of an extra source (DCGM, host CPU); the diagnosis goes on without it."""
        self.source_errors_total[(source, reason)] = self.source_errors_total.get((source, reason), 0) + 1

    def observe_gpu(self, timestamp: float, utilization: float | None) -> None:
        """Record a DCGM reading; readings older than the window are dropped."""
        if utilization is not None:
            self._gpu.push(timestamp, utilization)
        else:
            self._gpu.trim(timestamp)

    def observe_facts(self, source: str, values: Mapping[str, FactValue] | None) -> None:
        """What a fact source said (None: it is unavailable now); metrics facts come from the scrapes."""
        if values is None:
            self._observed_facts.pop(source, None)
        else:
            self._observed_facts[source] = dict(values)

    def evaluate(self, now: float) -> TargetState:
        host = self.host_probe(now) if self.host_probe is not None else HostInputs()
        for source, reason in host.errors:
            self.source_error(source, reason)
        self._track_failures("source", {source: reason for source, reason in host.errors})
        if self._gpu:
            readings = [value for _, value in self._gpu.newest(self._recent)]
            window = replace(host.window or HostInputs(), gpu_utilization=sum(self._gpu) / len(self._gpu))
            host = replace(host, gpu_utilization=sum(readings) / len(readings), sources=(*host.sources, "dcgm"),
                           window=window)
        slo = self.settings.slo_for(self.target)
        signals = compute(self.window, self.thresholds, host, slo.ttft.threshold_seconds)
        # Time-aligned evidence: each evaluation's recent reading of a cause, kept for the window, says
        # whether the cause acted at some time the window holds (its effect there is the cause's).
        cpu = replace(signals.cpu, starvation_score_peak=_held(self._cpu_scores, now, signals.cpu.starvation_score,
                                                                max))
        scheduler = replace(signals.scheduler, queued_recent_peak=_held(
            self._queued, now, signals.scheduler.queued_recent_fraction, max))
        kv = replace(signals.kv, prefix_hit_ratio_recent_low=_held(self._prefix_hits, now,
                                                                   signals.kv.prefix_hit_ratio_recent, min))
        # A burst's pace is the one measured on the largest sample the window's evaluations saw (the newest of
        # equals): as its last prompts leave the window, the few left stretch the mean interval.
        traffic = signals.traffic
        if traffic.long_prompt_interval_seconds is not None:
            self._long_intervals.push(now, (traffic.long_prompt_first_token_steps or 0.0,
                                            traffic.long_prompt_interval_seconds))
        else:
            self._long_intervals.trim(now)
        if traffic.long_prompts and self._long_intervals:
            _, pace = max(self._long_intervals.newest_first(), key=lambda sample: sample[0])
            traffic = replace(traffic, long_prompt_interval_seconds=pace)
        latency = signals.latency
        low_since = _run_start(self._prefix_hits, lambda ratio: ratio < self.thresholds.prefix_hit_ratio_low)
        if low_since is not None and kv.prefix_hit_ratio_recent is not None:
            latency = replace(signals.latency, ttft_histogram_prefix_low=self.window.histogram_since(
                vllm.TIME_TO_FIRST_TOKEN_SECONDS, low_since, self._recent - 1))
        gpu = replace(signals.gpu, read_bytes_per_busy_second_recent_low=_held(
            self._gpu_read, now, signals.gpu.read_bytes_per_busy_second_recent, min))
        signals = replace(signals, cpu=cpu, scheduler=scheduler, kv=kv, traffic=traffic, latency=latency, gpu=gpu)
        judged = objectives.judge_all({"ttft": signals.latency.ttft_histogram, "itl": signals.latency.itl_histogram},
                                      slo, self.thresholds.evidence_min_requests,
                                      {"itl": signals.speculative.itl_scale})
        self._warn_off_edge(judged)
        latest = self.window.latest
        model = ",".join(latest.model_names()) if latest is not None else ""
        ready = len(self.window) >= self.thresholds.evidence_min_scrapes and self.window.duration > 0
        facts, engine = self._facts(latest)
        if self.recorder is not None and facts != self._recorded_facts:  # the folder says what the captures were
            self._recorded_facts = facts
            self.recorder.describe(recorded_config(self.target, self.settings, engine))
        if ready and signals.engines.asleep:
            # vLLM's engine_sleep_state says every engine sleeps (/sleep): no latency rule judges an engine
            # that serves nothing on purpose, and nothing it left in the window pages anyone. The verdict
            # starts afresh when it wakes.
            self.tracker.reset(now)
            diagnosis = replace(unknown_diagnosis(now), verdict=Verdict("none", 0.0, now))
            status: TargetStatus = "sleeping"
        elif ready:
            ctx = Context(signals, engine, self.thresholds, slo)
            diagnosis = diagnose(ctx, self.tracker, now)
            for cause in diagnosis.rule_errors:
                self.rule_errors_total[cause] = self.rule_errors_total.get(cause, 0) + 1
            self._track_failures("rule", dict(diagnosis.rule_errors))
            status = "ok"
        else:
            diagnosis = replace(unknown_diagnosis(now), verdict=self.tracker.reset(now))
            status = "insufficient_evidence"
        scaling = self.scale.assess(now, status == "ok", diagnosis.verdict.layer, diagnosis.active_causes, signals,
                                    engine.max_num_seqs, self.thresholds, slo.ttft)
        self.state = TargetState(
            target=self.target.name, url=self.target.safe_url, status=status,
            window_seconds=self.settings.window_seconds,
            evaluated_at=now, health=self._health, diagnosis=diagnosis, model_name=model, signals=signals,
            missing=signals.missing, last_scrape_at=latest.timestamp if latest is not None else None, engine=facts,
            rule_errors_total=dict(self.rule_errors_total), source_errors_total=dict(self.source_errors_total),
            advice=self.advice, advice_track=self.advice_track, objectives=judged, recording=self._recording(),
            inputs=inputs.available(latest, self.target.cpu is not None, host), scaling=scaling,
        )
        self.window.forget_reads()
        return self.state

    def _facts(self, latest: Snapshot | None) -> tuple[Mapping[str, Fact], EngineFacts]:
        """The resolved engine facts and the rules' view of them, resolved again only when a source said
        something new (they change at a restart or a discovery, not with each scrape)."""
        observed = dict(self._observed_facts)
        if latest is not None:
            rows = latest.info.get(vllm.CACHE_CONFIG_INFO, ())
            if rows != self._cache_rows:
                self._cache_rows, self._cache_facts = rows, cache_info.facts(rows)
            observed[METRICS_SOURCE] = self._cache_facts
        if self._resolved is None or observed != self._resolved[0]:
            facts = resolve(self.target.engine, observed)
            self._resolved = (observed, facts, engine_facts(facts))
        return self._resolved[1], self._resolved[2]

    def _warn_off_edge(self, judged: Mapping[str, objectives.ObjectiveStatus]) -> None:
        """Once per objective: its threshold is not a bucket edge of this target's histogram."""
        for name, status in judged.items():
            line = objectives.edge_warning(self.target.name, status)
            if line is not None and name not in self._edge_warned:
                self._edge_warned.add(name)
                log.warning("%s", line)

    def _recording(self) -> RecordStatus | None:
        return self.recorder.status() if self.recorder is not None else None


def _held(buffer: Readings, now: float, value: float | None,
          pick: Callable[[Iterable[float]], float]) -> float | None:
    """Record ``value`` (this evaluation's recent reading) and return ``pick`` (max or min) of the readings
    the window holds; None when this evaluation has no reading."""
    if value is None:
        buffer.trim(now)
        return None
    buffer.push(now, value)
    return pick(buffer)


def _run_start(buffer: Readings, holds: Callable[[float], bool]) -> float | None:
    """When the newest run of readings for which ``holds`` is true began (the time of its oldest reading);
    None when the newest reading does not hold."""
    start = None
    for timestamp, value in reversed(buffer.newest(len(buffer))):
        if not holds(value):
            break
        start = timestamp
    return start


def replay(files: list[Path], pipeline: TargetPipeline, interval: float, start: float = 0.0,
           dcgm_dir: Path | None = None) -> TargetState:
    """Feed saved captures, in order, through the live code path.

    A capture recorded by the sidecar carries its scrape time; plain captures are spaced
    ``interval`` seconds apart. With ``dcgm_dir``, a DCGM capture of the same file name taken
    at the same instant feeds the GPU-utilisation evidence, as a live DCGM source would.
    """
    state = pipeline.state
    for index, path in enumerate(files):
        body = read_capture(path)
        stamp = capture_timestamp(body[:200].decode("utf-8", "replace"))
        started = stamp if stamp is not None else start + index * interval
        if dcgm_dir is not None and (dcgm_dir / path.name).is_file():
            gpu = gpu_utilization((dcgm_dir / path.name).read_text(encoding="utf-8", errors="replace"))
            pipeline.observe_gpu(started, gpu)
        state = pipeline.ingest(ScrapeResult(started_at=started, duration=0.0, body=body))
    return state
