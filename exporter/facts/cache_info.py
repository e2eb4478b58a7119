"""Engine facts from ``vllm:cache_config_info`` labels, across every vLLM generation.

The label set is every field of vLLM's CacheConfig, so it changes almost every release: labels are
matched by name, the string "None" is unknown, and the set itself dates the release.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from exporter.facts.base import FactValue
from exporter.facts.catalog import BY_NAME, convert

# fact <- label, first label present wins (older generations named some fields differently).
LABELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("block_size", ("block_size",)),
    # With data parallelism this is the sum over the engines, repeated on every engine's series.
    ("num_gpu_blocks", ("num_gpu_blocks",)),
    ("gpu_memory_utilization", ("gpu_memory_utilization",)),
    # cpu_kvcache_space_bytes (0.9.2-0.19) was the CPU backend's KV size before kv_cache_memory_bytes.
    ("kv_cache_memory_bytes", ("kv_cache_memory_bytes", "cpu_kvcache_space_bytes")),
    ("kv_cache_size_tokens", ("kv_cache_size_tokens",)),
    ("enable_prefix_caching", ("enable_prefix_caching",)),
    ("kv_cache_dtype", ("cache_dtype",)),
)

# (label first seen, release): the newest marker present dates the label set.
GENERATIONS: tuple[tuple[str, str], ...] = (
    ("enable_extensible_kv_cache", "0.34"),
    ("simple_cpu_offload_num_blocks", "0.33"),
    ("cache_hit_alignment_tokens", "0.32"),
    ("effective_attention_block_size", "0.31"),
    ("kv_cache_layout", "0.29"),
    ("replayssm_buffer_len", "0.27"),
    ("prefix_match_unit", "0.26"),
    ("skip_page_size_padded", "0.25"),
    ("kv_cache_size_tokens", "0.24"),
    ("kv_cache_dtype_skip_layers", "0.19"),
    ("_block_size_resolved", "0.18"),
    ("mamba_cache_mode", "0.16"),
    ("kv_offloading_backend", "0.11"),
    ("kv_cache_memory_bytes", "0.10"),
    ("cpu_kvcache_space_bytes", "0.9"),
    ("prefix_caching_hash_algo", "0.8"),
    ("calculate_kv_scales", "0.7"),
    ("block_size", "0.6"),
)


def generation(labels: Mapping[str, str]) -> str | None:
    """The vLLM release series whose CacheConfig has this label set (the newest known one is "X+")."""
    for marker, release in GENERATIONS:
        if marker in labels:
            return f"{release}+" if release == GENERATIONS[0][1] else release
    return None


def facts(rows: Sequence[Mapping[str, str]]) -> dict[str, FactValue]:
    """Facts from the ``vllm:cache_config_info`` series (every engine repeats the same values)."""
    if not rows:
        return {}
    row = rows[0]
    out: dict[str, FactValue] = {}
    for fact, labels in LABELS:
        spec = BY_NAME[fact]
        for label in labels:
            if label not in row:
                continue
            raw = row[label]
            value = convert(spec, raw) if spec.kind is not bool else {"True": True, "False": False}.get(raw)
            if value is not None:
                out[fact] = value
                break
    release = generation(row)
    if release is not None:
        out["vllm_version"] = release
    return out
