"""A pipeline run on a GKE profile: the driver runs on this machine (the workspace supervisor), every step
that executes is a GKE Job created through the profile's backend (kmock as the API server, the kubelet
double running each pod's runner, the jobs bucket and the artifact store on fake GCS). The canonical three
runs hold as on the local backend, counted in Jobs the API server was asked to create."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core.backends.gke.pools import GkePools
from kinetic_tui.core.backends.local.workspace import local_backend, store
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.supervisor import process as supervisor
from tests.gke.kubelet import Cluster, cluster, created_jobs, kube, serving, wait_for_workload
from tests.helpers import projects
from tests.pipelines.conftest import script

IMAGE = "us-docker.pkg.dev/kn-test/kn-c/base:cpu-0123456789ab"
MODULE = f"""
from kinetic_tui import Pipeline
from kinetic_tui.core.demo.canonical import DEFAULT_PARAMS, NAME, canonical_steps


def canonical():
    return Pipeline(NAME, canonical_steps(), DEFAULT_PARAMS, container_image={IMAGE!r})
"""
EXECUTED = ["preprocess", "train_a", "train_b", "evaluate", "accuracy_gate"]

__all__ = ["cluster", "kube"]  # the fixtures this module uses from the kubelet double


@pytest.fixture
def gke_project(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinetic_home: Path
) -> Iterator[Cluster]:
    """The canonical pipeline in a user project on a GKE profile with one desired CPU node pool."""
    projects.user_project(tmp_path, monkeypatch, "gke_pipe_user", MODULE)
    GkePools(store(), cluster.project, cluster.name).add("cpu", "cpu", max_nodes=2)
    try:
        yield cluster
    finally:
        supervisor.stop(kinetic_home)


def test_the_canonical_three_runs_on_gke_are_jobs_and_an_identical_rerun_creates_none(
    gke_project: Cluster,
) -> None:
    c = gke_project
    code, records = script("pipeline register gke_pipe_user:canonical\n")
    assert code == 0, records
    with serving(c.kubelet, count=6) as exits:
        code, records = script("pipeline run canonical\n")
    assert code == 0, records
    first = records[0]["result"]
    assert first["executed"] == [*EXECUTED, "register"]
    assert {s["name"]: s["status"] for s in first["steps"]}["notify"] == "Skipped"
    assert exits == [0] * 6
    created = created_jobs(c)
    assert len(created) == 6  # every executed step was a GKE Job, and nothing else was
    assert {job["spec"]["template"]["spec"]["containers"][0]["image"] for job in created} == {IMAGE}
    assert sorted(job["metadata"]["annotations"]["kinetic/display-name"] for job in created) == sorted(
        f"canonical#1 {name}" for name in first["executed"]
    )

    code, records = script("rerun canonical\n")
    assert code == 0, records
    assert records[0]["result"]["executed"] == []
    assert len(created_jobs(c)) == 6  # an identical rerun launches no Job

    with serving(c.kubelet, count=6) as exits:
        code, records = script("rerun canonical --param raw_rows=800 --param threshold=0.99\n")
    assert code == 0, records
    third = records[0]["result"]
    assert third["branch_taken"] == {"accuracy_gate": False}
    assert third["executed"] == [*EXECUTED, "notify"]
    assert exits == [0] * 6 and len(created_jobs(c)) == 12
    assert local_backend().jobs() == []  # no step ran on this machine's backend


def test_cancelling_a_run_on_gke_cancels_its_running_step_job(gke_project: Cluster) -> None:
    c = gke_project
    code, records = script("pipeline register gke_pipe_user:canonical\npipeline run canonical --detach\n")
    assert code == 0, records
    name = wait_for_workload(c.kubelet, "job")  # preprocess's Job, left pending: no kubelet runs it
    code, records = script("pipeline cancel canonical\n")
    assert code == 0, records
    assert records[0]["result"]["status"] == "Cancelled"
    steps = {s["name"]: s["status"] for s in records[0]["result"]["steps"]}
    assert steps["preprocess"] == "Cancelled" and set(steps.values()) == {"Cancelled"}
    assert c.backend().refresh(name).status is JobStatus.CANCELLED
    listed = c.clients.batch.list_namespaced_job(c.namespace, _preload_content=False).data
    assert name not in listed.decode()  # the cancelled Job was deleted from the cluster
    assert len(created_jobs(c)) == 1
