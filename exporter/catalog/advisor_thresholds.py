"""The what-if advisor's thresholds (exporter/advisor): declared here, fields of :class:`Thresholds`, which extends
:class:`AdvisorThresholds` (one catalog: ``exporter.catalog.thresholds`` lists, validates and re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.catalog.threshold_entry import threshold


@dataclass(frozen=True, slots=True)
class AdvisorThresholds:
    """The advisor's fields of :class:`~exporter.catalog.thresholds.Thresholds`."""

    advice_min_requests: float = threshold(20, "requests",
        "Finished requests the window must hold before the advisor calibrates its engine model: fewer "
        "give length distributions and latency tails too noisy to reproduce.", 1)
    advice_max_calibration_error: float = threshold(0.5, "ratio",
        "Largest relative error on TTFT p95, ITL p95 and throughput with which the calibrated model may "
        "still reproduce the window; above it the advisor says so and predicts nothing. Predictions are "
        "scaled by observed / simulated, so a residual error below it is corrected, not carried over.", 0)
    advice_calibration_confidence: float = threshold(0.95, "ratio",
        "Confidence of the band within which the calibrated model's TTFT and ITL p95 count as reproducing the "
        "window's whatever their relative error: a p95 read from n observations could have been read at "
        "ranks 0.95 -/+ z sqrt(0.05 x 0.95 / n) by chance (binomial), and on coarse buckets that moves it by "
        "half; its preemption rate, within the Poisson band of the window's count (0 in T s: up to 3.7 / T). "
        "Also the band within which the arrivals' variance / mean per scrape interval reads as Poisson "
        "(exporter/advisor/arrival.py). 0 turns the bands off.", 0, 0.999)
    advice_preemption_floor: float = threshold(0.05, "1/s",
        "Preemption rate below which observed and predicted rates count as the same (none to speak of): "
        "relative errors between two near-zero rates mean nothing.", 0)
    advice_closed_occupancy_cv: float = threshold(0.25, "ratio",
        "Coefficient of variation of running + waiting across the window's scrapes below which the "
        "traffic counts as closed (a fixed set of clients), with at least advice_closed_min_in_flight "
        "requests in flight.", 0)
    advice_closed_min_in_flight: float = threshold(1.5, "requests",
        "Mean running + waiting below which traffic is never read as closed: one client or less in "
        "flight has no steady set of clients to tell apart from sparse open arrivals.", 0)
    advice_open_occupancy_cv: float = threshold(0.5, "ratio",
        "Coefficient of variation of running + waiting above which traffic counts as open; between the "
        "two the advisor predicts both and shows the difference.", 0)
    advice_worse_share: float = threshold(0.05, "ratio",
        "Relative change by which a predicted metric must get worse to be listed under what gets worse.", 0)
    advice_cpu_seconds: float = threshold(20, "seconds",
        "CPU time the sidecar's advisor worker may spend per target and evaluation; candidates beyond it "
        "are left out (the CLI has no budget).", 1)
    advice_compute_efficiency: float = threshold(0.3, "ratio",
        "Achieved / datasheet FLOPs the advisor assumes for a compute-bound (prefill-heavy) step, which "
        "floors the step time of a larger token budget. Needs engine.gpu and engine.model_weight_bytes.",
        0.01, 1)
    advice_decode_token_weight: float = threshold(4, "ratio",
        "What one decoding sequence adds to a step, in prefill tokens. A prefill token is one row of a "
        "batched matrix product; a decode also reads its whole context from the KV cache and is sampled, "
        "detokenised and streamed on its own, so it costs several times more (this CPU build: about 6; "
        "a GPU at small batch: about 2-3). The prior: where the window's own steps identify the ratio "
        "(exporter/advisor/stepcost.py: the token gaps against the tokens per step) the fit takes the "
        "window's reading instead; most windows' batch size varies too little to tell.",
        1, 20)
    advice_decode_weight_sigma: float = threshold(0.6, "ratio",
        "Uncertainty of advice_decode_token_weight where the window does not identify it, in log terms (one "
        "standard deviation): 0.6 puts 2-9 within the 80 % band, the range from a GPU at small batch to the "
        "CPU build. The prediction is re-run at the weight times exp(-/+ this), each refitted to the window, "
        "and their spread is the parameter part of the interval.", 0, 2)
    advice_cached_token_weight: float = threshold(0, "ratio", "A prefix-cache hit's cost to the step admitting it, in "
        "prefill tokens; one window does not identify it, the interval takes its whole range (cached.py).", 0, 1)
    advice_step_curvature: float = threshold(0, "ratio",
        "How much dearer a prefill token is in a step of 1,024 prefill tokens than in a small step (a share of its "
        "cost): 0 is a step cost linear in its tokens. Where the window's steps identify it (exporter/advisor/"
        "curvature.py) the reading is used; else this, and the interval takes the whole range (0-1: the CPU "
        "build's tiny model read about 0.9 between one load's windows at two budgets; other engines read none).", 0, 1)
    advice_step_cost_scale_max: float = threshold(1.25, "ratio",
        "Where no decode weight reproduces the window, the step cost scaled by up to this factor either way is "
        "tried: a queue near saturation grows as 1 / (1 - utilisation), so a cost a few per cent off still "
        "fits the ITL and prefill means and misses a queued TTFT threefold.", 1, 2)
    advice_interval_coverage: float = threshold(0.8, "ratio",
        "Share of real outcomes the advisor's prediction interval is meant to cover: the interval is the "
        "prediction times exp(-/+ z sigma), sigma the root sum of squares of the step-cost parameter's spread, "
        "the calibration's residual error, the window's sampling error, the run-to-run noise and the model's "
        "own error below.", 0.5, 0.99)
    advice_noise_ttft_p95: float = threshold(0.19, "ratio",
        "Run-to-run noise of one window's TTFT p95, log terms: the same engine, configuration and traffic "
        "captured twice reads this far apart (RMS over the 74 real validation pairs' two base captures, "
        "vLLM's CPU build on a shared 2-core machine). Part of every prediction interval.", 0, 2)
    advice_noise_itl_p95: float = threshold(0.18, "ratio",
        "Run-to-run noise of one window's ITL p95, log terms (measured as advice_noise_ttft_p95).", 0, 2)
    advice_noise_preemption: float = threshold(0.09, "ratio",
        "Run-to-run noise of one window's preemption rate, log terms of the rate plus "
        "advice_preemption_floor (measured as advice_noise_ttft_p95).", 0, 2)
    advice_model_error_ttft_p95: float = threshold(0.54, "ratio",
        "The model's own error on a TTFT p95 that moved, log terms: the 80th percentile of the pooled validation "
        "record's misses on moved cells over z(0.8), less advice_noise_ttft_p95 (root of the difference of squares).",
        0, 3)
    advice_model_error_itl_p95: float = threshold(0.69, "ratio",
        "The model's own error on an ITL p95 that moved, log terms (measured as advice_model_error_ttft_p95).", 0, 3)
    advice_model_error_preemption: float = threshold(0.61, "ratio",
        "The model's own error on a preemption rate that moved (measured as advice_model_error_ttft_p95).", 0, 3)
    advice_simulated_seconds: float = threshold(90, "seconds",
        "Longest stretch of traffic the advisor's engine model replays per seed after its warm-up: the "
        "window's traffic (its rates and lengths) is replayed for at most this long, not for the whole of a "
        "longer window. Three seeds pooled hold as many requests as a window of three times this; the "
        "model's CPU time grows in proportion, and a TTFT tail built by a slow queue needs the length "
        "(small-token-budget at 180 s: TTFT p95 calibration error -16 % replayed whole, -33 % at 90 s, -49 % "
        "at 60 s).", 10)
