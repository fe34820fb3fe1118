"""Job and LeaderWorkerSet manifests: placement per accelerator, the runner command, and schema validity
(kubernetes-validate in strict mode for Jobs and pod templates; the LWS CRD schema for LeaderWorkerSets)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.accelerators import all_accelerators, format_accelerator, is_multi_host, parse_accelerator
from kinetic_tui.core.backends.gke import manifests
from kinetic_tui.core.backends.gke.manifests import WorkloadSpec, job_manifest, leaderworkerset_manifest

K8S_VERSIONS = ("1.37.0", "1.33.0")
LWS_SCHEMA = json.loads((Path(__file__).with_name("lws_schema.json")).read_text())
PAYLOAD_SHA, CONTEXT_SHA = "a" * 64, "b" * 64
RUNNER_ARGS = (
    "--payload",
    "gs://p-kn-c-jobs/job-0123abcd/payload.pkl",
    "--context",
    "gs://p-kn-c-jobs/job-0123abcd/context.zip",
    "--result",
    "gs://p-kn-c-jobs/job-0123abcd/result.pkl",
    "--payload-sha256",
    PAYLOAD_SHA,
    "--context-sha256",
    CONTEXT_SHA,
)


def spec_for(
    accelerator: str, output_dir: str = "gs://p-kn-c-jobs/job-0123abcd/output/", job_id: str = "job-0123abcd"
) -> WorkloadSpec:
    return WorkloadSpec(
        job_id=job_id,
        namespace="ml",
        image="us-docker.pkg.dev/p/kn-c/base:gpu-0123456789ab",
        accelerator=parse_accelerator(accelerator),
        runner_args=RUNNER_ARGS,
        output_dir=output_dir,
        service_account="kinetic-runner",
        display_name="train",
    )


def validate_job(manifest: dict[str, Any], versions: tuple[str, ...] = K8S_VERSIONS) -> None:
    for version in versions:
        kubernetes_validate.validate(manifest, version, strict=True)


def validate_lws(manifest: dict[str, Any], versions: tuple[str, ...] = K8S_VERSIONS) -> None:
    jsonschema.validate(manifest, LWS_SCHEMA)
    template = manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template}
    validate_job(pod_template, versions)


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    if manifest["kind"] == "Job":
        return manifest["spec"]["template"]["spec"]["containers"][0]
    return manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]


def pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    if manifest["kind"] == "Job":
        return manifest["spec"]["template"]["spec"]
    return manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]


def env_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container(manifest)["env"]}


# accelerator, node selector, toleration keys, resource limits
SINGLE_HOST_TABLE = [
    ("cpu", {}, [], None),
    ("cpu:spot", {"cloud.google.com/gke-spot": "true"}, ["cloud.google.com/gke-spot"], None),
    ("l4", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, ["nvidia.com/gpu"], {"nvidia.com/gpu": "1"}),
    ("l4x2", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, ["nvidia.com/gpu"], {"nvidia.com/gpu": "2"}),
    ("t4x4", {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}, ["nvidia.com/gpu"], {"nvidia.com/gpu": "4"}),
    (
        "a100-80gbx16",
        {"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"},
        ["nvidia.com/gpu"],
        {"nvidia.com/gpu": "16"},
    ),
    (
        "h100x8:spot",
        {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "cloud.google.com/gke-spot": "true"},
        ["nvidia.com/gpu", "cloud.google.com/gke-spot"],
        {"nvidia.com/gpu": "8"},
    ),
    (
        "v5litepod-1",
        {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "1x1"},
        ["google.com/tpu"],
        {"google.com/tpu": "1"},
    ),
    (
        "v5e-2x2",
        {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x2"},
        ["google.com/tpu"],
        {"google.com/tpu": "4"},
    ),
    (
        "v5litepod-2x4:spot",
        {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x4",
            "cloud.google.com/gke-spot": "true",
        },
        ["google.com/tpu", "cloud.google.com/gke-spot"],
        {"google.com/tpu": "8"},
    ),
    (
        "v3-4",
        {"cloud.google.com/gke-tpu-accelerator": "tpu-v3-podslice", "cloud.google.com/gke-tpu-topology": "2x2"},
        ["google.com/tpu"],
        {"google.com/tpu": "4"},
    ),
]


@pytest.mark.parametrize(("accelerator", "selector", "toleration_keys", "limits"), SINGLE_HOST_TABLE)
def test_job_manifest_places_and_validates(
    accelerator: str, selector: dict[str, str], toleration_keys: list[str], limits: dict[str, str] | None
) -> None:
    manifest = job_manifest(spec_for(accelerator))
    validate_job(manifest)
    pod = pod_spec(manifest)
    assert pod.get("nodeSelector", {}) == selector
    assert [t["key"] for t in pod.get("tolerations", [])] == toleration_keys
    assert all(t["effect"] == "NoSchedule" for t in pod.get("tolerations", []))
    resources = container(manifest)["resources"]
    if limits is None:
        assert "limits" not in resources and resources["requests"] == manifests.CPU_REQUESTS
    else:
        assert resources["limits"] == limits and resources["requests"] == limits


@pytest.mark.parametrize("accelerator", ["cpu", "l4x2", "v5e-2x2:spot"])
def test_job_manifest_carries_labels_runner_and_lifecycle(accelerator: str) -> None:
    manifest = job_manifest(spec_for(accelerator))
    labels = {"app": "kinetic", "kinetic/job-id": "job-0123abcd"}
    assert manifest["metadata"]["name"] == "job-0123abcd" and manifest["metadata"]["namespace"] == "ml"
    assert manifest["metadata"]["labels"] == labels
    assert manifest["spec"]["template"]["metadata"]["labels"] == labels  # pods are found by the same labels
    assert manifest["spec"]["backoffLimit"] == 0 and manifest["spec"]["ttlSecondsAfterFinished"] == 600
    pod = pod_spec(manifest)
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "kinetic-runner"
    command = container(manifest)["command"]
    assert command[:2] == ["python", "/kinetic/remote_runner.py"]
    assert command[command.index("--payload-sha256") + 1] == PAYLOAD_SHA
    assert command[command.index("--context-sha256") + 1] == CONTEXT_SHA
    assert command[command.index("--result") + 1] == "gs://p-kn-c-jobs/job-0123abcd/result.pkl"
    env = env_of(manifest)
    assert env["KINETIC_JOB_ID"] == "job-0123abcd" and env["KINETIC_NUM_HOSTS"] == "1"
    assert "TPU_WORKER_ID" not in env  # one host: the runner's default 0


def test_a_batch_input_is_labelled_with_its_group_and_can_be_created_suspended() -> None:
    from dataclasses import replace

    manifest = job_manifest(replace(spec_for("l4"), group_id="group-0a1b2c3d", suspend=True))
    validate_job(manifest)
    assert manifest["metadata"]["labels"][manifests.GROUP_LABEL] == "group-0a1b2c3d"
    assert manifest["spec"]["suspend"] is True
    plain = job_manifest(spec_for("l4"))
    assert "suspend" not in plain["spec"] and manifests.GROUP_LABEL not in plain["metadata"]["labels"]


def test_gs_output_dir_is_mounted_with_gcs_fuse() -> None:
    manifest = job_manifest(spec_for("cpu", output_dir="gs://other-bucket/runs/7/"))
    validate_job(manifest)
    assert env_of(manifest)["KINETIC_OUTPUT_DIR"] == manifests.OUTPUT_MOUNT
    (volume,) = pod_spec(manifest)["volumes"]
    assert volume["csi"] == {
        "driver": "gcsfuse.csi.storage.gke.io",
        "volumeAttributes": {"bucketName": "other-bucket", "mountOptions": "only-dir=runs/7"},
    }
    assert container(manifest)["volumeMounts"] == [{"name": volume["name"], "mountPath": manifests.OUTPUT_MOUNT}]
    assert manifest["spec"]["template"]["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}


def test_a_pod_path_output_dir_needs_no_volume() -> None:
    manifest = job_manifest(spec_for("cpu", output_dir="/scratch/out"))
    validate_job(manifest)
    assert env_of(manifest)["KINETIC_OUTPUT_DIR"] == "/scratch/out"
    assert "volumes" not in pod_spec(manifest) and "annotations" not in manifest["spec"]["template"]["metadata"]


@pytest.mark.parametrize(
    ("accelerator", "hosts", "chips_per_host"),
    [("v5litepod-4x4", 4, "4"), ("v4-8", 2, "4"), ("v5p-32:spot", 8, "4"), ("v6e-16", 4, "4")],
)
def test_multi_host_leaderworkerset(accelerator: str, hosts: int, chips_per_host: str) -> None:
    manifest = leaderworkerset_manifest(spec_for(accelerator))
    validate_lws(manifest)
    assert manifest["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and manifest["kind"] == "LeaderWorkerSet"
    assert manifest["metadata"]["labels"] == {"app": "kinetic", "kinetic/job-id": "job-0123abcd"}
    template = manifest["spec"]["leaderWorkerTemplate"]
    assert template["size"] == hosts and manifest["spec"]["replicas"] == 1
    assert "restartPolicy" not in template["workerTemplate"]["spec"]  # StatefulSet pods: the default, Always
    assert container(manifest)["resources"]["limits"] == {"google.com/tpu": chips_per_host}
    env = env_of(manifest)
    assert env["TPU_WORKER_ID"] == {
        "fieldRef": {"fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"}
    }
    assert env["KINETIC_NUM_HOSTS"] == str(hosts)
    assert ("cloud.google.com/gke-spot" in pod_spec(manifest).get("nodeSelector", {})) == accelerator.endswith(":spot")


def test_every_registry_shape_validates() -> None:
    latest = (K8S_VERSIONS[0],)
    for config in all_accelerators():
        spec = spec_for(format_accelerator(config))
        if is_multi_host(spec.accelerator):
            validate_lws(leaderworkerset_manifest(spec), latest)
        else:
            validate_job(job_manifest(spec), latest)


@settings(max_examples=40)
@given(
    accelerator=st.sampled_from([format_accelerator(c) for c in all_accelerators()]),
    spot=st.booleans(),
    job_hex=st.text(alphabet="0123456789abcdef", min_size=8, max_size=8),
    output=st.sampled_from(["gs://b-kn-c-jobs/x/output/", "gs://other", "/tmp/out"]),
)
def test_placement_follows_the_accelerator(accelerator: str, spot: bool, job_hex: str, output: str) -> None:
    spec = spec_for(accelerator + (":spot" if spot else ""), output_dir=output, job_id=f"job-{job_hex}")
    manifest = (leaderworkerset_manifest if spec.num_nodes > 1 else job_manifest)(spec)
    pod, resources = pod_spec(manifest), container(manifest)["resources"]
    selector = pod.get("nodeSelector", {})
    assert (selector.get("cloud.google.com/gke-spot") == "true") == spot
    assert any(t["key"] == "cloud.google.com/gke-spot" for t in pod.get("tolerations", [])) == spot
    config = spec.accelerator
    if hasattr(config, "chips"):
        assert selector["cloud.google.com/gke-tpu-topology"] == config.topology
        assert int(resources["limits"]["google.com/tpu"]) * spec.num_nodes == config.chips
    elif hasattr(config, "count"):
        assert resources["limits"]["nvidia.com/gpu"] == str(config.count)
    else:
        assert "limits" not in resources
    assert manifest["metadata"]["labels"]["kinetic/job-id"] == f"job-{job_hex}"


# -- the validators can fail: a broken manifest is caught ----------------------------------------------------


def test_strict_validation_rejects_a_misspelt_field() -> None:
    manifest = job_manifest(spec_for("l4"))
    broken = copy.deepcopy(manifest)
    broken["spec"]["template"]["spec"]["nodeSelectors"] = broken["spec"]["template"]["spec"].pop("nodeSelector")
    with pytest.raises(kubernetes_validate.ValidationError, match="nodeSelectors"):
        validate_job(broken)


@pytest.mark.parametrize("breakage", ["size", "worker", "restart", "extra"])
def test_lws_schema_rejects_broken_sets(breakage: str) -> None:
    manifest = leaderworkerset_manifest(spec_for("v5litepod-4x4"))
    template = manifest["spec"]["leaderWorkerTemplate"]
    if breakage == "size":
        template["size"] = 0
    elif breakage == "worker":
        del template["workerTemplate"]
    elif breakage == "restart":
        template["restartPolicy"] = "Always"
    else:
        manifest["spec"]["leaderWorkerTemplates"] = {}
    with pytest.raises(jsonschema.ValidationError):
        validate_lws(manifest)


def test_fused_data_is_mounted_read_only_with_gcs_fuse_and_validates() -> None:
    mounts = (("gs://p-kn-c-jobs/data-cache/abc/", "/kinetic/data/0123"), ("gs://raw,bucket/", "/mnt/raw"))
    for kind, build in (("cpu", job_manifest), ("v5p-16", leaderworkerset_manifest)):
        spec = dataclasses.replace(spec_for(kind), fuse_mounts=mounts)
        manifest = build(spec)
        (validate_job if manifest["kind"] == "Job" else validate_lws)(manifest)
        template = (
            manifest["spec"]["template"]
            if manifest["kind"] == "Job"
            else manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        )
        volumes = {v["name"]: v["csi"] for v in template["spec"]["volumes"]}
        assert volumes["kinetic-data-0"] == {
            "driver": "gcsfuse.csi.storage.gke.io",
            "readOnly": True,
            "volumeAttributes": {"bucketName": "p-kn-c-jobs", "mountOptions": "implicit-dirs,only-dir=data-cache/abc"},
        }
        assert volumes["kinetic-data-1"]["volumeAttributes"] == {
            "bucketName": "raw,bucket",
            "mountOptions": "implicit-dirs",
        }
        data_mounts = [m for m in container(manifest)["volumeMounts"] if m["name"].startswith("kinetic-data-")]
        assert data_mounts == [
            {"name": "kinetic-data-0", "mountPath": "/kinetic/data/0123", "readOnly": True},
            {"name": "kinetic-data-1", "mountPath": "/mnt/raw", "readOnly": True},
        ]
        assert template["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}


def test_fused_data_alone_gets_the_gcs_fuse_annotation() -> None:
    spec = dataclasses.replace(spec_for("cpu", output_dir="/scratch/out"), fuse_mounts=(("gs://b/d/", "/d"),))
    manifest = job_manifest(spec)
    validate_job(manifest)
    assert manifest["spec"]["template"]["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
    assert [v["name"] for v in pod_spec(manifest)["volumes"]] == ["kinetic-data-0"]
