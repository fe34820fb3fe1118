"""The Console (and so `--script`, the CLI verbs and the TUI) on a gke profile: jobs, logs, results, cancel and
pools come from the cluster (kmock + the kubelet double) and its jobs bucket (fake-gcs-server), not from the
workspace's local backend."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kinetic_tui.core.backends.gke.cluster import GkeCluster
from kinetic_tui.core.backends.gke.pools import GkePools
from kinetic_tui.core.backends.local.interface import LocalInterface
from kinetic_tui.core.backends.local.workspace import local_backend, store
from kinetic_tui.core.console import Console
from kinetic_tui.core.events import JobStatusChanged
from kinetic_tui.core.profiles import create_profile, resolve_infra
from kinetic_tui.script import run_script
from tests.gke.kubelet import Cluster, cluster, kube, serving, wait_for_workload
from tests.lifecycle.backend_projects import make_project

IMAGE = "us-docker.pkg.dev/kn-test/kn-c/base:cpu-0123456789ab"
REMOTE = f"""
import kinetic_tui as kinetic
from . import jobs

add, boom, count_lines, hold = (kinetic.run(container_image={IMAGE!r})(f)
                                for f in (jobs.add, jobs.boom, jobs.count_lines, jobs.hold))
"""


@pytest.fixture
def gke(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The cluster reached through a current gke profile (not KINETIC_* variables), and a user project whose
    decorated functions name a custom image (no Cloud Build here)."""
    create_profile(
        "cloud",
        backend="gke",
        project=cluster.project,
        cluster=cluster.name,
        namespace=cluster.namespace,
        make_current=True,
    )
    for variable in ("KINETIC_BACKEND", "KINETIC_PROJECT", "KINETIC_CLUSTER", "KINETIC_NAMESPACE"):
        monkeypatch.delenv(variable)
    project, package = make_project(tmp_path)
    (project / package / "remote.py").write_text(REMOTE)
    monkeypatch.syspath_prepend(str(project))
    pools = GkePools(store(), cluster.project, cluster.name)
    return SimpleNamespace(cluster=cluster, ref=f"{package}.remote", pools=pools)


def script(text: str) -> tuple[int, list[dict[str, Any]]]:
    out, err = io.StringIO(), io.StringIO()
    code = run_script(text, output="json", stdout=out, stderr=err)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def results(text: str) -> list[Any]:
    code, records = script(text)
    assert code == 0, records
    return [record["result"] for record in records]


def test_the_profile_chooses_the_jobs_source(gke: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_infra().profile == "cloud"
    assert isinstance(Console(offload=False).jobs.source, GkeCluster)
    monkeypatch.setenv("KINETIC_PROFILE", "local")
    assert isinstance(Console(offload=False).jobs.source, LocalInterface)


def test_submit_wait_then_jobs_status_logs_result(gke: SimpleNamespace) -> None:
    with serving(gke.cluster.kubelet) as codes:
        (submitted,) = results(f"submit {gke.ref}:count_lines --args [3] --name counter --wait")
    assert codes == [0]
    job_id = submitted["job_id"]
    assert (submitted["status"], submitted["result"], submitted["name"]) == ("SUCCEEDED", 3, "counter")
    assert (submitted["func"], submitted["accelerator"], submitted["pool"]) == ("count_lines", "cpu", None)
    handle = json.loads(gke.cluster.storage().get_bytes(f"{job_id}/handle.json"))
    assert submitted["created_at"] == handle["submitted_at"] and submitted["started_at"] is None
    assert local_backend().jobs() == []  # nothing of it in the local backend

    listed, status, logs, result = results(f"jobs\nstatus {job_id}\nlogs {job_id}\nresult {job_id}")
    assert [(job["job_id"], job["status"]) for job in listed] == [(job_id, "SUCCEEDED")]
    assert status == {**submitted, "result": None}
    assert [line for line in logs["lines"] if line.startswith("line ")] == ["line 0", "line 1", "line 2"]
    assert (result["status"], result["value"]) == ("SUCCEEDED", 3)
    (tail,) = results(f"logs {job_id} --tail 1")
    assert tail["lines"] == logs["lines"][-1:]


def test_a_failed_job_result_carries_the_remote_error(gke: SimpleNamespace) -> None:
    with serving(gke.cluster.kubelet):
        (failed,) = results(f"submit {gke.ref}:boom --args '[\"kaboom\"]' --wait")
    assert (failed["status"], failed["phase"], failed["detail"]) == ("FAILED", "execute", "ValueError: kaboom")
    code, (record,) = script(f"result {failed['job_id']}")
    assert code == 1
    assert record["error"]["type"] == "RemoteJobFailed"
    assert record["error"]["message"] == (f"job {failed['job_id']} failed in phase 'execute': ValueError: kaboom")


def test_cancel_deletes_the_running_job_and_pools_count_the_cluster_jobs(gke: SimpleNamespace) -> None:
    gke.pools.add("gpu-l4", "l4", 3)
    gke.pools.add("tpu-v5e", "v5e-2x2", 1, spot=True)
    (running,) = results(f"submit {gke.ref}:hold --args [30] --accelerator l4 --detach")
    name = wait_for_workload(gke.cluster.kubelet, "job")
    _pod, process = gke.cluster.kubelet.start_job(name)
    try:
        (queued,) = results(f"submit {gke.ref}:hold --args [30] --accelerator l4 --detach")
        status, pools, listed = results(f"status {name}\npools\njobs --status PENDING")
        assert (running["job_id"], status["status"], status["pool"]) == (name, "RUNNING", "gpu-l4")
        assert pools == [
            {
                "name": "gpu-l4",
                "accelerator": "l4x1",
                "nodes": 3,
                "spot": False,
                "in_use": 1,
                "queued": 1,
                "emulated": False,
            },
            {
                "name": "tpu-v5e",
                "accelerator": "v5litepod-2x2",
                "nodes": 1,
                "spot": True,
                "in_use": 0,
                "queued": 0,
                "emulated": False,
            },
        ]
        assert [job["job_id"] for job in listed] == [queued["job_id"]]

        cancelled, again = results(f"cancel {name}\nstatus {name}")
        assert (cancelled["status"], cancelled["detail"], again["status"]) == ("CANCELLED", "cancelled", "CANCELLED")
        assert name not in [
            item["metadata"]["name"]
            for item in json.loads(
                gke.cluster.clients.batch.list_namespaced_job(gke.cluster.namespace, _preload_content=False).data
            )["items"]
        ]
        results(f"cancel {queued['job_id']}")
        assert [(p["in_use"], p["queued"]) for p in results("pools")[0]] == [(0, 0), (0, 0)]
    finally:
        process.kill()
        process.wait()


def test_pool_changes_are_refused_on_the_console(gke: SimpleNamespace) -> None:
    gke.pools.add("gpu-l4", "l4", 2)
    before = gke.pools.list()
    for line, verb in [
        ("pool add big --accelerator l4x2 --nodes 2", "pool add big --accelerator l4x2 --nodes 2"),
        ("pool remove gpu-l4", "pool remove gpu-l4"),
    ]:
        code, (record,) = script(line)
        assert code == 1
        assert record["error"] == {
            "type": "ValidationError",
            "message": (
                f"node pools of GKE cluster {gke.cluster.name!r} change with its Pulumi stack, not from the console: "
                f"run `kinetic-tui {verb}` (it applies the stack)"
            ),
        }
    assert gke.pools.list() == before
    (pool,) = results("show pool gpu-l4")
    assert (pool["name"], pool["nodes"], pool["emulated"]) == ("gpu-l4", 2, False)


def test_an_unknown_job_is_one_line_naming_the_bucket(gke: SimpleNamespace) -> None:
    for verb in ("status", "logs", "result", "cancel"):
        code, (record,) = script(f"{verb} job-ffffffff")
        assert code == 1 and record["error"]["type"] == "NotFoundError"
        assert record["error"]["message"] == (
            f"unknown job 'job-ffffffff': no handle.json in bucket {gke.cluster.bucket!r}"
        )


def test_poll_announces_cluster_job_changes(gke: SimpleNamespace) -> None:
    console = Console(default_wait=False, offload=False)

    async def scenario() -> tuple[str, list[JobStatusChanged], list[JobStatusChanged], list[JobStatusChanged]]:
        job = await console.jobs.submit(f"{gke.ref}:add", args=[2, 3])
        first = await console.jobs.poll()
        quiet = await console.jobs.poll()
        assert gke.cluster.kubelet.run_job(wait_for_workload(gke.cluster.kubelet, "job")) == 0
        return job.job_id, first, quiet, await console.jobs.poll()

    job_id, first, quiet, settled = asyncio.run(scenario())
    assert first == [] and quiet == []  # submit already announced PENDING through this console
    assert settled == [JobStatusChanged(job_id, "SUCCEEDED", "PENDING")]
