"""Which version answers a request: GROUP is the group's Production version, GROUP:vN version N; each
with what it serves (its artifact and predict), or no artifact for a version registered before versions
carried their model."""

from __future__ import annotations

import re

from kinetic_tui.core.artifacts import ArtifactStore
from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.platform.registry import ModelRegistry
from kinetic_tui.core.serving.version import VersionModel
from kinetic_tui.core.store import Store, serving_repo


def _versions_named(registry: ModelRegistry, group: str) -> str:
    versions = registry.versions(group)
    if not versions:
        return f"group {group!r} has no versions; register one with: register {group} --from-training NAME"
    named = ", ".join(f"{group}:v{v.version} ({v.stage.value})" for v in versions)
    return f"known versions: {named}"


def route(
    store: Store, registry: ModelRegistry, artifacts: ArtifactStore | None, endpoint: str, group: str, requested: str
) -> tuple[VersionModel, str | None]:
    """The version `requested` names with its source training (NotFoundError naming the known versions
    otherwise)."""
    versions = {v.version: v for v in registry.versions(group)}
    match = re.fullmatch(rf"{re.escape(group)}:v([0-9]+)", requested)
    if requested == group:
        model = registry.get_latest_production(group)
        if model is None:
            raise NotFoundError(
                f"model {requested!r}: group {group!r} has no Production version; promote one or address a "
                f"version as {group}:vN; {_versions_named(registry, group)}"
            )
    elif match and int(match.group(1)) in versions:
        model = versions[int(match.group(1))]
    else:
        raise NotFoundError(
            f"model {requested!r}: endpoint {endpoint!r} serves group {group!r} ({group} for its Production "
            f"version, or {group}:vN); {_versions_named(registry, group)}"
        )
    metric = model.metrics.get("metric")
    found = serving_repo.model(store, model.group, model.version)
    if found is None:
        return VersionModel(model.group, model.version, model.artifact_hash, metric), model.source
    artifact, predict, code = found
    bucket, uri = (artifacts.storage.bucket, artifacts.uri()) if artifacts else (None, None)
    return (
        VersionModel(model.group, model.version, model.artifact_hash, metric, artifact, predict, code, bucket, uri),
        model.source,
    )
