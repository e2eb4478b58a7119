"""A request inside the simulated engine, and its phases.
"""

from __future__ import annotations

from exporter.simulator.workload import RequestSpec

# --------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------

_WAITING, _PREFILL, _DECODE, _DONE = 0, 1, 2, 3


class Request:
    """A request inside the engine. Plain slots class: it is touched on every event."""

    __slots__ = (
        "spec", "rid", "prompt_len", "out_len", "seg_ends", "seg_keys",
        "t_engine", "t_queued", "t_sched", "t_first", "t_last_out",
        "num_tokens", "generated", "target", "computed", "blocks", "n_hashed",
        "hits_first", "admitted_once", "preemptions", "order", "epoch", "phase",
        "c0", "t0", "g0", "remote", "ext_first", "load", "load_fails",
    )

    def __init__(self, spec: RequestSpec, t_engine: float) -> None:
        self.spec = spec
        self.rid = spec.rid
        self.prompt_len = spec.prompt_len
        self.out_len = spec.output_len
        self.seg_ends = spec.seg_ends
        self.seg_keys = spec.seg_keys
        self.t_engine = t_engine
        self.t_queued = t_engine
        self.t_sched = -1.0
        self.t_first = -1.0
        self.t_last_out = -1.0
        self.num_tokens = spec.prompt_len  # tokens that exist (prompt + generated)
        self.generated = 0
        self.target = spec.prompt_len  # tokens to (re)compute in the current prefill
        self.computed = 0
        self.blocks: list[int] = []
        self.n_hashed = 0  # leading blocks whose hash is registered (or that were hits)
        self.hits_first = 0
        self.admitted_once = False
        self.preemptions = 0
        self.order = 0
        self.epoch = 0
        self.phase = _WAITING
        self.c0 = 0  # decode clock when the current decode run started
        self.t0 = 0  # num_tokens at c0
        self.g0 = 0  # generated at c0
        self.remote = False  # its prompt's KV is to come from a prefill instance (a disaggregated decode)
        self.ext_first = 0  # prompt tokens loaded by the connector at its first admission
        self.load: tuple[str, float, float] | None = None  # the load under way: (kind, bytes, seconds)
        self.load_fails = False
