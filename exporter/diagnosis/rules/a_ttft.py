"""A: first tokens miss their objective. Long prompts (A1), a queue (A2), the CPU (A3), the token budget (A4),
prefix-cache misses (A5), LoRA adapter slots (A6), KV transfer slow or failing (A7, A8)."""

from __future__ import annotations

from exporter.catalog import metrics as vllm
from exporter.diagnosis.rules.conditions import (
    cpu_starved_in_window,
    cpu_starving,
    kv_evidence,
    kv_full,
    offload_evidence,
    queue_building,
    queue_ended,
    queue_forming,
    queue_sustained,
    starved_score,
)
from exporter.diagnosis.rules.effects import aligned_ttft_breach, gate, slow_first_tokens, ttft_breach, ttft_missed_now
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
    seconds,
    unknown_fact,
)
from exporter.diagnosis.rules.prefix import (
    cache_claims_first_tokens,
    hit_at_all,
    low_prefix_hit,
    prefix_hit_now,
    prefix_low_now,
    ttft_breach_since_prefix_low,
)
from exporter.frozen import replace
from exporter.signals import Signals


@rule("A1")
def rule_a1(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    lat = s.latency
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if lat.ttft_prefill_share is None or lat.ttft_queue_share is None or s.traffic.prompt_length_mean is None:
        return abstain(vllm.REQUEST_PREFILL_TIME_SECONDS, vllm.REQUEST_PROMPT_TOKENS)
    # A queue is a cause of its own (A2) when requests wait for capacity in most scrapes, or in every recent one;
    # a wait in a few scrapes behind prefill-bound first tokens is the wait behind those long prefills.
    # ... unless the slow first tokens all came with long prompts' first tokens: then the wait is behind them.
    behind = behind_long_prompts(ctx)
    queue_of_its_own = (lat.ttft_queue_share >= t.ttft_queue_share and (queue_sustained(ctx) or queue_building(ctx))
                        and behind is None)
    if queue_of_its_own:
        return clear(f"TTFT waits in a queue of its own (queue {pct(lat.ttft_queue_share)} of mean TTFT): A2")
    # The long prompts arriving now count before they lift the window's mean (a burst starting).
    recent_mean = s.traffic.prompt_length_mean_recent
    # What a prompt costs to prefill is the part the prefix cache does not serve: a 1500-token prompt whose
    # 1200-token system prompt hits is a 300-token prefill, not a long one.
    computed_now = _uncached(recent_mean, prefix_hit_now(s))
    long_now = computed_now is not None and computed_now >= t.long_prompt_tokens
    # TTFT is counted at the first token, prefill and queue time when the request finishes: while long prompts
    # get their first tokens now and no queue is building, the part of TTFT neither accounts for, beyond the
    # time finished requests spent outside the engine (e2e minus queue and inference: the frontend, all read
    # at the finish), is their prefill, recorded later (with a queue building it could be the wait, too).
    unrecorded = 0.0
    if long_now and not queue_building(ctx) and lat.ttft_mean:
        outside = lat.e2e_frontend_mean if lat.e2e_frontend_mean is not None else (lat.ttft_frontend_mean or 0.0)
        unrecorded = max(0.0, (lat.ttft_frontend_mean or 0.0) - outside) / lat.ttft_mean
    # Without a queue of its own, and with KV not full (a wait for KV room is the pool's, C3/D), the wait is
    # the wait behind long prefills: at most as long as the prefills themselves (a longer wait is a backlog,
    # such as a preemption storm leaves, not these prompts' cost).
    waiting = 0.0 if kv_full(ctx) else min(lat.ttft_queue_share, lat.ttft_prefill_share + unrecorded)
    prefill_bound = lat.ttft_prefill_share + unrecorded + waiting
    if prefill_bound < t.ttft_prefill_share:
        return clear(f"TTFT is not prefill-bound (prefill {pct(lat.ttft_prefill_share)}, "
                     f"queue {pct(lat.ttft_queue_share)})")
    # A few long prompts among many short ones: when the window's slow first tokens are no more than its long
    # prompts, every one of them can be a long prompt's own (sparse long prompts, 0.1/s, miss one at a time).
    # Or, time-aligned, when they all came with a long prompt's first token or just after it (behind_long_prompts).
    slow = slow_first_tokens(ctx)
    long_count = s.traffic.long_prompts or 0.0
    # ... and "a few" means a minority of the first tokens: when most prompts pass the long mark, the count says
    # nothing about which first tokens are slow.
    few_long = behind is not None or (long_count >= 1 and slow <= long_count
                                      and 2 * long_count <= (s.traffic.first_tokens or 0.0))
    computed = _uncached(s.traffic.prompt_length_mean, s.kv.prefix_hit_ratio) or 0.0
    if computed < t.long_prompt_tokens and not long_now and not few_long:
        served = (f", {computed:.0f} computed after prefix-cache hits" if computed < s.traffic.prompt_length_mean
                  else "")
        return clear(f"prompts are not long (mean {s.traffic.prompt_length_mean:.0f} tokens{served})")
    if rule_a5(ctx).status == "fired":
        return clear("prompts share a prefix the cache misses (A5): the prefill is not intrinsic")
    if cache_claims_first_tokens(ctx):
        return clear("prompts share a prefix the cache misses, and their first tokens pay for it (F): the prefill "
                     "and the wait behind it are not intrinsic")
    finding = fired(
        t.a1_strength + t.a1_strength_weight * excess(breach.ratio, 1, t.burn_rate_full),
        breach.evidence,
        f"prefill is {pct(lat.ttft_prefill_share)} of mean TTFT {seconds(lat.ttft_mean or 0)}"
        + (f", the wait behind long prefills {pct(waiting)} (no queue of its own)" if waiting >= 0.005 else
           f", queue {pct(lat.ttft_queue_share)}")
        + (f", first tokens of long prompts whose prefill time is recorded when they finish {pct(unrecorded)}"
           if unrecorded >= 0.005 else ""),
        f"mean prompt {s.traffic.prompt_length_mean:.0f} tokens (p95 {s.traffic.prompt_length_p95 or 0:.0f})"
        + (f", {recent_mean:.0f} over {recent_horizon(ctx)}" if recent_mean is not None else "")
        + (f"; {behind}" if behind is not None else
           f"; {long_count:.0f} long prompts in the window, {slow:.0f} first tokens over the objective" if few_long
           else ""),
    )
    if (quiet := long_prompts_ended(ctx)) is not None:
        return recovering(finding, f"no long prompt for {quiet}: the long prompts have stopped, their first tokens "
                                   "are still in the window")
    return finding


def _uncached(prompt_mean: float | None, hit_ratio: float | None) -> float | None:
    """The mean prompt less the share the prefix cache serves (the whole prompt when the ratio is unknown)."""
    if prompt_mean is None:
        return None
    return prompt_mean * (1.0 - min(1.0, max(0.0, hit_ratio))) if hit_ratio is not None else prompt_mean


def long_prompts_ended(ctx: Context) -> str | None:
    """How long no long prompt has come, when that is several of their mean intervals in the window (and
    more than the recent horizon): the burst has ended. None while they still come, or with too few to
    know their pace (one long prompt: a burst starting looks the same as one ending)."""
    s, t = ctx.signals, ctx.thresholds
    age, interval = s.traffic.long_prompt_age_seconds, s.traffic.long_prompt_interval_seconds
    if age is None or interval is None or s.window_seconds <= 0:
        return None
    horizon = s.window_seconds / max(s.scrapes - 1, 1) * t.recent_evaluations
    if age <= max(t.sparse_cause_quiet_intervals * interval, horizon):
        return None
    return f"{age:.0f} s ({age / max(interval, 1e-9):.1f} of their mean interval in the window, {interval:.0f} s)"


def behind_long_prompts(ctx: Context) -> str | None:
    """Time-aligned: every slow first token of the window came in the step of a long prompt's first token or the
    step after (the long prompt's own, and the requests that waited behind its prefill), and long prompts are a
    minority of the first tokens. Requests that wait then wait for those prefills, not for capacity (A1, not
    A2). None otherwise."""
    s = ctx.signals
    beside, slow = s.traffic.long_prompt_slow_first_tokens or 0.0, slow_first_tokens(ctx)
    if beside < 1 or slow > beside + 0.5 or 2 * (s.traffic.long_prompts or 0.0) > (s.traffic.first_tokens or 0.0):
        return None
    return f"all {slow:.0f} first tokens over the objective came with a long prompt's first token or just after it"


@rule("A2")
def rule_a2(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if s.latency.ttft_queue_share is None or s.scheduler.queued_fraction is None:
        return abstain(vllm.REQUEST_QUEUE_TIME_SECONDS, vllm.NUM_REQUESTS_WAITING)
    # A queue that has drained still owns the first tokens it delayed while the window holds them, if it was
    # sustained at some time the window holds (not a few scrapes beside waits vLLM counts as deferred) and the
    # window holds no preemptions (then the queue may have been KV's: C3/D judge it).
    was_sustained = s.scheduler.queued_recent_peak is not None and s.scheduler.queued_recent_peak >= 1.0
    drained = was_sustained and queue_ended(ctx) and not s.kv.preemptions
    share = s.latency.ttft_queue_share
    # Time-aligned: while a queue builds now, the first tokens of the recent steps are the ones it delays; the
    # window's share catches up only as they fill it.
    if queue_building(ctx) and s.latency.ttft_queue_share_recent is not None:
        share = max(share, s.latency.ttft_queue_share_recent)
    # vLLM records a request's queue time when it finishes, its first token when it comes: at a queue's onset
    # the slow first tokens are in before their queue times. A queue in every recent scrape beside first tokens
    # that miss now, with prefill not the bulk of TTFT and the CPU not starved, is the onset of this cause.
    # A queue in most recent scrapes counts too when the first tokens of those steps spent its share waiting
    # (their own queue times, time-aligned): a surge's first scrapes, before every one of them holds a queue.
    forming = queue_building(ctx) or queue_forming(ctx)
    onset = (forming and ttft_missed_now(ctx) and not cpu_starving(ctx)
             and (s.latency.ttft_prefill_share or 0.0) < t.ttft_prefill_share)
    if onset and share < t.ttft_queue_share:
        share = t.ttft_queue_share
    if share < t.ttft_queue_share or not (queue_sustained(ctx) or queue_building(ctx) or onset or drained):
        return clear(f"queue is {pct(share)} of TTFT, requests wait for capacity in "
                     f"{pct(s.scheduler.queued_fraction)} of scrapes")
    if kv_full(ctx):
        return clear(f"the queue is explained by KV pressure ({kv_evidence(s)}): see C3/D")
    if (behind := behind_long_prompts(ctx)) is not None:
        return clear(f"{behind}: requests wait behind long prefills (A1)")
    evidence = [
        breach.evidence,
        f"queue is {pct(s.latency.ttft_queue_share)} of mean TTFT "
        f"({seconds(s.latency.queue_mean or 0)} of {seconds(s.latency.ttft_mean or 0)})"
        + (f"; requests wait in every one of {recent_horizon(ctx)} while their first tokens miss the objective "
           "(their queue times are recorded when they finish)" if onset else ""),
        f"requests wait for capacity in {pct(s.scheduler.queued_fraction)} of scrapes "
        f"(mean {s.scheduler.waiting_mean or 0:.1f}) "
        f"while {kv_evidence(s)}",
    ]
    if ctx.facts.max_num_seqs and s.scheduler.running_mean is not None:
        evidence.append(f"running mean {s.scheduler.running_mean:.1f} of max_num_seqs {ctx.facts.max_num_seqs}")
    if s.scheduler.waiting_deferred:
        evidence.append(f"{s.scheduler.waiting_deferred:.0f} more wait deferred (LoRA slot, KV transfer), "
                        "not counted here")
    finding = fired(t.a2_strength + t.a2_strength_weight * excess(share, t.ttft_queue_share, 0.9), *evidence)
    if queue_ended(ctx):
        return recovering(finding, f"no request waited for capacity in {recent_horizon(ctx)}: the queue has drained, "
                                   "its first tokens are still in the window")
    return finding


@rule("A3")
def rule_a3(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    breach = aligned_ttft_breach(ctx, cpu_starving(ctx))
    if (early := gate(breach)) is not None:
        return early
    score = s.cpu.starvation_score
    # TTFT and queue/prefill are observed on different populations (first token vs finish);
    # the e2e-based estimate is same-population. Both must agree before blaming the frontend.
    # Both also hold the wait for the step under way (vLLM stamps QUEUED between steps): long
    # prefill steps are the budget's doing, not the tokenizer's, so that estimated wait comes off.
    share = None
    wait = s.latency.step_wait_mean or 0.0
    if s.latency.ttft_frontend_mean is not None and s.latency.e2e_frontend_mean is not None and s.latency.ttft_mean:
        outside = min(s.latency.ttft_frontend_mean, s.latency.e2e_frontend_mean)
        share = max(0.0, outside - wait) / s.latency.ttft_mean
    frontend = share is not None and share >= t.frontend_share
    if score is None and not frontend:
        return abstain("CPU source (targets[].cpu: pid, cgroup or match)")
    starving = cpu_starving(ctx)
    ended = not starving and cpu_starved_in_window(ctx)
    net = f", net of {seconds(wait)} waiting for the step under way" if wait else ""
    if not (starving or frontend or ended):
        return clear(f"CPU-starvation score {score:.2f}" if score is not None else "",
                     f"time outside the engine {pct(share or 0)} of TTFT{net}")
    evidence = [breach.evidence]
    if frontend:
        evidence.append(f"{pct(share or 0)} of mean TTFT ({seconds((share or 0) * (s.latency.ttft_mean or 0))}) "
                        f"is spent outside the engine (tokenization, templates, IPC){net}")
    if starving:
        evidence.append(f"CPU-starvation score {score:.2f} from {', '.join(sorted(s.cpu.inputs))}")
    peak = starved_score(s) or 0.0
    degree = max(excess(peak if ended else score or 0, t.cpu_starvation_score, 1.0),
                 excess(share or 0, t.frontend_share, 0.8))
    finding = fired(t.a3_strength + t.a3_strength_weight * degree, *evidence)
    if ended:
        return recovering(finding, f"the CPU starvation has ended (score {score or 0:.2f} over {recent_horizon(ctx)}, "
                                   f"up to {peak:.2f} earlier in the window): its effect is still in the window")
    return finding


@rule("A4")
def rule_a4(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    budget = ctx.facts.max_num_batched_tokens
    if budget is None:
        return abstain(unknown_fact("max_num_batched_tokens"))
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if s.traffic.prompt_length_mean is None:
        return abstain(vllm.REQUEST_PROMPT_TOKENS)
    chunks = s.traffic.prompt_length_mean / budget
    if chunks < t.budget_chunks_per_prompt:
        return clear(f"mean prompt fits in {chunks:.1f} chunks of {budget}")
    if kv_full(ctx):
        return clear(f"KV is full ({kv_evidence(s)}): the budget is not the limit")
    if cpu_starved_in_window(ctx):
        return clear(f"CPU starvation slows every step (score {s.cpu.starvation_score:.2f}, up to "
                     f"{starved_score(s) or 0:.2f} in the window): see A3")
    engine_share = (s.latency.ttft_prefill_share or 0) + (s.latency.ttft_queue_share or 0)
    return fired(
        t.a4_strength
        + t.a4_strength_weight * excess(chunks, t.budget_chunks_per_prompt, 4 * t.budget_chunks_per_prompt),
        breach.evidence,
        f"mean prompt {s.traffic.prompt_length_mean:.0f} tokens needs {chunks:.1f} chunks of "
        f"max_num_batched_tokens {budget}",
        f"prefill + queue are {pct(min(engine_share, 1.0))} of mean TTFT",
    )


@rule("A5")
def rule_a5(ctx: Context) -> Finding:
    s, t = ctx.signals, ctx.thresholds
    low = low_prefix_hit(ctx)
    breach = aligned_ttft_breach(ctx, prefix_low_now(low), ttft_breach_since_prefix_low(ctx))
    if (early := gate(breach)) is not None:
        return early
    if low.status != "fired":
        return low
    if not hit_at_all(low, s):
        # Nothing is shared at all: the prompts may be unique by design, and then the prefill
        # cost is intrinsic (A1), not a cache failure.
        return clear("no prompt shares a cached block: nothing to blame on the cache")
    if s.latency.ttft_prefill_share is None or s.latency.ttft_prefill_share < t.ttft_prefill_share:
        return clear("TTFT is not prefill-bound")
    return replace(low, evidence=(breach.evidence, *low.evidence,
                                  f"prefill is {pct(s.latency.ttft_prefill_share)} of mean TTFT"))


@rule("A6")
def rule_a6(ctx: Context) -> Finding:
    """Requests wait for a LoRA adapter slot: more adapters in demand than --max-loras while KV has room.

    vLLM's V1 scheduler skips a waiting request whose adapter would make the batch hold more than
    max_loras adapters (it stays waiting, counted by reason ``deferred``) and schedules the requests behind
    it: the wait is queue time, not a capacity wait, so A2 does not count it.
    """
    s, t = ctx.signals, ctx.thresholds
    lora = s.lora
    if not lora.enabled:
        return clear(f"LoRA is off (no {vllm.LORA_REQUESTS_INFO} on /metrics)")
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if lora.max_adapters is None or lora.adapters_seen is None:
        return abstain(f"{vllm.LORA_REQUESTS_INFO} (its max_lora label)")
    if s.scheduler.deferred_fraction is None or s.latency.ttft_queue_share is None:
        return abstain(vllm.NUM_REQUESTS_WAITING_BY_REASON, vllm.REQUEST_QUEUE_TIME_SECONDS)
    slots = (f"{lora.adapters_seen:.0f} adapters had requests in flight in the window for "
             f"{lora.max_adapters:.0f} adapter slot(s) (max_lora, --max-loras)")
    if lora.adapters_seen <= lora.max_adapters and not lora.waiting_adapters:
        return clear(slots + ": every adapter fits")
    deferred = s.scheduler.deferred_fraction
    # Under its share a deferred wait still counts when it is the only wait seen: the scrapes (a handful at slow
    # intervals) sample a gauge that empties between them, and with no scrape ever seeing a wait for capacity the
    # queue time checked below is the adapters' (A2 has no wait to claim it; A0 would say unknown).
    only_wait_seen = deferred > 0 and s.scheduler.queued_fraction == 0.0
    if deferred < t.lora_deferred_fraction and not only_wait_seen:
        return clear(f"{slots}, but requests wait deferred in only {pct(deferred)} of scrapes")
    if kv_full(ctx):
        return clear(f"the wait is KV's ({kv_evidence(s)}): see C3/D")
    if s.latency.ttft_queue_share < t.ttft_queue_share:
        return clear(f"{slots}, but the queue is only {pct(s.latency.ttft_queue_share)} of mean TTFT")
    evidence = [
        breach.evidence,
        slots,
        f"requests wait deferred (not for capacity) in {pct(deferred)} of scrapes "
        f"({vllm.NUM_REQUESTS_WAITING_BY_REASON}, reason deferred) while {kv_evidence(s)}"
        + ("" if deferred >= t.lora_deferred_fraction else ", and for capacity in none"),
        f"queue is {pct(s.latency.ttft_queue_share)} of mean TTFT "
        f"({seconds(s.latency.queue_mean or 0)} of {seconds(s.latency.ttft_mean or 0)})",
    ]
    if lora.slots_full_fraction is not None:
        evidence.append(f"every adapter slot in use in {pct(lora.slots_full_fraction)} of scrapes")
    if ctx.facts.max_lora_rank:
        evidence.append(f"max_lora_rank {ctx.facts.max_lora_rank}: the memory each slot reserves")
    return fired(t.a6_strength + t.a6_strength_weight * excess(deferred, t.lora_deferred_fraction, 1.0), *evidence)


def loads_kv(ctx: Context) -> str | None:
    """How the diagnosis knows this instance loads prompt KV through a connector; None when it does not."""
    kt, facts = ctx.signals.kv_transfer, ctx.facts
    connector = f" ({facts.kv_connector})" if facts.kv_connector else ""
    if facts.kv_role in ("kv_consumer", "kv_both"):
        return f"kv_role {facts.kv_role}{connector}"
    if kt.consumer:
        return f"a KV consumer ({vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE} is registered){connector}"
    if kt.transferred_prompt_share:
        return f"{pct(kt.transferred_prompt_share)} of prompt tokens arrive by KV transfer{connector}"
    return None


def transfer_evidence(s: Signals) -> list[str]:
    """The connector's own numbers: load time, size and throughput, the share of prompts that arrived by transfer."""
    kt = s.kv_transfer
    out = []
    if kt.transfers and kt.transfer_time_mean is not None:
        p95 = f", p95 {seconds(kt.transfer_time_p95)}" if kt.transfer_time_p95 is not None else ""
        size = f" of {kt.transfer_bytes_mean / 1e6:.0f} MB" if kt.transfer_bytes_mean else ""
        rate = (f", {kt.transfer_bytes_per_second / 1e9:.2f} GB/s moved" if kt.transfer_bytes_per_second
                else "")
        out.append(f"{kt.transfers:.0f} KV transfers{size}: mean {seconds(kt.transfer_time_mean)}{p95}{rate} "
                   f"({vllm.NIXL_XFER_TIME_SECONDS})")
    if kt.fetch_in_progress_mean is not None:
        out.append(f"{kt.fetch_in_progress_mean:.1f} loads in progress on average")
    if kt.transferred_prompt_share is not None:
        out.append(f"{pct(kt.transferred_prompt_share)} of prompt tokens arrived by transfer")
    if kt.offload:
        out.append(offload_evidence(s))
    return out


@rule("A7")
def rule_a7(ctx: Context) -> Finding:
    """KV transfer slow: the first-token objective is missed and the wait for KV explains it."""
    s, t = ctx.signals, ctx.thresholds
    kt = s.kv_transfer
    role = loads_kv(ctx)
    if role is None:
        return clear("no KV connector loads prompt KV on this instance")
    breach = ttft_breach(ctx)
    if (early := gate(breach)) is not None:
        return early
    if kt.deferred_ttft_share is None or kt.deferred_wait_mean is None:
        return abstain(vllm.NUM_REQUESTS_WAITING_BY_REASON, vllm.TIME_TO_FIRST_TOKEN_SECONDS)
    wait = (f"requests wait deferred for their KV {seconds(kt.deferred_wait_mean)} on average = "
            f"{pct(kt.deferred_ttft_share)} of mean TTFT {seconds(s.latency.ttft_mean or 0)}")
    if kt.deferred_ttft_share < t.kv_transfer_ttft_share:
        return clear(f"{wait}: the transfer does not explain the first tokens ({role})")
    evidence = [breach.evidence, f"{wait} ({role}; the queue time, split by the scrapes' deferred and capacity "
                                 "counts: vLLM schedules a request once its KV is in)",
                *transfer_evidence(s)]
    if s.scheduler.queued_fraction is not None:
        evidence.append(f"requests wait for capacity in only {pct(s.scheduler.queued_fraction)} of scrapes: "
                        "the wait is for KV, not for the scheduler")
    return fired(t.a7_strength + t.a7_strength_weight * excess(kt.deferred_ttft_share, t.kv_transfer_ttft_share, 0.9),
                 *evidence)


@rule("A8")
def rule_a8(ctx: Context) -> Finding:
    """KV transfer failing: a share of the connector's loads fail; their requests error or recompute."""
    s, t = ctx.signals, ctx.thresholds
    kt = s.kv_transfer
    if kt.failures is None:
        if loads_kv(ctx) is not None and kt.transfers is None:
            return clear("the connector exports no failure counter (only NIXL's is read)")
        return clear("no KV connector failure counter on /metrics")
    total = kt.failures + (kt.transfers or 0)
    loads = f"{kt.failures:.0f} of {total:.0f} KV loads failed in the window"
    if kt.failures < t.kv_transfer_failures_min or (kt.failure_share or 0) < t.kv_transfer_failure_share:
        return clear(loads)
    policy = ctx.facts.kv_load_failure_policy
    evidence = [f"{loads} ({pct(kt.failure_share or 0)}, mark {pct(t.kv_transfer_failure_share)}; "
                f"{vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL})"]
    if policy:
        evidence.append(f"kv_load_failure_policy {policy}: "
                        + ("each failure ends its request with an error" if policy == "fail"
                           else "each failure prefills its prompt here"))
    if kt.kv_expired:
        evidence.append(f"{kt.kv_expired:.0f} requests' KV expired before a decode instance read it")
    breach = ttft_breach(ctx)
    effects = []
    if kt.errored_requests:
        effects.append(f"{kt.errored_requests:.0f} requests finished with an error in the window")
    if breach.known and breach.breached:
        effects.append(breach.evidence)
    if not effects:
        return info(ctx, *evidence, "no request errored and first tokens meet their objective")
    return fired(t.a8_strength + t.a8_strength_weight * excess(kt.failure_share or 0, t.kv_transfer_failure_share,
                                     10 * t.kv_transfer_failure_share), *effects, *evidence)
