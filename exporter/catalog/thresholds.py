"""Every threshold of the product, declared once: the fields of :class:`Thresholds`.

The sidecar's rules, the generated alert rules and the dashboards' threshold steps all read
these entries; configuration may override values (validated against this table), never add
new keys. Each entry says what it controls and when to move it, kubernetes-mixin style. The
rules read a resolved ``Thresholds`` as typed attributes (``t.kv_usage_high``), so mypy knows
every threshold; ``THRESHOLDS``, ``DEFAULTS`` and ``BY_KEY`` are views of the same fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields
from types import MappingProxyType

from exporter.catalog.advisor_thresholds import AdvisorThresholds
from exporter.catalog.metrics import ITERATION_TOKENS_TOTAL, NIXL_NUM_FAILED_TRANSFERS_TOTAL
from exporter.catalog.threshold_entry import Threshold, threshold

__all__ = ["BY_KEY", "DEFAULTS", "THRESHOLDS", "Threshold", "Thresholds", "threshold"]


@dataclass(frozen=True, slots=True)
class Thresholds(AdvisorThresholds):
    """Every threshold of the product, declared once: each field is one, read as a typed attribute.

    A field's default is the catalog default; its metadata say what it controls and its range (the
    ``THRESHOLDS`` entries below are derived from here). An instance holds resolved values: the
    defaults plus validated overrides (``Thresholds.of(overrides)``); it checks ranges and the
    cross-field rules when built. The what-if advisor's fields are declared in
    :class:`~exporter.catalog.advisor_thresholds.AdvisorThresholds`, which this extends.
    """

    # -- evidence ------------------------------------------------------------------------
    evidence_min_scrapes: float = threshold(2, "scrapes",
        "Scrapes the window must hold before any diagnosis; below it the state is insufficient_evidence.", 2)
    evidence_min_requests: float = threshold(5, "requests",
        "Latency observations a latency rule needs in the window; with fewer it abstains. "
        "Raise it for noisy, low-traffic targets.", 1)
    evidence_min_misses: float = threshold(2, "events",
        "With fewer first tokens than evidence_min_requests, the first-token objective still counts as missed "
        "when at least this many of them missed it, beyond chance (onset_confidence_z): a few 40k-token prompts "
        "an hour that each wait seconds are an effect; one stray slow request is not.", 1)
    burn_rate_full: float = threshold(14.4, "ratio",
        "Burn rate (bad share / error budget) at which a missed latency objective weighs fully in a "
        "rule's strength; from 1 (the budget spent at its pace) it grows linearly. 14.4 is the SRE "
        "workbook's fast-burn paging factor (2 % of a 30-day budget in an hour).", 1)
    # -- KV cache ------------------------------------------------------------------------
    kv_usage_high: float = threshold(0.9, "ratio",
        "KV usage treated as full. Point samples swing 0.7-0.98 under sustained pressure, so rules "
        "read it as corroboration next to preemptions, never alone.", 0, 1)
    kv_full_fraction: float = threshold(0.5, "ratio",
        "Share of the window's scrapes at or above kv_usage_high for KV to count as full.", 0, 1)
    preemptions_per_request: float = threshold(0.1, "ratio",
        "Preemptions per admitted request above which preemption is 'frequent' (symptom D). "
        "Occasional preemption is vLLM's safety net; lower it only for latency-critical pools.", 0)
    preemptions_per_request_with_impact: float = threshold(0.025, "ratio",
        "A lower preemption rate that still counts as frequent (D) while a latency objective is missed: "
        "recompute gaps are the tail users see.", 0)
    preemptions_min: float = threshold(3, "preemptions",
        "Preemptions the window must hold before D can fire, so one stray preemption never pages.", 1)
    headroom_usage_mean: float = threshold(0.9, "ratio",
        "Mean KV usage over the window above which headroom is at risk (symptom E).", 0, 1)
    prefix_hit_ratio_low: float = threshold(0.3, "ratio",
        "Prefix-cache hit ratio (cached / queried prompt tokens) below which caching is ineffective (F).", 0, 1)
    prefix_min_prompt_blocks: float = threshold(4, "blocks",
        "Mean prompt length, in KV blocks, that prompts must span for a low hit ratio to mean anything: "
        "prompts shorter than a block can never hit.", 1)
    # -- TTFT structure (symptom A) ------------------------------------------------------
    ttft_queue_share: float = threshold(0.3, "ratio",
        "Share of mean TTFT spent in the engine queue above which waiting explains TTFT (A2).", 0, 1)
    ttft_prefill_share: float = threshold(0.5, "ratio",
        "Share of mean TTFT spent in prefill above which TTFT is prefill-bound (A1/A4/A5).", 0, 1)
    frontend_share: float = threshold(0.3, "ratio",
        "Share of mean TTFT (or e2e) spent outside the engine (tokenization, templates, IPC, output "
        "handling) above which the frontend CPU path is suspect.", 0, 1)
    long_prompt_tokens: float = threshold(1024, "tokens",
        "Mean prompt length at which prefill cost is intrinsic (A1). Workload-dependent: it corroborates "
        "a prefill-dominated TTFT, it never fires alone.", 1)
    budget_chunks_per_prompt: float = threshold(4, "chunks",
        "Mean prompt length over max_num_batched_tokens at which chunking itself delays the first token "
        "(A4).", 1)
    waiting_sustained_fraction: float = threshold(0.5, "ratio",
        "Share of the window's scrapes with requests waiting for the queue to count as sustained.", 0, 1)
    # -- ITL structure (symptom B) -------------------------------------------------------
    itl_tail_ratio: float = threshold(3.0, "ratio",
        "ITL p99 over p50 above which the stream stutters (B1/B2) rather than being uniformly slow (B3/G).", 1)
    itl_median_share: float = threshold(0.5, "ratio",
        "Share of the ITL objective's threshold the median token gap takes, at or above which the slowness is "
        "uniform: a gap that misses is then mostly the median, and a tail over it is a detail (G keeps the miss "
        "on a TP/PP engine with KV to spare; B1/B2 defer).", 0, 1)
    prefill_token_share: float = threshold(0.3, "ratio",
        "Share of computed tokens that are prompt tokens above which prefills compete with decode (B1).", 0, 1)
    batch_fill_high: float = threshold(0.8, "ratio",
        "Running requests over max_num_seqs above which the engine runs a throughput-oriented batch (B3).", 0, 1)
    budget_step_share: float = threshold(0.5, "ratio",
        f"Tokens of the largest steps (p99 of {ITERATION_TOKENS_TOTAL}) over max_num_batched_tokens above "
        "which the budget itself lets prefills pile into one step (B2).", 0, 1)
    long_step_tokens: float = threshold(2048, "tokens",
        "Tokens in one engine step above which the step stalls every decoding stream for tens of ms on any "
        "GPU; when the largest steps (p99) are this big and the budget lets them through, the budget is "
        "the lever (B2).", 1)
    bandwidth_use_low: float = threshold(0.3, "ratio",
        "GPU memory bandwidth achieved while the engine steps (vLLM's MFU estimates over the GPU's peak) below "
        "which decode runs on a slow kernel path (B4). Healthy decode reaches 0.6-0.9.", 0, 1)
    engine_busy_fraction: float = threshold(0.8, "ratio",
        "Share of wall time the engine spends stepping (steps/s x mean step time) above which it never "
        "waits for work (B4: the GPU path, not the feed, is slow).", 0, 1)
    spec_acceptance_low: float = threshold(0.3, "ratio",
        "Speculative decoding: draft acceptance rate (accepted / proposed draft tokens) below which the drafts "
        "are mostly rejected (B5): each verify step pays for draft tokens it throws away. Informational unless "
        "the ITL objective is missed. Lower it for a drafter whose steps are nearly free (n-gram).", 0, 1)
    spec_min_draft_tokens: float = threshold(200, "tokens",
        "Draft tokens the window must hold before the acceptance rate is judged (B5); with fewer it abstains.", 1)
    # -- throughput / idle (symptom C) ---------------------------------------------------
    gpu_util_low: float = threshold(0.5, "ratio",
        "GPU utilisation (DCGM) below which the GPU counts as idle (C). Used only when a DCGM source "
        "exists.", 0, 1)
    gpu_util_high: float = threshold(0.9, "ratio",
        "GPU utilisation (DCGM) above which the GPU counts as busy (B3).", 0, 1)
    sparse_mean_running: float = threshold(1.5, "requests",
        "Mean running requests below which, with nothing waiting, the workload does not form batches (C2).", 0)
    # -- CPU ------------------------------------------------------------------------------
    cpu_starvation_score: float = threshold(0.5, "score",
        "CPU-starvation score at which the cpu layer is blamed (A3/C1) and the CPU alert fires.", 0, 1)
    cpu_wait_share_floor: float = threshold(0.4, "ratio",
        "Run-queue wait share of the vLLM threads that maps to a score of 0. vLLM's own threads wait on each "
        "other on a small host: measured 0.30-0.34 under light load on 2 cores with nothing else running. "
        "Lower it on hosts with spare cores, where any wait is foreign.", 0, 1)
    cpu_wait_share_full: float = threshold(0.7, "ratio",
        "Run-queue wait share that maps to a score of 1: measured 0.73 with four busy loops sharing the two "
        "cores, 0.99 under a 0.2-CPU quota.", 0, 1)
    cpu_throttled_floor: float = threshold(0.05, "ratio",
        "Share of CFS periods throttled that maps to a score of 0: a quota sized for the load still clips "
        "the odd burst (measured 0.00 on an idle and 0.00-0.02 on a normally loaded real vLLM without a tight "
        "quota).", 0, 1)
    cpu_throttled_full: float = threshold(0.5, "ratio",
        "Share of CFS periods throttled that maps to a score of 1.", 0, 1)
    cpu_psi_floor: float = threshold(0.45, "ratio",
        "CPU PSI 'some' share of the vLLM cgroup (stalled time / window, from cpu.pressure's 'some total') "
        "that maps to a score of 0: vLLM's busy-polling threads on a small host wait on each other (see "
        "cpu_wait_share_floor). Measured on a real vLLM in its own cgroup on 2 shared cores: 0.01-0.02 idle, "
        "0.22-0.41 under a light steady load within a 2-CPU quota (20 s and 12 s windows); 0.66-0.68 when "
        "starved by a 1-CPU quota.", 0, 1)
    cpu_psi_full: float = threshold(0.65, "ratio",
        "CPU PSI 'some' share (stalled time / window) that maps to a score of 1: measured 0.66-0.68 with a "
        "real vLLM held to a 1-CPU quota it needs twice of.", 0, 1)
    cpu_demand_min_cores: float = threshold(0.2, "cores",
        "CPU the vLLM threads must use (run time / window) for their run-queue wait to count: an idle engine's "
        "wait share is a ratio of tiny numbers (measured 0.52-0.76 idle, at 0.03-0.07 cores) and says "
        "nothing about starvation.", 0)
    recent_evaluations: float = threshold(3, "evaluations",
        "Evaluations (one per scrape) over which a cause's own evidence is read as *now*: the host inputs (CPU "
        "run-queue wait, CFS throttling, PSI; DCGM utilisation), preemptions and the queue. The effect (an "
        "objective, a share of the window) is judged over the window; a cause whose window evidence remains but "
        "whose recent evidence is gone is *recovering*: it keeps its layer, marked so, until its effect leaves "
        "the window. 3 at the 5 s default is 15 s: enough for counters that move in scheduler ticks, short "
        "enough that a starved host is named, and released, within a few scrapes.", 1)
    recent_burn_min: float = threshold(2, "x budget",
        "Burn rate at which the first tokens of the recent horizon alone count as missing their objective (a "
        "cause's onset, named beside its own recent evidence before the window's share shows it): 15 s of first "
        "tokens is a small sample, and one slow request in it is not an onset.", 1)
    onset_confidence_z: float = threshold(1.645, "z",
        "How sure the first tokens since a cause began must be that they miss their objective: the lower "
        "Wilson bound of their slow share at this z (1.645: one-sided 95 %) must exceed the error budget. "
        "A cause that began within the window is judged on its own steps, not diluted by the calm ones "
        "before it, and a stretch of a few dozen first tokens is a sample, not a rate.", 0)
    sparse_cause_quiet_intervals: float = threshold(3, "intervals",
        "A cause made of sparse events (long prompts at a fraction of a request per second) has ended when "
        "none came for this many of its mean intervals in the window (and at least the recent horizon): "
        "a 15 s horizon is empty most of the time at 0.1 requests/s, so the horizon adapts to the rate.", 1)
    api_server_busy_cores: float = threshold(0.9, "cores",
        "API-server CPU (rate of process_cpu_seconds_total) near one core: its single event loop is "
        "saturated.", 0)
    # -- distributed (symptom G) ---------------------------------------------------------
    kv_relief_usage: float = threshold(0.5, "ratio",
        "Mean KV usage below which a TP/PP deployment has memory to spare, so added GPUs buy latency cost "
        "only (G).",
        0, 1)
    model_fits_share: float = threshold(0.8, "ratio",
        "Model weights over one GPU's memory below which the model fits on one GPU, so TP/PP was added for "
        "KV room or concurrency (G).", 0, 1)
    # -- KV transfer: disaggregated prefill/decode, KV connectors (A7, A8) ---------------
    kv_transfer_ttft_share: float = threshold(0.4, "ratio",
        "Share of mean TTFT a KV consumer's requests spend waiting deferred for their KV (the mean deferred "
        "count over the arrival rate) at or above which a missed first-token objective is put on the KV "
        "transfer (A7). Below it the transfer is a minor part of the first token and the A causes judge it.", 0, 1)
    kv_transfer_failure_share: float = threshold(0.02, "ratio",
        f"Failed KV transfers over all transfers ({NIXL_NUM_FAILED_TRANSFERS_TOTAL} against the transfer "
        "histogram's count) at or above which the transfer is failing (A8). Each failure fails its request "
        "or recomputes its prompt on the decode instance (kv_load_failure_policy).", 0, 1)
    kv_transfer_failures_min: float = threshold(5, "failures",
        "Failed KV transfers the window must hold before A8 fires: a lone failed handshake after a restart "
        "of the peer is no failing transfer.", 1)
    dp_imbalance_ratio: float = threshold(2.0, "ratio",
        "Data parallel: an engine's mean load (running + waiting) or mean TTFT/ITL over the median of its "
        "siblings' at which it stands out (G2). Raise it where the load balancer is known to be uneven.", 1)
    # -- LoRA adapter slots (A6) -------------------------------------------------------------
    lora_deferred_fraction: float = threshold(0.2, "ratio",
        "LoRA: share of scrapes with requests waiting deferred (num_requests_waiting_by_reason) at which "
        "the wait for an adapter slot counts (A6), with more adapters in demand than --max-loras slots.", 0, 1)
    # -- rule strengths (exporter/diagnosis/rules/) ---------------------------------------------
    # A fired finding's strength is its floor (``*_strength``) plus weights times how far its evidence goes
    # (0 at the cause's mark, 1 at the stated full mark). Every floor is at least the default
    # verdict_enter_score, so any cause that fires with an effect can become the verdict; a cause's ceiling
    # (floor plus weights, STRENGTHS) below verdict_enter_score would never win, and check_consistency refuses it.
    a1_strength: float = threshold(0.5, "score",
        "A1 (long prompts): strength of a fired finding at the burn rate of 1; see verdict_enter_score.", 0, 1)
    a1_strength_weight: float = threshold(0.4, "score",
        "A1: strength added as the first-token burn rate grows from 1 to burn_rate_full.", 0, 1)
    a2_strength: float = threshold(0.5, "score",
        "A2 (a queue while KV has room): strength at a queue share of ttft_queue_share.", 0, 1)
    a2_strength_weight: float = threshold(0.4, "score",
        "A2: strength added as the queue's share of TTFT grows to 90 %.", 0, 1)
    a3_strength: float = threshold(0.5, "score",
        "A3 (CPU short for the first tokens): strength at the starvation or frontend mark.", 0, 1)
    a3_strength_weight: float = threshold(0.5, "score",
        "A3: strength added as the starvation score grows to 1 (or the frontend share to 80 %).", 0, 1)
    a4_strength: float = threshold(0.55, "score",
        "A4 (token budget too small): strength at budget_chunks_per_prompt chunks a prompt.", 0, 1)
    a4_strength_weight: float = threshold(0.4, "score",
        "A4: strength added as the chunks per prompt grow to 4 x budget_chunks_per_prompt.", 0, 1)
    prefix_strength: float = threshold(0.5, "score",
        "A5, F, F1, F6 (prefix cache): strength at a hit ratio just under prefix_hit_ratio_low.", 0, 1)
    prefix_strength_weight: float = threshold(0.4, "score",
        "A5, F, F1, F6: strength added as the hit ratio falls to 0.", 0, 1)
    a6_strength: float = threshold(0.55, "score",
        "A6 (LoRA adapter slots): strength at a deferred share of lora_deferred_fraction.", 0, 1)
    a6_strength_weight: float = threshold(0.35, "score",
        "A6: strength added as the deferred share grows to every scrape.", 0, 1)
    a7_strength: float = threshold(0.55, "score",
        "A7 (KV transfer slow): strength at a transfer share of kv_transfer_ttft_share.", 0, 1)
    a7_strength_weight: float = threshold(0.35, "score",
        "A7: strength added as the transfer's share of TTFT grows to 90 %.", 0, 1)
    a8_strength: float = threshold(0.6, "score",
        "A8 (KV transfer failing): strength at a failure share of kv_transfer_failure_share.", 0, 1)
    a8_strength_weight: float = threshold(0.3, "score",
        "A8: strength added as the failure share grows to 10 x kv_transfer_failure_share.", 0, 1)
    b1_strength: float = threshold(0.5, "score",
        "B1 (prefill disturbs decode): strength at the stutter mark and the burn rate of 1.", 0, 1)
    b1_strength_shape_weight: float = threshold(0.2, "score",
        "B1: strength added as ITL p99/p50 grows to 3 x itl_tail_ratio.", 0, 1)
    b1_strength_burn_weight: float = threshold(0.2, "score",
        "B1: strength added as the ITL burn rate grows from 1 to burn_rate_full.", 0, 1)
    b2_strength: float = threshold(0.5, "score",
        "B2 (token budget too large): strength at the long-step mark and the burn rate of 1.", 0, 1)
    b2_strength_shape_weight: float = threshold(0.2, "score",
        "B2: strength added as the largest steps grow to 4 x the long-step mark.", 0, 1)
    b2_strength_burn_weight: float = threshold(0.2, "score",
        "B2: strength added as the ITL burn rate grows from 1 to burn_rate_full.", 0, 1)
    b3_strength: float = threshold(0.55, "score",
        "B3 (throughput-oriented batch): the strength of a fired finding (it has no degree).", 0, 1)
    b4_strength: float = threshold(0.6, "score",
        "B4 (slow GPU path): strength at a bandwidth use of bandwidth_use_low.", 0, 1)
    b4_strength_weight: float = threshold(0.3, "score",
        "B4: strength added as the bandwidth use falls to 0 (half of it when unmeasured).", 0, 1)
    b5_strength: float = threshold(0.55, "score",
        "B5 (drafts rejected): strength at an acceptance of spec_acceptance_low.", 0, 1)
    b5_strength_weight: float = threshold(0.35, "score",
        "B5: strength added as the acceptance falls to 0.", 0, 1)
    c1_strength: float = threshold(0.55, "score",
        "C1 (CPU cannot feed the GPU): strength at a starvation score of cpu_starvation_score.", 0, 1)
    c1_strength_weight: float = threshold(0.45, "score",
        "C1: strength added as the starvation score grows to 1.", 0, 1)
    c3_strength: float = threshold(0.6, "score",
        "C3 (KV caps concurrency): strength at a queued share of waiting_sustained_fraction.", 0, 1)
    c3_strength_weight: float = threshold(0.3, "score",
        "C3: strength added as the queued share grows to every scrape.", 0, 1)
    d_strength: float = threshold(0.65, "score",
        "D (frequent preemption): strength at preemptions_per_request.", 0, 1)
    d_strength_weight: float = threshold(0.25, "score",
        "D: strength added as preemptions per request grow to 10 x preemptions_per_request.", 0, 1)
    d_strength_corroborated: float = threshold(0.1, "score",
        "D: strength added when KV usage reached kv_usage_high in the window.", 0, 1)
    d_strength_offload_discount: float = threshold(0.15, "score",
        "D: strength taken off with KV offload on (a preempted block comes back by a copy, not a recompute).", 0, 1)
    e_strength: float = threshold(0.6, "score",
        "E (no headroom): strength at a full share of kv_full_fraction.", 0, 1)
    e_strength_weight: float = threshold(0.2, "score",
        "E: strength added as the full share grows to every scrape.", 0, 1)
    e_strength_restart: float = threshold(0.8, "score",
        "E: the strength of an engine restart with KV at its cap (OOM?).", 0, 1)
    e_strength_offload_discount: float = threshold(0.1, "score",
        "E: strength taken off with KV offload on (the cap costs copies).", 0, 1)
    g_strength: float = threshold(0.6, "score",
        "G (parallelism without memory pressure): the strength of a fired finding.", 0, 1)
    g2_strength: float = threshold(0.55, "score",
        "G2 (one data-parallel engine apart): strength at dp_imbalance_ratio.", 0, 1)
    g2_strength_weight: float = threshold(0.35, "score",
        "G2: strength added as the engine's ratio grows to 2 x dp_imbalance_ratio.", 0, 1)
    unexplained_strength: float = threshold(0.5, "score",
        "A0, B0 (an effect without a known cause): strength at the burn rate of 1. Their layer is unknown: it "
        "never competes for the verdict (an unexplained miss reads unknown while no layer reaches "
        "verdict_enter_score).", 0, 1)
    unexplained_strength_weight: float = threshold(0.4, "score",
        "A0, B0: strength added as the burn rate grows from 1 to burn_rate_full.", 0, 1)
    # -- the engine's own witnesses (exporter/signals/witnesses.py, exporter/diagnosis/witnesses.py) ----
    block_witness_min_evictions: float = threshold(20, "blocks",
        "Sampled KV blocks (--kv-cache-metrics) evicted in the window before their lifetimes and reuse gaps "
        "redirect a prefix-cache finding (F, F1, F6); with fewer the shares and ratios decide alone. At the default "
        "1 % sample rate that is ~2000 evicted blocks.", 1)
    block_reused_share: float = threshold(0.25, "ratio",
        "Share of the evicted blocks' lifetime before their last prefix-cache hit, over the prefix hit ratio, at "
        "or above which the hits land on blocks the pool later evicts: prompts come back for prefixes it has "
        "already evicted (F6). Below it the hits land on blocks that stay (a stable head before a changing "
        "field) and the evicted ones were not reused while they lived: prompts do not repeat (F1).", 0, 1)
    step_prefill_budget_share: float = threshold(0.5, "ratio",
        f"Computed prompt tokens an average engine step carries ({ITERATION_TOKENS_TOTAL} less the generated "
        "tokens, per step) over max_num_batched_tokens: the least share of steps that carried a prefill chunk "
        "(a step computes at most the budget). At half or more the median token gap is such a step: uniformly "
        "slow token gaps are the budget's (B1), with or without a stutter, and a busy GPU is the chunks' (not "
        "B4's slow path).", 0, 1)
    witness_corroboration: float = threshold(0.1, "score",
        "Witnesses: strength a finding gains when a witness names its cause: the steps show the token budget "
        "binding (A1, A4, B1, B2), or the evicted blocks' residency names the prefix cache's misses (F1, F6).",
        0, 1)
    witness_contradiction: float = threshold(0.15, "score",
        "Witnesses: strength A4 or B2 loses when the steps stay far below the budget they blame.", 0, 1)
    # -- verdict ------------------------------------------------------------------------
    # How it relates to the causes' strengths: see "rule strengths" above and docs/method.md (the text below is
    # also the dashboards' panel description).
    verdict_enter_score: float = threshold(0.5, "score", "Layer score a layer needs to become the verdict.", 0, 1)
    verdict_exit_score: float = threshold(0.35, "score",
        "Layer score below which the current verdict layer is released (hysteresis band).", 0, 1)
    verdict_hold_evaluations: float = threshold(2, "evaluations",
        "Consecutive evaluations a new verdict (or a stronger challenger layer) must win before it replaces "
        "the current one.", 1)
    info_strength: float = threshold(0.45, "score",
        "Strength shown for informational findings (capacity, saturation, zero prefix reuse). They never count "
        "towards a layer score; it must stay below verdict_enter_score.", 0, 1)

    # -- alerting (generated Prometheus rules; exporter/render/rules/) ------------------
    alert_symptom_active_share: float = threshold(0.3, "ratio",
        "Share of the smoothing range (alert_smoothing_seconds) a symptom must be active for its alert "
        "condition to hold. Symptoms flap with bursty traffic (case 1 is active ~1/3 of the time); "
        "a share, not an unbroken streak, keeps `for:` meaningful.", 0, 1)
    alert_smoothing_seconds: float = threshold(600, "seconds",
        "Range over which alert conditions average the sidecar's 0/1 symptom and root-cause gauges.", 60)
    target_startup_grace_seconds: float = threshold(1200, "seconds",
        "A target never up since the sidecar (pod) started alerts only after this long: model loads "
        "(download, weights, compile, CUDA graphs) take up to the 20 min the deployment's startupProbe "
        "allows.", 0)
    kv_pressure_preemption_rate: float = threshold(0.1, "1/s",
        "Preemptions per second (smoothed) the KV-pressure alert needs besides frequent preemption per "
        "request: a handful of preemptions per hour is vLLM's safety net, not a shortage.", 0)
    slo_min_requests: float = threshold(100, "requests",
        "Events (first tokens, finished requests) the last hour must hold before a burn rate pages: a "
        "burn of a handful of requests is noise.", 1)
    slo_low_traffic_min_events: float = threshold(10, "events",
        "Events (first tokens, finished requests) the last 30 minutes must hold before a low-traffic model "
        "(under slo_min_requests an hour) pages on its bad share; the SRE workbook's path for low-traffic "
        "services.", 1)
    slo_low_traffic_bad_share: float = threshold(0.5, "ratio",
        "Share of a low-traffic model's events that must be bad (over 30 minutes for the page, 6 hours for "
        "the ticket): most of its few users are hurt.", 0, 1)
    slo_low_traffic_ticket_min_events: float = threshold(3, "events",
        "Events the last 6 hours must hold before a low-traffic model too quiet to page gets a ticket on its "
        "bad share.", 1)
    replica_outlier_ratio: float = threshold(3, "ratio",
        "How many times its siblings' bad share one replica's must reach (while it burns at a paging rate "
        "itself) to be named as the outlier: a fleet-wide problem raises every replica alike.", 1)
    targets_down_share: float = threshold(0.1, "ratio",
        "Share of a model's replicas down (for 10 minutes) at which VLLMTargetsDown warns "
        "(kube-prometheus' TargetDown).", 0, 1)
    stale_after_intervals: float = threshold(4, "scrape intervals",
        "A diagnosis older than this many of the target's scrape intervals counts as stale.", 2)
    traffic_min_requests_per_second: float = threshold(0.01, "1/s",
        "Finished requests per second (smoothed) below which there is no traffic to protect: the CPU "
        "alert stays quiet.", 0)

    # -- scaling on the diagnosis (exporter/scaling.py; issue 51) ---------------------------
    scale_target_utilization: float = threshold(0.8, "ratio",
        "Share of a replica's binding capacity (batch slots, or the KV pool) the traffic may fill at the "
        "objectives: the desired replicas are demand / capacity / this. Lower it for bursty traffic (more "
        "headroom, more replicas); raise it when the objectives hold close to the cap.", 0.1, 1)
    scale_in_headroom: float = threshold(0.9, "ratio",
        "Scale-in needs the demand to stay below this share of scale_target_utilization on every evaluation of "
        "the stabilisation window (the sidecar's window): until then a replica asks for itself at least.",
        0.1, 1)
    scale_queue_growth_share: float = threshold(1 / 3, "ratio",
        "Share of the window, newest first, over which the desired replicas read the queue's growth (arrivals "
        "past the throughput): long enough to hold several scrapes, short enough that a queue which stopped "
        "growing stops asking for replicas within a third of the window.", 0.05, 1)
    scale_down_stabilization_seconds: float = threshold(300, "seconds",
        "The generated HPA's and KEDA's scale-down stabilisation window: a replica is removed only when every "
        "recommendation of this long asks for fewer (the HPA's default). Raise it for traffic with dips shorter "
        "than a replica's start-up.", 0, 3600)

    def __post_init__(self) -> None:
        values = self.as_dict()
        problems = [problem for key, value in values.items() if (problem := out_of_range(key, value))]
        problems += check_consistency(values)
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def of(cls, overrides: Mapping[str, float] | None = None) -> Thresholds:
        """The defaults with ``overrides`` (validated: a known key, a number in its range) applied."""
        return cls(**{key: validate(key, value) for key, value in (overrides or {}).items()})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _entry(f: Field[float]) -> Threshold:
    """A field's catalog entry (every field is declared through ``threshold``, with a default)."""
    if f.default is MISSING:
        raise TypeError(f"threshold {f.name} has no default: declare it with threshold()")
    meta = f.metadata
    return Threshold(f.name, f.default, meta["unit"], meta["controls"], meta["minimum"], meta["maximum"])


THRESHOLDS: tuple[Threshold, ...] = tuple(_entry(f) for f in fields(Thresholds))
DEFAULTS: Mapping[str, float] = MappingProxyType({t.key: t.default for t in THRESHOLDS})
BY_KEY: Mapping[str, Threshold] = MappingProxyType({t.key: t for t in THRESHOLDS})


# What the strength of each cause that can become the verdict is built from (exporter/diagnosis/rules/): one
# tuple of settings per way it fires, summed at their full marks. A0/B0 (layer unknown) never take the verdict.
STRENGTHS: Mapping[str, tuple[tuple[str, ...], ...]] = MappingProxyType({
    "A1": (("a1_strength", "a1_strength_weight"),),
    "A2": (("a2_strength", "a2_strength_weight"),),
    "A3": (("a3_strength", "a3_strength_weight"),),
    "A4": (("a4_strength", "a4_strength_weight"),),
    "A5": (("prefix_strength", "prefix_strength_weight"),),
    "A6": (("a6_strength", "a6_strength_weight"),),
    "A7": (("a7_strength", "a7_strength_weight"),),
    "A8": (("a8_strength", "a8_strength_weight"),),
    "B1": (("b1_strength", "b1_strength_shape_weight", "b1_strength_burn_weight"),),
    "B2": (("b2_strength", "b2_strength_shape_weight", "b2_strength_burn_weight"),),
    "B3": (("b3_strength",),),
    "B4": (("b4_strength", "b4_strength_weight"),),
    "B5": (("b5_strength", "b5_strength_weight"),),
    "C1": (("c1_strength", "c1_strength_weight"),),
    "C3": (("c3_strength", "c3_strength_weight"),),
    "D": (("d_strength", "d_strength_weight", "d_strength_corroborated"),),
    "E": (("e_strength", "e_strength_weight"), ("e_strength_restart",)),
    "F": (("prefix_strength", "prefix_strength_weight"),),
    "F1": (("prefix_strength", "prefix_strength_weight"),),
    "F6": (("prefix_strength", "prefix_strength_weight"),),
    "G": (("g_strength",),),
    "G2": (("g2_strength", "g2_strength_weight"),),
})


def strength_ceiling(cause: str, values: Mapping[str, float]) -> tuple[float, tuple[str, ...]]:
    """The strongest finding ``cause`` can make under ``values``, and the settings it is the sum of."""
    best = max(STRENGTHS[cause], key=lambda keys: sum(values[k] for k in keys))
    return min(1.0, sum(values[k] for k in best)), best


def check_consistency(values: Mapping[str, float]) -> list[str]:
    """Cross-field rules: a hysteresis band that is a band, informational below the verdict bar, every cause able
    to reach the verdict bar."""
    problems = []
    if values["verdict_exit_score"] >= values["verdict_enter_score"]:
        problems.append(f"verdict_exit_score {values['verdict_exit_score']:g} must be below "
                        f"verdict_enter_score {values['verdict_enter_score']:g}")
    if values["info_strength"] >= values["verdict_enter_score"]:
        problems.append(f"info_strength {values['info_strength']:g} must be below "
                        f"verdict_enter_score {values['verdict_enter_score']:g}")
    enter = values["verdict_enter_score"]
    for cause in STRENGTHS:
        ceiling, keys = strength_ceiling(cause, values)
        if ceiling < enter:
            problems.append(f"verdict_enter_score {enter:g} is above the strongest finding cause {cause} can make "
                            f"({ceiling:g} = {' + '.join(keys)}): {cause} could never become the verdict; lower "
                            f"verdict_enter_score to {ceiling:g} or less, or raise {keys[0]}")
    for low, high in (("cpu_wait_share_floor", "cpu_wait_share_full"), ("cpu_psi_floor", "cpu_psi_full"),
                      ("cpu_throttled_floor", "cpu_throttled_full")):
        if values[low] >= values[high]:
            problems.append(f"{low} {values[low]:g} must be below {high} {values[high]:g}")
    return problems


def out_of_range(key: str, value: float) -> str | None:
    """Why ``value`` is no valid setting of threshold ``key``, or None when it is."""
    entry = BY_KEY[key]
    if value < entry.minimum or (entry.maximum is not None and value > entry.maximum):
        upper = f"..{entry.maximum:g}" if entry.maximum is not None else "+"
        return f"threshold {key}={value:g} is out of range {entry.minimum:g}{upper}"
    return None


# Thresholds that became settings of their own: an old config names where its value went.
MOVED: dict[str, str] = {
    "advice_interval_seconds": "the advisor's interval is the setting advisor.interval (seconds between two advice "
                               "runs of one symptomatic target; the advisor no longer runs while a target is healthy)",
}


def validate(key: str, value: float) -> float:
    """An override as the catalog accepts it: a known key, a number (float) in its range."""
    if key in MOVED:
        raise ValueError(f"threshold {key!r} is gone: {MOVED[key]}")
    if key not in BY_KEY:
        raise ValueError(f"unknown threshold {key!r} (known: {', '.join(sorted(BY_KEY))})")
    value = float(value)
    problem = out_of_range(key, value)
    if problem is not None:
        raise ValueError(problem)
    return value
