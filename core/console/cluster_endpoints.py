"""Endpoints a cluster serves itself (a GKE profile's: a Deployment, a Service and an autoscaler each).

The endpoint is recorded as a local one is (its autoscaler config, its cache size, its serving record), with
the cluster's target in its config, so `start`, `stop` and `show` reach the cluster that serves it whatever
the profile is later. The cluster runs the replicas and scales them; the workspace's controllers never see
the endpoint (no router, no instances, no ticks). Decisions:
- `endpoint stop` deletes the three objects (an HPA cannot hold a Deployment at zero replicas without an
  alpha feature gate); `endpoint start` deploys them again from the store, as does `scale`.
- the pods carry the group's versions as of the deploy: a promotion reaches them at the next `start`.
- `observe`, `load`, `invoke` and `logs` are refused: the HPA scales from the pods' own metric, and the
  Service is reachable only inside the cluster.
- `--pool` and `--accelerator` are refused: the pods run the CPU serving image on the cluster's nodes.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kinetic_tui.core.backends.base import ClusterEndpoints
from kinetic_tui.core.backends.registry import backend_for_handle
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError, one_line
from kinetic_tui.core.serving.config import EndpointConfig
from kinetic_tui.core.store import Store, serving_repo

REFUSED = {
    "observe": "its HorizontalPodAutoscaler scales it from its pods' in-flight requests",
    "load": "its HorizontalPodAutoscaler scales it from its pods' in-flight requests",
    "invoke": "its Service is reachable inside the cluster only",
    "endpoint logs": "its pods' logs are the cluster's",
}


def serving_cluster(config: EndpointConfig) -> ClusterEndpoints | None:
    """The cluster that serves a stored endpoint; None when this workspace runs it."""
    if config.cluster is None:
        return None
    cluster = backend_for_handle(config.cluster).cluster_endpoints()
    if cluster is None:
        raise ValidationError(f"endpoint {config.name!r}: its record names a backend that serves no endpoints")
    return cluster


def refuse(verb: str, config: EndpointConfig, cluster: ClusterEndpoints) -> ValidationError:
    name = config.name
    return ValidationError(
        f"{verb}: endpoint {name!r} is served on {cluster.describe_target()}: {REFUSED[verb]}; from here, "
        f"reach it through `kubectl port-forward service/{name} 8080:{config.port or 'PORT'}`"
    )


def check_create(cluster: ClusterEndpoints, pool: str | None, accelerator: str | None) -> None:
    if pool is not None or accelerator is not None:
        raise ValidationError(
            f"endpoint create: on {cluster.describe_target()} the pods run the CPU serving image on the "
            f"cluster's nodes; --pool and --accelerator choose the pool of a local workspace's instances"
        )


def deploy(cluster: ClusterEndpoints, config: EndpointConfig, answers: dict[str, Any]) -> None:
    """Create or replace the objects; what a failed deploy created is deleted again, so a refused create
    leaves nothing on the cluster."""
    try:
        cluster.deploy_endpoint(config, answers)
    except ValidationError:
        raise  # refused before anything was written
    except BaseException:
        with contextlib.suppress(Exception):
            cluster.remove_endpoint(config.name)
        raise


def remove(cluster: ClusterEndpoints, name: str) -> None:
    with contextlib.suppress(NotFoundError):  # already gone: stopped is what was asked
        cluster.remove_endpoint(name)


def stored_view(store: Store, config: EndpointConfig, cluster: ClusterEndpoints) -> dict[str, Any]:
    """Where and how it serves, as stored (read inside a query); `reported` adds what the cluster says."""
    found = serving_repo.endpoint(store, config.name)
    return {
        "cluster": cluster.describe_target(),
        "wanted": found[1] if found else "stopped",
        "url": None,  # the Service's, once the cluster reports it
        "port": config.port,
        "pool": None,
        "tick_seconds": None,
        "router_pid": None,
        "token_file": None,
        "instances": [],
        "last_hold": None,
        "cache_events": [],
        "live": None,
    }


def reported(cluster: ClusterEndpoints, name: str) -> dict[str, Any]:
    """What the cluster reports of the endpoint now; its error in words when it cannot say (an unreachable
    cluster is shown in a listing, never raised into it)."""
    try:
        return cluster.endpoint_status(name)
    except Exception as exc:
        return {"error": one_line(exc) if isinstance(exc, KineticError) else f"{type(exc).__name__}: {one_line(exc)}"}
