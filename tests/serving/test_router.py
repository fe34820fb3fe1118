"""The router over instances served by the test: a request whose instance refuses the connection goes to
another instance (the refused one never saw it: a scale-in stopped it before the router's instance set
caught up, so nothing runs twice); with every instance slot taken and the queue full, a request is
answered 503 at once."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from kinetic_tui.core.serving import config as cfg
from kinetic_tui.core.serving.config import EndpointConfig
from kinetic_tui.core.serving.router import Router
from kinetic_tui.core.store import Store


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_a_refused_connection_goes_to_the_next_instance(tmp_path: Path) -> None:
    seen: list[object] = []

    async def invoke(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body["record"])
        return web.json_response({"output": body["record"]})

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    router = Router(Store(tmp_path / "state.db"), EndpointConfig("e", "g"), "token", None)  # type: ignore[arg-type]
    router.instances = {
        "job-0000000a": f"http://127.0.0.1:{_closed_port()}",
        "job-0000000b": f"http://127.0.0.1:{port}",
    }
    router.session = aiohttp.ClientSession()
    try:
        answer = await router.forward({"group": "g"}, {"x": 1})
        assert answer.status == 200 and seen == [{"x": 1}]
        assert router.dead == {"job-0000000a"}
        assert router.stats.per_instance == {"job-0000000a": 0, "job-0000000b": 0}
    finally:
        await router.session.close()
        await runner.cleanup()


@asynccontextmanager
async def _held_instance(release: asyncio.Event, arrived: list[object]) -> AsyncIterator[str]:
    """An instance that answers each request only once `release` is set; its URL."""

    async def invoke(request: web.Request) -> web.Response:
        arrived.append((await request.json())["record"])
        await release.wait()
        return web.json_response({"output": "done"})

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_with_every_slot_taken_and_the_queue_full_a_request_is_503_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cfg, "QUEUE_LIMIT", 1)
    release, arrived = asyncio.Event(), []
    config = EndpointConfig("e", "g", target_per_instance=0.5)  # one slot per instance
    router = Router(Store(tmp_path / "state.db"), config, "token", None)  # type: ignore[arg-type]
    async with _held_instance(release, arrived) as url:
        router.instances = {"job-0000000a": url}
        router.session = aiohttp.ClientSession()
        try:
            serving = asyncio.create_task(router.forward({"group": "g"}, 1))
            while not arrived:
                await asyncio.sleep(0.01)
            queued = asyncio.create_task(router.forward({"group": "g"}, 2))
            while router.waiting == 0:
                await asyncio.sleep(0.01)
            refused = await asyncio.wait_for(router.forward({"group": "g"}, 3), 10)  # "at once", not queued
            assert refused.status == 503 and b"Saturated" in refused.body and router.stats.rejected == 1
            assert arrived == [1] and not serving.done() and not queued.done()
            release.set()
            assert [(await task).status for task in (serving, queued)] == [200, 200] and arrived == [1, 2]
        finally:
            release.set()  # a failed check must not leave the held requests to the server's shutdown timeout
            await router.session.close()
