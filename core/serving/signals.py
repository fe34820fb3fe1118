"""How every serving process (router, instance, pod) is told to stop: SIGTERM from its controller or the
cluster, SIGINT from a person at its terminal. Each then finishes what it has in flight."""

from __future__ import annotations

import asyncio
import signal


async def until_stopped() -> None:
    """Return once SIGTERM or SIGINT arrives."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
