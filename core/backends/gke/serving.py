"""An endpoint on a GKE cluster: a Deployment of serving pods, a Service in front of them, and an
`autoscaling/v2` HorizontalPodAutoscaler that applies the endpoint's scaling rule to the Deployment.

`endpoint_manifests` is pure (no I/O, no SDK), so every object is checked against the published schemas
without a cluster. The configuration is the one a local endpoint runs with (`EndpointConfig`, the same
record and field names); the HPA carries it:
- the metric is each pod's in-flight requests (a `Pods` metric, `AverageValue` target = the target
  concurrency per instance), so the HPA's desired count is ceil(total in flight / target) clamped to
  [min, max], the local rule's;
- `minReplicas`/`maxReplicas` are the instance bounds;
- `behavior.scaleUp/scaleDown.stabilizationWindowSeconds` are the scale-out and scale-in cooldowns
  (whole seconds, rounded up: the controller's default tick is one second), and each direction may move
  by up to `max_instances` pods per period, so a decision jumps straight to the desired count as the local
  autoscaler does instead of the HPA's default doubling steps.

The serving pods run the serving image (infra/serving_image.py: this kinetic-tui version's wheel on a slim
Python) with its serving pod server as their command (`python -m kinetic_tui.core.serving.pod`) and
their endpoint, group, cache size, artifact store (in the jobs bucket) and the versions they answer for
(`KINETIC_ROUTES`) in the environment, listen on `CONTAINER_PORT`, answer `GET /healthz` (their readiness
probe) and export the metric on `GET /metrics`; the Service exposes them on the endpoint's port.
`deploy`/`remove` create, replace and delete the three objects through the API; `status` reads back which
exist and the replica counts the cluster reports.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kinetic_tui.core.backends.gke.k8s_client import K8sClients, api_error, api_reason
from kinetic_tui.core.backends.gke.manifests import APP, APP_LABEL, CPU_REQUESTS
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.platform.autoscaling import ScalingConfig
from kinetic_tui.core.serving.config import EndpointConfig, require_port
from kinetic_tui.core.serving.pod import IN_FLIGHT_METRIC, POD_MODULE
from kinetic_tui.core.validation import require_int, require_name

ENDPOINT_LABEL = "kinetic/endpoint"
MODEL_ANNOTATION = "kinetic/model"
CONTAINER = "serving"
CONTAINER_PORT = 8080
DEFAULT_SERVICE_PORT = 80  # a local endpoint's port 0 means "pick one"; a Service needs a real one
MAX_WINDOW = 3600  # the longest stabilization window the HPA accepts, in seconds
POLICY_PERIOD = 15  # seconds; the HPA controller's default sync period
# a Service's name is a DNS-1035 label, and the name is also a label value: at most 63 characters
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


class ServingError(KineticError):
    """The Kubernetes API refused to create, replace or delete one of an endpoint's objects."""


@dataclass(frozen=True)
class EndpointManifests:
    """The three objects of one endpoint, in the order they are created."""

    deployment: dict[str, Any]
    service: dict[str, Any]
    autoscaler: dict[str, Any]

    def names(self) -> dict[str, str]:
        return {
            "deployment": self.deployment["metadata"]["name"],
            "service": self.service["metadata"]["name"],
            "autoscaler": self.autoscaler["metadata"]["name"],
        }


def _quantity(value: float) -> str:
    """A Kubernetes quantity for a target concurrency: whole numbers as they are, else in thousandths."""
    return str(int(value)) if float(value).is_integer() else f"{math.ceil(value * 1000)}m"


def _window(field: str, cooldown: float) -> int:
    seconds = math.ceil(cooldown)
    if seconds > MAX_WINDOW:
        raise ValidationError(
            f"{field}: a GKE endpoint's autoscaler waits at most {MAX_WINDOW} s, got {cooldown}; "
            f"choose a cooldown in 0..{MAX_WINDOW}"
        )
    return seconds


def require_endpoint_name(name: object) -> str:
    text = require_name("endpoint name", name)
    if not _NAME.fullmatch(text):
        raise ValidationError(
            f"endpoint name {text!r}: on a GKE profile it names a Service, so it must be 1-63 lowercase "
            f"letters, digits and '-', starting with a letter and not ending with '-'"
        )
    return text


def service_port(config: EndpointConfig) -> int:
    """The Service's port: the endpoint's, or the default for 0."""
    return require_port(config.port) or DEFAULT_SERVICE_PORT


def check_config(config: EndpointConfig) -> ScalingConfig:
    """The endpoint's scaling rule, after checking every field a cluster uses with the rule a local endpoint
    runs; a one-line error naming the first bad one."""
    require_endpoint_name(config.name)
    require_name("model group", config.model_group)
    scaling = ScalingConfig(
        min_instances=config.min_instances,
        max_instances=config.max_instances,
        target_per_instance=config.target_per_instance,
        scale_out_cooldown=config.scale_out_cooldown,
        scale_in_cooldown=config.scale_in_cooldown,
    )
    _window("scale_out_cooldown", scaling.scale_out_cooldown)
    _window("scale_in_cooldown", scaling.scale_in_cooldown)
    require_int("max_loaded_models", config.max_loaded_models, 1)
    service_port(config)
    return scaling


def endpoint_manifests(
    config: EndpointConfig, routes: Mapping[str, Any], *, namespace: str, image: str, artifacts_uri: str
) -> EndpointManifests:
    """The Deployment, Service and HPA of the endpoint `config` describes, in `namespace`; the pods run
    `image`, answer for the versions `routes` lists and load them from the artifact store at `artifacts_uri`
    (the jobs bucket's)."""
    scaling = check_config(config)
    name = config.name
    selector = {ENDPOINT_LABEL: name}
    labels = {APP_LABEL: APP, **selector}
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "annotations": {MODEL_ANNOTATION: config.model_group},
    }
    env = {
        "KINETIC_ENDPOINT": name,
        "KINETIC_MODEL_GROUP": config.model_group,
        "KINETIC_MAX_LOADED_MODELS": str(config.max_loaded_models),
        "KINETIC_SERVING_PORT": str(CONTAINER_PORT),
        "KINETIC_ARTIFACTS": artifacts_uri,
        "KINETIC_ROUTES": json.dumps(routes, sort_keys=True, separators=(",", ":")),
    }
    container = {
        "name": CONTAINER,
        "image": image,
        "command": ["python", "-m", POD_MODULE],
        "env": [{"name": key, "value": value} for key, value in env.items()],
        "ports": [{"name": "http", "containerPort": CONTAINER_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 2},
        "resources": {"requests": dict(CPU_REQUESTS)},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": scaling.min_instances,  # the HPA owns the count from here on
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": service_port(config), "targetPort": "http", "protocol": "TCP"}],
        },
    }

    def direction(cooldown_field: str, cooldown: float) -> dict[str, Any]:
        return {
            "stabilizationWindowSeconds": _window(cooldown_field, cooldown),
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": scaling.max_instances, "periodSeconds": POLICY_PERIOD}],
        }

    autoscaler = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": scaling.min_instances,
            "maxReplicas": scaling.max_instances,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": IN_FLIGHT_METRIC},
                        "target": {"type": "AverageValue", "averageValue": _quantity(scaling.target_per_instance)},
                    },
                }
            ],
            "behavior": {
                "scaleUp": direction("scale_out_cooldown", scaling.scale_out_cooldown),
                "scaleDown": direction("scale_in_cooldown", scaling.scale_in_cooldown),
            },
        },
    }
    return EndpointManifests(deployment, service, autoscaler)


@dataclass(frozen=True)
class _Kind:
    """The API calls of one object kind (the SDK names them per kind)."""

    label: str
    create: Callable[..., Any]
    read: Callable[..., Any]
    replace: Callable[..., Any]
    delete: Callable[..., Any]
    keep: tuple[str, ...] = ()  # spec fields a replacement takes from the live object

    def replacement(self, body: dict[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
        """`body` with the live object's resourceVersion (a concurrent change is refused rather than lost)
        and the spec fields the cluster owns: the replicas the HPA chose, the Service's allocated IPs."""
        spec, live_spec = dict(body["spec"]), live.get("spec") or {}
        spec.update({field: live_spec[field] for field in self.keep if field in live_spec})
        metadata = dict(body["metadata"])
        version = (live.get("metadata") or {}).get("resourceVersion")
        if version:
            metadata["resourceVersion"] = version
        return {**body, "metadata": metadata, "spec": spec}


def _kinds(clients: K8sClients) -> list[_Kind]:
    apps, core, hpa = clients.apps, clients.core, clients.autoscaling
    return [
        _Kind(
            "Deployment",
            apps.create_namespaced_deployment,
            apps.read_namespaced_deployment,
            apps.replace_namespaced_deployment,
            apps.delete_namespaced_deployment,
            keep=("replicas",),
        ),
        _Kind(
            "Service",
            core.create_namespaced_service,
            core.read_namespaced_service,
            core.replace_namespaced_service,
            core.delete_namespaced_service,
            keep=("clusterIP", "clusterIPs"),
        ),
        _Kind(
            "HorizontalPodAutoscaler",
            hpa.create_namespaced_horizontal_pod_autoscaler,
            hpa.read_namespaced_horizontal_pod_autoscaler,
            hpa.replace_namespaced_horizontal_pod_autoscaler,
            hpa.delete_namespaced_horizontal_pod_autoscaler,
        ),
    ]


def _read(kind: _Kind, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = json.loads(kind.read(name, namespace, _preload_content=False).data)
    except api_error() as exc:
        if exc.status == 404:
            return None
        raise ServingError(
            f"could not read {kind.label} {name!r} in namespace {namespace!r}: {api_reason(exc)}"
        ) from None
    return found


def deploy(clients: K8sClients, objects: EndpointManifests) -> dict[str, str]:
    """Create each object, or replace the one already there; the objects' names."""
    bodies = (objects.deployment, objects.service, objects.autoscaler)
    for kind, body in zip(_kinds(clients), bodies, strict=True):
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        existing = _read(kind, name, namespace)
        try:
            if existing is None:
                kind.create(namespace, body, _preload_content=False)
                continue
            kind.replace(name, namespace, kind.replacement(body, existing), _preload_content=False)
        except api_error() as exc:
            verb = "create" if existing is None else "replace"
            raise ServingError(
                f"could not {verb} {kind.label} {name!r} in namespace {namespace!r}: {api_reason(exc)}"
            ) from None
    return objects.names()


def remove(clients: K8sClients, name: str, namespace: str) -> None:
    """Delete the endpoint's autoscaler, Service and Deployment (its pods with it); NotFoundError when the
    namespace holds none of them."""
    require_endpoint_name(name)
    removed = 0
    for kind in reversed(_kinds(clients)):  # the autoscaler first: it would otherwise scale a going target
        try:
            kind.delete(name, namespace, propagation_policy="Foreground", _preload_content=False)
            removed += 1
        except api_error() as exc:
            if exc.status != 404:
                raise ServingError(
                    f"could not delete {kind.label} {name!r} in namespace {namespace!r}: {api_reason(exc)}"
                ) from None
    if not removed:
        raise NotFoundError(f"endpoint {name!r} has no Deployment, Service or autoscaler in namespace {namespace!r}")


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


def status(clients: K8sClients, name: str, namespace: str) -> dict[str, Any]:
    """What the cluster reports of the endpoint: which objects exist, the Deployment's replica counts (wanted,
    created, ready) and the autoscaler's (current, desired)."""
    deployment, service, autoscaler = (_read(kind, name, namespace) for kind in _kinds(clients))
    found = {"deployment": deployment, "service": service, "autoscaler": autoscaler}
    answer: dict[str, Any] = {"objects": sorted(key for key, value in found.items() if value is not None)}
    if service is not None:
        port = ((service.get("spec") or {}).get("ports") or [{}])[0].get("port")
        answer["url"] = f"http://{name}.{namespace}.svc.cluster.local:{port}/v1/endpoints/{name} (in the cluster)"
    if deployment is not None:
        spec, state = deployment.get("spec") or {}, deployment.get("status") or {}
        answer["replicas"] = {
            "wanted": _count(spec.get("replicas")),
            "created": _count(state.get("replicas")),
            "ready": _count(state.get("readyReplicas")),
        }
    if autoscaler is not None:
        state = autoscaler.get("status") or {}
        answer["autoscaler"] = {
            "current": _count(state.get("currentReplicas")),
            "desired": _count(state.get("desiredReplicas")),
        }
    return answer
