"""vLLM's defaults per release series, for flags the command line did not give.

Applied only when the command line was read (so a missing flag really is missing) and only
where the value does not depend on something we cannot see. Checked against the installed
vLLM 0.32 CPU build in tests/realvllm/test_engine_facts.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.facts.base import FactValue

GIB = 2**30

# Release series -> facts whose default holds on every platform and model of the series.
COMMON: dict[str, dict[str, FactValue]] = {
    "0.32": {
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "data_parallel_size": 1,
        "gpu_memory_utilization": 0.92,  # CacheConfig.gpu_memory_utilization
        "kv_cache_dtype": "auto",
        "dtype": "auto",
    },
}

# vllm/engine/arg_utils.py get_batch_defaults (0.32), OpenAI API server usage context:
# (max_num_batched_tokens, max_num_seqs) per world size (TP x PP) of 1.
CPU_BATCH = {"0.32": (2048, 128)}  # scaled by the world size
GPU_BATCH = {  # by device memory; A100s keep the small defaults whatever their memory
    "0.32": ((160 * GIB, 16384, 1024), (70 * GIB, 8192, 1024), (0, 2048, 256)),
}
CPU_BLOCK_SIZE = {"0.32": 128}  # vllm/platforms/cpu.py, when --block-size is not given

# Device memory of GPUs by name fragment (lower case), for the batch defaults.
GPU_MEMORY: tuple[tuple[str, int], ...] = (
    ("b300", 288 * GIB), ("b200", 192 * GIB), ("mi300", 192 * GIB), ("h200", 141 * GIB), ("gh200", 96 * GIB),
    ("h100", 80 * GIB), ("h20", 96 * GIB), ("a100", 80 * GIB), ("l40", 48 * GIB), ("a10", 24 * GIB),
    ("l4", 24 * GIB), ("t4", 16 * GIB),
)


def series(version: str | None) -> str | None:
    """'0.32.1' -> '0.32'; the table's key for a version string."""
    if not version:
        return None
    parts = version.lstrip("v").split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else None


def _batch(release: str, known: Mapping[str, FactValue]) -> tuple[int, int] | None:
    platform = known.get("platform")
    world = int(known.get("tensor_parallel_size", 1)) * int(known.get("pipeline_parallel_size", 1))
    if int(known.get("data_parallel_size", 1)) > 1:
        return None  # batched data-parallel MoE engines use other budgets
    if platform == "cpu" and release in CPU_BATCH:
        tokens, seqs = CPU_BATCH[release]
        return tokens * world, seqs * world
    gpu = str(known.get("gpu", "")).lower()
    memory = next((size for name, size in GPU_MEMORY if name in gpu), None) if gpu else None
    if platform == "cpu" or memory is None or release not in GPU_BATCH:
        return None
    if "a100" in gpu:
        memory = 0
    return next((t, s) for floor, t, s in GPU_BATCH[release] if memory >= floor)


def defaults(version: str | None, known: Mapping[str, FactValue]) -> dict[str, FactValue]:
    """Default facts for this version, given what is already known (platform, GPU, sizes, flags)."""
    release = series(version)
    if release is None or release not in COMMON:
        return {}
    out = dict(COMMON[release])
    merged = {**out, **known}
    batch = _batch(release, merged)
    if batch is not None:
        tokens, seqs = batch
        if merged.get("performance_mode") == "throughput":
            tokens, seqs = tokens * 2, seqs * 2
        if merged.get("enable_chunked_prefill") is False:
            max_len = merged.get("max_model_len")
            if max_len is None:
                tokens = 0  # the default is max(max_model_len, budget): unknown without it
            else:
                tokens = max(tokens, int(max_len))
        if tokens:
            out["max_num_batched_tokens"] = tokens
        out["max_num_seqs"] = seqs
    if merged.get("platform") == "cpu" and release in CPU_BLOCK_SIZE:
        out["block_size"] = CPU_BLOCK_SIZE[release]
    return out
