"""Pure functions from one submission to Kubernetes manifests: a batch/v1 Job for one host, a
leaderworkerset.x-k8s.io/v1 LeaderWorkerSet for a multi-host TPU slice.

Kept free of I/O and of the kubernetes SDK so every shape can be checked against the published schemas
in tests without a cluster. Both kinds share one pod spec, so a single-host and a multi-host job of the
same accelerator are placed, labelled and started identically; only the host index differs (the LWS
controller's worker-index label, read through the downward API).

Outputs: a `gs://` output dir is mounted with the GCS FUSE CSI driver at `OUTPUT_MOUNT`, so the runner's
plain file writes to KINETIC_OUTPUT_DIR land in the bucket; any other output dir is a path in the pod.
Fused Data (`Data(..., fuse=True)`) is mounted the same way, read-only, one volume per mount path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kinetic_tui.core.accelerators import AcceleratorConfig, GpuConfig, TpuConfig, format_accelerator

APP_LABEL, APP = "app", "kinetic"
JOB_ID_LABEL = "kinetic/job-id"
GROUP_LABEL = "kinetic/group-id"
CONTAINER = "kinetic"
RUNNER_PATH = "/kinetic/remote_runner.py"
OUTPUT_MOUNT = "/kinetic/output"
OUTPUT_VOLUME = "kinetic-output"
DATA_VOLUME = "kinetic-data-{index}"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
BACKOFF_LIMIT = 0
TTL_AFTER_FINISHED = 600
CPU_REQUESTS = {"cpu": "1", "memory": "2Gi"}  # a CPU job still needs a floor, or it lands on a full node
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"

TPU_ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY = "cloud.google.com/gke-tpu-topology"
GPU_ACCELERATOR = "cloud.google.com/gke-accelerator"
SPOT = "cloud.google.com/gke-spot"
TPU_RESOURCE, GPU_RESOURCE = "google.com/tpu", "nvidia.com/gpu"


@dataclass(frozen=True)
class WorkloadSpec:
    """What a manifest needs, and nothing else: built from a JobContext and its uploaded artifacts."""

    job_id: str
    namespace: str
    image: str
    accelerator: AcceleratorConfig
    runner_args: tuple[str, ...]
    output_dir: str
    service_account: str = "default"
    display_name: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    group_id: str | None = None  # a map's batch: labelled, so `kubectl get jobs -l kinetic/group-id=...` works
    suspend: bool = False  # a Job created suspended starts no pod until released (a batch's max_concurrent)
    fuse_mounts: tuple[tuple[str, str], ...] = ()  # (gs:// directory, mount path) of fused Data, read-only

    @property
    def num_nodes(self) -> int:
        return self.accelerator.num_nodes


@dataclass(frozen=True)
class Placement:
    node_selector: dict[str, str]
    tolerations: list[dict[str, str]]
    resources: dict[str, dict[str, str]]


def _toleration(key: str, value: str | None = None) -> dict[str, str]:
    if value is None:
        return {"key": key, "operator": "Exists", "effect": "NoSchedule"}
    return {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}


def placement(accelerator: AcceleratorConfig) -> Placement:
    """Node selector, tolerations and resource requests that put a pod on the accelerator's node pool."""
    selector: dict[str, str] = {}
    tolerations: list[dict[str, str]] = []
    if isinstance(accelerator, TpuConfig):
        chips = str(accelerator.chips // accelerator.num_nodes)  # per node: one pod per host
        selector = {TPU_ACCELERATOR: accelerator.gke_accelerator, TPU_TOPOLOGY: accelerator.topology}
        tolerations = [_toleration(TPU_RESOURCE)]
        resources = {"requests": {TPU_RESOURCE: chips}, "limits": {TPU_RESOURCE: chips}}
    elif isinstance(accelerator, GpuConfig):
        count = str(accelerator.count)
        selector = {GPU_ACCELERATOR: accelerator.gke_label}
        tolerations = [_toleration(GPU_RESOURCE)]
        resources = {"requests": {GPU_RESOURCE: count}, "limits": {GPU_RESOURCE: count}}
    else:
        resources = {"requests": dict(CPU_REQUESTS)}
    if accelerator.spot:
        selector[SPOT] = "true"
        tolerations.append(_toleration(SPOT, "true"))
    return Placement(selector, tolerations, resources)


def labels(job_id: str) -> dict[str, str]:
    return {APP_LABEL: APP, JOB_ID_LABEL: job_id}


def job_selector(job_id: str) -> str:
    """The label selector of one job's workload and pods."""
    return f"{JOB_ID_LABEL}={job_id}"


ALL_JOBS_SELECTOR = f"{APP_LABEL}={APP}"


def runner_command(runner_args: Sequence[str]) -> list[str]:
    return ["python", RUNNER_PATH, *runner_args]


def _split_gs(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    return bucket, prefix.strip("/")


def _gcsfuse_volume(name: str, directory: str, read_only: bool, options: tuple[str, ...] = ()) -> dict[str, Any]:
    """An inline GCS FUSE CSI volume of a bucket, scoped to `directory`'s prefix when it has one."""
    bucket, prefix = _split_gs(directory)
    mount_options = list(options)
    if prefix:  # a comma separates mount options, so one inside the prefix is escaped
        mount_options.append("only-dir=" + prefix.replace(",", "\\,"))
    attributes = {"bucketName": bucket}
    if mount_options:
        attributes["mountOptions"] = ",".join(mount_options)
    csi: dict[str, Any] = {"driver": GCSFUSE_DRIVER, "volumeAttributes": attributes}
    if read_only:
        csi["readOnly"] = True
    return {"name": name, "csi": csi}


def _output(spec: WorkloadSpec) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(KINETIC_OUTPUT_DIR in the pod, volumes, volume mounts)."""
    if not spec.output_dir.startswith("gs://"):
        return spec.output_dir, [], []
    volume = _gcsfuse_volume(OUTPUT_VOLUME, spec.output_dir, read_only=False)
    return OUTPUT_MOUNT, [volume], [{"name": OUTPUT_VOLUME, "mountPath": OUTPUT_MOUNT}]


def _fused_data(spec: WorkloadSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, read-only mounts) of fused Data; implicit-dirs shows prefixes that have no folder object."""
    volumes, mounts = [], []
    for index, (directory, mount_path) in enumerate(spec.fuse_mounts):
        name = DATA_VOLUME.format(index=index)
        volumes.append(_gcsfuse_volume(name, directory, read_only=True, options=("implicit-dirs",)))
        mounts.append({"name": name, "mountPath": mount_path, "readOnly": True})
    return volumes, mounts


def _env(spec: WorkloadSpec, output_dir: str) -> list[dict[str, Any]]:
    values = {
        **spec.env,
        "KINETIC_JOB_ID": spec.job_id,
        "KINETIC_OUTPUT_DIR": output_dir,
        "KINETIC_NUM_HOSTS": str(spec.num_nodes),
        "PYTHONUNBUFFERED": "1",
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(values.items())]
    if spec.num_nodes > 1:
        path = f"metadata.labels['{LWS_WORKER_INDEX}']"
        env.append({"name": "TPU_WORKER_ID", "valueFrom": {"fieldRef": {"fieldPath": path}}})
    return env


def pod_template(spec: WorkloadSpec, restart_policy: str | None) -> dict[str, Any]:
    """The pod every host runs; `restart_policy` None leaves the controller's default (LWS needs Always)."""
    place = placement(spec.accelerator)
    output_dir, volumes, mounts = _output(spec)
    data_volumes, data_mounts = _fused_data(spec)
    volumes, mounts = volumes + data_volumes, mounts + data_mounts
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "command": runner_command(spec.runner_args),
        "env": _env(spec, output_dir),
        "resources": place.resources,
    }
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {"serviceAccountName": spec.service_account, "containers": [container]}
    if restart_policy is not None:
        pod["restartPolicy"] = restart_policy
    if place.node_selector:
        pod["nodeSelector"] = place.node_selector
    if place.tolerations:
        pod["tolerations"] = place.tolerations
    if volumes:
        pod["volumes"] = volumes
    metadata: dict[str, Any] = {"labels": labels(spec.job_id)}
    if volumes:
        metadata["annotations"] = {GCSFUSE_ANNOTATION: "true"}
    return {"metadata": metadata, "spec": pod}


def _metadata(spec: WorkloadSpec) -> dict[str, Any]:
    group = {GROUP_LABEL: spec.group_id} if spec.group_id else {}
    return {
        "name": spec.job_id,
        "namespace": spec.namespace,
        "labels": {**labels(spec.job_id), **group},
        "annotations": {
            "kinetic/display-name": spec.display_name or spec.job_id,
            "kinetic/accelerator": format_accelerator(spec.accelerator),
        },
    }


def job_manifest(spec: WorkloadSpec) -> dict[str, Any]:
    """A batch/v1 Job: one pod, never retried (a retry would run the user's function twice)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(spec),
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED,
            **({"suspend": True} if spec.suspend else {}),
            "template": pod_template(spec, "Never"),
        },
    }


def leaderworkerset_manifest(spec: WorkloadSpec) -> dict[str, Any]:
    """One group of `num_nodes` pods, the leader being host 0; a finished group is never recreated."""
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(spec),
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": spec.num_nodes,
                "restartPolicy": "None",
                "workerTemplate": pod_template(spec, None),
            },
        },
    }
