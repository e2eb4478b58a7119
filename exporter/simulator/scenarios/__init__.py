"""Named scenarios: a deployment, its traffic, and the diagnosis the method expects for it.

Each scenario is one frozen dataclass: the engine configuration (including the facts vLLM
does not export: token budget, max_num_seqs, TP size, GPU, CPU cores and CPU contention),
the workload, and the expected diagnosis (verdict layer, symptom ids, cause ids) from the
layered method (``docs/method.md``). ``docs/scenarios.md`` is the table of all
of them; ``tests/simulator`` checks the physics each one relies on. The types and building blocks are
in ``model``; the scenarios in ``faults``, ``cases``, ``features`` and ``witnesses``, registered here in
that order.

Numbers are production-scale: Llama-3.1-8B on one H100 unless said otherwise.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from exporter.simulator.scenarios.cases import CASES
from exporter.simulator.scenarios.faults import FAULTS
from exporter.simulator.scenarios.features import FEATURES
from exporter.simulator.scenarios.model import LAYERS, Expected, Scenario
from exporter.simulator.scenarios.witnesses import WITNESSES

__all__ = ["LAYERS", "SCENARIOS", "Expected", "Scenario", "get_scenario", "scenario_names"]

SCENARIOS: Final[MappingProxyType[str, Scenario]] = MappingProxyType(
    {
        s.name: s
        for s in (*FAULTS, *CASES, *FEATURES, *WITNESSES)
    }
)


def scenario_names() -> tuple[str, ...]:
    return tuple(SCENARIOS)


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
