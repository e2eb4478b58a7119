"""Engine facts from the environment variables vLLM reads a setting from.

Only the named variables are looked at; the rest of the environment (tokens, keys) is never
kept. Each entry says which fact the variable sets and whether it overrides the flag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.facts.base import FactValue

GIB = 2**30


def _gib(text: str) -> int | None:
    value = int(text)
    return value * GIB if value > 0 else None


@dataclass(frozen=True, slots=True)
class EnvSetting:
    variable: str
    fact: str
    convert: Callable[[str], FactValue | None]
    platform: str | None  # the build that reads it (None: every build)
    overrides_flag: bool  # vLLM applies it over the command-line flag


SETTINGS: tuple[EnvSetting, ...] = (
    # vllm/platforms/cpu.py (0.32): a set, non-empty VLLM_CPU_KVCACHE_SPACE (GiB) replaces
    # cache_config.kv_cache_memory_bytes, even when --kv-cache-memory-bytes was given.
    EnvSetting("VLLM_CPU_KVCACHE_SPACE", "kv_cache_memory_bytes", _gib, "cpu", True),
)
VARIABLES: frozenset[str] = frozenset(s.variable for s in SETTINGS)


def facts(environment: Mapping[str, str], platform: str | None) -> tuple[dict[str, FactValue], dict[str, FactValue]]:
    """(facts that override the command line, facts the command line overrides) for this build."""
    over: dict[str, FactValue] = {}
    under: dict[str, FactValue] = {}
    for setting in SETTINGS:
        raw = environment.get(setting.variable, "")
        if raw == "" or (setting.platform is not None and setting.platform != platform):
            continue
        try:
            value = setting.convert(raw)
        except ValueError:
            continue
        if value is not None:
            (over if setting.overrides_flag else under)[setting.fact] = value
    return over, under
