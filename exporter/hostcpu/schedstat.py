"""Run-queue wait of the vLLM threads, from /proc/<pid>/task/<tid>/schedstat.

Fields: on-CPU ns, run-queue wait ns, timeslices. The wait share (wait / (run + wait)) is
the most portable starvation signal: an engine-core busy loop short of CPU waits in the
run queue instead of running (measured 0.73-0.80 under real starvation).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from exporter.hostcpu.base import NoData


class SchedstatReader:
    name = "schedstat"

    def __init__(self, pids: Callable[[], list[int]], proc: Path = Path("/proc")) -> None:
        self._pids = pids
        self._proc = proc
        self._last: dict[int, tuple[int, int]] = {}

    def read(self) -> dict[str, float]:
        """Cumulative run and wait ns over threads seen now and at the last read.

        Threads come and go; summing raw totals would go backwards when one exits. So this
        keeps per-thread totals and accumulates only the deltas of threads seen twice.
        """
        current: dict[int, tuple[int, int]] = {}
        for pid in self._pids():
            task_dir = self._proc / str(pid) / "task"
            try:
                tids = [int(t.name) for t in task_dir.iterdir() if t.name.isdigit()]
            except OSError:
                continue
            for tid in tids:
                try:
                    fields = (task_dir / str(tid) / "schedstat").read_text().split()
                except OSError:
                    continue
                if len(fields) >= 2:
                    current[tid] = (int(fields[0]), int(fields[1]))
        if not current:
            raise NoData("no readable schedstat for the vLLM processes")
        run = wait = 0
        for tid, (r, w) in current.items():
            before = self._last.get(tid)
            if before is not None and r >= before[0] and w >= before[1]:
                run += r - before[0]
                wait += w - before[1]
        self._last = current
        self._run_total = getattr(self, "_run_total", 0) + run
        self._wait_total = getattr(self, "_wait_total", 0) + wait
        return {"run_ns": float(self._run_total), "wait_ns": float(self._wait_total)}
