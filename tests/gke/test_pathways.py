"""Multi-host TPU slices as LeaderWorkerSets on the emulated cluster: the host index from the LWS worker-index
label through the downward API, leader-and-worker outcomes, and the LWS removed once the job is decided."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.gke.backend import OUTCOME
from kinetic_tui.core.backends.gke.pathways import LWS_GROUP, LWS_PLURAL, LWS_VERSION, PathwaysBackend
from kinetic_tui.core.backends.gke.submission import submit_gke
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.submission.context import JobContext
from tests.gke.kubelet import Cluster, cluster, kube, serving, wait_for_workload
from tests.lifecycle.backend_projects import import_jobs, make_project

IMAGE = "us-docker.pkg.dev/kn-test/kn-c/base:tpu-0123456789ab"
SLICE = "v5litepod-4x4"  # 16 chips on 4 hosts
LWS_SCHEMA = json.loads(Path(__file__).with_name("lws_schema.json").read_text())


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    project, package = make_project(tmp_path)
    return import_jobs(project, package, monkeypatch)


def submit(func: Any, *args: Any) -> Any:
    ctx = JobContext.from_params(func, SLICE, container_image=IMAGE)
    assert ctx.backend == "pathways"  # a multi-host slice on a GKE profile selects Pathways
    return JobHandle.from_record(submit_gke(ctx, args, {}))


def lws_exists(c: Cluster, name: str) -> bool:
    listing = c.clients.custom.list_namespaced_custom_object(LWS_GROUP, LWS_VERSION, c.namespace, LWS_PLURAL)
    return name in {item["metadata"]["name"] for item in listing["items"]}


def test_run_on_a_slice_returns_host_zeros_value(
    cluster: Cluster, jobs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    remote = kinetic.run(accelerator=SLICE, container_image=IMAGE)(jobs.fail_on_worker)
    with serving(cluster.kubelet, "lws") as codes:
        value = remote("none")
    assert codes == [[0, 0, 0, 0]]
    assert value["worker"] == "0"
    out = capsys.readouterr().out
    for host in range(4):  # every host ran with its index from the worker-index label
        assert f"[host {host}] worker {host} pid" in out
    (name,) = cluster.kubelet.taken
    assert not lws_exists(cluster, name)  # decided, so deleted: nothing restarts it


def test_the_created_set_validates_against_the_crd_schema(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 2)
    lws = cluster.kubelet.leaderworkerset(handle.job_id)
    jsonschema.validate({k: lws[k] for k in ("apiVersion", "kind", "metadata", "spec")}, LWS_SCHEMA)
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 4
    assert lws["metadata"]["labels"] == {"app": "kinetic", "kinetic/job-id": handle.job_id}
    assert handle.job_id in PathwaysBackend(cluster.clients, cluster.storage(), cluster.namespace).job_ids()


def test_a_failed_worker_fails_the_job_despite_the_leaders_success(cluster: Cluster, jobs: Any) -> None:
    remote = kinetic.run(accelerator=SLICE, container_image=IMAGE)(jobs.fail_on_worker)
    with serving(cluster.kubelet, "lws") as codes, pytest.raises(RuntimeError, match="worker 2 broke") as caught:
        remote("2")
    assert codes == [[0, 0, 1, 0]]
    assert any("on host 2" in note for note in caught.value.__notes__)
    (name,) = cluster.kubelet.taken
    state = cluster.backend("pathways").refresh(name)
    assert (state.status, state.phase, state.nodes) == (JobStatus.FAILED, "execute", 4)
    assert state.detail == "host 2: RuntimeError: worker 2 broke"
    assert cluster.storage().exists(f"{name}/result-worker-2.pkl") and cluster.storage().exists(f"{name}/result.pkl")


def test_leader_success_waits_for_the_workers(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.fail_on_worker, "none")
    kubelet, backend = cluster.kubelet, cluster.backend("pathways")
    name = wait_for_workload(kubelet, "lws")
    template = kubelet.leaderworkerset(name)["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    pods = [
        kubelet.create_pod(
            name if host == 0 else f"{name}-{host}",
            template,
            {"leaderworkerset.sigs.k8s.io/worker-index": str(host)},
            {"phase": "Pending"},
        )
        for host in range(4)
    ]
    assert backend.refresh(name).status is JobStatus.PENDING
    processes = [kubelet.start_container(pod) for pod in pods]
    assert kubelet.finish_container(pods[0], processes[0]) == 0
    assert cluster.storage().exists(f"{name}/result.json")
    assert backend.refresh(name).status is JobStatus.RUNNING  # the leader is done, the workers are not
    assert lws_exists(cluster, name)
    assert [kubelet.finish_container(p, proc) for p, proc in zip(pods[1:], processes[1:])] == [0, 0, 0]
    assert backend.refresh(name).status is JobStatus.SUCCEEDED
    assert not lws_exists(cluster, name)
    assert json.loads(cluster.storage().get_bytes(f"{name}/{OUTCOME}"))["status"] == "SUCCEEDED"
    assert handle.storage().exists(f"{name}/result.pkl")


def _group(c: Cluster, job_id: str, states: dict[int, dict[str, Any]]) -> None:
    """Create the slice's pods with the given kinetic container state per host (others running)."""
    template = c.kubelet.leaderworkerset(job_id)["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    for host in range(4):
        state = states.get(host, {"running": {}})
        c.kubelet.create_pod(
            f"{job_id}-{host}",
            template,
            {"leaderworkerset.sigs.k8s.io/worker-index": str(host)},
            {
                "phase": "Pending" if "waiting" in state else "Running",
                "containerStatuses": [
                    {
                        "name": "kinetic",
                        "image": IMAGE,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": state,
                    }
                ],
            },
        )


def test_a_worker_killed_without_a_result_fails_the_job(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 1)
    _group(cluster, handle.job_id, {3: {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}})
    state = cluster.backend("pathways").refresh(handle.job_id)
    assert (state.status, state.phase) == (JobStatus.FAILED, "runner")
    assert state.detail == "host 3 exited with 137 without a result"
    assert not lws_exists(cluster, handle.job_id)


def test_one_host_that_cannot_start_fails_a_running_slice(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 1)
    _group(cluster, handle.job_id, {2: {"waiting": {"reason": "ImagePullBackOff", "message": "denied"}}})
    state = cluster.backend("pathways").refresh(handle.job_id)
    assert (state.status, state.phase) == (JobStatus.FAILED, "launch")
    assert "ImagePullBackOff" in state.detail and "denied" in state.detail
    assert not lws_exists(cluster, handle.job_id)


def test_cancel_deletes_the_set(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 1)
    backend = cluster.backend("pathways")
    assert backend.cancel(handle.job_id).status is JobStatus.CANCELLED
    assert not lws_exists(cluster, handle.job_id)
    delete = [r for r in cluster.api.requests() if r.method == "DELETE" and r.name == handle.job_id]
    assert [r.params.get("propagationPolicy") for r in delete] == ["Foreground"]
