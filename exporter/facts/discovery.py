"""Per target: which sources to ask, when, and what they said (source -> facts)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp

from exporter.config import Target
from exporter.facts import environ
from exporter.facts.base import CMDLINE, ENVIRONMENT, PROCESS, VLLM_CONFIG_FILE, FactValue, NoFacts
from exporter.facts.http_api import HTTP_SOURCES, HttpFactSource
from exporter.facts.process import ProcessLocator, read_environment
from exporter.poll import fetch

log = logging.getLogger(__name__)

# Facts change only when vLLM restarts; a minute bounds how stale they can be otherwise.
REFRESH_SECONDS = 60.0
HTTP_MAX_BYTES = 1024 * 1024
_LOCAL_HOSTS = frozenset({"127.0.0.1", "::1", "localhost", "0.0.0.0", "::"})


class FactSink(Protocol):
    def observe_facts(self, source: str, values: Mapping[str, FactValue] | None) -> None:
        ...


def is_local(url: str) -> bool:
    """A target this host serves (only then is the process on its port the target's vLLM)."""
    host = urlsplit(url).hostname or ""
    return host in _LOCAL_HOSTS or host.startswith("127.") or host == socket.gethostname()


def target_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


class ProcessFacts:
    """cmdline, vllm_config_file, environment and process facts of the vLLM serving a local port."""

    def __init__(self, port: int, proc: Path = Path("/proc"), *, same_network: bool = True) -> None:
        self.locator = ProcessLocator(port, proc, same_network=same_network)
        self.proc = proc

    def read(self) -> dict[str, dict[str, FactValue]]:
        found = self.locator.locate()
        flags, from_file = dict(found.invocation.flags), dict(found.invocation.config_file)
        try:
            variables = read_environment(found.pid, environ.VARIABLES, self.proc)
        except NoFacts:
            variables = {}  # another user's environment: the flags still stand
        over, under = environ.facts(variables, found.platform)
        for name in over:  # vLLM applies these over the flag: the flag is not what runs
            flags.pop(name, None)
            from_file.pop(name, None)
        out = {CMDLINE: flags, VLLM_CONFIG_FILE: from_file, ENVIRONMENT: {**under, **over}}
        out[PROCESS] = {"platform": found.platform} if found.platform else {}
        return out


class FactDiscovery:
    """Asks the target's sources every REFRESH_SECONDS (and after a vLLM restart)."""

    def __init__(self, target: Target, *, local: bool | None = None, proc: Path = Path("/proc"),
                 refresh_seconds: float = REFRESH_SECONDS) -> None:
        self.target = target
        # local=False (diagnose --url): no process access at all.
        use_process = target.discover and local is not False
        same_network = is_local(target.url) if local is None else local
        self.process = ProcessFacts(target_port(target.url), proc, same_network=same_network) if use_process else None
        self.http: tuple[HttpFactSource, ...] = HTTP_SOURCES if target.discover else ()
        self.refresh_seconds = refresh_seconds
        self._last: float | None = None
        self._restarts = 0
        self._reported: dict[str, str] = {}

    def due(self, now: float, restarts: int = 0) -> bool:
        if restarts != self._restarts:
            self._restarts = restarts
            return True
        return self._last is None or now - self._last >= self.refresh_seconds

    def _report(self, source: str, problem: str | None) -> None:
        """Log a source's problem once, and its recovery; never the facts' raw inputs."""
        if problem is None:
            if self._reported.pop(source, None) is not None:
                log.info("engine facts of %s: %s readable again", self.target.name, source)
        elif self._reported.get(source) != problem:
            self._reported[source] = problem
            log.info("engine facts of %s: %s unavailable: %s", self.target.name, source, problem)

    def read_process(self) -> dict[str, dict[str, FactValue]] | None:
        if self.process is None:
            return None
        try:
            found = self.process.read()
        except NoFacts as exc:
            self._report(CMDLINE, str(exc))
            return None
        self._report(CMDLINE, None)
        return found

    async def read_http(self, session: aiohttp.ClientSession) -> dict[str, dict[str, FactValue] | None]:
        out: dict[str, dict[str, FactValue] | None] = {}
        for source in self.http:
            result = await fetch(session, source.url(self.target.url), timeout=self.target.timeout,
                                 max_bytes=HTTP_MAX_BYTES)
            if result.body is None:
                self._report(source.name, result.error or "failed")
                out[source.name] = None
                continue
            try:
                out[source.name] = dict(source.parse(result.body))
                self._report(source.name, None)
            except NoFacts as exc:
                self._report(source.name, str(exc))
                out[source.name] = None
        return out

    async def refresh(self, session: aiohttp.ClientSession, sink: FactSink, now: float | None = None) -> None:
        self._last = time.time() if now is None else now
        try:
            if self.process is not None:
                local = await asyncio.get_running_loop().run_in_executor(None, self.read_process)
                for source in (CMDLINE, VLLM_CONFIG_FILE, ENVIRONMENT, PROCESS):
                    sink.observe_facts(source, None if local is None else local[source])
            for source, values in (await self.read_http(session)).items():
                sink.observe_facts(source, values)
        except Exception as exc:  # discovery is a side feature: it must never stop the diagnosis
            self._report("discovery", f"{type(exc).__name__} (facts kept from the last good read)")
