"""CFS throttling of the vLLM cgroup: cgroup v2 ``cpu.stat`` or v1 ``cpu/<path>/cpu.stat``."""

from __future__ import annotations

from pathlib import Path

from exporter.hostcpu.base import NoData, read_text


def cgroup_dirs_for(pid: int, proc: Path = Path("/proc"), root: Path = Path("/sys/fs/cgroup")) -> list[Path]:
    """Candidate cgroup directories holding ``cpu.stat`` for a process, v2 first then v1."""
    dirs: list[Path] = []
    for line in read_text(proc / str(pid) / "cgroup").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        rel = path.lstrip("/")
        if hierarchy == "0" and controllers == "":
            # unified (v2): mounted at the root, or under unified/ on hybrid hosts
            dirs[0:0] = [root / rel, root / "unified" / rel]
        elif "cpu" in controllers.split(","):
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                dirs.append(root / mount / rel)
    return dirs


class CgroupThrottleReader:
    name = "cgroup"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for line in read_text(self.directory / "cpu.stat").splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                values[key] = float(value)
        if "nr_periods" not in values or "nr_throttled" not in values:
            raise NoData(f"{self.directory}/cpu.stat has no CFS period counters")
        return {"nr_periods": values["nr_periods"], "nr_throttled": values["nr_throttled"]}


def find_throttle_reader(pid: int, proc: Path = Path("/proc"),
                         root: Path = Path("/sys/fs/cgroup")) -> CgroupThrottleReader:
    for directory in cgroup_dirs_for(pid, proc, root):
        reader = CgroupThrottleReader(directory)
        try:
            reader.read()
        except NoData:
            continue
        return reader
    raise NoData(f"no cgroup cpu.stat with CFS counters for pid {pid}")


def v2_dir_for(pid: int, proc: Path = Path("/proc"), root: Path = Path("/sys/fs/cgroup")) -> Path:
    """The process's own cgroup-v2 directory (not the root: root pressure is the whole host's)."""
    for line in read_text(proc / str(pid) / "cgroup").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "" and path.strip("/"):
            for base in (root, root / "unified"):
                if (base / path.lstrip("/") / "cpu.pressure").exists():
                    return base / path.lstrip("/")
    raise NoData(f"pid {pid} has no cgroup-v2 cpu.pressure of its own")
