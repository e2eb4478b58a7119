"""Real CPU starvation for a running vLLM: a cgroup-v1 CFS quota the test creates and removes."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

CPU_V1 = Path("/sys/fs/cgroup/cpu")


def _cpu_cgroup_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return "/"


@contextlib.contextmanager
def cpu_quota(pids: list[int], cpus: float) -> Iterator[Path]:
    """Move ``pids`` (whole thread groups) into a new cgroup limited to ``cpus`` CPUs; undo on exit."""
    if not (CPU_V1 / "cpu.cfs_quota_us").exists():
        raise RuntimeError(f"no cgroup-v1 cpu controller at {CPU_V1}")
    group = CPU_V1 / f"vllm-diag-test-{os.getpid()}"
    group.mkdir(exist_ok=True)
    period = 100_000
    (group / "cpu.cfs_period_us").write_text(str(period))
    (group / "cpu.cfs_quota_us").write_text(str(int(period * cpus)))
    origins = {pid: _cpu_cgroup_of(pid) for pid in pids}
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, OSError):
                (group / "cgroup.procs").write_text(str(pid))
        yield group
    finally:
        for pid, origin in origins.items():
            with contextlib.suppress(ProcessLookupError, OSError):
                (CPU_V1 / origin.lstrip("/") / "cgroup.procs").write_text(str(pid))
        with contextlib.suppress(OSError):
            group.rmdir()
