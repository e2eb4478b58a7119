"""The engine facts the sidecar knows: their type and the vLLM flags that set them.

Only these names are ever parsed out of a command line, a vLLM config file or an environment;
everything else there (API keys, tokens, URLs) is skipped unread.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from exporter.facts.base import FactValue


@dataclass(frozen=True, slots=True)
class FactSpec:
    name: str
    kind: type  # int, float, bool or str
    flags: tuple[str, ...] = ()  # vLLM option strings, without the leading dashes for long ones
    help: str = ""


FACTS: tuple[FactSpec, ...] = (
    FactSpec("max_num_batched_tokens", int, ("max-num-batched-tokens",), "token budget per scheduler step"),
    FactSpec("max_num_seqs", int, ("max-num-seqs",), "most requests in one batch"),
    FactSpec("max_model_len", int, ("max-model-len",), "longest request (prompt + output) in tokens"),
    FactSpec("tensor_parallel_size", int, ("tensor-parallel-size", "-tp"), "tensor-parallel GPUs"),
    FactSpec("pipeline_parallel_size", int, ("pipeline-parallel-size", "-pp"), "pipeline stages"),
    FactSpec("data_parallel_size", int, ("data-parallel-size", "-dp"), "data-parallel engines"),
    FactSpec("block_size", int, ("block-size",), "tokens per KV-cache block"),
    FactSpec("num_gpu_blocks", int, (), "KV-cache blocks allocated"),
    FactSpec("kv_cache_memory_bytes", int, ("kv-cache-memory-bytes", "kv-cache-memory"), "KV-cache size in bytes"),
    FactSpec("kv_cache_size_tokens", int, (), "KV-cache capacity in tokens"),
    FactSpec("gpu_memory_utilization", float, ("gpu-memory-utilization",), "share of device memory vLLM may use"),
    FactSpec("enable_prefix_caching", bool, ("enable-prefix-caching",), "automatic prefix caching"),
    FactSpec("enable_chunked_prefill", bool, ("enable-chunked-prefill",), "chunked prefill"),
    FactSpec("kv_cache_dtype", str, ("kv-cache-dtype",), "KV-cache data type"),
    FactSpec("dtype", str, ("dtype",), "model data type"),
    FactSpec("performance_mode", str, ("performance-mode",), "vLLM performance mode"),
    FactSpec("model", str, ("model",), "model served"),
    # From --speculative-config (a JSON value, or the config file's mapping): exporter.facts.cmdline.
    FactSpec("speculative_method", str, (), "speculative decoding drafter (ngram, eagle, mtp, draft_model, ...)"),
    FactSpec("num_speculative_tokens", int, (), "draft tokens per speculative step"),
    # From --kv-transfer-config (exporter.facts.cmdline): disaggregated prefill/decode and KV connectors.
    FactSpec("kv_connector", str, (), "KV connector (NixlConnector, LMCacheConnectorV1, OffloadingConnector, ...)"),
    FactSpec("kv_role", str, (), "KV transfer role: kv_producer (prefill), kv_consumer (decode) or kv_both"),
    FactSpec("kv_load_failure_policy", str, (), "what a failed KV load does: fail the request, or recompute"),
    FactSpec("kv_offloading_size", float, ("kv-offloading-size",), "native KV offload: CPU tier size in GiB"),
    FactSpec("kv_offloading_backend", str, ("kv-offloading-backend",), "native KV offload backend (native, lmcache)"),
    # LoRA and sleep mode (issue 29): whether the engine serves adapters, how many fit one batch, their rank.
    FactSpec("enable_lora", bool, ("enable-lora",), "LoRA adapters served"),
    FactSpec("max_loras", int, ("max-loras",), "LoRA adapters in one batch (adapter slots)"),
    FactSpec("max_lora_rank", int, ("max-lora-rank",), "largest LoRA rank a slot reserves memory for"),
    FactSpec("enable_sleep_mode", bool, ("enable-sleep-mode",), "sleep mode (/sleep, /wake_up) allowed"),
    FactSpec("vllm_version", str, (), "vLLM version (a release series when dated from the metrics)"),
    FactSpec("platform", str, (), "vLLM build: cpu, or a GPU build"),
    FactSpec("gpu", str, (), "GPU model (configure it)"),
    FactSpec("cpu_cores", float, (), "CPU cores for vLLM (configure it)"),
)
BY_NAME: dict[str, FactSpec] = {spec.name: spec for spec in FACTS}
BY_FLAG: dict[str, FactSpec] = {flag: spec for spec in FACTS for flag in spec.flags}

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(text: str) -> int:
    """vLLM's integer syntax: plain, or with a 1k (decimal) / 1K (binary) suffix."""
    text = text.strip()
    if text and text[-1] in _DECIMAL:
        return int(float(text[:-1]) * _DECIMAL[text[-1]])
    if text and text[-1] in _BINARY:
        return int(text[:-1]) * _BINARY[text[-1]]
    return int(text)


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


_CONVERT: dict[type, Callable[[str], FactValue]] = {int: human_int, float: float, bool: _boolean, str: str}


def convert(spec: FactSpec, raw: object) -> FactValue | None:
    """A raw value (string from argv or a label, or a YAML scalar) as the fact's type; None if unusable.

    'None', 'auto' and -1 are vLLM's spellings of "not set / decide at start-up": unknown here.
    """
    if raw is None or isinstance(raw, (dict, list)):
        return None
    if isinstance(raw, bool) and spec.kind is not bool:
        return None
    text = str(raw).strip()
    if text in ("", "None", "none") or (spec.kind is not str and text in ("auto", "-1")):
        return None
    try:
        value = _CONVERT[spec.kind](text)
    except (ValueError, OverflowError):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not (math.isfinite(value) and value > 0):
        return None
    return value
