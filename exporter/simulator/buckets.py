"""vLLM 0.32's histogram bucket edges, as the simulated engine records and exposes them.

vLLM's own values (``vllm/v1/metrics/loggers.py`` and ``buckets.py`` of 0.32); the two latency
families the rule renderer also checks objectives against are the catalog's
(``exporter/catalog/buckets.py``), not copies. A module of its own so that the engine (which
records into these buckets) and the exposition (which prints the engine) import it, not each other.
"""

from __future__ import annotations

from typing import Final

from exporter.catalog import buckets

REQUEST_LATENCY_BUCKETS: Final = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)
TIME_TO_FIRST_TOKEN_BUCKETS: Final = buckets.TIME_TO_FIRST_TOKEN
INTER_TOKEN_LATENCY_BUCKETS: Final = buckets.INTER_TOKEN_LATENCY
ITERATION_TOKENS_BUCKETS: Final = (
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
)
REQUEST_PARAMS_N_BUCKETS: Final = (1.0, 2.0, 5.0, 10.0, 20.0)
REQUEST_NUM_PREEMPTIONS_BUCKETS: Final = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)
HTTP_DURATION_HIGHR_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
    5.0, 7.5, 10.0, 30.0, 60.0,
)
HTTP_DURATION_BUCKETS: Final = (0.1, 0.5, 1.0)
# --kv-cache-metrics' block residency (kv_cache_residency in vllm/v1/metrics/buckets.py), seconds.
KV_CACHE_RESIDENCY_BUCKETS: Final = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1200.0, 1800.0,
)
# vLLM 0.34's API-server render duration (vllm/renderers/metrics.py), seconds.
RENDER_DURATION_BUCKETS: Final = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
# NIXL connector (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py): transfer time drops the first
# edge of the post-time list; bytes run 2^11 .. 2^33 in steps of 4x.
NIXL_POST_TIME_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_XFER_TIME_BUCKETS: Final = NIXL_POST_TIME_BUCKETS[1:]
NIXL_BYTES_BUCKETS: Final = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))
NIXL_DESCRIPTORS_BUCKETS: Final = (10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 400.0, 1000.0, 2000.0, 4000.0,
                                   10000.0, 20000.0, 50000.0)


def request_token_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's ``build_1_2_5_buckets(max_model_len)``: 1, 2, 5, 10, ... while <= the max."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(out)
            out.append(float(value))
        exponent += 1
