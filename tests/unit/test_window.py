"""Window arithmetic: resets, restarts, histogram merging and quantiles."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.parse import parse
from exporter.pipeline import COUNTERS
from exporter.signals.core import long_prompt_arrivals, long_prompt_steps
from exporter.snapshot import HistogramSample, LabelIs, Snapshot, label_value
from exporter.window import HistogramDelta, Window


def _counter(t: float, value: float, start: float = 1000.0) -> str:
    return f"process_start_time_seconds {start}\nvllm:num_preemptions_total{{engine=\"0\"}} {value}\n"


def test_counter_reset_between_scrapes_is_not_negative():
    window = Window(600, COUNTERS)
    for t, value in ((0, 100), (10, 120), (20, 5), (30, 15)):
        window.push(parse(_counter(t, value), t))
    # 20 before the reset, then the counter restarted from 0: 5, then 10 more
    assert window.increase("vllm:num_preemptions_total") == 35
    assert window.restarts == 1


def test_restart_detected_by_start_time_even_without_a_decrease():
    window = Window(600, COUNTERS)
    window.push(parse(_counter(0, 10, start=1000), 0))
    window.push(parse(_counter(10, 12, start=1005), 10))
    assert window.increase("vllm:num_preemptions_total") == 12
    assert window.restarts == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), min_size=2, max_size=20))
def test_arbitrary_counter_sequences_never_give_negative_rates(values):
    window = Window(10_000, COUNTERS)
    for i, value in enumerate(values):
        window.push(parse(_counter(i, value), float(i)))
    rate = window.rate("vllm:num_preemptions_total")
    assert rate is not None and rate >= 0 and math.isfinite(rate)


def _hist(engine: str, buckets: dict[str, float], total: float) -> str:
    lines = [f'vllm:time_to_first_token_seconds_bucket{{engine="{engine}",le="{le}"}} {v}' for le, v in buckets.items()]
    count = list(buckets.values())[-1]
    lines.append(f'vllm:time_to_first_token_seconds_count{{engine="{engine}"}} {count}')
    lines.append(f'vllm:time_to_first_token_seconds_sum{{engine="{engine}"}} {total}')
    return "\n".join(lines) + "\n"


def test_quantile_merged_across_two_engines_matches_hand_computation():
    zero = {"0.1": 0, "0.5": 0, "1.0": 0, "+Inf": 0}
    window = Window(600, COUNTERS)
    window.push(parse(_hist("0", zero, 0) + _hist("1", zero, 0), 0))
    # engine 0: 10 obs <= 0.1, 10 in (0.1, 0.5]; engine 1: 0 <= 0.1, 20 in (0.5, 1.0]
    e0 = {"0.1": 10, "0.5": 20, "1.0": 20, "+Inf": 20}
    e1 = {"0.1": 0, "0.5": 0, "1.0": 20, "+Inf": 20}
    window.push(parse(_hist("0", e0, 4.0) + _hist("1", e1, 15.0), 10))
    merged = window.histogram("vllm:time_to_first_token_seconds")
    assert merged is not None
    assert merged.cumulative == (10, 20, 40, 40) and merged.count == 40
    # p50: rank 20 -> exactly the 0.5 bound; p90: rank 36 -> 0.5 + 0.5 * (36 - 20) / 20 = 0.9
    assert math.isclose(merged.quantile(0.5), 0.5)
    assert math.isclose(merged.quantile(0.9), 0.9)
    assert math.isclose(merged.mean(), 19.0 / 40)


def test_histogram_since_takes_the_steps_from_a_time_and_the_ones_before_it_when_asked():
    window = Window(600, COUNTERS)
    buckets = {"0.1": 0.0, "0.5": 0.0, "1.0": 0.0, "+Inf": 0.0}
    for t, slow in ((0, 0), (5, 1), (10, 2), (15, 4), (20, 8)):  # step i adds 2**(i-1) slow first tokens
        buckets = {**buckets, "1.0": buckets["1.0"] + slow, "+Inf": buckets["+Inf"] + slow}
        window.push(parse(_hist("0", buckets, 0.0), t))
    name = "vllm:time_to_first_token_seconds"
    since = window.histogram_since(name, 15)
    assert since is not None and since.count == 4 + 8  # the steps ending at 15 and 20
    earlier = window.histogram_since(name, 15, earlier_steps=2)
    assert earlier is not None and earlier.count == 1 + 2 + 4 + 8  # and the two before them, no more
    assert window.histogram_since(name, 25) is None or window.histogram_since(name, 25).count == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=1000), min_size=3, max_size=3),
    st.floats(min_value=0.01, max_value=0.99),
)
def test_quantiles_stay_within_bucket_bounds(counts, q):
    bounds = (0.1, 1.0, 10.0, math.inf)
    cumulative, running = [], 0
    for c in [*counts, 0]:
        running += c
        cumulative.append(float(running))
    hist = HistogramDelta(bounds, tuple(cumulative), 0.0, cumulative[-1])
    value = hist.quantile(q)
    if cumulative[-1] == 0:
        assert value is None
    else:
        assert value is not None and 0.0 <= value <= 10.0


def test_window_prunes_by_time_and_clock_jump_restarts_it():
    window = Window(20, COUNTERS)
    for t in range(0, 100, 10):
        window.push(parse(_counter(t, t), float(t)))
    assert window.duration == 20 and len(window) == 3
    window.push(parse(_counter(0, 200), 5.0))  # clock went backwards
    assert len(window) == 1 and window.increase("vllm:num_preemptions_total") is None


# -- per-series resets (data-parallel engines restart independently) ------------------------
def _dp_pair(values: dict[tuple[str, str], float], order: list[tuple[str, str]]) -> str:
    """Two engines' counters, printed in ``order`` (the parser keeps the order it reads)."""
    lines = ["process_start_time_seconds 1000"]
    for name, engine in order:
        lines.append(f'vllm:{name}_total{{engine="{engine}",model_name="m"}} {values[(name, engine)]}')
    return "\n".join(lines) + "\n"


_SERIES = [(name, engine) for name in ("num_preemptions", "generation_tokens", "prompt_tokens",
                                       "request_success") for engine in ("0", "1")]


def test_one_engine_restarting_a_counter_rebases_that_series_only():
    window = Window(600, COUNTERS)
    before = {key: 1_000_000.0 for key in _SERIES}
    before[("num_preemptions", "1")] = 20.0
    after = {key: value + 10 for key, value in before.items()}
    after[("num_preemptions", "1")] = 2.0  # engine 1's counter restarted
    window.push(parse(_dp_pair(before, _SERIES), 0))
    window.push(parse(_dp_pair(after, _SERIES), 5))
    assert window.increase("vllm:generation_tokens_total") == 20  # +10 per engine, not +2,000,020
    assert window.increase("vllm:prompt_tokens_total") == 20
    assert window.increase("vllm:num_preemptions_total") == 12  # 10 on engine 0, 2 since the reset
    assert window.restarts == 1


@settings(max_examples=150, deadline=None)
@given(
    st.permutations(_SERIES),
    st.lists(st.floats(min_value=0, max_value=1e7, allow_nan=False), min_size=len(_SERIES), max_size=len(_SERIES)),
    st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=len(_SERIES), max_size=len(_SERIES)),
    st.sets(st.sampled_from(_SERIES), max_size=3),
)
def test_series_order_never_changes_per_series_deltas(order, starts, growths, resetting):
    """Whatever the order series are read in and whichever reset, each series' step increase is its own."""
    before = dict(zip(_SERIES, starts))
    after = {key: (growth if key in resetting else before[key] + growth)
             for key, growth in zip(_SERIES, growths)}
    window = Window(600, COUNTERS)
    window.push(parse(_dp_pair(before, order), 0))
    window.push(parse(_dp_pair(after, order), 5))
    for name in ("num_preemptions", "generation_tokens", "prompt_tokens", "request_success"):
        expected = 0.0
        for engine in ("0", "1"):
            key = (name, engine)
            went_down = after[key] < before[key]
            expected += after[key] if went_down else after[key] - before[key]
        assert math.isclose(window.increase(f"vllm:{name}_total"), expected, rel_tol=1e-9, abs_tol=1e-6)


# -- the columns' sums equal the step-by-step sums, bit for bit ---------------------------------------
BOUND_SETS = ((0.1, 0.5, math.inf), (0.1, 0.25, 0.5, math.inf))
HIST = "vllm:time_to_first_token_seconds"
COUNTER = "vllm:num_preemptions_total"
CPU = "process_cpu_seconds_total"  # a counter with fractional values: summed step by step

scrape_events = st.lists(st.tuples(
    st.sets(st.sampled_from(("0", "1")), max_size=2),  # engines present in the scrape
    st.integers(0, 1000) | st.sampled_from((-5, 2 ** 60)),  # counter step (negative: a reset; huge: inexact)
    st.floats(0, 10, allow_nan=False) | st.integers(0, 10),  # a histogram step's per-bucket increment
    st.sampled_from((0, 0, 0, 1)),  # the bounds set of engine "1"
    st.booleans(),  # the process restarted
), min_size=1, max_size=30)


def _reference_step(old: Snapshot, new: Snapshot) -> tuple[dict, dict]:
    """One step as a dict per family, series by series (the window's storage before it kept columns)."""
    start = old.scalars.get("process_start_time_seconds", {}).get(())
    restarted = start is not None and start != new.scalars.get("process_start_time_seconds", {}).get(())
    counters: dict = {}
    for name in (COUNTER, CPU):
        for key, value in new.scalars.get(name, {}).items():
            before = old.scalars.get(name, {}).get(key)
            counters.setdefault(name, {})[key] = (0.0 if before is None else value if restarted or value < before
                                                  else value - before)
    hists: dict = {}
    for key, sample in new.histograms.get(HIST, {}).items():
        before_hist = old.histograms.get(HIST, {}).get(key)
        if before_hist is None:
            part = HistogramDelta(sample.bounds, tuple(0.0 for _ in sample.bounds), 0.0, 0.0)
        elif (restarted or before_hist.bounds != sample.bounds or sample.count < before_hist.count
              or any(n < o for n, o in zip(sample.cumulative, before_hist.cumulative))):
            part = HistogramDelta(sample.bounds, sample.cumulative, sample.sum, sample.count)
        else:
            grown = tuple(n - o for n, o in zip(sample.cumulative, before_hist.cumulative))
            part = HistogramDelta(sample.bounds, grown, sample.sum - before_hist.sum, sample.count - before_hist.count)
        hists[key] = part
    return counters, hists


def _reference_increase(steps: list, name: str, match) -> float:
    total = 0.0
    for counters, _ in steps:
        for key, delta in counters.get(name, {}).items():
            if match is None or match(key):
                total += delta
    return total


def _order_free(steps: list, name: str, match) -> bool:
    """Whether every order of adding the steps' deltas gives one float: a single series (summed in step
    order), or whole numbers whose total stays within 2**53. Otherwise the window adds a step's series in
    the order it first held them, not the scrape's, and the sums may differ in the last place."""
    deltas = [(key, delta) for counters, _ in steps for key, delta in counters.get(name, {}).items()
              if match is None or match(key)]
    return (len({key for key, _ in deltas}) <= 1
            or (all(float(d).is_integer() for _, d in deltas) and math.fsum(abs(d) for _, d in deltas) <= 2 ** 53))


def _assert_increase(got: float | None, steps: list, name: str, match) -> None:
    expected = _reference_increase(steps, name, match)
    if _order_free(steps, name, match):
        assert repr(got) == repr(expected)
    else:
        assert got is not None and math.isclose(got, expected, rel_tol=1e-15)


def _reference_histogram(steps: list, match) -> HistogramDelta | None:
    per_series: dict = {}
    for _, hists in steps:
        for key, part in hists.items():
            if match is None or match(key):
                per_series.setdefault(key, []).append(part)
    merged = []
    for parts in per_series.values():
        bounds = parts[-1].bounds
        same = [p for p in parts if p.bounds == bounds]
        cumulative = [0.0] * len(bounds)
        for part in same:
            for i, value in enumerate(part.cumulative):
                cumulative[i] += value
        merged.append(HistogramDelta(bounds, tuple(cumulative), math.fsum(p.sum for p in same),
                                     math.fsum(p.count for p in same)))
    return HistogramDelta.merge(merged)


@settings(max_examples=150, deadline=None)
@given(scrape_events, st.sampled_from((15.0, 40.0, 1000.0)), st.integers(1, 4))
def test_column_sums_equal_stepwise_sums(events, span, recent):
    """Whole window, newest steps, step by step: the columns give the very floats a walk over per-step dicts
    gives (integer counts in any order, a fractional counter in step order); huge counts over several series
    agree to the last place (``_order_free``)."""
    window = Window(span, COUNTERS)
    counter: dict[str, float] = {"0": 0.0, "1": 0.0}
    buckets: dict[str, list[float]] = {"0": [0.0] * 4, "1": [0.0] * 4}
    start, cpu = 1000.0, 0.0
    reference: dict[float, tuple[dict, dict]] = {}
    previous = None
    for t, (engines, step, increment, bounds_choice, restarted) in enumerate(events):
        start += 1.0 if restarted else 0.0
        cpu += 0.1 * t
        scalars: dict = {"process_start_time_seconds": {(): start}, CPU: {(): cpu}, COUNTER: {}}
        hists: dict = {}
        for engine in sorted(engines):
            key = (("engine", engine),)
            counter[engine] = max(0.0, counter[engine] + step) if step >= 0 else 3.0
            scalars[COUNTER][key] = counter[engine]
            bounds = BOUND_SETS[bounds_choice if engine == "1" else 0]
            cumulative = buckets[engine]
            for i in range(len(cumulative)):
                cumulative[i] += increment * (i + 1)
            values = tuple(cumulative[: len(bounds)])
            hists.setdefault(HIST, {})[key] = HistogramSample(bounds, values, values[-1] * 0.3, values[-1])
        snapshot = Snapshot(float(t * 5), scalars, hists)
        if previous is not None:
            reference[snapshot.timestamp] = _reference_step(previous, snapshot)
        previous = snapshot
        window.push(snapshot)
        steps = [reference[s.end] for s in window.steps]
        if not steps:
            continue
        for name in (COUNTER, CPU):
            for match in (None, lambda k: k == (("engine", "1"),)):
                if window.present(name):
                    _assert_increase(window.increase(name, match), steps, name, match)
                    _assert_increase(window.increase_recent(name, recent, match), steps[-recent:], name, match)
            assert window.increase_by_step(name) == [sum(c.get(name, {}).values()) for c, _ in steps]
        for match in (None, lambda k: k == (("engine", "0"),)):
            if window.present(HIST):
                assert window.histogram(HIST, match) == _reference_histogram(steps, match)
                assert window.histogram_recent(HIST, recent, match) == _reference_histogram(steps[-recent:], match)
        for s, (_, hists) in zip(window.steps, steps):
            assert sorted(map(repr, window.histograms_at(s, HIST))) == sorted(map(repr, hists.values()))


# -- what the window keeps between evaluations ------------------------------------------------
_PHASES = ("idle", "steady-during", "steady", "prefix-during", "prefix", "chunked-during", "chunked",
           "pressure-during", "pressure-peak-waiting", "pressure", "abort", "final")


def test_readings_kept_between_evaluations_equal_a_fresh_reading_at_every_scrape(fixtures_dir: Path) -> None:
    # Window.per_step (each step read once while the window holds it) and gauge series read through a LabelIs
    # (kept per scrape) give what a window that kept nothing gives: across the window's slide, the counter
    # resets of the captures' second pass and a clock jump.
    texts = [(fixtures_dir / f"snapshot-{phase}.txt").read_text() for phase in _PHASES]
    window = Window(30.0, COUNTERS)
    reason = "vllm:num_requests_waiting_by_reason"
    # Two passes, then the clock jumps back and two more in another order: the window starts again, its steps
    # numbered from 0 (a reading kept from before the jump would be another step's).
    times = [5.0 * i for i in range(2 * len(texts))] * 2
    compared = 0
    for text, t in zip(texts * 2 + (texts[5:] + texts[:5]) * 2, times):
        window.push(parse(text, t))
        fresh = window.copy()  # the same scrapes and deltas, nothing kept
        for long_tokens, slow in ((200.0, None), (200.0, 0.5), (1000.0, 0.1)):
            assert long_prompt_arrivals(window, long_tokens, slow) == long_prompt_arrivals(fresh, long_tokens, slow)
            assert long_prompt_steps(window, long_tokens, slow) == long_prompt_steps(fresh, long_tokens, slow)
        for value in ("capacity", "deferred"):
            kept = window.gauge_series(reason, "sum", LabelIs("reason", value))
            assert kept == fresh.gauge_series(reason, "sum", lambda labels, v=value: label_value(labels, "reason") == v)
        compared += len(window.steps)
    assert compared > 100


def test_sums_read_in_an_evaluation_are_dropped_after_it_and_read_again_the_same():
    # The pipeline drops them after each evaluation (held to the next push they cost 13 KB a target).
    window = Window(600, COUNTERS)
    buckets = {"0.1": 0.0, "0.5": 0.0, "1.0": 0.0, "+Inf": 0.0}
    for t in (0, 5, 10):
        buckets = {le: count + 1 for le, count in buckets.items()}  # one fast first token a step
        window.push(parse(_hist("0", buckets, 0.0), t))
    name = "vllm:time_to_first_token_seconds"
    first = window.histogram(name)
    assert first is not None and window.histogram(name) is first  # one sum a push, read once
    window.forget_reads()
    again = window.histogram(name)
    assert again is not first and again is not None and again.count == first.count == 2
