"""Render the simulated engine's GPUs as dcgm-exporter's ``/metrics``: its default + DCP counters (its CSV
help texts, its label order, integers for integer fields)."""

from __future__ import annotations

from typing import Final

from exporter.simulator.dataparallel import DataParallelEngine
from exporter.simulator.engine import Engine

DCGM_HELP: Final[tuple[tuple[str, str, str], ...]] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
        "payloads - in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data "
        "payloads - in bytes per second.",
    ),
)
DCGM_DRIVER_VERSION: Final = "570.124.06"
DCGM_HOSTNAME: Final = "gpu-node-0"


def render_dcgm(engine: Engine | DataParallelEngine) -> str:
    """dcgm-exporter's ``/metrics`` for the engine's GPUs (TP x PP of them).

    Utilisation gauges cover the last complete simulated second, as DCGM samples them. Every
    TP rank runs the same kernels in lock step, so ranks report the same activity.
    """
    cfg, st, gpu = engine.cfg, engine.stats, engine.cfg.gpu
    n_gpus = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
    win = engine.gpu_window(1)
    busy = min(1.0, win.busy_s)
    total_mib = int(gpu.memory_bytes / 2**20)
    reserved_mib = 563
    used_mib = min(total_mib - reserved_mib, int(gpu.memory_bytes * cfg.gpu_memory_utilization / 2**20) + 520)
    power = gpu.idle_power_w + (gpu.max_power_w - gpu.idle_power_w) * (0.35 * busy + 0.5 * min(1.0, win.tensor_s))
    energy_mj = 1000.0 * (gpu.idle_power_w * engine.now + (gpu.max_power_w - gpu.idle_power_w) * 0.6 * st.gpu_busy_s)
    comm = win.comm_bytes  # bytes each GPU moved over its link in the last second
    values: dict[str, str] = {
        "DCGM_FI_DEV_SM_CLOCK": str(gpu.sm_clock_mhz if busy > 0 else 345),
        "DCGM_FI_DEV_MEM_CLOCK": str(gpu.mem_clock_mhz),
        "DCGM_FI_DEV_MEMORY_TEMP": str(int(38 + 30 * busy)),
        "DCGM_FI_DEV_GPU_TEMP": str(int(33 + 35 * busy)),
        "DCGM_FI_DEV_POWER_USAGE": f"{power:.3f}",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": str(int(energy_mj)),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "0",
        "DCGM_FI_DEV_GPU_UTIL": str(int(round(100 * busy))),
        "DCGM_FI_DEV_MEM_COPY_UTIL": str(int(round(100 * min(1.0, win.dram_s)))),
        "DCGM_FI_DEV_ENC_UTIL": "0",
        "DCGM_FI_DEV_DEC_UTIL": "0",
        "DCGM_FI_DEV_XID_ERRORS": "0",
        "DCGM_FI_DEV_FB_FREE": str(total_mib - reserved_mib - used_mib),
        "DCGM_FI_DEV_FB_USED": str(used_mib),
        "DCGM_FI_DEV_FB_RESERVED": str(reserved_mib),
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": str(int(st.comm_bytes / 1024) if gpu.nvlink else 0),
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "0",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "0",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "0",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": "0",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": f"{busy:.6f}",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": f"{min(1.0, win.tensor_s) * 0.8:.6f}",
        "DCGM_FI_PROF_DRAM_ACTIVE": f"{min(1.0, win.dram_s):.6f}",
        "DCGM_FI_PROF_PCIE_TX_BYTES": str(int(2.4e6 + (0 if gpu.nvlink else comm))),
        "DCGM_FI_PROF_PCIE_RX_BYTES": str(int(3.1e6 + (0 if gpu.nvlink else comm))),
    }
    lines: list[str] = []
    for name, kind, help_text in DCGM_HELP:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for i in range(n_gpus):
            # dcgm-exporter prints labels in its own (not alphabetical) order.
            labels = (
                f'gpu="{i}",UUID="GPU-5e1f0c2a-7d3b-4c9e-a1f0-{i:012d}",'
                f'pci_bus_id="00000000:{0x18 + 0x10 * i:02X}:00.0",'
                f'device="nvidia{i}",modelName="{gpu.model_name}",Hostname="{DCGM_HOSTNAME}",'
                f'DCGM_FI_DRIVER_VERSION="{DCGM_DRIVER_VERSION}"'
            )
            lines.append(f"{name}{{{labels}}} {values[name]}")
    return "\n".join(lines) + "\n"
