"""The GKE backend end to end against kmock (the API server) and fake-gcs-server (the jobs bucket), with
tests/gke/kubelet.py playing the Job controller and kubelet: real runner processes, real GCS round trips."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core import cleanup_later
from kinetic_tui.core.backends.gke import manifests
from kinetic_tui.core.backends.gke.backend import OUTCOME, GkeError
from kinetic_tui.core.backends.gke.cluster import GkeCluster
from kinetic_tui.core.backends.gke.k8s_client import ClusterAccessError, clients_for
from kinetic_tui.core.backends.gke.submission import submit_gke as submit_record
from kinetic_tui.core.backends.registry import backend_for_handle
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.core.storage import MissingExtraError
from kinetic_tui.core.submission.context import JobContext
from kinetic_tui.infra.container_builder import ImageBuild, prebuilt_image
from tests.gke.kubelet import Cluster, cluster, kube, serving, wait_for_workload
from tests.lifecycle.backend_projects import import_jobs, make_project, wait_for

IMAGE = "us-docker.pkg.dev/kn-test/kn-c/base:cpu-0123456789ab"


def submit_gke(*args: Any, **kwargs: Any) -> JobHandle:
    return JobHandle.from_record(submit_record(*args, **kwargs))


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    project, package = make_project(tmp_path)
    return import_jobs(project, package, monkeypatch)


def submit(func: Any, *args: Any, accelerator: str = "cpu", **options: Any) -> Any:
    ctx = JobContext.from_params(func, accelerator, container_image=IMAGE, **options)
    return submit_gke(ctx, args, {})


def objects(c: Cluster) -> list[str]:
    return c.storage().list("")


def created(c: Cluster, name: str) -> list[dict[str, Any]]:
    """The bodies of the create requests kmock received for workload `name`."""
    return [
        r.data
        for r in c.api.requests()
        if r.method == "POST" and isinstance(r.data, dict) and r.data["metadata"]["name"] == name
    ]


# -- @run on a GKE profile -------------------------------------------------------------------------------


def test_run_returns_the_remote_value_and_streams_its_output(
    cluster: Cluster, jobs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    remote = kinetic.run(accelerator="l4", container_image=IMAGE)(jobs.two_lines)
    with serving(cluster.kubelet) as codes:
        assert remote("first line", "second line", 0.2) == "done"
    assert codes == [0]
    out = capsys.readouterr().out
    assert "first line\nsecond line" in out  # followed from the pod log stream
    (name,) = cluster.kubelet.taken
    (job,) = created(cluster, name)
    assert job["metadata"]["labels"] == {"app": "kinetic", "kinetic/job-id": name}
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert cleanup_later.drain()  # the call handed its value back first: the finished Job goes with the inputs
    _assert_job_deleted(cluster, name)


def test_run_reraises_the_remote_exception_with_its_traceback(cluster: Cluster, jobs: Any) -> None:
    remote = kinetic.run(container_image=IMAGE)(jobs.boom)
    with serving(cluster.kubelet) as codes, pytest.raises(ValueError, match="kaboom") as caught:
        remote("kaboom")
    assert codes == [1]
    notes = "\n".join(caught.value.__notes__)
    assert "failed in phase 'execute'" in notes and "in boom" in notes and "raise ValueError(message)" in notes
    (name,) = cluster.kubelet.taken
    state = cluster.backend().refresh(name)
    assert (state.status, state.phase) == (JobStatus.FAILED, "execute")
    assert state.detail == "ValueError: kaboom"


def test_the_runner_gets_both_hashes_and_the_job_id(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.whoami)
    name = wait_for_workload(cluster.kubelet, "job")
    command = cluster.kubelet.job(name)["spec"]["template"]["spec"]["containers"][0]["command"]
    storage = cluster.storage()
    payload = storage.get_bytes(f"{name}/payload.pkl")
    context = storage.get_bytes(f"{name}/context.zip")
    assert command[command.index("--payload-sha256") + 1] == hashlib.sha256(payload).hexdigest()
    assert command[command.index("--context-sha256") + 1] == hashlib.sha256(context).hexdigest()
    assert cluster.kubelet.run_job(name) == 0
    outcome = handle.result()
    assert (outcome["worker"], outcome["job"]) == (None, name)


# -- status mapping ----------------------------------------------------------------------------------------


def test_status_follows_the_job_and_its_pod(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 2, 3)
    backend = cluster.backend()
    name = wait_for_workload(cluster.kubelet, "job")
    assert name == handle.job_id
    pending = backend.refresh(name)
    assert (pending.status, pending.detail) == (JobStatus.PENDING, "waiting for a node")
    pod, process = cluster.kubelet.start_job(name)
    assert backend.refresh(name).status is JobStatus.RUNNING
    assert cluster.kubelet.finish_job(name, pod, process) == 0
    assert backend.wait(name, timeout=10).status is JobStatus.SUCCEEDED
    assert handle.storage().exists(f"{name}/result.pkl")


def test_a_job_that_is_gone_without_a_result_is_lost(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 1)
    cluster.clients.batch.delete_namespaced_job(handle.job_id, cluster.namespace, _preload_content=False)
    state = cluster.backend().refresh(handle.job_id)
    assert (state.status, state.phase) == (JobStatus.FAILED, "lost")


def test_unknown_job_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFoundError, match="job-ffffffff"):
        cluster.backend().refresh("job-ffffffff")


def test_wait_times_out_and_leaves_the_job(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 1)
    with pytest.raises(TimeoutError, match="still PENDING"):
        cluster.backend().wait(handle.job_id, timeout=0.1)
    assert cluster.kubelet.job(handle.job_id)["metadata"]["name"] == handle.job_id


# -- pending diagnostics ---------------------------------------------------------------------------------


def _unschedulable(message: str, since: str = "2999-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": since,
            }
        ],
    }


def test_unschedulable_pod_reports_the_scheduler_message(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 1, accelerator="l4x2")
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    cluster.kubelet.pending_pod(handle.job_id, _unschedulable(message))
    state = cluster.backend().refresh(handle.job_id)
    assert (state.status, state.detail) == (JobStatus.PENDING, f"unschedulable: {message}")


def test_unschedulable_for_too_long_fails_the_job(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 1, accelerator="l4x2")
    cluster.kubelet.pending_pod(handle.job_id, _unschedulable("0/3 nodes are available", "2020-01-01T00:00:00Z"))
    state = cluster.backend(pending_timeout=60).refresh(handle.job_id)
    assert (state.status, state.phase) == (JobStatus.FAILED, "launch")
    assert state.detail.startswith("unschedulable for ") and "0/3 nodes are available" in state.detail


def test_no_node_pool_for_the_accelerator_fails_naming_it(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 1, accelerator="v5e-2x2")
    pod = cluster.kubelet.pending_pod(
        handle.job_id, _unschedulable("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.")
    )
    assert cluster.backend().refresh(handle.job_id).status is JobStatus.PENDING  # the autoscaler has not spoken
    cluster.kubelet.add_event(
        pod, "NotTriggerScaleUp", "pod didn't trigger scale-up: 2 node(s) didn't match Pod's node affinity/selector"
    )
    state = cluster.backend().refresh(handle.job_id)
    assert (state.status, state.phase) == (JobStatus.FAILED, "launch")
    assert "no node pool provides v5litepod-2x2" in state.detail
    assert "kinetic-tui pool add NAME --accelerator v5litepod-2x2" in state.detail
    _assert_job_deleted(cluster, handle.job_id)
    assert cluster.backend().refresh(handle.job_id).detail == state.detail  # durable, not recomputed


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff"])
def test_image_pull_errors_fail_with_the_reason(cluster: Cluster, jobs: Any, reason: str) -> None:
    handle = submit(jobs.add, 1, 1)
    waiting = {"waiting": {"reason": reason, "message": "manifest unknown"}}
    cluster.kubelet.pending_pod(
        handle.job_id,
        {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "kinetic", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0, "state": waiting}
            ],
        },
    )
    state = cluster.backend().refresh(handle.job_id)
    assert (state.status, state.phase) == (JobStatus.FAILED, "launch")
    assert reason in state.detail and IMAGE in state.detail and "manifest unknown" in state.detail


def _assert_job_deleted(c: Cluster, name: str) -> None:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as missing:
        c.clients.batch.read_namespaced_job(name, c.namespace)
    assert missing.value.status == 404


# -- cancel, cleanup, logs, listing --------------------------------------------------------------------------


def _delete_requests(c: Cluster, name: str) -> list[Any]:
    return [r for r in c.api.requests() if r.method == "DELETE" and r.name == name]


def test_cancel_deletes_the_job_in_the_foreground(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.hold, 30)
    name = wait_for_workload(cluster.kubelet, "job")
    _pod, process = cluster.kubelet.start_job(name)
    try:
        backend = cluster.backend()
        assert backend.refresh(name).status is JobStatus.RUNNING
        state = backend.cancel(name)
        assert (state.status, state.detail) == (JobStatus.CANCELLED, "cancelled")
        _assert_job_deleted(cluster, name)
        (delete,) = _delete_requests(cluster, name)
        assert delete.params.get("propagationPolicy") == "Foreground"
        assert backend.refresh(name).status is JobStatus.CANCELLED
        assert backend.cancel(name).status is JobStatus.CANCELLED  # settled: nothing more to do
        assert json.loads(handle.storage().get_bytes(f"{name}/{OUTCOME}"))["status"] == "CANCELLED"
    finally:
        process.kill()
        process.wait()


def test_cleanup_is_refused_while_running_then_removes_the_inputs(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 4, 5)
    backend = cluster.backend()
    before = objects(cluster)
    with pytest.raises(ValidationError, match="PENDING; cancel it or wait"):
        backend.cleanup(handle.job_id)
    assert objects(cluster) == before
    assert cluster.kubelet.run_job(wait_for_workload(cluster.kubelet, "job")) == 0
    backend.cleanup(handle.job_id)
    left = {key.split("/", 1)[1] for key in objects(cluster) if key.startswith(handle.job_id)}
    assert left == {"handle.json", "result.pkl", "result.json"}
    _assert_job_deleted(cluster, handle.job_id)
    assert backend.refresh(handle.job_id).status is JobStatus.SUCCEEDED  # told by the kept result


def _hold_with_finalizer(c: Cluster, name: str, finalizers: list[str]) -> None:
    """A finalizer keeps a deleted Job (with its deletionTimestamp) until it is cleared, as the garbage
    collector's `foregroundDeletion` keeps one until its pods are gone."""
    c.clients.batch.patch_namespaced_job(
        name, c.namespace, {"metadata": {"finalizers": finalizers}}, _preload_content=False
    )


def _reads(c: Cluster, name: str) -> int:
    return sum(1 for r in c.api.requests() if r.method == "GET" and r.name == name)


def test_cleanup_waits_until_the_job_object_is_gone(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 2)
    name = wait_for_workload(cluster.kubelet, "job")
    assert cluster.kubelet.run_job(name) == 0
    _hold_with_finalizer(cluster, name, ["test.kinetic.dev/hold"])
    with pytest.raises(TimeoutError, match=rf"Job {name} \(being deleted since .+\) still there 0.3 s later"):
        handle.cleanup(cleanup_timeout=0.3, cleanup_poll_interval=0.05)
    released = threading.Event()
    start = _reads(cluster, name)

    def release() -> None:  # once the waiting client has polled twice more, let the deletion finish
        while _reads(cluster, name) < start + 3:
            time.sleep(0.01)
        _hold_with_finalizer(cluster, name, [])
        released.set()

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    handle.cleanup(cleanup_timeout=30, cleanup_poll_interval=0.05)
    assert released.is_set()  # it returned only after the Job was really gone
    _assert_job_deleted(cluster, name)
    thread.join(5)


def test_cancel_waits_for_the_deleted_job_and_times_out_naming_it(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.hold, 30)
    name = wait_for_workload(cluster.kubelet, "job")
    _pod, process = cluster.kubelet.start_job(name)
    try:
        _hold_with_finalizer(cluster, name, ["test.kinetic.dev/hold"])
        with pytest.raises(TimeoutError, match=f"Job {name} .* still there 0.2 s later"):
            handle.cancel(cleanup_timeout=0.2, cleanup_poll_interval=0.05)
        assert handle.status() is JobStatus.CANCELLED  # recorded first; only the removal is late
        _hold_with_finalizer(cluster, name, [])
        assert handle.cancel(cleanup_timeout=30, cleanup_poll_interval=0.05) is JobStatus.CANCELLED
        _assert_job_deleted(cluster, name)
    finally:
        process.kill()
        process.wait()


def test_logs_after_the_fact_and_followed(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.count_lines, 3)
    backend = cluster.backend()
    name = wait_for_workload(cluster.kubelet, "job")
    followed: list[str] = []
    follower = threading.Thread(target=lambda: [followed.extend(b) for b in backend.read_logs(name, follow=True)])
    follower.start()
    wait_for(  # the follower has looked at the job while it was still pending (it has no pod yet)
        lambda: any(
            r.method == "GET" and str(r.url).split("?")[0].endswith(f"/jobs/{name}") for r in cluster.api.requests()
        ),
        10,
        "the log follower to poll the pending job",
    )
    assert cluster.kubelet.run_job(name) == 0
    follower.join(20)
    assert not follower.is_alive()
    lines = [line for batch in backend.read_logs(handle.job_id) for line in batch]
    assert [line for line in lines if line.startswith("line ")] == ["line 0", "line 1", "line 2"]
    assert [line for line in followed if line.startswith("line ")] == ["line 0", "line 1", "line 2"]
    assert any(line.startswith("[kinetic] phase execute") for line in lines)


def test_list_uses_the_kinetic_label(cluster: Cluster, jobs: Any) -> None:
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "not-ours", "labels": {"app": "other"}},
        "spec": {"template": {"spec": {"containers": [{"name": "x", "image": "x"}], "restartPolicy": "Never"}}},
    }
    cluster.clients.batch.create_namespaced_job(cluster.namespace, foreign, _preload_content=False)
    first = submit(jobs.add, 1, 1)
    second = submit(jobs.add, 1, 2)
    ids = cluster.backend().job_ids()
    assert "not-ours" not in ids
    assert {first.job_id, second.job_id} <= set(ids)
    request = [
        r
        for r in cluster.api.requests()
        if r.method == "GET" and r.resource is not None and r.resource.plural == "jobs" and r.name is None
    ][-1]
    assert request.params["labelSelector"] == "app=kinetic"


def test_backend_for_a_handle_reaches_the_same_job(cluster: Cluster, jobs: Any) -> None:
    handle = submit(jobs.add, 1, 1)
    backend = backend_for_handle(handle.to_record())
    assert isinstance(backend, GkeCluster) and backend.infra.namespace == cluster.namespace
    assert backend.refresh(handle.job_id).status is JobStatus.PENDING


# -- bad input and missing pieces change nothing ---------------------------------------------------------


def _requirements(jobs: Any, text: str) -> None:
    (Path(jobs.__file__).parents[1] / "requirements.txt").write_text(text)


def test_bundled_mode_runs_the_image_built_for_the_project(cluster: Cluster, jobs: Any) -> None:
    _requirements(jobs, "# pinned\nNumPy >= 1, < 3\n-e .\n")
    asked: list[Any] = []

    def ensure(inputs: Any) -> ImageBuild:
        asked.append(inputs)
        return ImageBuild(f"europe-docker.pkg.dev/kn-test/kn-c/base:{inputs.category}-{inputs.digest()[:12]}", False)

    ctx = JobContext.from_params(jobs.add, "l4")
    handle = submit_gke(ctx, (1, 2), {}, ensure=ensure)
    (inputs,) = asked
    assert (inputs.category, inputs.requirements) == ("gpu", ("numpy<3,>=1",))
    container = cluster.kubelet.job(handle.job_id)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"europe-docker.pkg.dev/kn-test/kn-c/base:gpu-{inputs.digest()[:12]}"
    assert "--requirements" not in container["command"]


def test_prebuilt_mode_installs_the_requirements_at_start(cluster: Cluster, jobs: Any) -> None:
    _requirements(jobs, "requests==2.32.0\n")
    handle = submit_gke(JobContext.from_params(jobs.add, "cpu", container_image="prebuilt"), (1, 2), {})
    container = cluster.kubelet.job(handle.job_id)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == prebuilt_image("cpu")
    command = container["command"]
    uri = command[command.index("--requirements") + 1]
    assert uri == f"gs://{cluster.bucket}/{handle.job_id}/requirements.txt"
    assert cluster.storage().get_bytes(f"{handle.job_id}/requirements.txt") == b"requests==2.32.0\n"


def test_a_bad_custom_image_is_refused_before_anything_is_written(cluster: Cluster, jobs: Any) -> None:
    ctx = JobContext.from_params(jobs.add, "cpu", container_image="not an image")
    with pytest.raises(ValidationError, match="container_image"):
        submit_gke(ctx, (1, 2), {})
    assert objects(cluster) == [] and cluster.backend().job_ids() == []


def test_multi_host_on_plain_gke_is_refused(cluster: Cluster, jobs: Any) -> None:
    ctx = JobContext.from_params(jobs.add, "v5litepod-4x4", backend="gke", container_image=IMAGE)
    with pytest.raises(ValidationError, match="backend='pathways'"):
        submit_gke(ctx, (1, 2), {})
    assert objects(cluster) == []


def test_an_api_refusal_is_one_line(cluster: Cluster, jobs: Any) -> None:
    ctx = JobContext.from_params(jobs.add, "cpu", container_image=IMAGE)
    taken = manifests.job_manifest(
        manifests.WorkloadSpec(ctx.job_id, cluster.namespace, IMAGE, ctx.accelerator, (), "/out")
    )
    cluster.clients.batch.create_namespaced_job(cluster.namespace, taken, _preload_content=False)
    with pytest.raises(GkeError, match=f"could not create gke workload {ctx.job_id}") as caught:
        submit_gke(ctx, (1, 2), {})
    assert "\n" not in str(caught.value) and "409" in str(caught.value)


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes.client", None)  # what an uninstalled package looks like
    monkeypatch.setenv("KINETIC_K8S_HOST", "http://127.0.0.1:9")
    with pytest.raises(MissingExtraError, match=r"pip install 'kinetic-tui\[gcp\]'") as caught:
        clients_for(resolve_infra(project="kn-test", backend="gke", cluster="nowhere"))
    assert "\n" not in str(caught.value)


def test_no_kubeconfig_context_names_the_gcloud_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config").write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    infra = resolve_infra(project="kn-test", backend="gke", cluster="c9", zone="europe-west4-a")
    with pytest.raises(
        ClusterAccessError, match="gcloud container clusters get-credentials c9 --zone europe-west4-a --project kn-test"
    ):
        clients_for(infra)


def test_attach_rebuilds_a_gke_handle_from_the_jobs_bucket(cluster: Cluster, jobs: Any) -> None:
    handle = kinetic.run(container_image=IMAGE)(jobs.two_lines).run_async("a", "b", 0.0)
    with serving(cluster.kubelet):
        again = kinetic.attach(handle.job_id)  # not in the local store: read from gs://.../handle.json
        assert again == handle
        assert again.result(timeout=60) == "done"
    with pytest.raises(LookupError, match="not in this workspace nor in gs://"):
        kinetic.attach("job-00000000")


def test_listing_many_jobs_pages_through_limit_and_continue(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big namespace is listed a page at a time, as the API server serves it; every Job comes back once."""
    monkeypatch.setattr("kinetic_tui.core.backends.gke.backend.LIST_PAGE", 40)
    names = [f"job-{n:08x}" for n in range(101)]
    for name in names:
        body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {"app": "kinetic"}}}
        cluster.clients.batch.create_namespaced_job(cluster.namespace, body, _preload_content=False)
    unlabelled = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "someone-else"}}
    cluster.clients.batch.create_namespaced_job(cluster.namespace, unlabelled, _preload_content=False)
    emulator = cluster.api.emulator
    assert emulator is not None
    before = emulator.list_pages

    listed = cluster.backend()._list()

    assert sorted(item["metadata"]["name"] for item in listed) == names
    assert emulator.list_pages - before == 3  # 40 + 40 + 21
    pages = [r for r in cluster.api.requests() if r.method == "GET" and "limit" in r.params][-3:]
    tokens = [r.params.get("continue") for r in pages]
    assert tokens[0] is None and len(set(tokens[1:])) == 2  # the server's own tokens, followed as given
    assert {r.params["limit"] for r in pages} == {"40"}
