"""`console.endpoints`: an autoscaling `Endpoint` and a `MultiModelEndpoint` sharing one name, serving the
versions of one registry group.

`observe` is the hot path (a script may feed thousands of ticks), so the service keeps the endpoint it last
saved and reuses it while the stored history still ends with the same event; anything another process
wrote makes it re-read.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.console.served_model import VersionModel
from kinetic_tui.core.console.snapshots import (
    EndpointSnapshot,
    InvocationSnapshot,
    LoadSnapshot,
    ScalingEventSnapshot,
)
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.events import EndpointChanged, Event, ModelInvoked, ScalingDecided
from kinetic_tui.core.platform.autoscaling import Endpoint
from kinetic_tui.core.platform.registry import ModelRegistry
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.validation import MAX_LOAD_CONCURRENCY, MAX_LOAD_TICKS, known_names, require_int

if TYPE_CHECKING:
    from kinetic_tui.core.console.registry import Registry
    from kinetic_tui.core.console.workspace import Workspace

_BARRIER_TIMEOUT = 10.0


def _scaling_event(endpoint: Endpoint) -> tuple[ScalingEventSnapshot, ScalingDecided]:
    event = endpoint.history[-1]
    return ScalingEventSnapshot.of(endpoint.name, event), ScalingDecided(endpoint.name, *event)


class Endpoints:
    def __init__(self, workspace: Workspace, registry: Registry) -> None:
        self.workspace = workspace
        self.store = workspace.store
        self.registry = registry
        self._endpoint_cache: dict[str, Endpoint] = {}

    # -- reading (inside an action) --------------------------------------------------------------------

    def _model_group(self, name: str) -> str:
        group = self.store.endpoints.model_group(name)
        if group is None:
            raise NotFoundError(f"endpoint: unknown {name!r}; known: {known_names(self.store.endpoints.names())}")
        return group

    def _endpoint(self, name: str) -> Endpoint:
        """The committed endpoint; the cached one while the stored history still ends where it does.

        Every change to an endpoint (observe, reconfigure) appends one history event and history is never
        rewritten, so the stored history's length and last event identify the stored state.
        """
        cached = self._endpoint_cache.get(name)
        if cached is not None:
            history = cached.history
            if self.store.endpoints.last_event(name) == ((len(history) - 1, history[-1]) if history else None):
                return cached
        self._endpoint_cache.pop(name, None)
        endpoint = self.store.endpoints.get(name)
        self._endpoint_cache[name] = endpoint
        return endpoint

    def _save_endpoint(self, endpoint: Endpoint) -> None:
        try:
            self.store.endpoints.save(endpoint)
        except BaseException:
            self._endpoint_cache.pop(endpoint.name, None)
            raise

    def _snapshot(self, name: str, endpoint: Endpoint | None = None) -> EndpointSnapshot:
        """Queries read the store, not the cache: an action in another thread may be mutating the cached one."""
        return EndpointSnapshot.of(
            self._model_group(name),
            endpoint or self.store.endpoints.get(name),
            self.store.endpoints.get_multimodel(name),
        )

    def _route(self, registry: ModelRegistry, name: str, route: str) -> VersionModel:
        """GROUP serves the group's Production version; GROUP:vN addresses version N."""
        group = self._model_group(name)
        count = len(registry.versions(group))
        match = re.fullmatch(rf"{re.escape(group)}:v([0-9]+)", route)
        if route == group:
            model = registry.get_latest_production(group)
            if model is None:
                raise NotFoundError(
                    f"model {route!r}: group {group!r} has no Production version; promote one or "
                    f"address a version as {group}:vN (N in 1..{count})"
                )
        elif match:
            model = registry.get(group, int(match.group(1)))
        else:
            raise NotFoundError(
                f"model {route!r}: endpoint {name!r} serves group {group!r}; use {group} (its "
                f"Production version) or {group}:vN (N in 1..{count})"
            )
        return VersionModel(group, model.version, model.artifact_hash, model.metrics.get("metric"))

    @staticmethod
    def _serving(models: MultiModelEndpoint, model: VersionModel) -> None:
        """Versions registered after the endpoint was created join it on first use."""
        if model.name not in models.models:
            models.register(model.name, model)

    # -- queries ---------------------------------------------------------------------------------------

    async def get(self, name: str) -> EndpointSnapshot:
        return await self.workspace.query(self._snapshot, name)

    # -- actions ---------------------------------------------------------------------------------------

    async def create(
        self,
        name: str,
        model_group: str,
        min_instances: int = 1,
        max_instances: int = 5,
        target_per_instance: float = 10,
        scale_out_cooldown: float = 3,
        scale_in_cooldown: float = 5,
        max_loaded_models: int = 3,
    ) -> EndpointSnapshot:
        def act() -> tuple[EndpointSnapshot, list[Event]]:
            if self.store.endpoints.model_group(name) is not None:
                raise ValidationError(f"endpoint {name!r} already exists; scale it or pick another name")
            versions = self.registry.load().versions(model_group)
            endpoint = Endpoint(
                name, min_instances, max_instances, target_per_instance, scale_out_cooldown, scale_in_cooldown
            )
            models = MultiModelEndpoint(max_loaded_models)
            for version in versions:
                served = VersionModel(
                    model_group, version.version, version.artifact_hash, version.metrics.get("metric")
                )
                models.register(served.name, served)
            self.store.endpoints.add_model_group(name, model_group)
            self._save_endpoint(endpoint)
            self.store.endpoints.save_multimodel(name, models)
            return (
                EndpointSnapshot.of(model_group, endpoint, models),
                [EndpointChanged(name, "created", endpoint.instance_count)],
            )

        return await self.workspace.act(act)

    async def scale(
        self,
        name: str,
        min_instances: int | None = None,
        max_instances: int | None = None,
        target_per_instance: float | None = None,
    ) -> EndpointSnapshot:
        if min_instances is None and max_instances is None and target_per_instance is None:
            raise ValidationError("scale: give at least one of --min, --max, --target")

        def act() -> tuple[EndpointSnapshot, list[Event]]:
            endpoint = self._endpoint(name)
            endpoint.reconfigure(min_instances, max_instances, target_per_instance)
            self._save_endpoint(endpoint)
            return self._snapshot(name, endpoint), [EndpointChanged(name, "scaled", endpoint.instance_count)]

        return await self.workspace.act(act)

    def _observe(self, name: str, concurrency: float, tick: float | None) -> tuple[ScalingEventSnapshot, list[Event]]:
        endpoint = self._endpoint(name)
        if tick is None:
            tick = 0 if endpoint.last_tick is None else endpoint.last_tick + 1
        endpoint.observe(concurrency, tick)
        self._save_endpoint(endpoint)
        snapshot, event = _scaling_event(endpoint)
        return snapshot, [event]

    async def observe(self, name: str, concurrency: float, tick: float | None = None) -> ScalingEventSnapshot:
        """One autoscaler observation; the default tick is the endpoint's clock (its last tick + 1)."""
        return await self.workspace.act(self._observe, name, concurrency, tick)

    async def invoke(self, name: str, model: str, record: Any) -> InvocationSnapshot:
        def act() -> tuple[InvocationSnapshot, list[Event]]:
            served = self._route(self.registry.load(), name, model)
            models = self.store.endpoints.get_multimodel(name)
            self._serving(models, served)
            prediction = models.invoke(served.name, record)
            self.store.endpoints.save_multimodel(name, models)
            loaded = tuple(models.loaded)
            return (
                InvocationSnapshot(name, model, served.name, prediction, loaded, models.hits, models.misses),
                [ModelInvoked(name, served.name, loaded, models.hits, models.misses)],
            )

        return await self.workspace.act(act)

    async def load(self, name: str, concurrency: int, ticks: int, wait: bool | None = None) -> LoadSnapshot:
        """Drive `ticks` ticks of `concurrency` real concurrent invocations of the endpoint's Production
        model; each tick observes the in-flight concurrency it measured and commits as one action."""
        require_int("concurrency", concurrency, 0)
        require_int("ticks", ticks, 1, MAX_LOAD_TICKS)
        if concurrency > MAX_LOAD_CONCURRENCY:
            raise ValidationError(f"concurrency: at most {MAX_LOAD_CONCURRENCY} requests in flight, got {concurrency}")
        model_group = await self.workspace.blocking(self._model_group, name)
        work = self._drive_load(name, model_group, concurrency, ticks)
        if self.workspace.wants_wait(wait):
            return await work
        self.workspace.spawn(f"load {name}", work)
        return LoadSnapshot(name, model_group, concurrency, ticks, "started", 0, ())

    async def _drive_load(self, name: str, route: str, concurrency: int, ticks: int) -> LoadSnapshot:
        events: list[ScalingEventSnapshot] = []
        with ThreadPoolExecutor(max_workers=max(concurrency, 1), thread_name_prefix=f"load-{name}") as pool:
            for _ in range(ticks):
                events.append(await self.workspace.act(self._load_tick, name, route, concurrency, pool))
                await asyncio.sleep(0)  # let the UI breathe between ticks
        return LoadSnapshot(name, route, concurrency, ticks, "completed", concurrency * ticks, tuple(events))

    def _load_tick(
        self, name: str, route: str, concurrency: int, pool: ThreadPoolExecutor
    ) -> tuple[ScalingEventSnapshot, list[Event]]:
        served = self._route(self.registry.load(), name, route)
        models = self.store.endpoints.get_multimodel(name)
        self._serving(models, served)
        peak = _concurrent_invocations(models, served.name, concurrency, pool, self._next_tick(name))
        self.store.endpoints.save_multimodel(name, models)
        return self._observe(name, peak, None)

    def _next_tick(self, name: str) -> float:
        last = self._endpoint(name).last_tick
        return 0 if last is None else last + 1

    # kept last: a signature below it would read `list[...]` as this method, not the builtin
    async def list(self) -> tuple[EndpointSnapshot, ...]:
        return await self.workspace.query(lambda: tuple(self._snapshot(n) for n in self.store.endpoints.names()))


def _concurrent_invocations(
    models: MultiModelEndpoint, model: str, count: int, pool: ThreadPoolExecutor, tick: float
) -> int:
    """Send `count` requests at once and return the most that were in flight together.

    Each request registers as in flight, then waits at a barrier until all have, as a load generator
    holding `count` connections open would; the endpoint itself serves them one at a time (it is not
    thread-safe), so a request stays in flight until its turn comes.
    """
    if count == 0:
        return 0
    barrier, lock, serve = threading.Barrier(count), threading.Lock(), threading.Lock()
    state = {"in_flight": 0, "peak": 0}

    def request(index: int) -> None:
        with lock:
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
        # a slow thread start breaks the barrier: serve anyway, the peak shows what was really in flight
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(_BARRIER_TIMEOUT)
        try:
            with serve:
                models.invoke(model, {"tick": tick, "request": index})
        finally:
            with lock:
                state["in_flight"] -= 1

    for future in [pool.submit(request, index) for index in range(count)]:
        future.result()
    return state["peak"]
