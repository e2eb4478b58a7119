"""The groups of features a deployment may run: speculative decoding, KV transfer, LoRA adapters, sleep mode
and data-parallel engines."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.signals.common import _hist_mean, _histogram, _increase, _mean, _position, _ratio, _reason, _source
from exporter.signals.model import Engines, KvTransfer, Latency, Lora, Speculative, Traffic
from exporter.snapshot import LabelIs, LabelSet, Snapshot, label_value
from exporter.window import HistogramDelta, Window

SPEC_DECODE_FAMILIES: tuple[str, ...] = (
    vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL, vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL,
    vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL, vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL,
)


def speculative(window: Window, itl: HistogramDelta | None) -> Speculative:
    """Acceptance and tokens per output event; ``Speculative()`` when no spec-decode family is exported."""
    if not any(window.present(name) for name in SPEC_DECODE_FAMILIES):
        return Speculative()
    drafts = _increase(window, vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL)
    draft_tokens = _increase(window, vllm.SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL)
    accepted = _increase(window, vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL)
    per_position: tuple[float, ...] = ()
    name = vllm.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL
    latest = window.latest
    if drafts and latest is not None and window.present(name):
        positions = sorted({int(p) for labels in latest.scalars.get(name, {})
                            if (p := label_value(labels, "position")) is not None and p.isdigit()})
        per_position = tuple((window.increase(name, _position(str(p))) or 0.0) / drafts for p in positions)
    # Every generated token but each request's first arrives in an ITL-observed output event.
    generated = _increase(window, vllm.GENERATION_TOKENS_TOTAL)
    ttft = _histogram(window, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    per_event = None
    if generated is not None and ttft is not None and itl is not None and itl.count > 0:
        per_event = max(1.0, (generated - ttft.count) / itl.count)
    return Speculative(
        enabled=True, drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
        acceptance_rate=_ratio(accepted, draft_tokens),
        mean_accepted_length=1.0 + accepted / drafts if accepted is not None and drafts else None,
        acceptance_per_position=per_position, tokens_per_event=per_event, event_gap_mean=_hist_mean(itl),
    )


# KV transfer / offload families: any of them on /metrics says a connector or offload is configured.
KV_TRANSFER_FAMILIES: tuple[str, ...] = (
    vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE, vllm.NIXL_XFER_TIME_SECONDS, vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL,
    vllm.KV_OFFLOAD_LOAD_BYTES_TOTAL, vllm.KV_OFFLOAD_TOTAL_BYTES_TOTAL, vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC,
)


def _stage(value: str) -> LabelIs:
    return LabelIs("stage", value)


def _transfer_type(value: str) -> LabelIs:
    return LabelIs("transfer_type", value)


def _deferred_wait(window: Window, flow: Traffic, times: Latency, consumer: bool) -> float | None:
    """Mean time a request waits deferred (for its KV, on a consumer), in seconds.

    vLLM stamps a request SCHEDULED only once its KV load is done, so its queue time (QUEUED to SCHEDULED,
    exact per request) holds the wait for KV and any wait for capacity. The scrapes' mean deferred and
    capacity counts split it (all of it on a consumer no scrape caught waiting: its waits are short loads).
    Without the queue-time histogram, Little's law: the mean deferred count over the arrival rate.
    """
    by_reason = vllm.NUM_REQUESTS_WAITING_BY_REASON
    if not window.present(by_reason):
        return None
    deferred = _mean(window.gauge_series(by_reason, "sum", _reason("deferred")))
    capacity = _mean(window.gauge_series(by_reason, "sum", _reason("capacity")))
    if deferred is None:
        return None
    if times.queue_mean is not None:
        waiting = deferred + (capacity or 0.0)
        return times.queue_mean * (deferred / waiting if waiting > 0 else 1.0 if consumer else 0.0)
    if flow.first_tokens and window.duration > 0:
        return deferred / (flow.first_tokens / window.duration)
    return None


def kv_transfer(window: Window, flow: Traffic, times: Latency) -> KvTransfer:
    """KV transfer and offload signals; ``KvTransfer()`` when no connector is at work."""
    external_queries = _increase(window, vllm.EXTERNAL_PREFIX_CACHE_QUERIES_TOTAL)
    if not (any(window.present(name) for name in KV_TRANSFER_FAMILIES) or external_queries):
        return KvTransfer()
    duration = window.duration
    by_source = vllm.PROMPT_TOKENS_BY_SOURCE_TOTAL
    transferred_share = None
    if window.present(by_source):
        transferred_share = _ratio(window.increase(by_source, _source("external_kv_transfer")),
                                   window.increase(by_source))
    fetch = vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE
    deferred_wait = _deferred_wait(window, flow, times, window.present(fetch))
    xfer = _histogram(window, vllm.NIXL_XFER_TIME_SECONDS)
    xfer_bytes = _histogram(window, vllm.NIXL_BYTES_TRANSFERRED)
    failures = _increase(window, vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL)
    transfers = xfer.count if xfer is not None else None
    load_bytes, load_seconds = (_increase(window, vllm.KV_OFFLOAD_LOAD_BYTES_TOTAL),
                                _increase(window, vllm.KV_OFFLOAD_LOAD_TIME_TOTAL))
    if load_bytes is None and window.present(vllm.KV_OFFLOAD_TOTAL_BYTES_TOTAL):  # before the flat names
        load_bytes = window.increase(vllm.KV_OFFLOAD_TOTAL_BYTES_TOTAL, _transfer_type("CPU_to_GPU"))
        if window.present(vllm.KV_OFFLOAD_TOTAL_TIME_TOTAL):
            load_seconds = window.increase(vllm.KV_OFFLOAD_TOTAL_TIME_TOTAL, _transfer_type("CPU_to_GPU"))
    errored = (window.increase(vllm.REQUEST_SUCCESS_TOTAL, lambda labels: label_value(labels, "finished_reason")
                               == "error") if window.present(vllm.REQUEST_SUCCESS_TOTAL) else None)
    return KvTransfer(
        enabled=True,
        consumer=window.present(fetch),
        transferred_prompt_share=transferred_share,
        external_queried_tokens=external_queries,
        external_hit_ratio=_ratio(_increase(window, vllm.EXTERNAL_PREFIX_CACHE_HITS_TOTAL), external_queries),
        deferred_wait_mean=deferred_wait,
        deferred_ttft_share=(min(1.0, deferred_wait / times.ttft_mean)
                             if deferred_wait is not None and times.ttft_mean else None),
        fetch_in_progress_mean=_mean(window.gauge_series(fetch, "sum", _stage("in_progress")))
        if window.present(fetch) else None,
        transfers=transfers,
        transfer_time_mean=_hist_mean(xfer),
        transfer_time_p95=xfer.quantile(0.95) if xfer is not None and xfer.count else None,
        transfer_bytes_per_second=_ratio(xfer_bytes.sum, duration) if xfer_bytes is not None else None,
        transfer_bytes_mean=_hist_mean(xfer_bytes),
        failures=failures,
        failure_share=_ratio(failures, (failures or 0) + (transfers or 0)) if failures is not None else None,
        kv_expired=_increase(window, vllm.NIXL_NUM_KV_EXPIRED_REQS_TOTAL),
        errored_requests=errored,
        offload_load_seconds=load_seconds,
        offload_load_bytes=load_bytes,
        offload_load_bytes_per_second=_ratio(load_bytes, load_seconds),
        offload_cpu_usage=window.gauge(vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC, "max")
        if window.present(vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC) else None,
    )


def per_token(itl: HistogramDelta | None, tokens_per_event: float | None) -> HistogramDelta | None:
    """The ITL histogram with each event gap divided by the tokens an event carried on average."""
    if itl is None or tokens_per_event is None:
        return itl
    return HistogramDelta(tuple(b / tokens_per_event for b in itl.bounds), itl.cumulative,
                          itl.sum / tokens_per_event, itl.count)


def _adapters(labels: LabelSet, name: str) -> frozenset[str]:
    value = label_value(labels, name) or ""
    return frozenset(part for part in value.split(",") if part)


def _lora_current(snapshot: Snapshot) -> tuple[LabelSet, float] | None:
    """The newest ``lora_requests_info`` series of a scrape (its value is the time of its update)."""
    series = snapshot.scalars.get(vllm.LORA_REQUESTS_INFO)
    if not series:
        return None
    return max(series.items(), key=lambda item: item[1])


def lora(window: Window) -> Lora:
    """Adapter slots; ``Lora()`` when the engine serves no LoRA (the family is registered only then)."""
    latest = window.latest
    current = _lora_current(latest) if latest is not None else None
    if latest is None or current is None:
        return Lora()
    labels, _ = current
    try:
        slots: float | None = float(label_value(labels, "max_lora") or "")
    except ValueError:
        slots = None
    running = _adapters(labels, "running_lora_adapters")
    waiting = _adapters(labels, "waiting_lora_adapters") - running
    # Updated while the window covers: the series' value (an update's unix time) is not older than its
    # oldest scrape. The scrape's own time stands in for vLLM's clock (the same host, or NTP).
    start = latest.timestamp - window.duration
    seen: set[str] = set()
    for series_labels, updated in latest.scalars.get(vllm.LORA_REQUESTS_INFO, {}).items():
        if updated >= start:
            seen |= _adapters(series_labels, "running_lora_adapters")
            seen |= _adapters(series_labels, "waiting_lora_adapters")
    full: list[float] = []
    if slots:
        for snapshot in window.snapshots:
            now = _lora_current(snapshot)
            if now is not None:
                full.append(1.0 if len(_adapters(now[0], "running_lora_adapters")) >= slots else 0.0)
    return Lora(enabled=True, max_adapters=slots, running_adapters=float(len(running)),
                waiting_adapters=float(len(waiting)), adapters_seen=float(len(seen | running)),
                slots_full_fraction=_mean(full))


def _engine(value: str) -> LabelIs:
    return LabelIs("engine", value)


SLEEP_LEVELS: tuple[str, ...] = ("weights_offloaded", "discard_all")


def _sleep(snapshot: Snapshot) -> tuple[str | None, float | None]:
    """The sleep state at one scrape (the deepest any engine is in) and how many engines are not awake."""
    series = snapshot.scalars.get(vllm.ENGINE_SLEEP_STATE)
    if not series:
        return None, None
    state: dict[str, dict[str, float]] = {}
    for labels, value in series.items():
        state.setdefault(label_value(labels, "engine") or "", {})[label_value(labels, "sleep_state") or ""] = value
    asleep = [e for e, one_hot in state.items() if one_hot.get("awake", 1.0) == 0.0]
    if not asleep:
        return "awake", 0.0
    deepest = "asleep"  # awake 0 and no level set: vLLM's release_kv_cache_memory
    for level in SLEEP_LEVELS:
        if any(state[e].get(level, 0.0) > 0 for e in asleep):
            deepest = level
    return deepest, float(len(asleep))


def _engine_numbers(window: Window, engine: str) -> dict[str, float | None]:
    match = _engine(engine)
    ttft = window.histogram(vllm.TIME_TO_FIRST_TOKEN_SECONDS, match) if window.present(
        vllm.TIME_TO_FIRST_TOKEN_SECONDS) else None
    itl = window.histogram(vllm.INTER_TOKEN_LATENCY_SECONDS, match) if window.present(
        vllm.INTER_TOKEN_LATENCY_SECONDS) else None
    running = window.gauge_series(vllm.NUM_REQUESTS_RUNNING, "sum", match)
    waiting = window.gauge_series(vllm.NUM_REQUESTS_WAITING, "sum", match)
    load = [r + w for r, w in zip(running, waiting)] if len(running) == len(waiting) else running
    return {
        "requests_finished": window.increase(vllm.REQUEST_SUCCESS_TOTAL, match)
        if window.present(vllm.REQUEST_SUCCESS_TOTAL) else None,
        "first_tokens": ttft.count if ttft is not None else None,
        "load_mean": _mean(load),  # running + waiting, mean over the window's scrapes
        "ttft_mean": _hist_mean(ttft),
        "itl_mean": _hist_mean(itl),
        "kv_cache_usage_mean": _mean(window.gauge_series(vllm.KV_CACHE_USAGE_PERC, "max", match)),
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _over_siblings(numbers: Mapping[str, Mapping[str, float | None]], engine: str, key: str,
                   floor: float) -> float | None:
    """An engine's value over the median of its siblings' (each at least ``floor``, so idle ones do not divide)."""
    own = numbers[engine].get(key)
    others = [v for e, row in numbers.items() if e != engine and (v := row.get(key)) is not None]
    if own is None or not others:
        return None
    return max(own, floor) / max(_median(others), floor)


def engines(window: Window, thresholds: Thresholds) -> Engines:
    """Sleep state and per-engine signals; per-engine numbers only with two or more engines."""
    latest = window.latest
    if latest is None:
        return Engines()
    ranks = sorted({e for name in (vllm.NUM_REQUESTS_RUNNING, vllm.ENGINE_SLEEP_STATE)
                    for labels in latest.scalars.get(name, {}) if (e := label_value(labels, "engine")) is not None},
                   key=lambda e: (len(e), e))
    state, sleeping = _sleep(latest)
    if len(ranks) < 2:
        return Engines(count=float(len(ranks)) if ranks else None, sleep_state=state, sleeping=sleeping)
    numbers = {e: _engine_numbers(window, e) for e in ranks}
    # An engine is compared only while it and its siblings served enough first tokens to judge latency.
    judged = {e: row for e, row in numbers.items() if (row["first_tokens"] or 0) >= thresholds.evidence_min_requests}
    outlier, load_ratio, latency_ratio, worst = None, None, None, 0.0
    for e in judged if len(judged) >= 2 else ():
        load = _over_siblings(judged, e, "load_mean", 1.0)  # at least one request: an idle sibling is no ratio
        slow = [r for key, floor in (("ttft_mean", 0.001), ("itl_mean", 0.001))
                if (r := _over_siblings(judged, e, key, floor)) is not None]
        latency_ratio_e = max(slow) if slow else None
        score = max(load or 0.0, latency_ratio_e or 0.0)
        if score > worst:
            outlier, load_ratio, latency_ratio, worst = e, load, latency_ratio_e, score
    return Engines(count=float(len(ranks)), sleep_state=state, sleeping=sleeping, per_engine=numbers,
                   outlier=outlier, load_ratio=load_ratio, latency_ratio=latency_ratio)
