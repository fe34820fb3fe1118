"""Training and tuning on a gke profile go through the profile's backend: every attempt and every trial is a
GKE Job (kmock + the kubelet double run it with the real runner, checkpoints in fake GCS), and an attempt
interrupted before epoch 3 then resumed ends with the straight run's artifact hash."""

from __future__ import annotations

from typing import Any

import pytest

from kinetic_tui.core.backends.gke import submission
from kinetic_tui.core.backends.gke.pools import GkePools
from kinetic_tui.core.backends.local.workspace import local_backend, store
from kinetic_tui.core.backends.registry import backend_for
from kinetic_tui.core.platform.training import ManagedTrainingRunner, TrainingCluster, TrainingJob, default_train_step
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.core.training.entry import PREEMPTED_EXIT_CODE
from kinetic_tui.core.training.service import TrainingService
from kinetic_tui.infra.container_builder import ResolvedImage
from tests.gke.kubelet import Cluster, cluster, kube, serving

IMAGE = "us-docker.pkg.dev/kn-test/kn-c/base:cpu-0123456789ab"
HP = {"learning_rate": 0.2}


@pytest.fixture
def service(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> TrainingService:
    """The gke profile's training service, with one desired CPU node pool and a ready image (no Cloud Build)."""
    monkeypatch.setattr(submission, "job_image", lambda ctx, root, ensure=None: ResolvedImage("custom", IMAGE))
    GkePools(store(), cluster.project, cluster.name).add("cpu", "cpu", max_nodes=2)
    return TrainingService(store(), backend_for(resolve_infra()))


def straight(epochs: int) -> TrainingJob:
    job = TrainingJob("reference", HP, epochs, 1)
    ManagedTrainingRunner(TrainingCluster(1), default_train_step).start(job)
    return job


def job_names(c: Cluster) -> set[str]:
    listing: Any = c.clients.batch.list_namespaced_job(c.namespace)
    return {item.metadata.name for item in listing.items}


def test_an_interrupted_training_resumed_on_gke_ends_with_the_straight_hash(
    service: TrainingService, cluster: Cluster
) -> None:
    with serving(cluster.kubelet) as codes:
        service.start("t", HP, 4, 1, None, interrupt_before_epoch=3)
        stopped = service.wait("t", timeout=90)
    assert codes == [PREEMPTED_EXIT_CODE]
    assert (stopped.status, stopped.pool) == ("Stopped", "cpu")
    with serving(cluster.kubelet) as codes:
        service.resume("t")
        done = service.wait("t", timeout=90)
    assert codes == [0]
    assert done.status == "Completed" and done.artifact_hash == straight(4).artifact_hash
    assert set(done.job_ids) <= job_names(cluster) and len(done.job_ids) == 2  # both attempts were GKE Jobs
    assert local_backend().jobs() == []  # nothing ran on the local backend
    checkpoints = [key for key in cluster.storage().list("") if "/output/training/t/checkpoint-" in key]
    assert len(checkpoints) == 4  # in the jobs bucket, under the first attempt's output dir


def test_a_studys_trials_run_as_gke_jobs(service: TrainingService, cluster: Cluster) -> None:
    with serving(cluster.kubelet, count=2):
        study = service.tune("s", {"learning_rate": [0.1, 0.2]}, "grid", 2, epochs=2)
    assert study.status == "Completed" and len(study.trials) == 2
    attempts = [job_id for trial in study.trials for job_id in service.get(trial.training).job_ids]
    assert len(attempts) == 2 and set(attempts) <= job_names(cluster)
    assert local_backend().jobs() == []
