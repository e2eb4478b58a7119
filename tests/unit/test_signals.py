"""Signals from real captures, and the same signals from old-generation names."""

from __future__ import annotations

import math
import re

import pytest

from exporter.catalog.thresholds import Thresholds
from exporter.parse import parse
from exporter.pipeline import COUNTERS
from exporter.signals import compute
from exporter.window import Window
from tests.conftest import read_capture
from tests.helpers import signals_with

# vLLM <= 0.9.1 / 0.10 names for the same families (exporter/catalog/metrics.py aliases)
OLD_NAMES = (
    ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
)


def _to_old(text: str) -> str:
    for new, old in OLD_NAMES:
        text = re.sub(re.escape(new) + r"(?=[_{ ])", old, text)
    return text


def _signals(texts: list[str], times: list[float]):
    window = Window(600, COUNTERS)
    for text, t in zip(texts, times):
        window.push(parse(text, t))
    return compute(window, Thresholds())


PHASES = ["chunked", "prefix-during", "pressure-during", "pressure"]


def _phase_texts(fixtures_dir):
    return [read_capture(fixtures_dir, p) for p in PHASES], [0.0, 10.0, 20.0, 30.0]


def test_signals_from_real_captures(fixtures_dir):
    texts, times = _phase_texts(fixtures_dir)
    s = _signals(texts, times)
    assert s.kv.preemptions == 59 and math.isclose(s.kv.preemption_rate, 59 / 30)
    assert s.kv.usage_max == 1.0 and s.kv.usage == 0.0
    assert s.cache.block_size == 32 and s.cache.num_gpu_blocks == 96
    assert s.missing == ()
    # TTFT breakdown: frontend is what is left of TTFT after queue and prefill
    assert s.latency.ttft_frontend_mean is not None and s.latency.ttft_frontend_mean >= 0


def test_cpu_frontend_input_is_net_of_the_step_wait(fixtures_dir):
    texts, times = _phase_texts(fixtures_dir)
    s = _signals(texts, times)
    lat = s.latency
    assert lat.e2e_frontend_mean is not None and lat.e2e_mean and lat.step_wait_mean
    # vLLM stamps QUEUED between steps: the wait for the step under way is not the frontend's
    expected = max(0.0, lat.e2e_frontend_mean - lat.step_wait_mean) / lat.e2e_mean
    assert s.cpu.inputs["frontend_share"] == pytest.approx(expected)
    assert s.cpu.inputs["frontend_share"] < lat.e2e_frontend_share


def test_old_names_give_the_same_canonical_signals(fixtures_dir):
    texts, times = _phase_texts(fixtures_dir)
    old_texts = [_to_old(t) for t in texts]
    assert "vllm:gpu_cache_usage_perc" in old_texts[0] and "vllm:kv_cache_usage_perc" not in old_texts[0]
    assert _signals(texts, times) == _signals(old_texts, times)


def test_absent_metric_is_missing_never_zero(fixtures_dir):
    texts, times = _phase_texts(fixtures_dir)
    stripped = [re.sub(r"^vllm:num_preemptions_total.*\n", "", t, flags=re.M) for t in texts]
    s = _signals(stripped, times)
    assert s.kv.preemptions is None and s.kv.preemption_rate is None
    assert "vllm:num_preemptions_total" in s.missing


# -- issue 11: honest inputs ------------------------------------------------------------------
from exporter.signals import cpu_starvation, itl_tail, step_wait  # noqa: E402
from exporter.window import HistogramDelta  # noqa: E402

ITL_BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, float("inf"))


def _itl(counts: list[float]) -> HistogramDelta:
    cumulative, total = [], 0.0
    for c in counts:
        total += c
        cumulative.append(total)
    return HistogramDelta(ITL_BOUNDS, tuple(cumulative), sum=0.0, count=total)


def test_itl_tail_ratio_never_divides_by_a_made_up_median():
    """Most gaps under 10 ms: p50 interpolated inside the first bucket is invented, so the bound stands in."""
    hist = _itl([900, 40, 20, 10, 10, 10, 5, 5, 0, 0, 0, 0, 0])
    interpolated = hist.quantile(0.99) / hist.quantile(0.5)
    ratio, note = itl_tail(hist)
    assert ratio == pytest.approx(hist.quantile(0.99) / 0.01)
    assert ratio < interpolated and "lower bound" in note


def test_itl_tail_inside_the_first_bucket_is_no_stutter():
    ratio, note = itl_tail(_itl([1000] + [0] * 12))
    assert ratio == 1.0 and "no tail" in note


def test_itl_tail_from_resolved_quantiles_is_plain():
    hist = _itl([0, 500, 300, 100, 50, 30, 20, 0, 0, 0, 0, 0, 0])
    ratio, note = itl_tail(hist)
    assert ratio == pytest.approx(hist.quantile(0.99) / hist.quantile(0.5)) and note == ""


def _itl_with_sum(counts: list[float], mean: float) -> HistogramDelta:
    hist = _itl(counts)
    return HistogramDelta(hist.bounds, hist.cumulative, sum=mean * hist.count, count=hist.count)


def test_step_wait_is_half_a_step_on_an_engine_that_always_steps():
    """Every step 20 ms, 50 steps/s: an arrival waits half a step, 10 ms (give or take the bucket's spread)."""
    wait = step_wait(_itl_with_sum([0, 1000] + [0] * 11, 0.02), steps_per_second=50, prefill_mean=0.05)
    assert wait == pytest.approx(0.01, rel=0.1)


def test_step_wait_is_dominated_by_the_long_prefill_steps():
    """One gap in ten a 250 ms prefill step: most of the time goes to those, so an arrival waits
    E[S^2] / 2E[S] = 80 ms, twice the mean step, where half the mean would say 20 ms."""
    hist = _itl_with_sum([0, 900, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0], 0.9 * 0.0175 + 0.1 * 0.25)
    steps_per_second = 1 / hist.mean()  # fully busy
    wait = step_wait(hist, steps_per_second, prefill_mean=0.25)
    assert wait == pytest.approx(0.080, rel=0.05)


def test_step_wait_counts_a_preempted_gap_as_no_longer_than_a_prefill():
    """Gaps of seconds (a preempted request back in the queue) are not steps an arrival waits for."""
    hist = _itl_with_sum([0, 980, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 10], 0.98 * 0.0175 + 0.02 * 1.5)
    wait = step_wait(hist, steps_per_second=40, prefill_mean=0.02)
    uncapped = step_wait(hist, steps_per_second=40, prefill_mean=None)
    assert wait < 0.02 < uncapped


def test_step_wait_is_none_without_steps_or_gaps():
    assert step_wait(None, 10, 0.1) is None
    assert step_wait(_itl_with_sum([0] * 13, 0.0), 10, 0.1) is None
    assert step_wait(_itl_with_sum([0, 10] + [0] * 11, 0.02), None, 0.1) is None


def test_cpu_score_needs_a_direct_source():
    """The frontend share of e2e time or a busy API server are not starvation evidence on their own."""
    score, per_input = cpu_starvation({"frontend_share": 0.9, "api_server_cpu_cores": 1.0}, Thresholds())
    assert score is None
    assert per_input["frontend_share"] == 1.0  # still reported, for the evidence


@pytest.mark.parametrize("key, calm, starved", [
    ("psi_some_share", 0.3, 0.7), ("cfs_throttled_share", 0.03, 0.6), ("run_queue_wait_share", 0.33, 0.8),
])
def test_direct_cpu_inputs_have_a_floor(key, calm, starved):
    t = Thresholds()
    assert cpu_starvation({key: calm}, t)[0] == 0.0
    assert cpu_starvation({key: starved}, t)[0] == 1.0


def test_an_idle_engine_is_not_starved_however_long_its_threads_wait():
    """Idle vLLM on a busy host: wait share 0.7 of almost no run time (measured on a real vLLM)."""
    t = Thresholds()
    assert cpu_starvation({"run_queue_wait_share": 0.7, "busy_cores": 0.05}, t)[0] == 0.0
    assert cpu_starvation({"run_queue_wait_share": 0.7, "busy_cores": 1.2}, t)[0] == 1.0


# -- the JSON contract of the grouped signals -------------------------------------------------------
from exporter.signals import FLAT_FIELDS, FLAT_KEYS, LATENCY_FAMILIES, QUANTILES, UNPUBLISHED, Signals  # noqa: E402

TOP_LEVEL_KEYS = {"window_seconds", "scrapes", "restarts", "cache", "missing", "notes"}


def test_every_grouped_field_has_exactly_one_flat_key():
    quantile_maps = {f"{family}_quantiles" for family in LATENCY_FAMILIES}
    assert set(FLAT_FIELDS) - quantile_maps - UNPUBLISHED == set(FLAT_KEYS) - TOP_LEVEL_KEYS
    assert len(FLAT_KEYS) == len(set(FLAT_KEYS))


def test_to_dict_gives_the_flat_keys_in_order_then_the_quantiles(fixtures_dir):
    texts, times = _phase_texts(fixtures_dir)
    data = _signals(texts, times).to_dict()
    quantile_keys = [f"{f}_p{round(q * 100)}_seconds" for f in LATENCY_FAMILIES for q in QUANTILES]
    assert list(data) == [*FLAT_KEYS, *quantile_keys]
    assert isinstance(data["missing"], list) and isinstance(data["cpu_inputs"], dict)


def test_signals_with_sets_a_grouped_field_by_its_json_name():
    s = signals_with(Signals(window_seconds=60, scrapes=13), kv_cache_usage_max=0.9, engine_busy_fraction=0.5,
                     restarts=2, itl_quantiles={0.95: 0.2})
    assert s.kv.usage_max == 0.9 and s.scheduler.busy_fraction == 0.5 and s.restarts == 2
    assert s.latency.quantile("itl", 0.95) == 0.2
    assert s.to_dict()["kv_cache_usage_max"] == 0.9 and s.to_dict()["itl_p95_seconds"] == 0.2
    with pytest.raises(TypeError):
        signals_with(s, kv_usage_max=0.9)


def _sample(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf'^{re.escape(name)}{{engine="0",model_name="tiny"{labels}}} (\S+)$', text, re.M)
    assert match is not None, name
    return float(match.group(1))


def test_speculative_signals_from_a_real_ngram_run(fixtures_dir):
    """vLLM 0.32 with n-gram speculative decoding (3 draft tokens), two scrapes of a temperature-0 load."""
    start, end = read_capture(fixtures_dir, "speculative-start"), read_capture(fixtures_dir, "speculative-end")
    s = _signals([start, end], [0.0, 80.0])

    def delta(name: str, labels: str = "") -> float:
        return _sample(end, name, labels) - _sample(start, name, labels)

    drafts, draft_tokens = delta("vllm:spec_decode_num_drafts_total"), delta("vllm:spec_decode_num_draft_tokens_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    spec = s.speculative
    assert spec.enabled and spec.drafts == drafts and spec.draft_tokens == draft_tokens
    # vLLM's own definitions (vllm/v1/spec_decode/metrics.py): accepted / draft tokens; 1 + accepted / drafts.
    assert math.isclose(spec.acceptance_rate, accepted / draft_tokens)
    assert math.isclose(spec.mean_accepted_length, 1 + accepted / drafts)
    assert len(spec.acceptance_per_position) == 3
    assert math.isclose(spec.acceptance_per_position[0],
                        delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", ',position="0"') / drafts)
    # One ITL observation per output event: the tokens after each request's first, over those events.
    events = delta("vllm:inter_token_latency_seconds_count")
    first = delta("vllm:time_to_first_token_seconds_count")
    assert math.isclose(spec.tokens_per_event, (delta("vllm:generation_tokens_total") - first) / events)
    assert spec.tokens_per_event > 2 and spec.itl_scale == spec.tokens_per_event
    # The ITL quantiles are per token; the per-event gaps stay for the engine-step estimates.
    assert math.isclose(spec.event_gap_mean, delta("vllm:inter_token_latency_seconds_sum") / events)
    assert math.isclose(s.latency.itl_mean, spec.event_gap_mean / spec.tokens_per_event)
    assert math.isclose(s.scheduler.busy_fraction or 0, min(1.0, s.scheduler.steps_per_second * spec.event_gap_mean))


def test_without_speculative_decoding_the_itl_stays_per_event(fixtures_dir):
    texts, times = _phase_texts(fixtures_dir)
    s = _signals(texts, times)
    assert s.speculative.enabled is None and s.speculative.itl_scale is None
    assert vllm_names_absent(s.missing)


def vllm_names_absent(missing: tuple[str, ...]) -> bool:
    """Spec-decode families are optional: never listed as missing inputs."""
    return not any("spec_decode" in name for name in missing)


def test_kv_transfer_signals_of_a_simulated_decode_instance():
    """A disaggregated decode instance (NIXL, kv_consumer) rendered twice by the simulator: the signals follow
    vLLM's definitions from the exposition's own numbers."""
    from exporter.simulator import SCENARIOS
    from exporter.simulator.exposition import render_vllm

    engine = SCENARIOS["pd-decode-slow-transfer"].build()
    texts, times = [], [120.0, 240.0]
    for t in times:
        engine.advance_to(t)
        texts.append(render_vllm(engine, start_unix=0.0))
    s = _signals(texts, times)
    kt = s.kv_transfer
    first = re.escape('{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"')

    def delta(name: str, labels: str = "") -> float:
        pattern = rf'^{re.escape(name)}{first}{re.escape(labels)}}} (\S+)$'
        a, b = (re.search(pattern, text, re.M) for text in texts)
        assert a is not None and b is not None, name
        return float(b.group(1)) - float(a.group(1))

    assert kt.enabled and kt.consumer  # vllm:num_requests_kv_fetch_by_stage is registered
    assert kt.transfers == delta("vllm:nixl_xfer_time_seconds_count")
    assert math.isclose(kt.transfer_time_mean or 0, delta("vllm:nixl_xfer_time_seconds_sum") / (kt.transfers or 1))
    by_source = "vllm:prompt_tokens_by_source_total"
    transferred = delta(by_source, ',source="external_kv_transfer"')
    total = transferred + delta(by_source, ',source="local_compute"') + delta(by_source, ',source="local_cache_hit"')
    assert math.isclose(kt.transferred_prompt_share or 0, transferred / total) and transferred / total > 0.9
    # vLLM schedules a request once its KV is in: with no capacity wait, the queue time is all wait for KV.
    assert kt.deferred_wait_mean is not None and kt.deferred_ttft_share is not None
    assert s.scheduler.queued_fraction == 0.0 and kt.deferred_wait_mean == s.latency.queue_mean
    assert kt.deferred_ttft_share > 0.5
    assert kt.failures == 0 and kt.failure_share == 0.0
    assert "nixl" not in " ".join(s.missing)  # connector families are optional, never missing inputs


def test_a_real_kv_consumer_is_recognised_from_its_metrics(fixtures_dir):
    """vLLM 0.32 with ExampleConnector as kv_consumer (docs/disaggregation.md): it registers the fetch-stage
    gauge; with the producer's KV in the shared folder, most prompt tokens arrived by transfer."""
    text = read_capture(fixtures_dir, "kv-consumer")
    s = _signals([text], [0.0])
    assert s.kv_transfer.enabled and s.kv_transfer.consumer
    plain = _signals([read_capture(fixtures_dir, "steady")], [0.0])
    assert plain.kv_transfer.enabled is None and plain.kv_transfer.consumer is None
    assert _sample(text, "vllm:prompt_tokens_by_source_total", ',source="external_kv_transfer"') == 5376
    assert _sample(text, "vllm:external_prefix_cache_hits_total") == 5376


def _first_token_scrape(prompt_tokens: float, first_tokens: float, finished_prompt_sum: float, finished: float) -> str:
    bounds = ("0.1", "1.0", "10.0", "+Inf")
    lines = [f"vllm:prompt_tokens_total{{model_name=\"m\"}} {prompt_tokens}",
             f"vllm:time_to_first_token_seconds_count{{model_name=\"m\"}} {first_tokens}",
             f"vllm:time_to_first_token_seconds_sum{{model_name=\"m\"}} {first_tokens * 2.0}",
             f"vllm:request_prompt_tokens_count{{model_name=\"m\"}} {finished}",
             f"vllm:request_prompt_tokens_sum{{model_name=\"m\"}} {finished_prompt_sum}"]
    lines += [f"vllm:time_to_first_token_seconds_bucket{{model_name=\"m\",le=\"{b}\"}} "
              f"{first_tokens if b in ('10.0', '+Inf') else 0}" for b in bounds]
    lines += [f"vllm:request_prompt_tokens_bucket{{model_name=\"m\",le=\"{b}\"}} {finished}"
              for b in ("1000.0", "+Inf")]
    return "\n".join(lines) + "\n"


def test_recent_prompt_mean_counts_prompts_at_their_first_token_not_at_their_finish():
    # Three 4000-token prompts got their first tokens in the last step; only one 300-token request finished.
    s = _signals([_first_token_scrape(0, 0, 0, 0), _first_token_scrape(12000, 3, 300, 1)], [0.0, 5.0])
    assert s.traffic.prompt_length_mean_recent == pytest.approx(4000)
    assert s.traffic.prompt_length_mean == pytest.approx(300)  # the window's, from the finished requests


def _long_prompt_scrape(t: float, prompt_tokens: float, first_tokens: float, finished_long: float,
                        slow: float = 0.0) -> str:
    """One scrape: the prompt-token counter, first tokens (``slow`` of them over 1 s), long prompts finished so
    far."""
    lines = [f"vllm:prompt_tokens_total {prompt_tokens}"]
    for le, count in (("1.0", first_tokens - slow), ("+Inf", first_tokens)):
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{le}"}} {count}')
    lines += [f"vllm:time_to_first_token_seconds_count {first_tokens}",
              f"vllm:time_to_first_token_seconds_sum {first_tokens * 0.5}"]
    for le, count in (("1000.0", 0.0), ("+Inf", finished_long)):
        lines.append(f'vllm:request_prompt_tokens_bucket{{le="{le}"}} {count}')
    lines += [f"vllm:request_prompt_tokens_count {finished_long}",
              f"vllm:request_prompt_tokens_sum {finished_long * 28000}"]
    return "\n".join(lines) + "\n"


def test_a_long_prompt_arrives_at_its_first_token_not_at_its_finish():
    """Two 28k-token prompts get their first tokens in the steps ending at 10 and 20 s and finish, after long
    answers, at 90 and 100 s: the long prompts' age and pace come from the first tokens (vLLM counts prompt
    tokens when a prefill completes), so at 100 s they last came 80 s ago, one step apart."""
    from exporter.signals import long_prompt_arrivals

    window = Window(600, COUNTERS)
    prompt, firsts, finished = 0.0, 0.0, 0.0
    for t in range(0, 105, 5):
        if t in (10, 20):
            prompt, firsts = prompt + 28000 + 300, firsts + 2  # a long prompt and a 300-token chat in the step
        elif t > 0:
            prompt, firsts = prompt + 300, firsts + 1
        if t in (90, 100):
            finished += 1
        window.push(parse(_long_prompt_scrape(float(t), prompt, firsts, finished), float(t)))
    arrivals = long_prompt_arrivals(window, 1024)
    assert arrivals["long_prompts"] == 2  # counted when they finished
    assert arrivals["long_prompt_age_seconds"] == 80  # but they came at their first tokens
    assert arrivals["long_prompt_interval_seconds"] == 10


def test_the_newest_long_prompt_that_hurt_dates_a_burst_not_a_chat_prompt_just_over_the_mark():
    """Two 28k-token prompts came with first tokens over a 1 s objective (steps ending at 10 and 20 s); at 60 s
    a lone 1100-token chat prompt, over the 1024-token mark, met it. With the objective's threshold the burst
    last hurt 80 s ago; without it the chat prompt reads as a long prompt 40 s ago. The pace counts every long
    prompt, and with no slow one in the window the newest long one sets the age."""
    from exporter.signals import long_prompt_arrivals

    def window_of(slow_burst: bool) -> Window:
        window = Window(600, COUNTERS)
        prompt, firsts, slow = 0.0, 0.0, 0.0
        for t in range(0, 105, 5):
            if t in (10, 20):
                prompt, firsts, slow = prompt + 28000 + 300, firsts + 2, slow + (1 if slow_burst else 0)
            elif t == 60:
                prompt, firsts = prompt + 1100, firsts + 1
            elif t > 0:
                prompt, firsts = prompt + 300, firsts + 1
            window.push(parse(_long_prompt_scrape(float(t), prompt, firsts, 0.0, slow), float(t)))
        return window

    hurt = long_prompt_arrivals(window_of(True), 1024, slow_seconds=1.0)
    assert (hurt["long_prompt_age_seconds"], hurt["long_prompt_interval_seconds"]) == (80, 25)
    every = long_prompt_arrivals(window_of(True), 1024)
    assert every["long_prompt_age_seconds"] == 40
    none_hurt = long_prompt_arrivals(window_of(False), 1024, slow_seconds=1.0)
    assert none_hurt["long_prompt_age_seconds"] == 40
    # the slow first tokens beside a long prompt's: one in each long step (the step after holds none slow)
    assert hurt["long_prompt_slow_first_tokens"] == 2 and none_hurt["long_prompt_slow_first_tokens"] == 0
    assert every["long_prompt_slow_first_tokens"] is None  # no threshold, no judgement
