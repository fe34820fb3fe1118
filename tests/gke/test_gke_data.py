"""Data on the GKE backend against kmock and fake-gcs-server: fused Data becomes a read-only GCS FUSE volume
of the created Job (strictly schema-valid), recorded in handle.json; a pod where nothing mounted it copies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.data import Data
from kinetic_tui.core.submission.context import JobContext
from tests.gke.kubelet import Cluster, cluster, kube, wait_for_workload
from tests.gke.test_gke_backend import IMAGE, created, jobs, submit_gke


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "a.txt").write_text("alpha")
    return data


def test_a_fused_argument_is_a_read_only_gcs_fuse_volume_of_the_job(cluster: Cluster, jobs: Any, dataset: Path) -> None:
    ctx = JobContext.from_params(jobs.read_tree, "cpu", container_image=IMAGE)
    handle = submit_gke(ctx, (Data(dataset, fuse=True),), {})
    name = wait_for_workload(cluster.kubelet, "job")
    (job,) = created(cluster, name)
    for version in ("1.37.0", "1.33.0"):
        kubernetes_validate.validate(job, version, strict=True)
    pod = job["spec"]["template"]
    digest = Data(dataset).content_hash()
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"].startswith("kinetic-data-")]
    assert volume["csi"]["volumeAttributes"] == {
        "bucketName": cluster.bucket,
        "mountOptions": f"implicit-dirs,only-dir=data-cache/{digest}",
    }
    assert volume["csi"]["readOnly"] is True
    (mount,) = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True and mount["mountPath"].startswith("/kinetic/data/")
    assert pod["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
    record = json.loads(cluster.storage().get_bytes(f"{name}/handle.json"))
    assert record["fuse_mounts"] == [[f"gs://{cluster.bucket}/data-cache/{digest}/", mount["mountPath"]]]
    assert cluster.kubelet.run_job(name) == 0  # this kubelet has no CSI driver: the runner copies instead
    assert handle.result()["files"] == {"a.txt": "alpha"}


def test_a_fused_volume_is_mounted_at_its_own_path(cluster: Cluster, jobs: Any, dataset: Path) -> None:
    remote = kinetic.run(container_image=IMAGE, volumes={"/mnt/data": Data(dataset, fuse=True)})
    handle = remote(jobs.read_tree).run_async("/mnt/data")
    name = wait_for_workload(cluster.kubelet, "job")
    (job,) = created(cluster, name)
    mounts = job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "kinetic-data-0", "mountPath": "/mnt/data", "readOnly": True} in mounts
    handle.cancel()
