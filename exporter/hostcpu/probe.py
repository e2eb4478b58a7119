"""Turn the readers' cumulative counters into shares over the diagnosis window."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from exporter.catalog.thresholds import DEFAULTS
from exporter.config import Target
from exporter.hostcpu.base import NoData, Reader
from exporter.hostcpu.cgroup import CgroupThrottleReader, find_throttle_reader, v2_dir_for
from exporter.hostcpu.processes import cgroup_members, descendants, matching
from exporter.hostcpu.psi import PsiReader
from exporter.hostcpu.schedstat import SchedstatReader
from exporter.signals import HostInputs
from exporter.timebuffer import TimeBuffer

log = logging.getLogger(__name__)


class HostProbe:
    """Reads every available CPU source at each evaluation and keeps ``span`` seconds of deltas.

    The shares it returns are read over the newest ``recent_evaluations`` evaluations (the rules judge
    the host as it is now), with the same shares over the whole span in ``HostInputs.window``.
    """

    def __init__(self, pids: Callable[[], list[int]], span_seconds: float, *, cgroup_dir: Path | None = None,
                 proc: Path = Path("/proc"), psi_path: Path | None = None,
                 readers: Mapping[str, Callable[[], Reader]] | None = None,
                 recent_evaluations: int = int(DEFAULTS["recent_evaluations"])) -> None:
        self._pids = pids
        self._proc = proc
        self.span = span_seconds
        self._schedstat = SchedstatReader(pids, proc)
        self._cgroup_dir = cgroup_dir
        self._throttle: CgroupThrottleReader | None = None
        self._psi_path = psi_path
        # source -> its cumulative counters, per evaluation; the baseline keeps the deltas over the whole span
        self._history: TimeBuffer[dict[str, dict[str, float]]] = TimeBuffer(span_seconds, keep_baseline=True)
        self._failed: list[tuple[str, str]] = []
        self.recent_evaluations = recent_evaluations  # the rules' recent horizon, resolved from the config
        self._warned: set[str] = set()
        # source name -> its reader; the default reads /proc and the cgroup (a simulator passes its own)
        self._readers: Mapping[str, Callable[[], Reader]] = readers if readers is not None else {
            "schedstat": lambda: self._schedstat, "cgroup": self._throttle_reader, "psi": self._psi_reader}

    def _throttle_reader(self) -> Reader:
        if self._cgroup_dir is not None:
            return CgroupThrottleReader(self._cgroup_dir)
        # Resolved at every read: vLLM restarts, and processes can be moved between cgroups.
        pids = self._pids()
        if not pids:
            raise NoData("no vLLM process")
        reader = find_throttle_reader(pids[-1], self._proc)
        if self._throttle is not None and reader.directory != self._throttle.directory:
            # Counters of another cgroup are not comparable: restart the history of this source.
            for readings in self._history:
                readings.pop("cgroup", None)
        self._throttle = reader
        return reader

    def _psi_reader(self) -> Reader:
        """PSI of the vLLM cgroup only: host-wide pressure blames vLLM for anyone's load."""
        if self._psi_path is not None:
            return PsiReader(self._psi_path)
        directory = self._cgroup_dir
        if directory is None:
            pids = self._pids()
            if not pids:
                raise NoData("no vLLM process")
            directory = v2_dir_for(pids[-1], self._proc)
        return PsiReader(directory / "cpu.pressure")

    def _read(self, name: str, get_reader: Callable[[], Reader]) -> dict[str, float] | None:
        try:
            return get_reader().read()
        except NoData as exc:
            if name not in self._warned:
                self._warned.add(name)
                log.info("CPU source %s unavailable: %s", name, exc)
            self._failed.append((name, "unavailable"))
            return None
        except OSError as exc:  # a permission or a vanished /proc entry: counted, never raised
            self._failed.append((name, "read"))
            log.debug("CPU source %s: %s", name, exc)
            return None

    def __call__(self, now: float) -> HostInputs:
        readings: dict[str, dict[str, float]] = {}
        self._failed = []
        for name, reader in self._readers.items():
            value = self._read(name, reader)
            if value is not None:
                readings[name] = value
        self._history.push(now, readings)
        # Only the schedstat source is expected everywhere; cgroup and PSI depend on the host.
        errors = tuple(e for e in self._failed if e[0] == "schedstat" or e[1] != "unavailable")
        inputs = self.inputs()
        return replace(inputs, errors=tuple((f"hostcpu:{n}", r) for n, r in errors))

    def inputs(self) -> HostInputs:
        """The shares over the newest ``recent_evaluations`` evaluations, with the whole span's as ``window``."""
        if len(self._history) < 2:
            return HostInputs()
        entries = self._history.newest(len(self._history))
        recent = _shares(entries[-(self.recent_evaluations + 1):])
        return replace(recent, window=_shares(entries))


def _delta(entries: list[tuple[float, dict[str, dict[str, float]]]], source: str, key: str) -> float | None:
    first = next((r[source][key] for _, r in entries if source in r), None)
    last = next((r[source][key] for _, r in reversed(entries) if source in r), None)
    if first is None or last is None or last < first:
        return None
    return last - first


def _shares(entries: list[tuple[float, dict[str, dict[str, float]]]]) -> HostInputs:
    """Run-queue wait, throttling and PSI shares between the oldest and the newest of ``entries``."""
    if len(entries) < 2:
        return HostInputs()
    span = entries[-1][0] - entries[0][0]
    sources = []
    wait_share = throttled = psi = None
    run, wait = _delta(entries, "schedstat", "run_ns"), _delta(entries, "schedstat", "wait_ns")
    busy = None
    if run is not None and wait is not None and run + wait > 0:
        wait_share = wait / (run + wait)
        busy = run / 1e9 / span if span > 0 else None
        sources.append("schedstat")
    periods, hits = _delta(entries, "cgroup", "nr_periods"), _delta(entries, "cgroup", "nr_throttled")
    if periods is not None and hits is not None and periods > 0:
        throttled = hits / periods
        sources.append("cgroup")
    some = _delta(entries, "psi", "some_us")
    if some is not None and span > 0:
        psi = min(1.0, some / (span * 1e6))
        sources.append("psi")
    return HostInputs(cpu_wait_share=wait_share, cpu_busy_cores=busy, cpu_throttled_share=throttled,
                      cpu_psi_share=psi, sources=tuple(sources))


def host_probe_for(target: Target, span_seconds: float | None = None,
                   recent_evaluations: int = int(DEFAULTS["recent_evaluations"])) -> HostProbe | None:
    """A probe for a target with a configured CPU source, else None (rules then abstain).

    ``span_seconds`` is the window the shares are kept for, ``recent_evaluations`` the horizon the rules
    read them over (both from the sidecar's resolved settings: ``server.HostProbeFactory``).
    """
    source = target.cpu
    if source is None:
        return None
    span = span_seconds or 60.0
    if source.pid is not None:
        pid = source.pid
        return HostProbe(lambda: _safe(lambda: descendants(pid)), span, recent_evaluations=recent_evaluations)
    if source.match is not None:
        pattern = source.match
        return HostProbe(lambda: _safe(lambda: matching(pattern)), span, recent_evaluations=recent_evaluations)
    directory = Path(source.cgroup or "")
    if not directory.is_absolute():
        directory = Path("/sys/fs/cgroup") / directory
    return HostProbe(lambda: _safe(lambda: cgroup_members(directory)), span, cgroup_dir=directory,
                     recent_evaluations=recent_evaluations)


def _safe(find: Callable[[], list[int]]) -> list[int]:
    try:
        return find()
    except NoData:
        return []
