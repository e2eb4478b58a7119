"""The engine's own witnesses: what vLLM says about its KV blocks, its steps and its frontend, over the window.

Each is a direct reading of a cause the rules otherwise infer from shares and ratios; the diagnosis uses them
only to corroborate or redirect a finding whose effect is already shown (exporter/diagnosis/witnesses.py),
never to raise a symptom of their own.

* Block residency (``--kv-cache-metrics``, sampled): vLLM observes a sampled block when it is evicted (its slot
  handed to a new block): its lifetime (allocation to eviction), its idle time (last prefix-cache hit, or its
  allocation, to eviction) and the gaps between its hits. A block never hit has idle time equal to its
  lifetime, and no gap. So ``block_hit_life_share``, the share of the evicted blocks' lives that came before
  their last hit, is 0 when no evicted block was ever reused, and ``block_reuse_gaps_per_eviction`` counts the
  reuses that came back while the block lived.
* Steps (``vllm:iteration_tokens_total``): per engine output batch, the prompt tokens computed (counted in the
  step a request's prefill completes; prefix-cache hits excluded since 0.23) plus the tokens generated. Its
  sum over its count is the work of an average step, whichever step carried it; less the generated tokens per
  step, the prompt tokens an average step carried (``prefill_tokens_per_step``): the diagnosis compares both
  with the token budget (max_num_batched_tokens, an engine fact).
* Rendering (``vllm:request_render_duration_seconds``, 0.34+): the API server's chat template and tokenisation
  time per request, part of the time a request spends outside the engine before its first token.
"""

from __future__ import annotations

from typing import Any

from exporter.catalog import metrics as vllm
from exporter.signals.common import _histogram, _increase, _ratio
from exporter.signals.model import Witnesses
from exporter.window import Window


def blocks(window: Window) -> dict[str, float | None]:
    """Block residency of the blocks evicted in the window; nothing without ``--kv-cache-metrics``."""
    lifetime = _histogram(window, vllm.KV_BLOCK_LIFETIME_SECONDS)
    if lifetime is None:
        return {}
    idle = _histogram(window, vllm.KV_BLOCK_IDLE_BEFORE_EVICT_SECONDS)
    gaps = _histogram(window, vllm.KV_BLOCK_REUSE_GAP_SECONDS)
    out: dict[str, float | None] = {"block_evictions": lifetime.count}
    if lifetime.count <= 0:
        return out
    out.update(block_lifetime_mean=lifetime.mean(), block_lifetime_p50=lifetime.quantile(0.5))
    if idle is not None and idle.count > 0:
        out["block_idle_mean"] = idle.mean()
        if lifetime.sum > 0:
            # Idle time is measured from the last hit, lifetime from the allocation: what lies between is the
            # part of the blocks' lives before their last reuse (0 when none was hit after its allocation).
            out["block_hit_life_share"] = max(0.0, min(1.0, 1.0 - idle.sum / lifetime.sum))
    if gaps is not None:
        out.update(block_reuse_gaps=gaps.count, block_reuse_gaps_per_eviction=gaps.count / lifetime.count)
        if gaps.count > 0:
            out.update(block_reuse_gap_mean=gaps.mean(), block_reuse_gap_p90=gaps.quantile(0.9))
    return out


def steps(window: Window) -> dict[str, Any]:
    """The average step's prompt and generated tokens (computed work, as vLLM counts it per output batch)."""
    hist = _histogram(window, vllm.ITERATION_TOKENS_TOTAL)
    if hist is None or hist.count <= 0:
        return {}
    generated = _increase(window, vllm.GENERATION_TOKENS_TOTAL)
    out: dict[str, Any] = {"steps": hist.count, "step_histogram": hist}
    if generated is not None:
        per_step = generated / hist.count
        out.update(generated_tokens_per_step=per_step, prefill_tokens_per_step=max(0.0, hist.sum / hist.count
                                                                                   - per_step))
    return out


def render(window: Window) -> dict[str, float | None]:
    hist = _histogram(window, vllm.REQUEST_RENDER_DURATION_SECONDS)
    if hist is None or hist.count <= 0:
        return {}
    return {"render_mean": hist.mean(), "render_requests": hist.count}


def compute(window: Window) -> Witnesses:
    return Witnesses(**{**blocks(window), **steps(window), **render(window)})


def steps_over(w: Witnesses, tokens: float) -> float | None:
    """Steps of the window that carried more than ``tokens`` (None without the step histogram). Over the
    budget, each is the completion of a prefill that the budget spread over several steps."""
    hist = w.step_histogram
    if hist is None:
        return None
    share = hist.share_above(tokens)
    return share * hist.count if share is not None else None


def render_share(w: Witnesses, ttft_mean: float | None) -> float | None:
    """The mean render time as a share of the mean TTFT (both per request)."""
    return _ratio(w.render_mean, ttft_mean)
