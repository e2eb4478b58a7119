"""vLLM's default histogram bucket edges (``vllm/v1/metrics/buckets.py``, 0.8.4 and later).

Facts about vLLM, kept in the catalog because both the simulator (which exports them) and the rule
renderer (which checks that an objective's threshold is an edge, so the share of good events is
counted and never interpolated) read them. vLLM 0.32+ can replace a family with
``--custom-histogram-buckets '{"time_to_first_token": [...]}'``; the family keys below are that
option's keys. Live targets are judged on the edges of each scrape, not on these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

TIME_TO_FIRST_TOKEN: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
INTER_TOKEN_LATENCY: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)

# The --custom-histogram-buckets family key of each latency objective, and its default edges.
FAMILY_OF_OBJECTIVE: Final[Mapping[str, str]] = {"ttft": "time_to_first_token", "itl": "inter_token_latency"}
DEFAULT_EDGES: Final[Mapping[str, tuple[float, ...]]] = {
    "time_to_first_token": TIME_TO_FIRST_TOKEN, "inter_token_latency": INTER_TOKEN_LATENCY,
}


def nearest_edges(value: float, edges: tuple[float, ...]) -> tuple[float | None, float | None]:
    """The largest edge below ``value`` and the smallest above it (None past either end)."""
    below = max((e for e in edges if e < value), default=None)
    above = min((e for e in edges if e > value), default=None)
    return below, above
