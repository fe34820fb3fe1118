"""An endpoint's router: the one HTTP entry point (127.0.0.1 only, bearer token), spreading invocations
over the endpoint's ready instances and measuring what the autoscaler needs.

API:
  POST /v1/endpoints/NAME/invoke  {"record": ..., "model": "GROUP" | "GROUP:vN"}  -> {"model", "output", "cache"}
  GET  /v1/endpoints/NAME         config, instances, in flight, counters, latency
  POST /v1/endpoints/NAME/tick    the average in flight since the previous tick (the autoscaler's input)
  POST /v1/endpoints/NAME/cache   the instances' model loads and evictions since the previous call
  GET  /healthz

Each instance takes `slots_per_instance` requests at once; beyond that requests wait in a bounded queue, and
when it is full the router answers 503 at once. An instance that dies under a request answers it 503 at
once; a request whose instance refuses the link (`link.py`) is sent to another. The instance set and the
registry are read from the store (the controller writes the first).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any

from aiohttp import web

from kinetic_tui.core.artifacts import ArtifactStore
from kinetic_tui.core.errors import NotFoundError, one_line
from kinetic_tui.core.serving import config as cfg
from kinetic_tui.core.serving import link
from kinetic_tui.core.serving.invocation import BadRequest, error_body, read_invocation
from kinetic_tui.core.serving.model import unservable
from kinetic_tui.core.serving.routes import route
from kinetic_tui.core.serving.stats import Stats
from kinetic_tui.core.store import Store, serving_repo

REFRESH = 0.2  # seconds between reads of the instance set
ROUTES_TTL = 0.5  # seconds a resolved route is reused (a promotion takes effect within it)


def fail(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(error_body(kind, message), status=status)


class Router:
    def __init__(self, store: Store, config: cfg.EndpointConfig, token: str, artifacts: ArtifactStore) -> None:
        self.store = store
        self.config = config
        self.token = token
        self.artifacts = artifacts
        self.stats = Stats()
        self.instances: dict[str, str] = {}  # ready instance -> url
        self.dead: set[str] = set()
        self.cache: dict[str, tuple[int, int]] = {}  # instance -> its (hits, misses) so far
        self.cache_events: list[dict[str, Any]] = []  # loads and evictions since the last tick
        self.new_hits = self.new_misses = 0  # since the last tick, over every instance
        self.waiting = 0
        self.freed = asyncio.Condition()
        self.routes: dict[str, tuple[float, Any]] = {}
        self.links: dict[str, asyncio.Future[link.Link]] = {}

    # -- the instance set ---------------------------------------------------------------------------------

    def read_instances(self) -> None:
        rows = serving_repo.instances(self.store, self.config.name)
        self.instances = {inst: url for inst, state, url, _, _ in rows if state == "ready" and url}
        self.dead &= {inst for inst, *_ in rows}

    async def watch(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.read_instances)
            except Exception as exc:  # a locked store this round: the next one reads it
                print(f"reading instances failed: {one_line(exc)}", flush=True)
            self.close_idle_links()
            async with self.freed:
                self.freed.notify_all()
            await asyncio.sleep(REFRESH)

    def free_instance(self) -> str | None:
        best, load = None, self.config.slots_per_instance
        for inst in self.instances:
            if inst in self.dead:
                continue
            used = self.stats.per_instance.get(inst, 0)
            if used < load:
                best, load = inst, used
        return best

    # -- requests -----------------------------------------------------------------------------------------

    def authorised(self, request: web.Request) -> bool:
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())

    def resolve(self, requested: str) -> Any:
        now = time.monotonic()
        cached = self.routes.get(requested)
        if cached is not None and now - cached[0] < ROUTES_TTL:
            return cached[1]
        registry = self.store.registry.load_registry()
        try:
            served, source = route(
                self.store, registry, self.artifacts, self.config.name, self.config.model_group, requested
            )
            found: Any = (served, source, json.dumps(served.to_spec()).encode())  # encoded once per route
        except NotFoundError as exc:
            found = exc
        self.routes[requested] = (now, found)
        return found

    async def invoke(self, request: web.Request) -> web.Response:
        if not self.authorised(request):
            return fail(
                401, "Unauthorized", f"missing or wrong bearer token; it is in {cfg.token_path(self.config.name)}"
            )
        if request.match_info["name"] != self.config.name:
            return fail(
                404, "NotFound", f"endpoint {request.match_info['name']!r}: this router serves {self.config.name!r}"
            )
        try:
            body = await request.read()
            _, requested = read_invocation(body, self.config.model_group)
        except web.HTTPRequestEntityTooLarge:
            return fail(413, "TooLarge", f"the request body is over {cfg.MAX_BODY_BYTES} bytes")
        except BadRequest as exc:
            return fail(400, "BadRequest", str(exc))
        found = (
            await asyncio.to_thread(self.resolve, requested)
            if requested not in self.routes
            else self.resolve(requested)
        )
        if isinstance(found, NotFoundError):
            return fail(404, "NotFound", str(found))
        served, source, spec = found
        if served.artifact is None:
            return fail(409, "NotServable", unservable(served.group, served.version, source))
        started = time.monotonic()
        self.stats.enter()
        status = 500
        try:
            async with asyncio.timeout(cfg.REQUEST_TIMEOUT):
                response = await self.forward(spec, body)
            status = response.status
            return response
        except TimeoutError:
            status = 504
            return fail(504, "Timeout", f"no answer within {cfg.REQUEST_TIMEOUT:g} s")
        finally:
            self.stats.leave(started, status)

    async def forward(self, spec: bytes, body: bytes) -> web.Response:
        """Send the request (the version's spec and the client's body) to a free instance. One that never
        got it (it refused the link, or had closed it: a scale-in stopped it, or it died, before this
        router's instance set caught up) is passed over and the request goes to another, waiting for one if
        need be; one that goes away with the request sent answers 503."""
        while True:
            inst = self.free_instance()
            if inst is None:
                if self.waiting >= cfg.QUEUE_LIMIT:
                    self.stats.rejected += 1
                    return fail(503, "Saturated", f"every instance is busy and {cfg.QUEUE_LIMIT} requests are queued")
                self.waiting += 1
                try:
                    async with self.freed:
                        await self.freed.wait_for(lambda: self.free_instance() is not None)
                        inst = self.free_instance()
                finally:
                    self.waiting -= 1
            assert inst is not None
            counts = self.stats.per_instance
            counts[inst] = counts.get(inst, 0) + 1
            try:
                answer = await (await self.link_to(inst)).ask(spec, body)
                self.note_cache(inst, answer)
                return web.Response(body=answer.body, status=answer.status, content_type="application/json")
            except link.NotSent:
                self.dead.add(inst)  # not reached: try the next instance
            except link.LinkLost as exc:
                self.dead.add(inst)
                return fail(503, "InstanceLost", f"instance {inst} stopped while serving the request ({exc})")
            finally:
                counts[inst] -= 1
                if self.waiting:
                    async with self.freed:
                        self.freed.notify(1)

    async def link_to(self, inst: str) -> link.Link:
        """The kept-alive link to `inst`, opened by its first request (those arriving meanwhile share it)."""
        opening = self.links.get(inst)
        if opening is None or (opening.done() and not _open(opening)):
            url = self.instances.get(inst)
            if url is None:
                raise link.NotSent(f"instance {inst} left the router's instance set")
            opening = self.links[inst] = asyncio.ensure_future(link.Link.open(url, self.token))
        return await asyncio.shield(opening)  # a request timing out does not cancel its neighbours' link

    def close_idle_links(self) -> None:
        """Close the links to instances that left the set once nothing is in flight on them (a draining
        instance finishes what it was sent)."""
        for inst in set(self.links) - set(self.instances):
            if self.links[inst].done() and self.stats.per_instance.get(inst, 0) == 0:
                self.close_link(inst)

    def close_links(self) -> None:
        for inst in list(self.links):
            self.close_link(inst)

    def close_link(self, inst: str) -> None:
        opening = self.links.pop(inst)
        if opening.done() and _open(opening):
            opening.result().close()
        else:
            opening.cancel()

    def note_cache(self, inst: str, answer: link.Answer) -> None:
        old_hits, old_misses = self.cache.get(inst, (0, 0))
        self.new_hits += answer.hits - old_hits
        self.new_misses += answer.misses - old_misses
        self.cache[inst] = (answer.hits, answer.misses)
        if answer.events:
            self.cache_events.extend({**event, "instance": inst} for event in json.loads(answer.events))

    # -- reading --------------------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "config": self.config.to_record(),
            "instances": {inst: {"url": url, "lost": inst in self.dead} for inst, url in self.instances.items()},
            "queued": self.waiting,
            "cache": {inst: {"hits": h, "misses": m} for inst, (h, m) in self.cache.items()},
            **self.stats.to_dict(),
        }

    async def show(self, request: web.Request) -> web.Response:
        if not self.authorised(request):
            return fail(401, "Unauthorized", "missing or wrong bearer token")
        return web.json_response(self.describe())

    async def tick(self, request: web.Request) -> web.Response:
        if not self.authorised(request):
            return fail(401, "Unauthorized", "missing or wrong bearer token")
        return web.json_response({"average_in_flight": self.stats.tick(), **self.describe()})

    async def cache_news(self, request: web.Request) -> web.Response:
        """The loads and evictions, hits and misses since the previous call (the controller records them)."""
        if not self.authorised(request):
            return fail(401, "Unauthorized", "missing or wrong bearer token")
        events, self.cache_events = self.cache_events, []
        hits, misses, self.new_hits, self.new_misses = self.new_hits, self.new_misses, 0, 0
        return web.json_response({"cache_events": events, "hits": hits, "misses": misses, **self.describe()})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "endpoint": self.config.name})

    def app(self) -> web.Application:
        application = web.Application(client_max_size=cfg.MAX_BODY_BYTES)
        application.router.add_post("/v1/endpoints/{name}/invoke", self.invoke)
        application.router.add_get("/v1/endpoints/{name}", self.show)
        application.router.add_post("/v1/endpoints/{name}/tick", self.tick)
        application.router.add_post("/v1/endpoints/{name}/cache", self.cache_news)
        application.router.add_get("/healthz", self.health)
        return application


def _open(opening: asyncio.Future[link.Link]) -> bool:
    return not opening.cancelled() and opening.exception() is None and not opening.result().closed
