"""LoRA adapter slots, data-parallel engines and sleep mode, read from vLLM 0.32's exposition (issue 29)."""

from __future__ import annotations

from exporter.catalog.thresholds import Thresholds
from exporter.parse import parse
from exporter.pipeline import COUNTERS
from exporter.signals import compute, engines, lora
from exporter.simulator.exposition import render_vllm
from exporter.simulator.scenarios import SCENARIOS
from exporter.window import Window

T0 = 1_800_000_000.0
LORA_HEAD = "# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n"


def _lora_row(running: str, at: float, waiting: str | None = None) -> str:
    waiting = running if waiting is None else waiting  # 0.32 fills both labels alike
    return (f'vllm:lora_requests_info{{max_lora="1",running_lora_adapters="{running}",'
            f'waiting_lora_adapters="{waiting}"}} {at}\n')


def _window(texts: list[tuple[float, str]], span: float = 180.0) -> Window:
    window = Window(span, COUNTERS)
    for at, text in texts:
        window.push(parse(text, at))
    return window


def test_lora_slots_read_from_the_newest_series_and_the_ones_updated_in_the_window():
    """vLLM keeps a series per adapter set, valued at its last update: the newest is the state now, and
    the sets updated while the window covers them name the adapters in flight; older ones do not count."""
    stale = _lora_row("tenant-old", T0 - 1000)  # last in flight long before the window
    first = LORA_HEAD + stale + _lora_row("tenant-a", T0 - 1)
    second = LORA_HEAD + stale + _lora_row("tenant-a", T0 + 20) + _lora_row("tenant-b", T0 + 59)
    slots = lora(_window([(T0, first), (T0 + 30, second), (T0 + 60, second)]))
    assert slots.enabled and slots.max_adapters == 1
    assert slots.running_adapters == 1 and slots.waiting_adapters == 0
    assert slots.adapters_seen == 2  # tenant-a and tenant-b, not tenant-old
    assert slots.slots_full_fraction == 1.0


def test_an_adapter_named_waiting_only_counts_as_waiting_for_a_slot():
    """Older releases list an adapter under waiting_lora_adapters only while it has waiting requests."""
    text = LORA_HEAD + _lora_row("tenant-a", T0 + 9, waiting="tenant-a,tenant-b")
    slots = lora(_window([(T0, text), (T0 + 10, text)]))
    assert (slots.running_adapters, slots.waiting_adapters, slots.adapters_seen) == (1, 1, 2)


def test_a_real_lora_capture_reads_two_adapters_for_one_slot(fixtures_dir):
    """vLLM 0.32 with --max-loras 1 after one request per adapter: three series ("", tenant-a, tenant-b)."""
    text = (fixtures_dir / "snapshot-lora.txt").read_text()
    newest = max(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith("vllm:lora_requests_info{"))
    slots = lora(_window([(newest - 5, text), (newest + 1, text)]))
    assert slots.enabled and slots.max_adapters == 1 and slots.adapters_seen == 2
    assert slots.running_adapters == 0  # the newest set is "" (nothing in flight after the requests)


def test_without_enable_lora_there_is_no_lora_group():
    assert lora(_window([(T0, "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1\n")])).enabled is None


def _sleep(awake: int, offloaded: int, discard: int, engine: str = "0") -> str:
    return "".join(f'vllm:engine_sleep_state{{engine="{engine}",model_name="m",sleep_state="{state}"}} {value}\n'
                   for state, value in (("awake", awake), ("weights_offloaded", offloaded), ("discard_all", discard)))


def test_sleep_state_one_hot_and_asleep_only_when_every_engine_sleeps():
    def state(text: str) -> tuple[str | None, bool]:
        group = engines(_window([(T0, text), (T0 + 5, text)]), Thresholds())
        return group.sleep_state, group.asleep

    assert state(_sleep(1, 0, 0)) == ("awake", False)
    assert state(_sleep(0, 1, 0)) == ("weights_offloaded", True)
    assert state(_sleep(0, 0, 1)) == ("discard_all", True)
    assert state(_sleep(0, 0, 0)) == ("asleep", True)  # release_kv_cache_memory: awake 0, no level
    assert state(_sleep(0, 1, 0) + _sleep(1, 0, 0, engine="1")) == ("weights_offloaded", False)


def _simulated(name: str, until: float = 240.0) -> Window:
    engine = SCENARIOS[name].build(0)
    window = Window(180.0, COUNTERS)
    t = 0.0
    while t < until:
        t += 5.0
        engine.advance_to(t)
        window.push(parse(render_vllm(engine, start_unix=T0), T0 + t))
    return window


def test_one_slow_data_parallel_engine_stands_out_and_alike_engines_do_not():
    slow = compute(_simulated("dp-slow-engine"), Thresholds()).engines
    assert slow.count == 2 and slow.outlier == "1"
    assert slow.latency_ratio is not None and slow.latency_ratio > 5
    alike = compute(_simulated("dp-healthy"), Thresholds()).engines
    assert alike.count == 2 and set(alike.per_engine) == {"0", "1"}
    assert max(alike.load_ratio or 0, alike.latency_ratio or 0) < Thresholds().dp_imbalance_ratio


def test_the_simulated_lora_engine_exports_vllm_s_gauge_only_with_enable_lora():
    text = render_vllm(SCENARIOS["lora-slots"].build(0), start_unix=T0)
    assert "# TYPE vllm:lora_requests_info gauge" in text  # registered with --enable-lora ...
    assert "vllm:lora_requests_info{" not in text  # ... with no series before the first step
    engine = SCENARIOS["lora-slots"].build(0)
    engine.advance_to(120.0)
    text = render_vllm(engine, start_unix=T0)
    assert 'max_lora="1"' in text and "running_lora_adapters=" in text
    # Like a real engine's: an adapter set per series, both labels alike (tests/fixtures, snapshot-lora.txt).
    assert 'running_lora_adapters="adapter-1",waiting_lora_adapters="adapter-1"' in text
    engine = SCENARIOS["healthy"].build(0)
    engine.advance_to(30.0)
    assert "vllm:lora_requests_info" not in render_vllm(engine, start_unix=T0)
