"""What a scenario is (a deployment, its traffic, the diagnosis the method expects) and the building blocks
the scenarios are made of. Numbers are production-scale: Llama-3.1-8B on one H100 unless said otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from exporter.simulator.dataparallel import DataParallelEngine
from exporter.simulator.engine import (
    Engine,
    EngineConfig,
)
from exporter.simulator.workload import (
    Arrivals,
    LengthDist,
    PrefixSpec,
    RequestClass,
    Workload,
)

LAYERS: Final = ("request", "scheduler", "kv_cache", "gpu_compute", "cpu", "distributed")


@dataclass(frozen=True, slots=True)
class Expected:
    """What a correct layered diagnosis says about the scenario once its window is full.

    ``symptoms``/``causes`` must be active; ``also_possible`` may co-fire without the
    diagnosis being wrong (the method's classes overlap, e.g. KV pressure also makes the
    scheduler conservative). ``verdict`` is a layer id, ``none``, or ``unknown`` for an objective
    missed that no cause the catalog knows explains (A0, B0).
    """

    verdict: str
    symptoms: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    also_possible: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.verdict not in (*LAYERS, "none", "unknown"):
            raise ValueError(f"unknown verdict layer {self.verdict!r}")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str  # what it models, one or two sentences
    knobs: str  # the settings that make it what it is (for the docs table)
    engine: EngineConfig
    workload: Workload
    expected: Expected
    case: str = ""  # symptom class / worked case it demonstrates, e.g. "A1" or "case 3"
    dcgm: bool = True  # also serve DCGM-style GPU series
    seed: int = 0
    # The deployment's objectives, when not the global default: {"ttft": {"threshold_seconds", "target"}, ...},
    # thresholds on the simulated histograms' bucket edges (vLLM's defaults) so the shares are exact.
    slo: dict[str, dict[str, float]] | None = None
    data_parallel_size: int = 1  # engines behind one API server (each gets the workload)
    restart_engine_at: tuple[tuple[int, float], ...] = ()  # (rank, simulated second) engine restarts
    # (rank, its own configuration) for a data-parallel engine that differs from its siblings (a slow GPU)
    engine_overrides: tuple[tuple[int, EngineConfig], ...] = ()
    # The target state a correct sidecar reports (ok; sleeping for an engine put to sleep).
    expected_state: str = "ok"

    @property
    def cpu_share(self) -> float:
        """CPU contention: the share of CPU time vLLM's processes get (1.0 = none)."""
        return self.engine.cpu_share

    @property
    def tensor_parallel_size(self) -> int:
        return self.engine.tensor_parallel_size

    def engine_facts(self) -> dict[str, Any]:
        """The engine facts vLLM does not export, keyed as in the sidecar's config."""
        e = self.engine
        return {
            "max_num_batched_tokens": e.max_num_batched_tokens,
            "max_num_seqs": e.max_num_seqs,
            "tensor_parallel_size": e.tensor_parallel_size,
            "pipeline_parallel_size": e.pipeline_parallel_size,
            "gpu": e.gpu.name,
            "cpu_cores": e.cpu_cores,
            "model_weight_bytes": e.model.weight_bytes,
            **({"data_parallel_size": self.data_parallel_size} if self.data_parallel_size > 1 else {}),
            **({"speculative_method": e.spec_method, "num_speculative_tokens": e.num_speculative_tokens}
               if e.num_speculative_tokens else {}),
            **({"kv_connector": e.kv_connector, "kv_role": e.kv_role,
                "kv_load_failure_policy": e.kv_load_failure_policy} if e.kv_role else {}),
            **({"enable_lora": True, "max_loras": e.max_loras} if e.enable_lora else {}),
        }

    def build(self, seed: int | None = None) -> Engine | DataParallelEngine:
        """A fresh engine (or data-parallel group) at simulated time 0."""
        seed = self.seed if seed is None else seed
        if self.data_parallel_size > 1:
            return DataParallelEngine(self.engine, self.workload, seed, self.data_parallel_size,
                                      dict(self.restart_engine_at), dict(self.engine_overrides))
        return Engine(self.engine, self.workload, seed)


def lognormal(mean: float, sigma: float, lo: int = 1, hi: int = 1_000_000) -> LengthDist:
    return LengthDist("lognormal", mean, sigma, lo, hi)


def chat(
    rate: float,
    *,
    prompt: LengthDist | None = None,
    output: LengthDist | None = None,
    prefix: PrefixSpec | None = None,
    arrivals: Arrivals | None = None,
    max_tokens: int | None = 1024,
    name: str = "chat",
) -> RequestClass:
    """Interactive chat: a shared system prompt, a few hundred tokens of user text."""
    return RequestClass(
        name=name,
        arrivals=arrivals or Arrivals("steady", rate=rate),
        prompt=prompt or lognormal(300, 0.6, 10, 4000),
        output=output or lognormal(250, 0.7, 5, 2000),
        prefix=prefix if prefix is not None else PrefixSpec(groups=4, shared_len=1200, zipf_s=0.5),
        max_tokens=max_tokens,
    )


def single(*classes: RequestClass) -> Workload:
    return Workload(classes=classes)
