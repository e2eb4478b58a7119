"""Catalog of the DCGM-exporter families the sidecar reads (parsed by ``exporter.parse``)."""

from __future__ import annotations

from exporter.catalog.metrics import Catalog, Kind, MetricDef

# Percent 0..100, one series per GPU (labels gpu, UUID, ...).
GPU_UTIL = MetricDef("DCGM_FI_DEV_GPU_UTIL", Kind.GAUGE, "GPU utilization (in %)")

DCGM_METRICS: tuple[MetricDef, ...] = (GPU_UTIL,)
DCGM = Catalog.of(DCGM_METRICS)
