"""Real CPU starvation for a running vLLM: a cgroup-v1 CFS quota the test creates and removes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

CPU_V1 = Path("/sys/fs/cgroup/cpu")


def _cpu_cgroup_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return "/"


@contextlib.contextmanager
def cpu_quota(pids: list[int], cpus: float, period_us: int = 100_000) -> Iterator[Path]:
    """Move ``pids`` (whole thread groups) into a new cgroup limited to ``cpus`` CPUs per ``period_us``;
    undo on exit. A short period spreads the limit evenly (a slower machine); the default 100 ms lets a
    burst run, then stalls it, as a container's limit does."""
    if not (CPU_V1 / "cpu.cfs_quota_us").exists():
        raise RuntimeError(f"no cgroup-v1 cpu controller at {CPU_V1}")
    group = CPU_V1 / f"vllm-diag-test-{os.getpid()}"
    group.mkdir(exist_ok=True)
    (group / "cpu.cfs_period_us").write_text(str(period_us))
    (group / "cpu.cfs_quota_us").write_text(str(max(1000, int(period_us * cpus))))  # the kernel's floor: 1 ms
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


# -- the vLLM processes in cgroups of their own, for PSI and CFS throttling ----------------------

def cgroup_v2_root() -> Path | None:
    """The writable cgroup-v2 hierarchy: /sys/fs/cgroup (pure v2) or /sys/fs/cgroup/unified (hybrid).

    PSI (cpu.pressure) exists per cgroup only in v2; hybrid hosts mount v2 beside the v1
    controllers with no controller enabled, which still tracks pressure per group.
    """
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (root / "cgroup.controllers").exists() and (root / "cpu.pressure").exists() and os.access(root, os.W_OK):
            return root
    return None


def _v2_cgroup_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            return path
    return "/"


@contextlib.contextmanager
def own_cgroups(pids: list[int], cpus: float) -> Iterator[tuple[Path, Path]]:
    """Move ``pids`` into a new cgroup-v2 group (its cpu.pressure is their PSI) and a new v1 cpu
    group with a CFS quota of ``cpus`` (its cpu.stat counts throttled periods), as a container
    with a CPU limit would; both are undone on exit. Yields (v2 dir, v1 cpu dir)."""
    v2_root = cgroup_v2_root()
    if v2_root is None:
        raise RuntimeError("no writable cgroup-v2 hierarchy with cpu.pressure")
    v2_group = v2_root / f"vllm-diag-test-{os.getpid()}"
    v2_group.mkdir(exist_ok=True)
    origins = {pid: _v2_cgroup_of(pid) for pid in pids}
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, OSError):
                (v2_group / "cgroup.procs").write_text(str(pid))
        with cpu_quota(pids, cpus) as v1_group:
            yield v2_group, v1_group
    finally:
        for pid, origin in origins.items():
            with contextlib.suppress(ProcessLookupError, OSError):
                (v2_root / origin.lstrip("/") / "cgroup.procs").write_text(str(pid))
        with contextlib.suppress(OSError):
            v2_group.rmdir()
