"""Window -> derived diagnostic numbers (:class:`Signals`).

Every rate and ratio comes from deltas inside the window, never from lifetime counters.
A value is ``None`` when its inputs are absent or the window holds no such traffic; the
names of absent inputs are listed in ``missing`` so nothing reads as zero.

``Signals`` is a composition of small frozen groups (``GROUPS``: traffic, KV, scheduler, latency,
CPU, GPU in ``core``; speculative decoding, KV transfer, LoRA, data-parallel engines in ``features``),
each filled by its own function over the window with the readers of ``common``; the types are in
``model``. The JSON ``signals`` object is a contract (docs/method.md, "The JSON signals object"):
:meth:`Signals.to_dict` flattens the groups into one object, in the order of the dataclasses' fields
(``FLAT_KEYS``, derived from them): a new signal is one new field of its group.
"""

from __future__ import annotations

from exporter.catalog import metrics as vllm
from exporter.catalog.thresholds import Thresholds
from exporter.frozen import replace
from exporter.signals.common import (
    API_SERVER_CPU_ABSENT,
    _hist_mean,
    _histogram,
    cache_facts,
    cpu_starvation,
    itl_tail,
    missing_inputs,
    step_wait,
)
from exporter.signals.core import (
    _net_share,
    cpu,
    first_token_prompt_mean,
    gpu,
    kv,
    latency,
    long_prompt_arrivals,
    scheduler,
    traffic,
)
from exporter.signals.features import engines, kv_transfer, lora, per_token, speculative
from exporter.signals.model import (
    FLAT_FIELDS,
    FLAT_KEYS,
    GROUPS,
    LATENCY_FAMILIES,
    PUBLISHED,
    QUANTILES,
    UNPUBLISHED,
    CacheFacts,
    HostInputs,
    Signals,
)
from exporter.signals.witnesses import compute as witnesses_of
from exporter.window import Window

__all__ = [
    "CacheFacts", "FLAT_FIELDS", "FLAT_KEYS", "GROUPS", "HostInputs", "LATENCY_FAMILIES", "PUBLISHED", "QUANTILES",
    "Signals", "UNPUBLISHED", "compute", "cpu_starvation", "engines", "itl_tail", "long_prompt_arrivals", "lora",
    "per_token", "step_wait",
]


def compute(window: Window, thresholds: Thresholds, host: HostInputs | None = None,
            slow_first_token_seconds: float | None = None) -> Signals:
    """Derive every signal from the window (and optional host readings).

    ``slow_first_token_seconds``: the first-token objective's threshold, when the target has one; long
    prompts that came with a first token over it date a burst (long_prompt_arrivals).

    Under speculative decoding the latency group's ITL (quantiles, mean, the objective's histogram) is
    per token; the engine-step estimates (busy fraction, step wait) keep the per-event gaps.
    """
    host = host or HostInputs()
    recent = int(thresholds.recent_evaluations)
    flow = replace(traffic(window, recent), **long_prompt_arrivals(window, thresholds.long_prompt_tokens,
                                                                    slow_first_token_seconds))
    itl = _histogram(window, vllm.INTER_TOKEN_LATENCY_SECONDS)
    spec = speculative(window, itl)
    times = latency(window, per_token(itl, spec.itl_scale), recent)
    if (aligned := first_token_prompt_mean(window, times.ttft_histogram_recent, recent)) is not None:
        flow = replace(flow, prompt_length_mean_recent=aligned)
    if spec.itl_scale and times.itl_histogram_recent is not None:  # per token, as the objective judges the gaps
        itl_recent = per_token(times.itl_histogram_recent, spec.itl_scale)
        times = replace(times, itl_histogram_recent=itl_recent,
                        itl_median_recent=itl_recent.quantile(0.5) if itl_recent is not None else None)
    steps = scheduler(window, _hist_mean(itl), recent)
    times = replace(times, step_wait_mean=step_wait(itl, steps.steps_per_second, times.prefill_mean))
    cpu_use = cpu(window, thresholds, host, _net_share(times.e2e_frontend_mean, times.step_wait_mean, times.e2e_mean))
    return Signals(
        window_seconds=window.duration,
        scrapes=len(window),
        restarts=window.restarts,
        traffic=flow,
        kv=kv(window, thresholds, flow,
              times.ttft_histogram_recent.count if times.ttft_histogram_recent is not None else None),
        scheduler=steps,
        latency=times,
        cpu=cpu_use,
        gpu=gpu(window, host, recent),
        speculative=spec,
        kv_transfer=kv_transfer(window, flow, times),
        lora=lora(window),
        engines=engines(window, thresholds),
        witnesses=witnesses_of(window),
        cache=cache_facts(window.latest),
        missing=missing_inputs(window),
        notes=() if cpu_use.api_server_cores is not None else (API_SERVER_CPU_ABSENT,),
    )
