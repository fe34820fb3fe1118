"""The registry: which backend serves a profile, a job context or a stored handle.

The kind table (`kinds.py`) names each kind's implementation as `MODULE:FACTORY`; the module is imported on
first use, so a local workspace never loads the GKE backend, and a GKE profile without the `gcp` extra gets
the extra's one-line error when its backend is first needed. A factory takes a function returning the
resolved infrastructure (called only by backends that need it: resolving reads profiles.json, which a local
handle's every status poll should not pay for) and the jobs bucket; each implementation caches its instances.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.backends.kinds import DEFAULT_KIND, kind
from kinetic_tui.core.profiles import ResolvedInfra, resolve_infra

if TYPE_CHECKING:
    from kinetic_tui.core.backends.base import Backend
    from kinetic_tui.core.submission.context import JobContext

Factory = Callable[[Callable[[], ResolvedInfra], str], "Backend"]


@cache
def _factory(implementation: str) -> Factory:
    module, _, name = implementation.partition(":")
    factory: Factory = getattr(importlib.import_module(module), name)
    return factory


def backend_for(infra: ResolvedInfra, bucket: str | None = None) -> Backend:
    """The backend of a resolved profile (its jobs bucket unless `bucket` names another)."""
    chosen = kind(infra.backend)
    return _factory(chosen.implementation)(lambda: infra, bucket or infra.jobs_bucket)


def backend_for_context(ctx: JobContext) -> Backend:
    """The backend a job context's job is submitted to."""
    return backend_for(ctx.infra, ctx.bucket)


def backend_for_handle(record: Mapping[str, Any]) -> Backend:
    """The backend that runs the job a stored handle record (`handle.json`) describes."""
    chosen = kind(record["backend"], "job handle: ")
    infra = partial(
        resolve_infra,
        project=record["project"],
        zone=record["zone"],
        cluster=record["cluster"],
        namespace=record["namespace"],
        backend=chosen.profile_kind,
    )
    return _factory(chosen.implementation)(infra, record["bucket"])


def workspace_backend() -> Backend:
    """The backend of this workspace's own store: it knows every job submitted from the workspace."""
    return _factory(kind(DEFAULT_KIND).implementation)(partial(resolve_infra, backend=DEFAULT_KIND), "")


def lookup_order(infra: ResolvedInfra | None = None) -> list[Backend]:
    """Where to look for a job or batch by id: the workspace's store first, then the profile's backend."""
    infra = infra or resolve_infra()
    first = workspace_backend()
    if kind(infra.backend).name == first.kind:
        return [first]
    return [first, backend_for(infra)]


def profile_has_stack(infra: ResolvedInfra) -> bool:
    """The profile's infrastructure is a cloud stack (`up`, `down`, `pool`, `build-image` apply it)."""
    return kind(infra.backend).has_stack
