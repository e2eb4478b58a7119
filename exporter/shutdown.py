"""Waiting for a stop request, for the long-running commands that are not ``web.run_app``.

Python leaves SIGTERM at its default action, and the kernel ignores that default for PID 1: in a
container the simulator and the demo would never stop on ``docker stop`` (compose waits 10 s and
kills them). Handling SIGTERM and SIGINT explicitly makes them stop cleanly everywhere.
"""

from __future__ import annotations

import asyncio
import signal

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


async def until_stopped() -> signal.Signals | None:
    """Return the signal that asked to stop (or None when cancelled), after cleaning up the handlers."""
    loop = asyncio.get_running_loop()
    stopped: asyncio.Future[signal.Signals] = loop.create_future()
    installed = []

    def stop(sig: signal.Signals) -> None:
        if not stopped.done():
            stopped.set_result(sig)

    for sig in STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, stop, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
            pass
    try:
        return await stopped
    except asyncio.CancelledError:
        return None
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
