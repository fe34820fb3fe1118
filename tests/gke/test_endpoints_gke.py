"""Endpoints on a GKE profile as a user runs them (the CLI and `--script`, through the Console) against kmock:
`endpoint create` deploys the Deployment, Service and HPA from the endpoint's config, `stop` deletes them,
`start` deploys them again from the store, `show endpoint` reports the replicas the cluster reports; the
workspace's controllers never drive such an endpoint, and bad input is refused before anything is written.
The serving pod's own command, taken from the Deployment kmock holds, serves a version from the bucket."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from click.testing import CliRunner

from kinetic_tui.cli.main import main
from kinetic_tui.core.artifacts import workspace_artifacts
from kinetic_tui.core.backends.gke import serving
from kinetic_tui.core.backends.local.workspace import store
from kinetic_tui.core.backends.registry import backend_for
from kinetic_tui.core.console import Console
from kinetic_tui.core.console.snapshots import EndpointSnapshot
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.core.serving.config import token_path
from kinetic_tui.core.serving.controller import EndpointControllers
from kinetic_tui.core.store import serving_repo
from kinetic_tui.script import run_script
from kinetic_tui.views import endpoints as endpoints_view
from tests.gke.kubelet import Cluster, cluster, created, kube
from tests.gke.test_console_gke import results, script

__all__ = ["cluster", "kube"]  # the fixtures this module uses from the kubelet double

KINDS = {
    "Deployment": ("apps", "deployment"),
    "Service": ("core", "service"),
    "HorizontalPodAutoscaler": ("autoscaling", "horizontal_pod_autoscaler"),
}
LOSS = 0.25  # the trained state of fraud:v1: the built-in predict scores a record by it
CREATE = (
    "endpoint create fraud-web --model fraud --min 2 --max 6 --target 4 --scale-out-cooldown 3 "
    "--scale-in-cooldown 7 --max-loaded-models 2 --port 8000"
)


@pytest.fixture
def gke(cluster: Cluster) -> Cluster:
    """The GKE profile's cluster, with model group `fraud` whose Production v1 carries its trained state in
    the profile's jobs bucket (registered as `register --from-training` records it) and a v2 without one."""
    artifacts = workspace_artifacts(backend_for(resolve_infra()))
    digest = artifacts.put_value({"loss": LOSS})
    db = store()
    with db.transaction():
        registry = db.registry.load_registry()
        first = registry.register("fraud", "a" * 64, {"metric": LOSS}, "trained")
        registry.register("fraud", "b" * 64, {"metric": 0.5}, "older")
        serving_repo.save_model(db, "fraud", first.version, digest, None, None)
        registry.transition("fraud", first.version, "Staging")
        registry.transition("fraud", first.version, "Production")
    return cluster


def live(c: Cluster, kind: str, name: str = "fraud-web") -> dict[str, Any] | None:
    api, noun = KINDS[kind]
    try:
        answer = getattr(getattr(c.clients, api), f"read_namespaced_{noun}")(name, c.namespace, _preload_content=False)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise
    found: dict[str, Any] = json.loads(answer.data)
    return found


def posted(c: Cluster) -> list[dict[str, Any]]:
    return created(c, tuple(KINDS))


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"]}


def test_the_cli_creates_the_three_objects_on_the_cluster_from_the_endpoint_config(gke: Cluster) -> None:
    result = CliRunner().invoke(main, [*CREATE.split(), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)["result"]
    assert shown["serving"]["cluster"] == f"GKE cluster {gke.name!r} (namespace {gke.namespace!r})"

    bodies = posted(gke)
    assert [body["kind"] for body in bodies] == list(KINDS)
    for body in bodies:
        for version in ("1.37.0", "1.33.0"):
            kubernetes_validate.validate(body, version, strict=True)
    deployment, service, hpa = (live(gke, kind) for kind in KINDS)
    assert deployment is not None and service is not None and hpa is not None
    assert deployment["spec"]["replicas"] == 2
    assert service["spec"]["ports"][0]["port"] == 8000
    spec = hpa["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 6)
    assert spec["metrics"][0]["pods"]["target"]["averageValue"] == "4"
    windows = [spec["behavior"][d]["stabilizationWindowSeconds"] for d in ("scaleUp", "scaleDown")]
    assert windows == [3, 7]  # the scale-out and scale-in cooldowns
    env = env_of(deployment)
    assert env["KINETIC_MAX_LOADED_MODELS"] == "2"
    routes = json.loads(env["KINETIC_ROUTES"])
    assert routes["production"] == "fraud:v1" and routes["versions"]["fraud:v2"]["spec"] is None
    assert routes["versions"]["fraud:v1"]["spec"]["artifact"] is not None

    # the workspace runs nothing for it: no router, no instances, no token, no controller duty
    db = store()
    assert serving_repo.wanted_running(db) == [] and serving_repo.endpoints_with_processes(db) == []
    assert not EndpointControllers().due(SimpleHome(db))
    assert not token_path("fraud-web").exists()


class SimpleHome:
    """What the controllers' duty asks of a home to decide whether it is due: its store."""

    def __init__(self, db: Any) -> None:
        self.store = db


def test_show_reports_the_replicas_the_cluster_reports(gke: Cluster) -> None:
    results(CREATE)
    apps, scaling = gke.clients.apps, gke.clients.autoscaling
    apps.patch_namespaced_deployment_status(  # as the Deployment controller and the HPA would
        "fraud-web", gke.namespace, {"status": {"replicas": 3, "readyReplicas": 2}}, _preload_content=False
    )
    scaling.patch_namespaced_horizontal_pod_autoscaler_status(
        "fraud-web",
        gke.namespace,
        {"status": {"currentReplicas": 3, "desiredReplicas": 4}},
        _preload_content=False,
    )
    shown, (listed,) = results("show endpoint fraud-web\nendpoints")
    assert shown["instance_count"] == listed["instance_count"] == 3
    assert listed["serving"]["replicas"] == shown["serving"]["replicas"]
    serving = shown["serving"]
    assert serving["wanted"] == "running" and serving["objects"] == ["autoscaler", "deployment", "service"]
    assert serving["replicas"] == {"wanted": 2, "created": 3, "ready": 2}
    assert serving["autoscaler"] == {"current": 3, "desired": 4}
    assert serving["url"].startswith(f"http://fraud-web.{gke.namespace}.svc.cluster.local:8000/")

    async def listed() -> tuple[EndpointSnapshot, ...]:  # what the endpoints view lists and renders
        console = Console()
        try:
            return await console.endpoints.list()
        finally:
            await console.aclose()

    (snapshot,) = asyncio.run(listed())
    assert snapshot.instance_count == 3
    text = endpoints_view._serving(snapshot)
    assert f"served on GKE cluster {gke.name!r}" in text
    assert "replicas 2 ready / 3 created / 2 wanted · autoscaler current 3 desired 4" in text


def test_stop_deletes_the_objects_and_start_deploys_them_again_from_the_store(gke: Cluster) -> None:
    scaled, stopped, started = results(
        f"{CREATE}\nscale fraud-web --max 9\nendpoint stop fraud-web\nendpoint start fraud-web"
    )[1:]
    assert scaled["max_instances"] == 9
    assert stopped["serving"]["wanted"] == "stopped" and stopped["serving"]["objects"] == []  # as the cluster says
    assert started["serving"]["wanted"] == "running"
    assert started["serving"]["objects"] == ["autoscaler", "deployment", "service"]
    hpa = live(gke, "HorizontalPodAutoscaler")
    assert hpa is not None and (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 9)
    deployment = live(gke, "Deployment")
    assert deployment is not None and json.loads(env_of(deployment)["KINETIC_ROUTES"])["production"] == "fraud:v1"
    deleted = [r.resource.plural for r in gke.api.requests() if r.method == "DELETE" and r.namespace == gke.namespace]
    assert sorted(deleted) == ["deployments", "horizontalpodautoscalers", "services"]  # stop deleted each once


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("endpoint create fraud-web --model nope", "unknown group 'nope'"),
        ("endpoint create Fraud_Web --model fraud", "lowercase letters, digits and '-'"),
        ("endpoint create fraud-web --model fraud --pool cpu", "--pool and --accelerator"),
        ("endpoint create fraud-web --model fraud --min 4 --max 2", "max_instances"),
        ("endpoint create fraud-web --model fraud --scale-in-cooldown 4000", "at most 3600 s"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(gke: Cluster, line: str, says: str) -> None:
    before = len(posted(gke))
    code, (record,) = script(line)
    assert code != 0 and not record["ok"]
    assert says in record["error"]["message"] and "\n" not in record["error"]["message"]
    assert len(posted(gke)) == before and live(gke, "Deployment", "fraud-web") is None
    assert store().endpoints.names() == []


def test_a_deploy_the_api_refuses_halfway_leaves_nothing_behind(gke: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    real = serving.deploy

    def refused_after_creating(clients: Any, objects: serving.EndpointManifests) -> dict[str, str]:
        real(clients, objects)  # every object is on the cluster when the API refuses
        raise serving.ServingError("could not create HorizontalPodAutoscaler 'fraud-web': Forbidden")

    monkeypatch.setattr(serving, "deploy", refused_after_creating)
    code, (record,) = script(CREATE)
    assert code != 0 and "Forbidden" in record["error"]["message"]
    assert all(live(gke, kind) is None for kind in KINDS) and store().endpoints.names() == []


@pytest.mark.parametrize(
    "line", ["observe fraud-web 40", "load fraud-web --concurrency 2 --ticks 1", "invoke fraud-web fraud '{}'"]
)
def test_what_drives_the_workspace_autoscaler_is_refused_the_hpa_scales_it(gke: Cluster, line: str) -> None:
    results(CREATE)
    code, (record,) = script(line)
    assert code != 0 and "served on GKE cluster" in record["error"]["message"]
    assert "kubectl port-forward service/fraud-web" in record["error"]["message"]
    assert store().endpoints.get("fraud-web").history == []  # the workspace's rule never ran


# -- the serving pod ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _http(url: str, body: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_pods_command_from_the_deployment_serves_the_version_from_the_bucket(gke: Cluster, tmp_path: Path) -> None:
    results(CREATE)
    deployment = live(gke, "Deployment")
    assert deployment is not None
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = list(container["command"])
    assert command[0] == "python"
    port = _free_port()  # the container's port may be taken on this machine; everything else is the pod's
    env = {
        **env_of(deployment),
        "KINETIC_SERVING_PORT": str(port),
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "STORAGE_EMULATOR_HOST": os.environ["STORAGE_EMULATOR_HOST"],
    }
    log = (tmp_path / "pod.log").open("wb")
    pod = subprocess.Popen([sys.executable, *command[1:]], env=env, cwd=tmp_path, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                status, text = _http(base + container["readinessProbe"]["httpGet"]["path"])
                break
            except OSError:
                assert pod.poll() is None and time.monotonic() < deadline, (tmp_path / "pod.log").read_text()
                time.sleep(0.05)
        assert status == 200 and json.loads(text)["ok"] is True
        invoke = f"{base}/v1/endpoints/fraud-web/invoke"
        status, text = _http(invoke, json.dumps({"record": {"x": 2}}).encode())
        assert status == 200, text
        answer = json.loads(text)
        assert answer["model"] == "fraud:v1" and answer["output"] == {"score": LOSS * 2, "loss": LOSS}
        status, text = _http(invoke, json.dumps({"record": {}, "model": "fraud:v9"}).encode())
        assert status == 404 and "fraud:v1 (Production)" in text and "fraud:v2 (None)" in text
        status, text = _http(invoke, json.dumps({"record": {}, "model": "fraud:v2"}).encode())
        assert status == 409 and "register fraud --from-training older" in text
        assert _http(invoke, b"{not json")[0] == 400
        status, text = _http(base + "/metrics")
        assert status == 200 and "\nkinetic_in_flight_requests 0\n" in text
    finally:
        pod.send_signal(signal.SIGTERM)
        pod.wait(10)
        log.close()
    assert pod.returncode == 0
