"""The versions an endpoint answers for, as one JSON document a serving pod carries (a cluster's pods reach
no state.db): each version of the group with its stage, its source training and what it serves (None for a
version registered before versions carried their model), and which one is Production.

A pod resolves a request from it with the router's rule and the router's messages: GROUP is the Production
version, GROUP:vN version N; anything else is 404 naming the known versions, a version without its model
409. The document is taken when the endpoint's objects are deployed (`endpoint create`, `start`, `scale`),
so a promotion reaches the pods with the next deploy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.serving.model import NotServable, unservable

if TYPE_CHECKING:
    from kinetic_tui.core.platform.registry import ModelRegistry
    from kinetic_tui.core.store import Store

LOCATION = ("bucket", "uri")  # where the artifacts are: the pod's own artifact store fills these in


def publish(store: Store, registry: ModelRegistry, endpoint: str, group: str) -> dict[str, Any]:
    """The document for `group`'s versions as committed now (read inside a query)."""
    from kinetic_tui.core.serving.routes import route  # here: a serving pod resolves, it has no store

    versions: dict[str, Any] = {}
    for found in registry.versions(group):
        model, source = route(store, registry, None, endpoint, group, f"{group}:v{found.version}")
        spec = {k: v for k, v in model.to_spec().items() if k not in LOCATION} if model.artifact else None
        versions[model.name] = {"stage": found.stage.value, "source": source, "spec": spec}
    production = registry.get_latest_production(group)
    return {
        "endpoint": endpoint,
        "group": group,
        "production": None if production is None else f"{group}:v{production.version}",
        "versions": versions,
    }


def _known(document: dict[str, Any]) -> str:
    group, versions = document["group"], document["versions"]
    if not versions:
        return f"group {group!r} has no versions; register one with: register {group} --from-training NAME"
    return "known versions: " + ", ".join(f"{name} ({entry['stage']})" for name, entry in versions.items())


def resolve(document: dict[str, Any], requested: str, bucket: str, uri: str) -> dict[str, Any]:
    """The spec an instance loads for `requested`, its artifacts in `bucket` reached by `uri`; NotFoundError
    or NotServable with the router's messages."""
    group, endpoint = document["group"], document["endpoint"]
    if requested == group:
        name = document["production"]
        if name is None:
            raise NotFoundError(
                f"model {requested!r}: group {group!r} has no Production version; promote one or address a "
                f"version as {group}:vN; {_known(document)}"
            )
    elif requested in document["versions"]:
        name = requested
    else:
        raise NotFoundError(
            f"model {requested!r}: endpoint {endpoint!r} serves group {group!r} ({group} for its Production "
            f"version, or {group}:vN); {_known(document)}"
        )
    entry = document["versions"][name]
    if entry["spec"] is None:
        version = int(name.rpartition(":v")[2])
        raise NotServable(unservable(group, version, entry["source"]))
    return {**entry["spec"], "bucket": bucket, "uri": uri}
