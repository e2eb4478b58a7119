"""Signals from real captures, and the same signals from old-generation names."""

from __future__ import annotations

import math
import re

from exporter.catalog.thresholds import Thresholds
from exporter.parse import parse
from exporter.pipeline import COUNTERS
from exporter.signals import compute
from exporter.window import Window
from tests.conftest import read_capture

# vLLM <= 0.9.1 / 0.10 names for the same families (vllm-metrics.md section 2.2)
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
    assert s.preemptions == 59 and math.isclose(s.preemption_rate, 59 / 30)
    assert s.kv_cache_usage_max == 1.0 and s.kv_cache_usage == 0.0
    assert s.cache.block_size == 32 and s.cache.num_gpu_blocks == 96
    assert s.missing == ()
    # TTFT breakdown: frontend is what is left of TTFT after queue and prefill
    assert s.ttft_frontend_mean is not None and s.ttft_frontend_mean >= 0


def test_old_names_give_the_same_canonical_signals(fixtures_dir):
    texts, times = _phase_texts(fixtures_dir)
    old_texts = [_to_old(t) for t in texts]
    assert "vllm:gpu_cache_usage_perc" in old_texts[0] and "vllm:kv_cache_usage_perc" not in old_texts[0]
    assert _signals(texts, times) == _signals(old_texts, times)


def test_absent_metric_is_missing_never_zero(fixtures_dir):
    texts, times = _phase_texts(fixtures_dir)
    stripped = [re.sub(r"^vllm:num_preemptions_total.*\n", "", t, flags=re.M) for t in texts]
    s = _signals(stripped, times)
    assert s.preemptions is None and s.preemption_rate is None
    assert "vllm:num_preemptions_total" in s.missing
