"""C: throughput short of demand while the engine idles. The CPU cannot feed the GPU (C1), spare capacity
(C2, information), KV pressure caps concurrency (C3)."""

from __future__ import annotations

from exporter.catalog import metrics as vllm
from exporter.diagnosis.rules.conditions import (
    cpu_starved_in_window,
    kv_evidence,
    kv_full,
    queue_ended,
    queue_sustained,
    starved_score,
)
from exporter.diagnosis.rules.effects import itl_breach, itl_breach_now, ttft_breach, ttft_breach_now
from exporter.diagnosis.rules.finding import (
    Context,
    Finding,
    abstain,
    clear,
    excess,
    fired,
    info,
    pct,
    recent_horizon,
    recovering,
    rule,
)
from exporter.signals import Signals


def _traffic(s: Signals) -> bool:
    return bool((s.traffic.requests_finished or 0) > 0 or (s.scheduler.running_mean or 0) > 0
                or (s.scheduler.waiting_max or 0) > 0)


def demand_unmet(ctx: Context) -> str | None:
    """A user-visible shortfall: a sustained queue, rejected requests or a latency objective missed."""
    s = ctx.signals
    if queue_sustained(ctx):
        return f"requests wait for capacity in {pct(s.scheduler.queued_fraction or 0)} of scrapes"
    if s.traffic.admission_rejections_per_second:
        return f"{s.traffic.admission_rejections_per_second:.2f} requests/s rejected at admission"
    for breach in (ttft_breach(ctx), itl_breach(ctx)):
        if breach.known and breach.breached:
            return breach.evidence
    return None


@rule("C1")
def rule_c1(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    score = s.cpu.starvation_score
    if score is None:
        return abstain("CPU source (targets[].cpu: pid, cgroup or match)")
    peak = starved_score(s)
    ended = score < t.cpu_starvation_score and cpu_starved_in_window(ctx)
    if score < t.cpu_starvation_score and not ended:
        return clear(f"CPU-starvation score {score:.2f}")
    if not _traffic(s):
        return clear("no traffic in the window")
    if s.gpu.utilization is not None and s.gpu.utilization >= t.gpu_util_low:
        return clear(f"GPU utilisation {pct(s.gpu.utilization)}: the GPU is fed")
    effect = demand_unmet(ctx)
    if effect is None and not ended and (now := ttft_breach_now(ctx) or itl_breach_now(ctx)) is not None:
        effect = now.evidence  # time-aligned: the first tokens or token gaps that miss now are the starved host's
    if effect is None:
        return clear(f"CPU-starvation score {score:.2f}, but every objective is met and nothing waits")
    inputs = ", ".join(f"{k} {v:.2f}" for k, v in sorted(s.cpu.inputs.items()))
    evidence = [effect, f"CPU-starvation score {score:.2f} (inputs: {inputs})"]
    if s.scheduler.steps_per_second is not None:
        evidence.append(f"engine output batches {s.scheduler.steps_per_second:.1f}/s")
    if s.gpu.utilization is not None:
        evidence.append(f"GPU utilisation {pct(s.gpu.utilization)}")
    finding = fired(t.c1_strength + t.c1_strength_weight * excess(peak if ended and peak is not None else score,
                                          t.cpu_starvation_score, 1.0), *evidence)
    if ended:
        return recovering(finding, f"the CPU starvation has ended (score {score:.2f} over {recent_horizon(ctx)}, "
                                   f"up to {peak or 0:.2f} earlier in the window): its effect is still in the window")
    return finding


@rule("C2")
def rule_c2(ctx: Context) -> Finding:
    """Spare capacity: never a symptom on its own (demand is met), shown for capacity planning."""
    s, t = ctx.signals, ctx.thresholds
    if s.scheduler.running_mean is None or s.scheduler.waiting_max is None or s.traffic.requests_finished is None:
        return abstain(vllm.NUM_REQUESTS_RUNNING, vllm.NUM_REQUESTS_WAITING)
    if s.traffic.requests_finished < t.evidence_min_requests:
        return clear("too little traffic to judge batching")
    if s.scheduler.running_mean >= t.sparse_mean_running or s.scheduler.waiting_max > 0:
        return clear(f"running mean {s.scheduler.running_mean:.1f}, waiting max {s.scheduler.waiting_max:.0f}")
    if cpu_starved_in_window(ctx):
        return clear("CPU starvation explains the idle engine (C1)")
    evidence = [f"running mean {s.scheduler.running_mean:.2f} with nothing waiting (max {s.scheduler.waiting_max:.0f})",
                f"{s.traffic.requests_per_second or 0:.2f} requests/s finished: the engine has spare capacity"]
    if s.gpu.utilization is not None:
        evidence.append(f"GPU utilisation {pct(s.gpu.utilization)}")
    return info(ctx, *evidence)


@rule("C3")
def rule_c3(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    if s.scheduler.queued_fraction is None or s.kv.usage_mean is None:
        return abstain(vllm.NUM_REQUESTS_WAITING, vllm.KV_CACHE_USAGE_PERC)
    if not queue_sustained(ctx):
        return clear(f"requests wait for capacity in only {pct(s.scheduler.queued_fraction)} of scrapes")
    if not kv_full(ctx):
        return clear(f"KV has room ({kv_evidence(s)})")
    evidence = [f"requests wait for capacity in {pct(s.scheduler.queued_fraction)} of scrapes "
                f"(max {s.scheduler.waiting_max or 0:.0f})",
                kv_evidence(s)]
    if s.scheduler.waiting_capacity is not None:
        evidence.append(f"{s.scheduler.waiting_capacity:.0f} waiting for capacity at the last scrape")
    seqs = ctx.facts.max_num_seqs
    if seqs and s.scheduler.running_mean is not None:
        if s.scheduler.running_mean >= seqs * t.batch_fill_high:
            return clear(f"running {s.scheduler.running_mean:.1f} is at max_num_seqs {seqs}: the cap, not KV, binds")
        evidence.append(f"running mean {s.scheduler.running_mean:.1f} below max_num_seqs {seqs}")
    queued = excess(s.scheduler.queued_fraction, t.waiting_sustained_fraction, 1.0)
    finding = fired(t.c3_strength + t.c3_strength_weight * queued, *evidence)
    if queue_ended(ctx):
        return recovering(finding, f"no request waited for capacity in {recent_horizon(ctx)}: the queue has drained")
    return finding
