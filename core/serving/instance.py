"""One serving instance: the function a long-running job runs on a pool node. It holds the multi-model LRU
of its endpoint and answers the router's invocations over HTTP on 127.0.0.1.

A miss loads the version (its state and predict) before the LRU records it; an eviction unloads the
evicted version, so its next use is a miss that loads again. Every load and eviction goes back to the
router in a response header with the load's measured time, and from there into the store.

The instance says where it listens on its log (one structured line), which the controller reads through
the backend, as the training service reads a training's progress.

Run as a module (`python -m kinetic_tui.core.serving.instance`) it is a cluster's serving pod, with no
router in front: a Service spreads requests over the pods. It then answers the endpoint's own API
(`POST /v1/endpoints/NAME/invoke`, `GET /healthz`) from the versions its Deployment hands it
(`KINETIC_ROUTES`, see `published.py`), loads them from the artifact store at `KINETIC_ARTIFACTS`, and
exports its requests in flight on `GET /metrics` (the autoscaler's per-pod metric). Invocations run one at
a time on one worker thread, so the loop keeps taking requests and the gauge counts those waiting too.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from kinetic_tui.core.errors import NotFoundError, one_line
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.serving import published
from kinetic_tui.core.serving.model import NotServable
from kinetic_tui.core.serving.version import VersionModel, load, unload
from kinetic_tui.core.training.entry import emit

CACHE_HEADER = "X-Kinetic-Cache"  # "HITS MISSES" on every answer
EVENTS_HEADER = "X-Kinetic-Cache-Events"  # JSON list of {kind, model, seconds} when the LRU changed
IN_FLIGHT_METRIC = "kinetic_in_flight_requests"  # a pod's gauge on /metrics: received and not yet answered
POD_MODULE = "kinetic_tui.core.serving.instance"  # `python -m POD_MODULE`: a serving pod's command
POD_ENV = (
    "KINETIC_ENDPOINT",
    "KINETIC_MAX_LOADED_MODELS",
    "KINETIC_SERVING_PORT",
    "KINETIC_ARTIFACTS",
    "KINETIC_ROUTES",
)


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message}}


class BadRequest(ValueError):
    """A malformed invocation body: HTTP 400 naming the problem."""


def read_invocation(data: bytes, group: str) -> tuple[Any, str]:
    """(record, requested model: GROUP when the body names none) of an invocation body."""
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(payload, dict) or "record" not in payload:
        raise BadRequest('the body must be a JSON object with a "record" (and an optional "model")')
    requested = payload.get("model", group)
    if not isinstance(requested, str):
        raise BadRequest(f'"model" must be GROUP or GROUP:vN, got {requested!r}')
    return payload["record"], requested


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


async def _serve(application: web.Application, host: str, port: int) -> None:
    runner = web.AppRunner(application, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    port = runner.addresses[0][1]
    emit({"type": "listening", "url": f"http://{host}:{port}", "pid": os.getpid()})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()  # finishes the requests in flight, then closes


def serve_instance(endpoint: str, max_loaded_models: int) -> None:
    """The job's function: serve until the job is stopped (SIGTERM drains what is in flight)."""
    print(f"instance of endpoint {endpoint!r} starting (cache of {max_loaded_models})", flush=True)
    asyncio.run(_serve(app(Instance(max_loaded_models)), "127.0.0.1", 0))


# -- a cluster's serving pod ---------------------------------------------------------------------------


class Pod:
    """The endpoint's API answered by one pod, from the versions its Deployment carries."""

    def __init__(self, routes: dict[str, Any], artifacts_uri: str, max_loaded_models: int) -> None:
        self.routes = routes
        self.name = routes["endpoint"]
        self.bucket = artifacts_uri.removeprefix("gs://").partition("/")[0]
        self.uri = artifacts_uri
        self.instance = Instance(max_loaded_models)
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="predict")  # the LRU is used by one thread

    async def handle_invoke(self, request: web.Request) -> web.Response:
        self.instance.in_flight += 1
        try:
            status, body = await self._invoke(request)
        finally:
            self.instance.in_flight -= 1
        return web.json_response(body, status=status)

    async def _invoke(self, request: web.Request) -> tuple[int, dict[str, Any]]:
        if request.match_info["name"] != self.name:
            return 404, error_body(
                "NotFound", f"endpoint {request.match_info['name']!r}: this pod serves {self.name!r}"
            )
        try:
            record, requested = read_invocation(await request.read(), self.routes["group"])
            spec = published.resolve(self.routes, requested, self.bucket, self.uri)
        except BadRequest as exc:
            return 400, error_body("BadRequest", str(exc))
        except NotFoundError as exc:
            return 404, error_body("NotFound", str(exc))
        except NotServable as exc:
            return 409, error_body("NotServable", str(exc))
        loop = asyncio.get_running_loop()
        status, body, _ = await loop.run_in_executor(self.worker, self.instance.invoke, spec, record)
        return status, body

    async def handle_metrics(self, request: web.Request) -> web.Response:
        """The Prometheus text format a metrics pipeline scrapes for the autoscaler."""
        text = (
            f"# HELP {IN_FLIGHT_METRIC} Requests this pod received and has not answered yet.\n"
            f"# TYPE {IN_FLIGHT_METRIC} gauge\n{IN_FLIGHT_METRIC} {self.instance.in_flight}\n"
        )
        return web.Response(text=text, content_type="text/plain")

    def app(self) -> web.Application:
        application = web.Application(client_max_size=1 << 20)
        application.router.add_post("/v1/endpoints/{name}/invoke", self.handle_invoke)
        application.router.add_get("/healthz", self.instance.handle_health)
        application.router.add_get("/metrics", self.handle_metrics)
        return application


def pod_settings(env: Mapping[str, str]) -> tuple[Pod, int]:
    """The pod and its port from the environment its Deployment sets; a one-line error naming what is
    missing or malformed."""
    missing = [name for name in POD_ENV if not env.get(name)]
    if missing:
        raise ValueError(f"serving pod: {', '.join(missing)} not set; its Deployment sets {', '.join(POD_ENV)}")
    try:
        routes = json.loads(env["KINETIC_ROUTES"])
        loaded, port = int(env["KINETIC_MAX_LOADED_MODELS"]), int(env["KINETIC_SERVING_PORT"])
    except ValueError as exc:
        raise ValueError(f"serving pod: malformed setting ({exc})") from None
    return Pod(routes, env["KINETIC_ARTIFACTS"], loaded), port


def main() -> None:
    """The serving pod's command: serve on every interface until SIGTERM (which drains what is in flight)."""
    try:
        pod, port = pod_settings(os.environ)
    except ValueError as exc:
        sys.exit(str(exc))
    print(f"pod of endpoint {pod.name!r} serving {pod.routes['group']!r} from {pod.uri}", flush=True)
    asyncio.run(_serve(pod.app(), "0.0.0.0", port))  # a pod is reached through its Service


if __name__ == "__main__":
    main()
