"""Which processes are 'vLLM': a configured pid and its descendants, or a command-line match."""

from __future__ import annotations

import os
from pathlib import Path

from exporter.hostcpu.base import NoData


def _children_map(proc: Path) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # the process exited while we looked
        # comm may hold spaces and parentheses: the ppid follows the last ')'
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """pid and every process below it (vLLM's API server spawns EngineCore and workers)."""
    if not (proc / str(pid)).exists():
        raise NoData(f"no process {pid}")
    children = _children_map(proc)
    out, stack = [], [pid]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(children.get(current, ()))
    return out


def matching(pattern: str, proc: Path = Path("/proc")) -> list[int]:
    """Processes whose command line contains ``pattern``, plus their descendants."""
    own = os.getpid()
    roots = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if pattern in cmdline:
            roots.append(int(entry.name))
    if not roots:
        raise NoData(f"no process matches {pattern!r}")
    pids: set[int] = set()
    for root in roots:
        try:
            pids.update(descendants(root, proc))
        except NoData:
            continue
    return sorted(pids)


def cgroup_members(cgroup_dir: Path) -> list[int]:
    procs = cgroup_dir / "cgroup.procs"
    try:
        return [int(line) for line in procs.read_text().split()]
    except OSError as exc:
        raise NoData(f"cannot read {procs}: {exc}") from None
