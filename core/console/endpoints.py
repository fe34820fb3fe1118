"""`console.endpoints`: an autoscaling `Endpoint` and a `MultiModelEndpoint` sharing one name, serving the
versions of one registry group over HTTP: a router on 127.0.0.1 and instance processes that the
endpoint's controller (in the workspace supervisor) starts and stops as the autoscaler decides. `invoke`
and `load` are HTTP requests to the router.

An endpoint a cluster serves (`cluster_endpoints.py`) is recorded the same way, its objects deployed on the
cluster; the cluster scales it, so the verbs that drive the workspace's router and autoscaler refuse it.

`observe` is the hot path (a script may feed thousands of ticks), so the service keeps the endpoint it last
saved and reuses it while the stored history still ends with the same event; anything another process
wrote makes it re-read.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import kinetic_tui.core.console.cluster_endpoints as clusters
import kinetic_tui.core.console.endpoint_processes as processes
from kinetic_tui.core.console.snapshots import (
    EndpointSnapshot,
    InvocationSnapshot,
    LoadSnapshot,
    LogsSnapshot,
    ScalingEventSnapshot,
)
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.events import EndpointChanged, Event, ModelInvoked, ScalingDecided
from kinetic_tui.core.platform.autoscaling import Endpoint
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.serving import client, published
from kinetic_tui.core.serving.config import (
    DEFAULT_TICK_SECONDS,
    EndpointConfig,
    read_token,
    require_port,
    token_path,
    write_token,
)
from kinetic_tui.core.serving.routes import route
from kinetic_tui.core.store import serving_repo
from kinetic_tui.core.validation import (
    MAX_LOAD_CONCURRENCY,
    MAX_LOAD_TICKS,
    MAX_TICK,
    known_names,
    require_int,
    require_number,
)

if TYPE_CHECKING:
    from kinetic_tui.core.backends.base import Backend, ClusterEndpoints
    from kinetic_tui.core.console.registry import Registry
    from kinetic_tui.core.console.workspace import Workspace


def _scaling_event(endpoint: Endpoint) -> tuple[ScalingEventSnapshot, ScalingDecided]:
    event = endpoint.history[-1]
    return ScalingEventSnapshot.of(endpoint.name, event), ScalingDecided(endpoint.name, *event)


class Endpoints:
    def __init__(self, workspace: Workspace, registry: Registry) -> None:
        self.workspace = workspace
        self.store = workspace.store
        self.registry = registry
        self._endpoint_cache: dict[str, Endpoint] = {}
        self._workspace_served: set[str] = set()  # endpoints known to be run by this workspace

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

    @property
    def backend(self) -> Backend:
        """The profile's backend: where new endpoints are served."""
        return self.registry.training.service.backend

    def _snapshot(self, name: str, endpoint: Endpoint | None = None) -> EndpointSnapshot:
        """Queries read the store, not the cache: an action in another thread may be mutating the cached one."""
        return self._stored(name, endpoint)[0]

    def _stored(self, name: str, endpoint: Endpoint | None = None) -> tuple[EndpointSnapshot, ClusterEndpoints | None]:
        """The stored snapshot and the cluster that serves it, if one does (read inside a query)."""
        config, cluster = self._served(name)
        serving = (
            processes.serving_view(self.store, name)
            if config is None or cluster is None
            else clusters.stored_view(self.store, config, cluster)
        )
        snapshot = EndpointSnapshot.of(
            self._model_group(name),
            endpoint or self.store.endpoints.get(name),
            self.store.endpoints.get_multimodel(name),
            serving,
        )
        return snapshot, cluster

    async def _reported(self, stored: tuple[EndpointSnapshot, ClusterEndpoints | None]) -> EndpointSnapshot:
        """With what the serving cluster reports now (outside any transaction: it is a network call); its
        replicas are the endpoint's instances."""
        snapshot, cluster = stored
        if cluster is None or snapshot.serving is None:
            return snapshot
        status = await self.workspace.blocking(clusters.reported, cluster, snapshot.name)
        count = status.get("replicas", {}).get("created", 0)
        return dataclasses.replace(snapshot, instance_count=count, serving={**snapshot.serving, **status})

    def _served(self, name: str) -> tuple[EndpointConfig | None, ClusterEndpoints | None]:
        """The endpoint's serving config and the cluster that serves it (None: this workspace runs it)."""
        found = serving_repo.endpoint(self.store, name)
        if found is None:
            return None, None
        config = EndpointConfig.from_record(found[0])
        return config, clusters.serving_cluster(config)

    def _workspace_run(self, name: str, verb: str) -> None:
        """Refuse `verb` for an endpoint a cluster serves (read inside a query)."""
        config, cluster = self._served(name)
        if config is not None and cluster is not None:
            raise clusters.refuse(verb, config, cluster)

    # -- queries ---------------------------------------------------------------------------------------

    async def get(self, name: str) -> EndpointSnapshot:
        """The stored endpoint, with its router's live measurements when it runs."""
        stored = await self.workspace.query(self._stored, name)
        snapshot = stored[0]
        serving = snapshot.serving
        if stored[1] is not None:
            return await self._reported(stored)
        if serving is None or serving["router_pid"] is None:
            return snapshot
        try:
            config, token = await self.workspace.query(self._client_config, name)
            live = await client.describe(config, token)
        except KineticError:
            return snapshot
        return dataclasses.replace(snapshot, serving={**serving, "live": live})

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
        port: int = 0,
        tick_seconds: float = DEFAULT_TICK_SECONDS,
        pool: str | None = None,
        accelerator: str | None = None,
    ) -> EndpointSnapshot:
        """Record the endpoint and hand it to the supervisor, whose controller starts its router on
        127.0.0.1:`port` (0: a free one, kept for later starts) and `min_instances` instances on the pool;
        returns once the router answers. A port in use is refused before anything is recorded. On a profile
        whose cluster serves endpoints itself, the cluster's objects are deployed instead (the Service on
        `port`) and the cluster's autoscaler scales them."""
        require_number("tick_seconds", tick_seconds, minimum=0, maximum=MAX_TICK)
        if pool is not None and accelerator is not None:
            raise ValidationError("endpoint create: give --pool or --accelerator, not both")
        cluster = self.backend.cluster_endpoints()
        if cluster is not None:
            clusters.check_create(cluster, pool, accelerator)
        target = "cpu" if cluster else await self.workspace.blocking(self._instance_pool, pool, accelerator)
        chosen = require_port(port) if cluster else await self.workspace.blocking(processes.free_port, port)
        config = EndpointConfig(
            name,
            model_group,
            min_instances,
            max_instances,
            target_per_instance,
            scale_out_cooldown,
            scale_in_cooldown,
            max_loaded_models,
            chosen,
            float(tick_seconds),
            target,
            cluster.target() if cluster else None,
        )
        Endpoint(name, min_instances, max_instances, target_per_instance, scale_out_cooldown, scale_in_cooldown)
        MultiModelEndpoint(max_loaded_models)  # both refuse bad bounds by name, before anything is written
        if await self.workspace.query(self.store.endpoints.model_group, name) is not None:
            raise ValidationError(f"endpoint {name!r} already exists; scale it or pick another name")
        if cluster is not None:
            return await self._create_on_cluster(cluster, config)
        await self.workspace.blocking(write_token, name)
        try:
            await self.workspace.act(self._record, config)
        except BaseException:
            await self.workspace.blocking(lambda: token_path(name).unlink(missing_ok=True))
            raise
        return await self._running(name)

    def _record(self, config: EndpointConfig) -> tuple[EndpointSnapshot, list[Event]]:
        name, group = config.name, config.model_group
        if self.store.endpoints.model_group(name) is not None:
            raise ValidationError(f"endpoint {name!r} already exists; scale it or pick another name")
        registry = self.registry.load()
        registry.versions(group)  # an unknown group is refused by name
        endpoint = Endpoint(
            name,
            config.min_instances,
            config.max_instances,
            config.target_per_instance,
            config.scale_out_cooldown,
            config.scale_in_cooldown,
        )
        models = MultiModelEndpoint(config.max_loaded_models)
        self.store.endpoints.add_model_group(name, group)
        self._save_endpoint(endpoint)
        self.store.endpoints.save_multimodel(name, models)
        serving_repo.add_endpoint(self.store, name, config.to_record())
        return (
            EndpointSnapshot.of(group, endpoint, models),
            [EndpointChanged(name, "created", endpoint.instance_count)],
        )

    async def _create_on_cluster(self, cluster: ClusterEndpoints, config: EndpointConfig) -> EndpointSnapshot:
        """Deploy the objects, then record the endpoint; a record that fails deletes them again."""
        answers = await self.workspace.query(self._routes, config)
        await self.workspace.blocking(clusters.deploy, cluster, config, answers)
        try:
            await self.workspace.act(self._record, config)
        except BaseException:
            await self.workspace.blocking(clusters.remove, cluster, config.name)
            raise
        return await self.get(config.name)

    def _routes(self, config: EndpointConfig) -> dict[str, Any]:
        """What a cluster's pods answer for: the group's versions as committed (an unknown group by name)."""
        return published.publish(self.store, self.registry.load(), config.name, config.model_group)

    async def _redeploy(self, name: str, **changes: Any) -> bool:
        """Deploy the objects of an endpoint a cluster serves again from the store (its config with
        `changes`, the group's versions now); False for one this workspace runs."""
        config, cluster = await self.workspace.query(self._served, name)
        if config is None or cluster is None:
            return False
        config = config.replace(**changes)
        answers = await self.workspace.query(self._routes, config)
        await self.workspace.blocking(clusters.deploy, cluster, config, answers)
        return True

    def _instance_pool(self, pool: str | None, accelerator: str | None) -> str:
        """The pool instances take nodes from: the one named, the one an accelerator is placed on, or cpu."""
        backend = self.backend
        if pool is not None:
            return backend.pool(pool).name
        wanted = accelerator or "cpu"
        placed = backend.placement(wanted, 1)
        if placed is None:
            names = ", ".join(f"{p.name} ({p.accelerator})" for p in backend.pools()) or "none"
            raise ValidationError(
                f"accelerator {wanted!r}: no pool provides it (pools: {names}); add one with "
                f"pool add NAME --accelerator {wanted} --nodes N"
            )
        return placed

    async def _running(self, name: str) -> EndpointSnapshot:
        await self.workspace.blocking(processes.hand_over, self.workspace.home)
        await self.workspace.blocking(processes.wait_running, self.store, self.workspace.home, name)
        return await self.get(name)

    async def start(self, name: str) -> EndpointSnapshot:
        """Bring a stopped endpoint back from the store: its config, scaling history and cooldown clock (a
        cluster's objects deployed again, with the group's versions now)."""

        def act() -> tuple[None, list[Event]]:
            self._model_group(name)
            processes.serving_config(self.store, name)
            serving_repo.set_wanted(self.store, name, "running")
            return None, [EndpointChanged(name, "started", self._endpoint(name).instance_count)]

        if await self._redeploy(name):
            await self.workspace.act(act)
            return await self.get(name)
        await self.workspace.act(act)
        if not await self.workspace.blocking(token_path(name).exists):
            await self.workspace.blocking(write_token, name)
        return await self._running(name)

    async def stop(self, name: str) -> EndpointSnapshot:
        """Drain and stop the endpoint's instances (each after its requests in flight), then its router (a
        cluster's objects deleted, its pods with them)."""

        def act() -> tuple[None, list[Event]]:
            self._model_group(name)
            processes.serving_config(self.store, name)
            serving_repo.set_wanted(self.store, name, "stopped")
            return None, [EndpointChanged(name, "stopped", 0)]

        _, cluster = await self.workspace.query(self._served, name)
        if cluster is not None:
            await self.workspace.blocking(clusters.remove, cluster, name)
            await self.workspace.act(act)
            return await self.get(name)
        await self.workspace.act(act)
        await self.workspace.blocking(processes.hand_over, self.workspace.home)
        await self.workspace.blocking(processes.wait_stopped, self.store, self.workspace.home, name)
        return await self.get(name)

    async def logs(self, name: str, tail: int = 50) -> LogsSnapshot:
        """The router's log and each instance's, the last `tail` lines of each."""
        require_int("tail", tail, 0)
        await self.workspace.query(self._workspace_run, name, "endpoint logs")
        backend = self.backend
        lines = await self.workspace.query(processes.logs, self.store, backend, name, tail)
        return LogsSnapshot(f"endpoint {name}", tuple(lines))

    async def scale(
        self,
        name: str,
        min_instances: int | None = None,
        max_instances: int | None = None,
        target_per_instance: float | None = None,
    ) -> EndpointSnapshot:
        if min_instances is None and max_instances is None and target_per_instance is None:
            raise ValidationError("scale: give at least one of --min, --max, --target")

        def planned() -> dict[str, Any]:
            endpoint = self.store.endpoints.get(name)  # a copy: the plan changes nothing
            endpoint.reconfigure(min_instances, max_instances, target_per_instance)
            bounds = ("min_instances", "max_instances", "target_per_instance")
            return {key: getattr(endpoint, key) for key in bounds}

        redeployed = await self._redeploy(name, **await self.workspace.query(planned))

        def act() -> tuple[EndpointSnapshot, list[Event]]:
            endpoint = self._endpoint(name)
            endpoint.reconfigure(min_instances, max_instances, target_per_instance)
            self._save_endpoint(endpoint)
            found = serving_repo.endpoint(self.store, name)
            if found is not None:
                changed = EndpointConfig.from_record(found[0]).replace(
                    min_instances=endpoint.min_instances,
                    max_instances=endpoint.max_instances,
                    target_per_instance=endpoint.target_per_instance,
                )
                serving_repo.save_config(self.store, name, changed.to_record())
            return self._snapshot(name, endpoint), [EndpointChanged(name, "scaled", endpoint.instance_count)]

        snapshot = await self.workspace.act(act)
        return await self.get(name) if redeployed else snapshot

    def _observe(self, name: str, concurrency: float, tick: float | None) -> tuple[ScalingEventSnapshot, list[Event]]:
        if name not in self._workspace_served:  # looked up once: where an endpoint is served never changes
            self._workspace_run(name, "observe")
            self._workspace_served.add(name)
        endpoint = self._endpoint(name)
        if tick is None:
            tick = 0 if endpoint.last_tick is None else endpoint.last_tick + 1
        endpoint.observe(concurrency, tick)
        self._save_endpoint(endpoint)
        snapshot, event = _scaling_event(endpoint)
        return snapshot, [event]

    async def observe(self, name: str, concurrency: float, tick: float | None = None) -> ScalingEventSnapshot:
        """One autoscaler observation; the default tick is the endpoint's clock (its last tick + 1). The
        controller then starts or drains instances to the count it decided."""
        return await self.workspace.act(self._observe, name, concurrency, tick)

    def _client_config(self, name: str, check_route: bool = False) -> tuple[EndpointConfig, str]:
        """The endpoint's config and token; with `check_route`, NotFoundError unless its group has a
        Production version (what `load` sends its requests to)."""
        group = self._model_group(name)
        self._workspace_run(name, "load" if check_route else "invoke")
        if check_route:
            route(self.store, self.registry.load(), None, name, group, group)
        return processes.serving_config(self.store, name), read_token(name)

    async def invoke(self, name: str, model: str | None, record: Any) -> InvocationSnapshot:
        """One request to the endpoint's router over HTTP (MODEL: GROUP for Production, or GROUP:vN)."""
        config, token = await self.workspace.query(self._client_config, name)
        answer = await client.invoke(config, token, model, record)
        cache = answer["cache"]  # the answering instance's LRU
        loaded, hits, misses = tuple(cache["loaded"]), cache["hits"], cache["misses"]
        self.workspace.events.publish(ModelInvoked(name, answer["model"], loaded, hits, misses))
        return InvocationSnapshot(
            name, model or config.model_group, answer["model"], answer["output"], loaded, hits, misses
        )

    async def load(self, name: str, concurrency: int, ticks: int, wait: bool | None = None) -> LoadSnapshot:
        """Keep `concurrency` real HTTP invocations of the Production model in flight for `ticks` ticks of
        the endpoint; its controller scales from the concurrency its router measures (an endpoint with
        tick 0 has no controller ticks: each load tick observes the router's measurement itself)."""
        require_int("concurrency", concurrency, 0)
        require_int("ticks", ticks, 1, MAX_LOAD_TICKS)
        if concurrency > MAX_LOAD_CONCURRENCY:
            raise ValidationError(f"concurrency: at most {MAX_LOAD_CONCURRENCY} requests in flight, got {concurrency}")
        config, token = await self.workspace.query(self._client_config, name, True)
        work = self._drive_load(config, token, concurrency, ticks)
        if self.workspace.wants_wait(wait):
            return await work
        self.workspace.spawn(f"load {name}", work)
        return LoadSnapshot(name, config.model_group, concurrency, ticks, "started", 0, ())

    async def _drive_load(self, config: EndpointConfig, token: str, concurrency: int, ticks: int) -> LoadSnapshot:
        name = config.name
        before = len((await self.workspace.query(self._endpoint, name)).history)
        requests = 0
        if config.tick_seconds == 0:  # the router's window starts with this load, not at its last tick
            await client.tick(config, token)
        for _ in range(ticks):
            counts = await client.drive(config, token, concurrency, config.tick_seconds or DEFAULT_TICK_SECONDS)
            requests += counts["ok"] + counts["failed"]
            if config.tick_seconds == 0:
                await self.observe(name, await client.tick(config, token))
        history = (await self.workspace.query(self._endpoint, name)).history[before:]
        events = tuple(ScalingEventSnapshot.of(name, event) for event in history)
        for event in history:
            self.workspace.events.publish(ScalingDecided(name, *event))
        return LoadSnapshot(name, config.model_group, concurrency, ticks, "completed", requests, events)

    # kept last: a signature below it would read `list[...]` as this method, not the builtin
    async def list(self) -> tuple[EndpointSnapshot, ...]:
        stored = await self.workspace.query(lambda: [self._stored(n) for n in self.store.endpoints.names()])
        return tuple([await self._reported(one) for one in stored])
