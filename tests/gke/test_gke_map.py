"""`map` on a GKE profile (core/backends/gke/batches.py) against kmock and fake-gcs-server, with the kubelet double
running each pod's runner as a real process: one Job per input, `max_concurrent` through suspended Jobs,
retries, partial failures, reattaching, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.gke import manifests
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.submission.packaging import PayloadError
from tests.gke.kubelet import Cluster, cluster, created_jobs, kube, serving
from tests.lifecycle.run_projects import flaky_task, load_module, make_project

IMAGE = "us-docker.pkg.dev/kn-test/kn-c/base:cpu-0123456789ab"
TIMEOUT = 60

TASKS = """
import threading
from pathlib import Path

import kinetic_tui as kinetic

IMAGE = "us-docker.pkg.dev/kn-test/kn-c/base:cpu-0123456789ab"


@kinetic.run(container_image=IMAGE)
def cube(x):
    return x ** 3


@kinetic.run(container_image=IMAGE)
def invert(x):
    return 1 / x


@kinetic.run(container_image=IMAGE, accelerator="v5litepod-2x4", backend="pathways")
def sliced(x):
    return x
""" + flaky_task("container_image=IMAGE")


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    project = make_project(tmp_path / "gkemap", {"kt_gke_map/__init__.py": "", "kt_gke_map/tasks.py": TASKS})
    return load_module(monkeypatch, project, "kt_gke_map.tasks")


def releases(c: Cluster) -> list[str]:
    return [
        str(r.url).split("?")[0].rsplit("/", 1)[-1]
        for r in c.api.requests()
        if r.method == "PATCH"
        and f"/namespaces/{c.namespace}/jobs/" in str(r.url)
        and r.data == {"spec": {"suspend": False}}
    ]


def test_map_runs_one_labelled_job_per_input(cluster: Cluster, tasks: ModuleType) -> None:
    with serving(cluster.kubelet, count=3) as codes:
        batch = tasks.cube.map([1, 2, 3])
        assert batch.results(timeout=TIMEOUT) == [1, 8, 27]
    assert codes == [0, 0, 0]
    jobs = created_jobs(cluster)
    assert [job["metadata"]["name"] for job in jobs] == [h.job_id for h in batch.handles()]
    assert {job["metadata"]["labels"][manifests.GROUP_LABEL] for job in jobs} == {batch.group_id}
    assert not any(job["spec"].get("suspend") for job in jobs)
    manifest = json.loads(cluster.storage().get_bytes(f"_groups/{batch.group_id}/manifest.json"))
    assert manifest["count"] == 3 and manifest["image"]["image"] == IMAGE


def test_max_concurrent_creates_the_rest_suspended_and_releases_them_one_by_one(
    cluster: Cluster, tasks: ModuleType
) -> None:
    with serving(cluster.kubelet, count=3):
        batch = tasks.cube.map([1, 2, 3], max_concurrent=1)
        jobs = created_jobs(cluster)
        assert [bool(job["spec"].get("suspend")) for job in jobs] == [False, True, True]
        _first, second, third = (h.job_id for h in batch.handles())
        assert kinetic.attach(second).status() is JobStatus.PENDING
        assert batch.results(timeout=TIMEOUT) == [1, 8, 27]
    assert releases(cluster) == [second, third]  # in input order, each once a slot was free


def test_a_poll_reads_no_suspended_input_one_by_one(cluster: Cluster, tasks: ModuleType) -> None:
    batch = tasks.cube.map([1, 2, 3, 4], max_concurrent=1)  # nothing serves: the first stays pending
    waiting = {h.job_id for h in batch.handles()[1:]}
    before = len(cluster.api.requests())
    assert batch.status_list() == [JobStatus.PENDING] * 4
    urls = [str(r.url) for r in cluster.api.requests()[before:]]
    assert not [url for url in urls if any(job_id in url for job_id in waiting)]
    assert sum("kinetic%2Fgroup-id" in url or "kinetic/group-id" in url for url in urls) == 1  # one list call
    batch.cancel()


def test_a_failing_input_raises_batch_error_with_the_partial_results(cluster: Cluster, tasks: ModuleType) -> None:
    with serving(cluster.kubelet, count=3):
        batch = tasks.invert.map([1, 0, 4])
        with pytest.raises(kinetic.BatchError) as info:
            batch.results(timeout=TIMEOUT)
    assert list(info.value.errors) == [1] and isinstance(info.value.errors[1], ZeroDivisionError)
    assert info.value.results == [1.0, None, 0.25]
    assert batch.status_counts() == {"SUCCEEDED": 2, "FAILED": 1}


def test_retries_create_a_new_job_from_the_stored_payload(cluster: Cluster, tasks: ModuleType, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    with serving(cluster.kubelet, count=4):
        batch = tasks.flaky.map([(1, str(markers)), (2, str(markers))], retries=1, max_concurrent=1)
        assert batch.results(timeout=TIMEOUT) == [10, 20]
    assert [len(attempts) for attempts in batch.manifest["attempts"]] == [2, 2]
    assert len(created_jobs(cluster)) == 4


def test_attach_batch_reads_the_manifest_from_the_jobs_bucket(cluster: Cluster, tasks: ModuleType) -> None:
    with serving(cluster.kubelet, count=2):
        group_id = tasks.cube.map([2, 3], max_concurrent=1).group_id
        again = kinetic.attach_batch(group_id)  # nothing of it is in the local workspace
        assert again.results(timeout=TIMEOUT) == [8, 27]
    assert len(again) == 2 and again.manifest["max_concurrent"] == 1


def test_bad_input_and_pathways_are_refused_before_anything_is_created(cluster: Cluster, tasks: ModuleType) -> None:
    import threading

    with pytest.raises(PayloadError, match=r"input 1: argument 'x' \(args\[0\]\) cannot be pickled"):
        tasks.cube.map([1, threading.Lock()])
    with pytest.raises(ValidationError, match="map on the pathways backend is not supported yet"):
        tasks.sliced.map([1, 2])
    assert created_jobs(cluster) == []
    assert cluster.storage().list("") == []
