"""An endpoint on a GKE profile: its Deployment, Service and autoscaling/v2 HPA validate against the
Kubernetes schema (kubernetes-validate, strict), carry the endpoint's scaling configuration, and are
created, replaced and removed through the profile's backend on kmock."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from kinetic_tui.core.backends.gke import serving
from kinetic_tui.core.backends.gke.cluster import GkeCluster
from kinetic_tui.core.backends.registry import backend_for
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.core.serving.config import EndpointConfig
from kinetic_tui.infra.serving_image import serving_inputs
from tests.gke.kubelet import Cluster, cluster, kube

__all__ = ["cluster", "kube"]  # the fixtures this module uses from the kubelet double

K8S_VERSIONS = ("1.37.0", "1.33.0")
CONFIG = EndpointConfig(
    "fraud-web",
    "fraud",
    min_instances=1,
    max_instances=5,
    target_per_instance=10,
    scale_out_cooldown=3,
    scale_in_cooldown=5,
    max_loaded_models=2,
    port=8000,
)
ROUTES = {"endpoint": "fraud-web", "group": "fraud", "production": None, "versions": {}}
ARTIFACTS = "gs://p-kn-c-jobs/_artifacts/sha256/"


def built(**changes: Any) -> serving.EndpointManifests:
    return serving.endpoint_manifests(
        CONFIG.replace(**changes), ROUTES, namespace="ml", image="img:1", artifacts_uri=ARTIFACTS
    )


def test_the_three_objects_validate_strictly_and_the_hpa_carries_the_configuration() -> None:
    objects = built(target_per_instance=2.5, scale_out_cooldown=0.5, port=0)
    for version in K8S_VERSIONS:
        for body in (objects.deployment, objects.service, objects.autoscaler):
            kubernetes_validate.validate(body, version, strict=True)
    spec = objects.autoscaler["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "fraud-web"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 5)
    (metric,) = spec["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == serving.IN_FLIGHT_METRIC
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "2500m"}
    assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 1  # 0.5 s rounded up to whole seconds
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 5
    for direction in ("scaleUp", "scaleDown"):  # a decision may jump straight to the desired count
        assert spec["behavior"][direction]["policies"] == [{"type": "Pods", "value": 5, "periodSeconds": 15}]
    assert objects.service["spec"]["ports"][0]["port"] == serving.DEFAULT_SERVICE_PORT  # port 0: the default
    (container,) = objects.deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["KINETIC_ARTIFACTS"] == ARTIFACTS and env["KINETIC_MODEL_GROUP"] == "fraud"
    assert env["KINETIC_MAX_LOADED_MODELS"] == "2"
    assert json.loads(env["KINETIC_ROUTES"]) == ROUTES  # the versions the pods answer for
    assert objects.deployment["spec"]["selector"]["matchLabels"] == objects.service["spec"]["selector"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "Fraud_Web"}, "lowercase letters, digits and '-'"),
        ({"max_instances": 0}, "max_instances"),
        ({"min_instances": 4, "max_instances": 2}, "max_instances: must be >= min_instances (4)"),
        ({"target_per_instance": 0}, "target_per_instance"),
        ({"scale_in_cooldown": 3601}, "scale_in_cooldown: a GKE endpoint's autoscaler waits at most 3600 s"),
        ({"max_loaded_models": 0}, "max_loaded_models"),
        ({"port": 70000}, "port"),
    ],
)
def test_bad_configuration_is_one_line_naming_the_key(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        built(**changes)


# -- on kmock, through the GKE profile's backend -----------------------------------------------------------


def _live(c: Cluster, kind: str, name: str) -> dict[str, Any] | None:
    calls = {
        "deployment": c.clients.apps.read_namespaced_deployment,
        "service": c.clients.core.read_namespaced_service,
        "autoscaler": c.clients.autoscaling.read_namespaced_horizontal_pod_autoscaler,
    }
    try:
        return json.loads(calls[kind](name, c.namespace, _preload_content=False).data)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise


def _requests(c: Cluster, method: str, plural: str) -> int:
    return sum(1 for r in c.api.requests() if r.method == method and r.resource and r.resource.plural == plural)


def test_an_endpoint_is_created_replaced_and_removed_on_the_cluster(cluster: Cluster) -> None:
    backend = backend_for(resolve_infra())
    assert isinstance(backend, GkeCluster)
    names = backend.deploy_endpoint(CONFIG, ROUTES)
    assert names == {"deployment": "fraud-web", "service": "fraud-web", "autoscaler": "fraud-web"}
    deployment, service, hpa = (_live(cluster, kind, "fraud-web") for kind in names)
    assert deployment is not None and service is not None and hpa is not None
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["KINETIC_ARTIFACTS"] == f"gs://{cluster.bucket}/_artifacts/sha256/"  # the profile's jobs bucket
    infra = resolve_infra()  # the pods run the serving image of the profile's cluster repository
    assert container["image"] == serving_inputs().tag(infra.project, infra.region, infra.cluster)
    assert container["image"].startswith(f"{infra.region}-docker.pkg.dev/{infra.project}/kn-{infra.cluster}/serving:")
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(deployment, version, strict=True)
    assert service["spec"]["ports"][0]["port"] == 8000
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 5)
    assert hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "10"
    assert hpa["spec"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 3
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 5

    # the HPA scaled the Deployment meanwhile; a changed max replaces the HPA and keeps that count
    cluster.clients.apps.patch_namespaced_deployment(
        "fraud-web", cluster.namespace, {"spec": {"replicas": 4}}, _preload_content=False
    )
    assert backend.deploy_endpoint(CONFIG.replace(max_instances=8), ROUTES) == names
    hpa = _live(cluster, "autoscaler", "fraud-web")
    assert hpa is not None and hpa["spec"]["maxReplicas"] == 8
    assert hpa["spec"]["behavior"]["scaleUp"]["policies"][0]["value"] == 8
    deployment = _live(cluster, "deployment", "fraud-web")
    assert deployment is not None and deployment["spec"]["replicas"] == 4
    assert _requests(cluster, "POST", "horizontalpodautoscalers") == 1  # replaced, not created twice
    assert _requests(cluster, "PUT", "horizontalpodautoscalers") == 1

    backend.remove_endpoint("fraud-web")
    assert all(_live(cluster, kind, "fraud-web") is None for kind in names)
    with pytest.raises(NotFoundError, match="endpoint 'fraud-web' has no Deployment, Service or autoscaler"):
        backend.remove_endpoint("fraud-web")


def test_bad_configuration_writes_nothing_to_the_cluster(cluster: Cluster) -> None:
    backend = backend_for(resolve_infra())
    before = len(cluster.api.requests())
    with pytest.raises(ValidationError, match="max_instances"):
        backend.deploy_endpoint(CONFIG.replace(max_instances=0), ROUTES)
    assert len(cluster.api.requests()) == before
