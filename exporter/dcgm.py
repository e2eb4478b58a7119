"""Optional GPU utilisation from a DCGM exporter, to confirm 'GPU idle while work waits'.

vLLM exports no GPU utilisation; NVIDIA's dcgm-exporter does (``DCGM_FI_DEV_GPU_UTIL``, percent
per GPU). The payload goes through the same parser as vLLM's, with the DCGM catalog
(``exporter.catalog.dcgm``); the mean over the GPUs it lists is one reading, and the pipeline
averages readings over its window.
"""

from __future__ import annotations

from exporter.catalog.dcgm import DCGM, GPU_UTIL
from exporter.parse import ParseError, parse


def gpu_utilization(text: str) -> float | None:
    """Mean GPU utilisation 0..1 across the GPUs in a dcgm-exporter payload.

    None when the family is absent, no value lies within 0..100 %, or the payload is not an
    exposition (the sidecar counts that as a ``parse`` error of the ``dcgm`` source).
    """
    try:
        snapshot = parse(text, 0.0, catalog=DCGM)
    except ParseError:
        return None
    values = [value / 100.0 for value in snapshot.scalars.get(GPU_UTIL.name, {}).values() if 0.0 <= value <= 100.0]
    return sum(values) / len(values) if values else None
