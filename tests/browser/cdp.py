"""A real headless Chromium driven over the DevTools protocol (aiohttp websocket, no extra package).

``async with Chromium(url) as page: await page.evaluate("js expression")`` loads ``url`` and
returns the JSON value of the expression, computed by the browser: layout, computed styles and
``fetch`` of the page's own links all come from the real engine.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from itertools import count
from pathlib import Path
from typing import Any

import aiohttp
import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic")


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed (scripts/install-test-infra.sh installs it)")
    return path


class Chromium:
    def __init__(self, url: str, timeout: float = 60.0) -> None:
        self.url, self.timeout = url, timeout
        self._ids = count(1)

    async def __aenter__(self) -> Chromium:
        # Chromium helpers may still write to the profile for a moment after the kill.
        self._profile = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
        self._proc = await asyncio.create_subprocess_exec(
            chromium_path(), *FLAGS, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
            f"--user-data-dir={self._profile.name}", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )
        self._session = aiohttp.ClientSession()
        try:
            port = await self._devtools_port(Path(self._profile.name) / "DevToolsActivePort")
            async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
                pages = [t for t in await response.json() if t["type"] == "page"]
            self._ws = await self._session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
            await self.call("Page.enable")
            await self.call("Page.navigate", url=self.url)
            await self._wait_loaded()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if getattr(self, "_ws", None) is not None:
            await self._ws.close()
        await self._session.close()
        if self._proc.returncode is None:
            self._proc.kill()  # our own child, by its PID
            await self._proc.wait()
        self._profile.cleanup()

    async def _devtools_port(self, marker: Path) -> int:
        for _ in range(int(self.timeout * 10)):
            if marker.is_file() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            await asyncio.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    async def _wait_loaded(self) -> None:
        for _ in range(int(self.timeout * 10)):
            if (await self.evaluate("document.readyState") == "complete"
                    and await self.evaluate("location.href") != "about:blank"):
                return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.url} did not load")

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = await asyncio.wait_for(self._ws.receive(), timeout=self.timeout)
            if message.type != aiohttp.WSMsgType.TEXT:
                raise ConnectionError(f"DevTools connection closed: {message.type}")
            reply = json.loads(message.data)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (promises awaited)."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")
