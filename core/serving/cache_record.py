"""What a controller tick records: the instances' model loads and evictions (with each load's measured
time) into the endpoint's multi-model record and its serving events, and the autoscaler's observation of
the router's measured concurrency."""

from __future__ import annotations

from typing import Any

from kinetic_tui.core.artifacts import ArtifactStore
from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.serving.routes import route
from kinetic_tui.core.store import Store, serving_repo


def save(store: Store, name: str, tick: dict[str, Any], artifacts: ArtifactStore) -> None:
    events: list[dict[str, Any]] = tick["cache_events"]
    if not events and not tick["hits"] and not tick["misses"]:
        return
    group = store.endpoints.model_group(name) or ""
    with store.transaction():
        models = store.endpoints.get_multimodel(name)
        registered = models.models
        registry = store.registry.load_registry()
        loaded = models.loaded
        loads, evicts = models.load_events, models.evict_events
        for event in events:
            model = event["model"]
            if model not in registered:
                try:
                    registered[model] = route(store, registry, artifacts, name, group, model)[0]
                except NotFoundError:
                    continue
            if model in loaded:
                loaded.remove(model)
            if event["kind"] == "load":
                loaded.append(model)
                loads.append(model)
            else:
                evicts.append(model)
        loaded = loaded[-models.max_loaded_models :]
        updated = MultiModelEndpoint.restore(
            models.max_loaded_models,
            registered,
            loaded,
            models.hits + tick["hits"],
            models.misses + tick["misses"],
            loads,
            evicts,
        )
        store.endpoints.save_multimodel(name, updated)
        serving_repo.add_events(store, name, [(event["kind"], event) for event in events])


def observe(store: Store, name: str, concurrency: float) -> None:
    """One autoscaler observation at the endpoint's next tick (its clock: the last tick + 1)."""
    with store.transaction():
        endpoint = store.endpoints.get(name)
        endpoint.observe(concurrency, 0 if endpoint.last_tick is None else endpoint.last_tick + 1)
        store.endpoints.save(endpoint)
