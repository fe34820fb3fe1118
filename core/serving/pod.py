"""A cluster's serving pod (`python -m kinetic_tui.core.serving.pod`): an instance with no router in
front, since a Service spreads requests over the pods. It answers the endpoint's own API
(`POST /v1/endpoints/NAME/invoke`, `GET /healthz`) over HTTP from the versions its Deployment hands it
(`KINETIC_ROUTES`, see `published.py`), loads them from the artifact store at `KINETIC_ARTIFACTS`, and
exports its requests in flight on `GET /metrics` (the autoscaler's per-pod metric). Invocations run one at
a time on one worker thread, so the loop keeps taking requests and the gauge counts those waiting too.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.serving import published
from kinetic_tui.core.serving.instance import Instance
from kinetic_tui.core.serving.invocation import BadRequest, error_json, read_invocation
from kinetic_tui.core.serving.model import NotServable
from kinetic_tui.core.serving.signals import until_stopped
from kinetic_tui.core.serving.version import VersionModel

IN_FLIGHT_METRIC = "kinetic_in_flight_requests"  # a pod's gauge on /metrics: received and not yet answered
POD_MODULE = "kinetic_tui.core.serving.pod"  # `python -m POD_MODULE`: a serving pod's command
POD_ENV = (
    "KINETIC_ENDPOINT",
    "KINETIC_MAX_LOADED_MODELS",
    "KINETIC_SERVING_PORT",
    "KINETIC_ARTIFACTS",
    "KINETIC_ROUTES",
)


class Pod:
    """The endpoint's API answered by one pod, from the versions its Deployment carries."""

    def __init__(self, routes: dict[str, Any], artifacts_uri: str, max_loaded_models: int) -> None:
        self.routes = routes
        self.name = routes["endpoint"]
        self.bucket = artifacts_uri.removeprefix("gs://").partition("/")[0]
        self.uri = artifacts_uri
        self.instance = Instance(max_loaded_models)
        self.in_flight = 0
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="predict")  # the LRU is used by one thread

    async def handle_invoke(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        try:
            status, body = await self._invoke(request)
        finally:
            self.in_flight -= 1
        return web.Response(body=body, status=status, content_type="application/json")

    async def _invoke(self, request: web.Request) -> tuple[int, bytes]:
        if request.match_info["name"] != self.name:
            message = f"endpoint {request.match_info['name']!r}: this pod serves {self.name!r}"
            return 404, error_json("NotFound", message)
        try:
            record, requested = read_invocation(await request.read(), self.routes["group"])
            spec = published.resolve(self.routes, requested, self.bucket, self.uri)
        except BadRequest as exc:
            return 400, error_json("BadRequest", str(exc))
        except NotFoundError as exc:
            return 404, error_json("NotFound", str(exc))
        except NotServable as exc:
            return 409, error_json("NotServable", str(exc))
        loop = asyncio.get_running_loop()
        status, body, _ = await loop.run_in_executor(self.worker, self.instance.invoke, VersionModel(**spec), record)
        return status, body

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "in_flight": self.in_flight, "loaded": self.instance.models.loaded})

    async def handle_metrics(self, request: web.Request) -> web.Response:
        """The Prometheus text format a metrics pipeline scrapes for the autoscaler."""
        text = (
            f"# HELP {IN_FLIGHT_METRIC} Requests this pod received and has not answered yet.\n"
            f"# TYPE {IN_FLIGHT_METRIC} gauge\n{IN_FLIGHT_METRIC} {self.in_flight}\n"
        )
        return web.Response(text=text, content_type="text/plain")

    def app(self) -> web.Application:
        application = web.Application(client_max_size=1 << 20)
        application.router.add_post("/v1/endpoints/{name}/invoke", self.handle_invoke)
        application.router.add_get("/healthz", self.handle_health)
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


async def _serve(application: web.Application, port: int) -> None:
    runner = web.AppRunner(application, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()  # a pod is reached through its Service
    await until_stopped()
    await runner.cleanup()  # finishes the requests in flight, then closes


def main() -> None:
    """The serving pod's command: serve until SIGTERM (which drains what is in flight)."""
    try:
        pod, port = pod_settings(os.environ)
    except ValueError as exc:
        sys.exit(str(exc))
    print(f"pod of endpoint {pod.name!r} serving {pod.routes['group']!r} from {pod.uri}", flush=True)
    asyncio.run(_serve(pod.app(), port))


if __name__ == "__main__":
    main()
