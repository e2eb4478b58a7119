"""What a user of the engine model may replace, each through a protocol (step cost, arrivals, observer), and
the defaults (``RooflineCost``, ``SpecStream``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol

from exporter.simulator.deployment import EngineConfig
from exporter.simulator.request import Request
from exporter.simulator.workload import RequestSpec

# --------------------------------------------------------------------------------------------
# What a user of the model may replace: step cost, arrivals, observer
# --------------------------------------------------------------------------------------------


class StepTime(NamedTuple):
    """One step: its wall time and what the GPU did meanwhile (DCGM's view, vLLM's MFU estimates)."""

    wall_s: float
    gpu_s: float  # busy (kernels, and NCCL waiting on the link)
    tensor_s: float
    dram_s: float
    comm_s: float
    comm_bytes: float
    flops: float = 0.0  # analytic work per GPU, as --enable-mfu-metrics estimates it
    read_bytes: float = 0.0


class StepCostModel(Protocol):
    """What one engine step costs."""

    def step_time(self, now: float, n_decode: int, decode_context: int,
                  chunks: Sequence[tuple[Request, int, int]]) -> StepTime:
        """The step that starts at ``now``: ``n_decode`` decoding requests attending to ``decode_context``
        tokens in all, and prefill ``chunks`` of (request, tokens computed before, tokens now)."""
        ...


class ArrivalSource(Protocol):
    """The requests that reach the API server, in arrival order."""

    def next_arrival(self) -> float | None:
        """When the next request arrives (None: none is known yet)."""
        ...

    def arrived(self, now: float) -> Iterator[RequestSpec]:
        """Every request that has arrived by ``now`` and was not handed out yet, in order."""
        ...

    def finished(self, spec: RequestSpec, seen: float) -> None:
        """The client saw the request's last token at ``seen`` (a closed loop sends its next one)."""
        ...


class EngineObserver(Protocol):
    """Told what happens to requests, for bookkeeping beyond vLLM's own statistics."""

    def admitted(self, request: Request, step: int) -> None:
        """``request`` was scheduled for the first time, in step ``step``."""
        ...

    def token_gap(self, now: float, value: float, n: int) -> None:
        """``n`` inter-token-latency observations of ``value`` seconds, the step ending at ``now``."""
        ...

    def finished(self, request: Request, seen: float) -> None:
        """``request`` produced its last token; its client saw it at ``seen``."""
        ...


class SpecStream:
    """An :class:`ArrivalSource` over an iterator of requests in arrival order (open traffic)."""

    __slots__ = ("_specs", "_next")

    def __init__(self, specs: Iterator[RequestSpec]) -> None:
        self._specs = specs
        self._next: RequestSpec | None = next(specs, None)

    def next_arrival(self) -> float | None:
        return self._next.arrival if self._next is not None else None

    def arrived(self, now: float) -> Iterator[RequestSpec]:
        spec = self._next
        while spec is not None and spec.arrival <= now:
            yield spec
            spec = self._next = next(self._specs, None)

    def finished(self, spec: RequestSpec, seen: float) -> None:
        pass  # open traffic arrives whatever the engine does


class RooflineCost:
    """The default step cost: roofline per step (GEMM FLOPs vs HBM bytes for weights + KV reads), a fixed
    GPU overhead, TP all-reduces (two per layer, latency + ring bandwidth), and engine-core CPU time per
    step divided by the CPU share."""

    def __init__(self, cfg: EngineConfig) -> None:
        m, g, c = cfg.model, cfg.gpu, cfg.costs
        tp = cfg.tensor_parallel_size
        self._gpu = g
        self._gpu_fixed_s = c.gpu_step_fixed_s
        self._spec_k = cfg.num_speculative_tokens
        self._flops_per_token = 2.0 * m.params / tp
        self._attn_flops_per_pair = 4.0 * m.n_layers * m.hidden / tp
        self._weight_bytes_gpu = m.weight_bytes / tp
        self._kv_bytes_per_token_gpu = m.kv_bytes_per_token / tp
        self._weight_s = m.weight_bytes / tp / (g.hbm_bandwidth * c.bandwidth_efficiency)
        self._kv_s_per_token = m.kv_bytes_per_token / tp / (g.hbm_bandwidth * c.bandwidth_efficiency)
        self._flop_rate = g.peak_flops * c.compute_efficiency
        self._n_allreduce = 2 * m.n_layers if tp > 1 else 0
        self._ar_bytes_per_token = m.hidden * m.dtype_bytes
        self._ring = 2.0 * (tp - 1) / tp if tp > 1 else 0.0
        self._cpu_fixed = (c.step_cpu_s + c.tp_step_cpu_s * (tp - 1)) / cfg.cpu_share
        self._cpu_per_seq = c.seq_cpu_s / cfg.cpu_share

    def step_time(self, now: float, n_decode: int, decode_context: int,
                  chunks: Sequence[tuple[Request, int, int]]) -> StepTime:
        ctx = decode_context  # tokens attended by the decodes
        per_decode = 1 + self._spec_k  # its last token and the drafts, verified in one pass
        tokens = n_decode * per_decode
        pairs = float(ctx) * per_decode
        kv_tokens = ctx
        for _, k, c in chunks:
            tokens += c
            pairs += c * (k + c / 2.0)
            kv_tokens += k + c
        flops = self._flops_per_token * tokens + self._attn_flops_per_pair * pairs
        read_bytes = self._weight_bytes_gpu + self._kv_bytes_per_token_gpu * kv_tokens
        compute_s = flops / self._flop_rate
        dram_s = self._weight_s + self._kv_s_per_token * kv_tokens
        gpu_s = max(compute_s, dram_s) + self._gpu_fixed_s
        comm_s = comm_bytes = 0.0
        if self._n_allreduce:
            per_ar = tokens * self._ar_bytes_per_token * self._ring
            comm_bytes = per_ar * self._n_allreduce
            comm_s = self._n_allreduce * self._gpu.allreduce_latency_s + comm_bytes / self._gpu.link_bandwidth
        cpu_s = self._cpu_fixed + self._cpu_per_seq * (n_decode + len(chunks))
        # NCCL kernels keep the GPU "utilised" in DCGM's eyes while they wait on the link.
        return StepTime(cpu_s + gpu_s + comm_s, gpu_s + comm_s, compute_s, dram_s, comm_s, comm_bytes, flops,
                        read_bytes)
