"""Lazy Kubernetes API clients for the GKE and Pathways backends.

The `kubernetes` SDK sits in the `gcp` extra: it is imported only when a GKE job is submitted or looked
at, so local users never pay for it and a missing extra is one line naming the install command.

Where the API server is: `KINETIC_K8S_HOST` (an explicit URL without auth: emulators and tests) wins;
inside a pod the in-cluster config; otherwise the kubeconfig context gcloud writes for the cluster,
`gke_{project}_{zone}_{cluster}`. Clients are cached per target: building one parses the kubeconfig
and opens a connection pool, which is most of a submission's Kubernetes cost.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.profiles import ResolvedInfra
from kinetic_tui.core.storage import MissingExtraError

HOST_SETTING = "KINETIC_K8S_HOST"


class ClusterAccessError(KineticError):
    """No way to reach the cluster's API server (no kubeconfig context for it, no in-cluster config)."""


def kubernetes_module() -> Any:
    """`kubernetes.client`, or a one-line MissingExtraError naming the extra."""
    try:
        return importlib.import_module("kubernetes.client")
    except ImportError as exc:
        raise MissingExtraError(
            f"the GKE backend needs the kubernetes SDK ({exc.name or exc}): pip install 'kinetic-tui[gcp]'"
        ) from None


if TYPE_CHECKING:

    class ApiError(Exception):
        """The fields of the SDK's `kubernetes.client.exceptions.ApiException` the backends read: the SDK has
        no type hints, so this class names them for the type checker only (`api_error` returns the SDK's)."""

        status: int | None
        reason: str | None
        body: str | bytes | None


def api_error() -> type[ApiError]:
    """The SDK's ApiException class (typed by the fields the backends read)."""
    exception: type[ApiError] = kubernetes_module().exceptions.ApiException
    return exception


def api_reason(exc: ApiError) -> str:
    """One line from an API error: its status, reason and the server's message."""
    try:
        message = json.loads(exc.body or "").get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return f"{exc.status} {exc.reason}: {message or 'no message'}"


@dataclass(frozen=True)
class K8sClients:
    """The API groups the backends use, sharing one connection pool."""

    batch: Any
    core: Any
    custom: Any
    apps: Any  # an endpoint's Deployment
    autoscaling: Any  # an endpoint's HorizontalPodAutoscaler (autoscaling/v2)


def kube_context(infra: ResolvedInfra) -> str:
    """The context name `gcloud container clusters get-credentials` writes."""
    return f"gke_{infra.project}_{infra.zone}_{infra.cluster}"


_lock = threading.Lock()
_cache: dict[str, K8sClients] = {}


def target(infra: ResolvedInfra) -> str:
    """A cache key naming the API server, computed without loading any config."""
    host = os.environ.get(HOST_SETTING)
    if host:
        return f"host:{host.rstrip('/')}"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "incluster"
    return f"context:{kube_context(infra)}"


def _configuration(key: str, infra: ResolvedInfra) -> Any:
    client = kubernetes_module()
    configuration = client.Configuration()
    kind, _, value = key.partition(":")
    if kind == "host":
        configuration.host = value
        return configuration
    config = importlib.import_module("kubernetes.config")
    if kind == "incluster":
        config.load_incluster_config(client_configuration=configuration)
        return configuration
    try:
        config.load_kube_config(context=value, client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise ClusterAccessError(
            f"no kubeconfig context {value!r} ({exc}); run: gcloud container clusters get-credentials "
            f"{infra.cluster} --zone {infra.zone} --project {infra.project}"
        ) from None
    return configuration


def clients_for(infra: ResolvedInfra) -> K8sClients:
    """Cached API clients for the cluster `infra` names."""
    key = target(infra)
    with _lock:
        if key not in _cache:
            client = kubernetes_module()
            api = client.ApiClient(_configuration(key, infra))
            _cache[key] = K8sClients(
                client.BatchV1Api(api),
                client.CoreV1Api(api),
                client.CustomObjectsApi(api),
                client.AppsV1Api(api),
                client.AutoscalingV2Api(api),
            )
        return _cache[key]
