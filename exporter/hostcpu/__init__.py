"""CPU evidence from outside vLLM's /metrics, read from /proc and cgroupfs.

One reader per file behind a small interface (node_exporter style): each ``read()`` returns
cumulative counters or raises :class:`NoData` when the feature is absent on this host.
:class:`HostProbe` turns successive readings into window shares for the signals stage.
"""

from __future__ import annotations

from exporter.hostcpu.probe import HostProbe, host_probe_for

__all__ = ["HostProbe", "host_probe_for"]
