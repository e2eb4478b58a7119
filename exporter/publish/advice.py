"""``vllm_diag_advice_info``: the advisor's top recommendation per target, as a Prometheus info metric.

Only the top recommendation, and only as labels on a constant 1 (the Prometheus convention for
text); the predicted numbers stay in the JSON and on the page, where their intervals go with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.state import TargetState

NAME = "vllm_diag_advice_info"
LABELS = ["target", "model_name", "knob", "current", "proposed"]


def _text(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return ",".join(f"{k}={_text(v)}" for k, v in value.items())
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def families(states: Iterable[TargetState]) -> Iterator[Metric]:
    info = GaugeMetricFamily(NAME, "The what-if advisor's top recommendation for the target (always 1; absent "
                                   "when the advisor has none).", labels=LABELS)
    for state in states:
        top = state.advice.top if state.advice is not None else None
        if top is not None:
            info.add_metric([state.target, state.model_name, top.knob, _text(top.current), _text(top.proposed)], 1.0)
    if info.samples:  # no family at all until the advisor has answered (the exposition stays as it was)
        yield info
