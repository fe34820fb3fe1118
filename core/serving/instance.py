"""One serving instance: the function a long-running job runs on a pool node. It holds the multi-model LRU
of its endpoint and answers the router's invocations over HTTP on 127.0.0.1.

A miss loads the version (its state and predict) before the LRU records it; an eviction unloads the
evicted version, so its next use is a miss that loads again. Every load and eviction goes back to the
router in a response header with the load's measured time, and from there into the store.

The instance says where it listens on its log (one structured line), which the controller reads through
the backend, as the training service reads a training's progress.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

from aiohttp import web

from kinetic_tui.core.errors import one_line
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.serving.model import NotServable
from kinetic_tui.core.serving.version import VersionModel, load, unload
from kinetic_tui.core.training.entry import emit

CACHE_HEADER = "X-Kinetic-Cache"  # "HITS MISSES" on every answer
EVENTS_HEADER = "X-Kinetic-Cache-Events"  # JSON list of {kind, model, seconds} when the LRU changed


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message}}


class Instance:
    def __init__(self, max_loaded_models: int) -> None:
        self.models = MultiModelEndpoint(max_loaded_models)
        self.in_flight = 0

    def invoke(self, spec: dict[str, Any], record: Any) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
        """(status, body, cache events) of one invocation; user errors become 500 JSON, never a stack."""
        served = VersionModel(**spec)
        if served.name not in self.models.models or self.models.models[served.name] != served:
            self.models.register(served.name, served)
        events: list[dict[str, Any]] = []
        evicted_before = len(self.models.evict_events)
        try:
            if served.name not in self.models.loaded:
                unload(served.name)
                events.append({"kind": "load", "model": served.name, "seconds": load(served).seconds})
            output = self.models.invoke(served.name, record)
        except NotServable as exc:
            return 409, error_body("NotServable", str(exc)), events
        except Exception as exc:  # the user's predict (or its import) failed: the instance keeps serving
            return 500, error_body(type(exc).__name__, one_line(exc)), events
        finally:
            for name in self.models.evict_events[evicted_before:]:
                unload(name)
                events.append({"kind": "evict", "model": name, "seconds": 0.0})
        try:
            body = {
                "model": served.name,
                "output": json.loads(json.dumps(output, allow_nan=False)),
                "cache": {"loaded": self.models.loaded, "hits": self.models.hits, "misses": self.models.misses},
            }
        except (TypeError, ValueError) as exc:
            return (
                500,
                error_body("NotJSON", f"predict returned a {type(output).__name__}, not a JSON value: {exc}"),
                events,
            )
        return 200, body, events

    async def handle_invoke(self, request: web.Request) -> web.Response:
        payload = await request.json()
        self.in_flight += 1
        try:
            status, body, events = self.invoke(payload["model"], payload["record"])
        finally:
            self.in_flight -= 1
        headers = {CACHE_HEADER: f"{self.models.hits} {self.models.misses}"}
        if events:
            headers[EVENTS_HEADER] = json.dumps(events)
        return web.json_response(body, status=status, headers=headers)

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "in_flight": self.in_flight, "loaded": self.models.loaded})


def app(instance: Instance) -> web.Application:
    application = web.Application(client_max_size=64 << 20)
    application.router.add_post("/invoke", instance.handle_invoke)
    application.router.add_get("/healthz", instance.handle_health)
    return application


async def _serve(max_loaded_models: int) -> None:
    runner = web.AppRunner(app(Instance(max_loaded_models)), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    emit({"type": "listening", "url": f"http://127.0.0.1:{port}", "pid": os.getpid()})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()  # finishes the requests in flight, then closes


def serve_instance(endpoint: str, max_loaded_models: int) -> None:
    """The job's function: serve until the job is stopped (SIGTERM drains what is in flight)."""
    print(f"instance of endpoint {endpoint!r} starting (cache of {max_loaded_models})", flush=True)
    asyncio.run(_serve(max_loaded_models))
