"""Optional GPU utilisation from a DCGM exporter, to confirm 'GPU idle while work waits'.

vLLM exports no GPU utilisation; NVIDIA's dcgm-exporter does (``DCGM_FI_DEV_GPU_UTIL``, percent
per GPU). The mean over the GPUs it lists is one reading; the pipeline averages readings over
its window.
"""

from __future__ import annotations

import re

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
_SAMPLE = re.compile(r"^DCGM_FI_DEV_GPU_UTIL(?:\{[^}]*\})?[ \t]+([^ \t\n]+)", re.M)


def gpu_utilization(text: str) -> float | None:
    """Mean GPU utilisation 0..1 across the GPUs in a dcgm-exporter payload; None if absent."""
    values = []
    for match in _SAMPLE.finditer(text):
        try:
            value = float(match.group(1))
        except ValueError:
            continue
        if 0.0 <= value <= 100.0:
            values.append(value / 100.0)
    return sum(values) / len(values) if values else None
