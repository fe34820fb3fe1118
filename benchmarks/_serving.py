"""Shared set-up for the serving benchmarks: a served workspace (a trained version behind an endpoint's
router and instance processes, all real), a bare aiohttp server to compare against, and one HTTP client
that keeps N requests in flight and records each latency."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from _workspace import fresh_workspace

from kinetic_tui.core.commands import parse_line
from kinetic_tui.core.commands.execute import execute
from kinetic_tui.core.console import Console

BARE_SERVER = """
import sys
from aiohttp import web

async def invoke(request):
    body = await request.json()
    return web.json_response({"model": "bare", "output": {"echo": body["record"]}})

app = web.Application()
app.router.add_post("/invoke", invoke)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def run(line: str) -> Any:
    command = parse_line(line)
    assert command is not None

    async def go() -> Any:
        console = Console()
        try:
            return await execute(console, command)
        finally:
            await console.aclose()

    return asyncio.run(go())


def served_workspace(endpoint_flags: str, versions: int = 1) -> tuple[str, str]:
    """A fresh home with `versions` trained versions of group g (v1 Production) behind endpoint `bench`;
    (invoke URL, token)."""
    fresh_workspace("kn-bench-serving-")
    for index in range(1, versions + 1):
        run(f"train t{index} --epochs 2 --hp learning_rate=0.{index}")
        run(f"register g --from-training t{index}")
    run("promote g 1 Staging")
    run("promote g 1 Production")
    shown = run(f"endpoint create bench --model g {endpoint_flags}")
    token = Path(shown["serving"]["token_file"]).read_text().strip()
    return shown["serving"]["url"] + "/invoke", token


def stop_workspace() -> None:
    from kinetic_tui.core.backends.local import launcher
    from kinetic_tui.core.paths import kinetic_home
    from kinetic_tui.core.supervisor import process as supervisor

    run("endpoint stop bench")
    supervisor.stop()
    if (kinetic_home() / "run" / "forkserver.sock").exists():
        launcher.shutdown_server()


def start_bare_server(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(port)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            import urllib.request

            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
        except OSError as exc:
            if getattr(exc, "code", None) in (404, 405):
                return process
            time.sleep(0.05)
    raise RuntimeError("the bare server did not start")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _drive(url: str, token: str, concurrency: int, seconds: float, body: dict[str, Any]) -> list[float]:
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    data = json.dumps(body).encode()
    deadline = time.monotonic() + seconds

    async def worker(client: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            start = time.perf_counter()
            async with client.post(url, data=data, headers=headers) as answer:
                await answer.read()
                assert answer.status == 200, answer.status
            latencies.append(time.perf_counter() - start)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return latencies


def drive(url: str, token: str, concurrency: int, seconds: float, body: dict[str, Any]) -> list[float]:
    """Keep `concurrency` requests in flight for `seconds`; each request's latency."""
    return asyncio.run(_drive(url, token, concurrency, seconds, body))


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def median(samples: list[float]) -> float:
    return statistics.median(samples)
