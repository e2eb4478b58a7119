"""Datasheet figures of common inference GPUs, for rules that compare achieved work with peak.

Keyed by the ``engine.gpu`` fact. Matching is by the first known key found in the name, case-
insensitive, so "H100", "NVIDIA H100 80GB HBM3" and "h100-sxm" all find the H100 entry. Dense
BF16 tensor throughput, HBM bandwidth and memory per GPU, from the vendors' datasheets (SXM
variants where there are several).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class GpuDatasheet:
    name: str
    memory_bytes: float
    hbm_bandwidth: float  # bytes/s
    peak_flops: float  # dense BF16 FLOP/s


_GB = 1e9
_TB = 1e12

GPUS: Mapping[str, GpuDatasheet] = MappingProxyType({g.name.lower(): g for g in (
    GpuDatasheet("B200", 180 * _GB, 8.0 * _TB, 2250 * _TB),
    GpuDatasheet("H200", 141 * _GB, 4.8 * _TB, 989 * _TB),
    GpuDatasheet("H100", 80 * _GB, 3.35 * _TB, 989 * _TB),
    GpuDatasheet("H800", 80 * _GB, 3.35 * _TB, 989 * _TB),
    GpuDatasheet("GH200", 96 * _GB, 4.0 * _TB, 989 * _TB),
    GpuDatasheet("A100", 80 * _GB, 2.0 * _TB, 312 * _TB),
    GpuDatasheet("A800", 80 * _GB, 2.0 * _TB, 312 * _TB),
    GpuDatasheet("L40S", 48 * _GB, 0.864 * _TB, 362 * _TB),
    GpuDatasheet("L40", 48 * _GB, 0.864 * _TB, 181 * _TB),
    GpuDatasheet("A10G", 24 * _GB, 0.6 * _TB, 70 * _TB),
    GpuDatasheet("A10", 24 * _GB, 0.6 * _TB, 125 * _TB),
    GpuDatasheet("L4", 24 * _GB, 0.3 * _TB, 121 * _TB),
    GpuDatasheet("MI300X", 192 * _GB, 5.3 * _TB, 1307 * _TB),
)})


def lookup(name: str | None) -> GpuDatasheet | None:
    """The datasheet for a GPU name as an operator writes it, or None when unknown."""
    if not name:
        return None
    lowered = name.lower()
    # Longest keys first, so "L40S" wins over "L40" and "A10G" over "A10".
    for key in sorted(GPUS, key=len, reverse=True):
        if key in lowered:
            return GPUS[key]
    return None
