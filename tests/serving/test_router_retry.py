"""The router sends a request whose instance refuses the connection to another instance: the refused one
never saw it (a scale-in stopped it before the router's instance set caught up), so nothing runs twice."""

from __future__ import annotations

import socket
from pathlib import Path

import aiohttp
from aiohttp import web

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
