"""The sidecar's own process metrics (``vllm_diag_process_*``): prometheus_client's ``ProcessCollector``
text, without prometheus_client.

Six numbers about the sidecar itself, read from /proc at each ``/metrics`` request. prometheus_client's
package brings its HTTP and WSGI servers, push gateway and multiprocess mode along with its collector
(about 0.9 MB of a one-target sidecar's RSS); only the central mode, whose collector is a prometheus_client
one, loads it (``Sidecar.registry``). The bytes are those ``generate_latest`` writes for the collector on
the same /proc files (tests/unit/test_process_metrics.py compares them).
"""

from __future__ import annotations

import os
import resource

from exporter.publish.exposition import go_float


def _boot_time(proc: str) -> float:
    with open(os.path.join(proc, "stat"), "rb") as stat:
        for line in stat:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    return 0.0


def _family(name: str, kind: str, doc: str, value: float) -> str:
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n{name} {go_float(value)}\n"


class ProcessMetrics:
    """``ProcessCollector(namespace=...)``'s families for the process ``pid`` under ``proc``."""

    def __init__(self, namespace: str, proc: str = "/proc", pid: str = "self") -> None:
        self.prefix = f"{namespace}_process_" if namespace else "process_"
        self.path = os.path.join(proc, pid)
        try:
            self.ticks = float(os.sysconf("SC_CLK_TCK"))
        except (ValueError, OSError):
            self.ticks = 100.0
        try:
            self.btime = _boot_time(proc)  # 0: no /proc to read, and no families
        except OSError:
            self.btime = 0.0

    def render(self) -> bytes:
        if not self.btime:
            return b""
        p, out = self.prefix, []
        try:
            with open(os.path.join(self.path, "stat"), "rb") as stat:
                parts = stat.read().split(b")")[-1].split()
            out += [
                _family(p + "virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", float(parts[20])),
                _family(p + "resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                        float(parts[21]) * resource.getpagesize()),
                _family(p + "start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
                        float(parts[19]) / self.ticks + self.btime),
                _family(p + "cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
                        float(parts[11]) / self.ticks + float(parts[12]) / self.ticks),
            ]
        except OSError:
            pass
        try:
            max_fds = None
            with open(os.path.join(self.path, "limits"), "rb") as limits:
                for line in limits:
                    if line.startswith(b"Max open file"):
                        max_fds = float(line.split()[3])
                        break
            open_fds = len(os.listdir(os.path.join(self.path, "fd")))
            out.append(_family(p + "open_fds", "gauge", "Number of open file descriptors.", open_fds))
            if max_fds is not None:
                out.append(_family(p + "max_fds", "gauge", "Maximum number of open file descriptors.", max_fds))
        except OSError:
            pass
        return "".join(out).encode()
