"""Every threshold of the product, declared once.

The sidecar's rules, the generated alert rules and the dashboards' threshold steps all read
these entries; configuration may override values (validated against this table), never add
new keys. Each entry says what it controls and when to move it, kubernetes-mixin style.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from exporter.catalog.metrics import ITERATION_TOKENS_TOTAL


@dataclass(frozen=True, slots=True)
class Threshold:
    key: str
    default: float
    unit: str
    controls: str
    minimum: float = 0.0
    maximum: float | None = None


THRESHOLDS: tuple[Threshold, ...] = (
    # -- evidence ------------------------------------------------------------------------
    Threshold("evidence_min_scrapes", 2, "scrapes",
              "Scrapes the window must hold before any diagnosis; below it the state is insufficient_evidence.", 2),
    Threshold("evidence_min_requests", 5, "requests",
              "Latency observations a latency rule needs in the window; with fewer it abstains. "
              "Raise it for noisy, low-traffic targets.", 1),
    Threshold("burn_rate_full", 14.4, "ratio",
              "Burn rate (bad share / error budget) at which a missed latency objective weighs fully in a "
              "rule's strength; from 1 (the budget spent at its pace) it grows linearly. 14.4 is the SRE "
              "workbook's fast-burn paging factor (2 % of a 30-day budget in an hour).", 1),
    # -- KV cache ------------------------------------------------------------------------
    Threshold("kv_usage_high", 0.9, "ratio",
              "KV usage treated as full. Point samples swing 0.7-0.98 under sustained pressure, so rules "
              "read it as corroboration next to preemptions, never alone.", 0, 1),
    Threshold("kv_full_fraction", 0.5, "ratio",
              "Share of the window's scrapes at or above kv_usage_high for KV to count as full.", 0, 1),
    Threshold("preemptions_per_request", 0.1, "ratio",
              "Preemptions per admitted request above which preemption is 'frequent' (symptom D). "
              "Occasional preemption is vLLM's safety net; lower it only for latency-critical pools.", 0),
    Threshold("preemptions_per_request_with_impact", 0.025, "ratio",
              "A lower preemption rate that still counts as frequent (D) while a latency objective is missed: "
              "recompute gaps are the tail users see.", 0),
    Threshold("preemptions_min", 3, "preemptions",
              "Preemptions the window must hold before D can fire, so one stray preemption never pages.", 1),
    Threshold("headroom_usage_mean", 0.9, "ratio",
              "Mean KV usage over the window above which headroom is at risk (symptom E).", 0, 1),
    Threshold("prefix_hit_ratio_low", 0.3, "ratio",
              "Prefix-cache hit ratio (cached / queried prompt tokens) below which caching is ineffective (F).", 0, 1),
    Threshold("prefix_min_prompt_blocks", 4, "blocks",
              "Mean prompt length, in KV blocks, that prompts must span for a low hit ratio to mean anything: "
              "prompts shorter than a block can never hit.", 1),
    # -- TTFT structure (symptom A) ------------------------------------------------------
    Threshold("ttft_queue_share", 0.3, "ratio",
              "Share of mean TTFT spent in the engine queue above which waiting explains TTFT (A2).", 0, 1),
    Threshold("ttft_prefill_share", 0.5, "ratio",
              "Share of mean TTFT spent in prefill above which TTFT is prefill-bound (A1/A4/A5).", 0, 1),
    Threshold("frontend_share", 0.3, "ratio",
              "Share of mean TTFT (or e2e) spent outside the engine (tokenization, templates, IPC, output "
              "handling) above which the frontend CPU path is suspect.", 0, 1),
    Threshold("long_prompt_tokens", 1024, "tokens",
              "Mean prompt length at which prefill cost is intrinsic (A1). Workload-dependent: it corroborates "
              "a prefill-dominated TTFT, it never fires alone.", 1),
    Threshold("budget_chunks_per_prompt", 4, "chunks",
              "Mean prompt length over max_num_batched_tokens at which chunking itself delays the first token "
              "(A4).", 1),
    Threshold("waiting_sustained_fraction", 0.5, "ratio",
              "Share of the window's scrapes with requests waiting for the queue to count as sustained.", 0, 1),
    # -- ITL structure (symptom B) -------------------------------------------------------
    Threshold("itl_tail_ratio", 3.0, "ratio",
              "ITL p99 over p50 above which the stream stutters (B1/B2) rather than being uniformly slow (B3/G).", 1),
    Threshold("prefill_token_share", 0.3, "ratio",
              "Share of computed tokens that are prompt tokens above which prefills compete with decode (B1).", 0, 1),
    Threshold("batch_fill_high", 0.8, "ratio",
              "Running requests over max_num_seqs above which the engine runs a throughput-oriented batch (B3).", 0, 1),
    Threshold("budget_step_share", 0.5, "ratio",
              f"Tokens of the largest steps (p99 of {ITERATION_TOKENS_TOTAL}) over max_num_batched_tokens above "
              "which the budget itself lets prefills pile into one step (B2).", 0, 1),
    Threshold("long_step_tokens", 2048, "tokens",
              "Tokens in one engine step above which the step stalls every decoding stream for tens of ms on any "
              "GPU; when the largest steps (p99) are this big and the budget lets them through, the budget is "
              "the lever (B2).", 1),
    Threshold("bandwidth_use_low", 0.3, "ratio",
              "GPU memory bandwidth achieved while the engine steps (vLLM's MFU estimates over the GPU's peak) below "
              "which decode runs on a slow kernel path (B4). Healthy decode reaches 0.6-0.9.", 0, 1),
    Threshold("engine_busy_fraction", 0.8, "ratio",
              "Share of wall time the engine spends stepping (steps/s x mean step time) above which it never "
              "waits for work (B4: the GPU path, not the feed, is slow).", 0, 1),
    # -- throughput / idle (symptom C) ---------------------------------------------------
    Threshold("gpu_util_low", 0.5, "ratio",
              "GPU utilisation (DCGM) below which the GPU counts as idle (C). Used only when a DCGM source "
              "exists.", 0, 1),
    Threshold("gpu_util_high", 0.9, "ratio", "GPU utilisation (DCGM) above which the GPU counts as busy (B3).", 0, 1),
    Threshold("sparse_mean_running", 1.5, "requests",
              "Mean running requests below which, with nothing waiting, the workload does not form batches (C2).", 0),
    # -- CPU ------------------------------------------------------------------------------
    Threshold("cpu_starvation_score", 0.5, "score",
              "CPU-starvation score at which the cpu layer is blamed (A3/C1) and the CPU alert fires.", 0, 1),
    Threshold("cpu_wait_share_floor", 0.4, "ratio",
              "Run-queue wait share of the vLLM threads that maps to a score of 0. vLLM's own threads wait on each "
              "other on a small host: measured 0.30-0.34 under light load on 2 cores with nothing else running. "
              "Lower it on hosts with spare cores, where any wait is foreign.", 0, 1),
    Threshold("cpu_wait_share_full", 0.7, "ratio",
              "Run-queue wait share that maps to a score of 1: measured 0.73 with four busy loops sharing the two "
              "cores, 0.99 under a 0.2-CPU quota.", 0, 1),
    Threshold("cpu_throttled_floor", 0.05, "ratio",
              "Share of CFS periods throttled that maps to a score of 0: a quota sized for the load still clips "
              "the odd burst (measured 0.00 on an idle and 0.00-0.02 on a normally loaded real vLLM without a tight "
              "quota).", 0, 1),
    Threshold("cpu_throttled_full", 0.5, "ratio", "Share of CFS periods throttled that maps to a score of 1.", 0, 1),
    Threshold("cpu_psi_floor", 0.45, "ratio",
              "CPU PSI 'some' share of the vLLM cgroup (stalled time / window, from cpu.pressure's 'some total') "
              "that maps to a score of 0: vLLM's busy-polling threads on a small host wait on each other (see "
              "cpu_wait_share_floor). Measured on a real vLLM in its own cgroup on 2 shared cores: 0.01-0.02 idle, "
              "0.22-0.41 under a light steady load within a 2-CPU quota (20 s and 12 s windows); 0.66-0.68 when "
              "starved by a 1-CPU quota.", 0, 1),
    Threshold("cpu_psi_full", 0.65, "ratio",
              "CPU PSI 'some' share (stalled time / window) that maps to a score of 1: measured 0.66-0.68 with a "
              "real vLLM held to a 1-CPU quota it needs twice of.", 0, 1),
    Threshold("cpu_demand_min_cores", 0.2, "cores",
              "CPU the vLLM threads must use (run time / window) for their run-queue wait to count: an idle engine's "
              "wait share is a ratio of tiny numbers (measured 0.52-0.76 idle, at 0.03-0.07 cores) and says "
              "nothing about starvation.", 0),
    Threshold("api_server_busy_cores", 0.9, "cores",
              "API-server CPU (rate of process_cpu_seconds_total) near one core: its single event loop is "
              "saturated.", 0),
    # -- distributed (symptom G) ---------------------------------------------------------
    Threshold("kv_relief_usage", 0.5, "ratio",
              "Mean KV usage below which a TP/PP deployment has memory to spare, so added GPUs buy latency cost "
              "only (G).",
              0, 1),
    Threshold("model_fits_share", 0.8, "ratio",
              "Model weights over one GPU's memory below which the model fits on one GPU, so TP/PP was added for "
              "KV room or concurrency (G).", 0, 1),
    # -- verdict ------------------------------------------------------------------------
    Threshold("verdict_enter_score", 0.5, "score", "Layer score a layer needs to become the verdict.", 0, 1),
    Threshold("verdict_exit_score", 0.35, "score",
              "Layer score below which the current verdict layer is released (hysteresis band).", 0, 1),
    Threshold("verdict_hold_evaluations", 2, "evaluations",
              "Consecutive evaluations a new verdict (or a stronger challenger layer) must win before it replaces "
              "the current one.", 1),
    Threshold("info_strength", 0.45, "score",
              "Strength shown for informational findings (capacity, saturation, zero prefix reuse). They never count "
              "towards a layer score; it must stay below verdict_enter_score.", 0, 1),

    # -- alerting (generated Prometheus rules; exporter/render/rules.py) ------------------
    Threshold("alert_symptom_active_share", 0.3, "ratio",
              "Share of the smoothing range (alert_smoothing_seconds) a symptom must be active for its alert "
              "condition to hold. Symptoms flap with bursty traffic (case 1 is active ~1/3 of the time); "
              "a share, not an unbroken streak, keeps `for:` meaningful.", 0, 1),
    Threshold("alert_smoothing_seconds", 600, "seconds",
              "Range over which alert conditions average the sidecar's 0/1 symptom and root-cause gauges.", 60),
    Threshold("target_startup_grace_seconds", 1200, "seconds",
              "A target never up since the sidecar (pod) started alerts only after this long: model loads "
              "(download, weights, compile, CUDA graphs) take up to the 20 min the deployment's startupProbe "
              "allows.", 0),
    Threshold("kv_pressure_preemption_rate", 0.1, "1/s",
              "Preemptions per second (smoothed) the KV-pressure alert needs besides frequent preemption per "
              "request: a handful of preemptions per hour is vLLM's safety net, not a shortage.", 0),
    Threshold("slo_min_requests", 100, "requests",
              "Events (first tokens, finished requests) the last hour must hold before a burn rate pages: a "
              "burn of a handful of requests is noise.", 1),
    Threshold("targets_down_share", 0.1, "ratio",
              "Share of a model's replicas down (for 10 minutes) at which VLLMTargetsDown warns "
              "(kube-prometheus' TargetDown).", 0, 1),
    Threshold("stale_after_intervals", 4, "scrape intervals",
              "A diagnosis older than this many of the target's scrape intervals counts as stale.", 2),
    Threshold("traffic_min_requests_per_second", 0.01, "1/s",
              "Finished requests per second (smoothed) below which there is no traffic to protect: the CPU "
              "alert stays quiet.", 0),

    # -- what-if advisor (exporter/advisor) -----------------------------------------------
    Threshold("advice_min_requests", 20, "requests",
              "Finished requests the window must hold before the advisor calibrates its engine model: fewer "
              "give length distributions and latency tails too noisy to reproduce.", 1),
    Threshold("advice_max_calibration_error", 0.5, "ratio",
              "Largest relative error on TTFT p95, ITL p95 and throughput with which the calibrated model may "
              "still reproduce the window; above it the advisor says so and predicts nothing. Predictions are "
              "scaled by observed / simulated, so a residual error below it is corrected, not carried over.", 0),
    Threshold("advice_calibration_confidence", 0.95, "ratio",
              "Confidence of the band within which the calibrated model's TTFT and ITL p95 count as reproducing the "
              "window's whatever their relative error: a p95 read from n observations could have been read at "
              "ranks 0.95 -/+ z sqrt(0.05 x 0.95 / n) by chance (binomial), and on coarse buckets that moves it by "
              "half. 0 turns the band off (the relative error alone decides).", 0, 0.999),
    Threshold("advice_preemption_floor", 0.05, "1/s",
              "Preemption rate below which observed and predicted rates count as the same (none to speak of): "
              "relative errors between two near-zero rates mean nothing.", 0),
    Threshold("advice_closed_occupancy_cv", 0.25, "ratio",
              "Coefficient of variation of running + waiting across the window's scrapes below which the "
              "traffic counts as closed (a fixed set of clients), with at least advice_closed_min_in_flight "
              "requests in flight.", 0),
    Threshold("advice_closed_min_in_flight", 1.5, "requests",
              "Mean running + waiting below which traffic is never read as closed: one client or less in "
              "flight has no steady set of clients to tell apart from sparse open arrivals.", 0),
    Threshold("advice_open_occupancy_cv", 0.5, "ratio",
              "Coefficient of variation of running + waiting above which traffic counts as open; between the "
              "two the advisor predicts both and shows the difference.", 0),
    Threshold("advice_worse_share", 0.05, "ratio",
              "Relative change by which a predicted metric must get worse to be listed under what gets worse.", 0),
    Threshold("advice_cpu_seconds", 20, "seconds",
              "CPU time the sidecar's advisor worker may spend per target and evaluation; candidates beyond it "
              "are left out (the CLI has no budget).", 1),
    Threshold("advice_compute_efficiency", 0.3, "ratio",
              "Achieved / datasheet FLOPs the advisor assumes for a compute-bound (prefill-heavy) step, which "
              "floors the step time of a larger token budget. Needs engine.gpu and engine.model_weight_bytes.",
              0.01, 1),
    Threshold("advice_decode_token_weight", 4, "ratio",
              "What one decoding sequence adds to a step, in prefill tokens. A prefill token is one row of a "
              "batched matrix product; a decode also reads its whole context from the KV cache and is sampled, "
              "detokenised and streamed on its own, so it costs several times more (this CPU build: about 6; "
              "a GPU at small batch: about 2-3). One window cannot tell the two apart (its batch size barely "
              "varies), so the step-cost fit takes this ratio as given.",
              1, 20),
    Threshold("advice_interval_seconds", 300, "seconds",
              "How often the sidecar's advisor worker re-calibrates and re-predicts each target (off the poll loop).",
              30),
)

DEFAULTS: Mapping[str, float] = MappingProxyType({t.key: t.default for t in THRESHOLDS})
BY_KEY: Mapping[str, Threshold] = MappingProxyType({t.key: t for t in THRESHOLDS})


class Thresholds:
    """Resolved threshold values: catalog defaults plus validated overrides, read as attributes."""

    __slots__ = ("_values",)

    def __init__(self, overrides: Mapping[str, float] | None = None) -> None:
        values = dict(DEFAULTS)
        for key, value in (overrides or {}).items():
            values[key] = validate(key, value)
        problems = check_consistency(values)
        if problems:
            raise ValueError("; ".join(problems))
        self._values = MappingProxyType(values)

    def __getattr__(self, key: str) -> float:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(key) from None

    def as_dict(self) -> dict[str, float]:
        return dict(self._values)

    def __reduce__(self) -> tuple[type[Thresholds], tuple[dict[str, float]]]:
        # Pickled as its values (to the advisor's worker process): unpickling without __init__
        # would send the first attribute lookup through __getattr__ before _values exists.
        return Thresholds, (dict(self._values),)


def check_consistency(values: Mapping[str, float]) -> list[str]:
    """Cross-field rules: a hysteresis band that is a band, informational below the verdict bar."""
    problems = []
    if values["verdict_exit_score"] >= values["verdict_enter_score"]:
        problems.append(f"verdict_exit_score {values['verdict_exit_score']:g} must be below "
                        f"verdict_enter_score {values['verdict_enter_score']:g}")
    if values["info_strength"] >= values["verdict_enter_score"]:
        problems.append(f"info_strength {values['info_strength']:g} must be below "
                        f"verdict_enter_score {values['verdict_enter_score']:g}")
    for low, high in (("cpu_wait_share_floor", "cpu_wait_share_full"), ("cpu_psi_floor", "cpu_psi_full"),
                      ("cpu_throttled_floor", "cpu_throttled_full")):
        if values[low] >= values[high]:
            problems.append(f"{low} {values[low]:g} must be below {high} {values[high]:g}")
    return problems


def validate(key: str, value: float) -> float:
    entry = BY_KEY.get(key)
    if entry is None:
        raise ValueError(f"unknown threshold {key!r} (known: {', '.join(sorted(BY_KEY))})")
    value = float(value)
    if value < entry.minimum or (entry.maximum is not None and value > entry.maximum):
        upper = f"..{entry.maximum:g}" if entry.maximum is not None else "+"
        raise ValueError(f"threshold {key}={value:g} is out of range {entry.minimum:g}{upper}")
    return value
