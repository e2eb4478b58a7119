"""Which inputs of the paging alert rules a target provides (``catalog.metrics.WATCHED_INPUTS``).

An alert that cannot see its input stays silent, which looks like health: the sidecar says which
inputs are there so a missing one (a renamed family after a vLLM upgrade, an unreadable CPU source)
pages on its own instead of hiding a problem.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.catalog.metrics import CPU_SOURCE_INPUT, WATCHED_INPUTS
from exporter.signals import HostInputs
from exporter.snapshot import Snapshot

# The host CPU readings the starvation score reads (exporter/hostcpu); schedstat failures are always
# reported, so no schedstat error means it was read.
CPU_READINGS: frozenset[str] = frozenset({"schedstat", "cgroup", "psi"})


def cpu_readable(host: HostInputs) -> bool:
    """The host CPU source gave a reading this time."""
    return bool(CPU_READINGS.intersection(host.sources)) or not any(
        source == "hostcpu:schedstat" for source, _ in host.errors)


def available(latest: Snapshot | None, cpu_configured: bool, host: HostInputs | None) -> dict[str, bool]:
    """Each watched input: present in the latest successful scrape (``latest`` None: a target down, all
    False); ``cpu_source`` only when the target configures one, then whether it was read."""
    out: dict[str, bool] = {}
    for name, family in WATCHED_INPUTS.items():
        if name == CPU_SOURCE_INPUT:
            if cpu_configured:
                out[name] = latest is not None and host is not None and cpu_readable(host)
        elif family is not None:
            out[name] = latest is not None and latest.has(family)
    return out


def down(previous: Mapping[str, bool]) -> dict[str, bool]:
    """A target that stopped answering: every input it had is unavailable (none before its first scrape)."""
    return {name: False for name in previous}
