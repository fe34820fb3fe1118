"""Submitting to GKE: check and pack a call, resolve its image (a bundled build runs in parallel with the
upload), upload to the jobs bucket, write handle.json, then create the Job (or LeaderWorkerSet).

Bad input raises before anything is written; a failed bundled build leaves the uploaded artifacts but no
handle and no workload. The workload backends are cached per (kind, cluster, namespace, bucket, project):
a handle asks for one on every call, and building GCS and Kubernetes clients costs more than a poll.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.backends.gke.backend import GkeBackend
from kinetic_tui.core.backends.gke.k8s_client import clients_for, target
from kinetic_tui.core.backends.gke.pathways import PathwaysBackend
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.profiles import ResolvedInfra
from kinetic_tui.core.storage import GcsStorage, Storage
from kinetic_tui.core.submission.context import JobContext
from kinetic_tui.core.submission.pack import (
    Archives,
    DeferredWrites,
    Packed,
    Prepared,
    captured_env,
    handle_record,
    pack,
    upload,
    write_handle,
)

if TYPE_CHECKING:
    from kinetic_tui.infra.container_builder import (
        ImageBuild,
        ImageInputs,
        ResolvedImage,
    )

REQUIREMENTS = "requirements.txt"
WORKLOADS: dict[str, type[GkeBackend]] = {"gke": GkeBackend, "pathways": PathwaysBackend}


def job_image(ctx: JobContext, root: Path, ensure: Callable[[ImageInputs], ImageBuild] | None = None) -> ResolvedImage:
    """The image a job runs in (`kinetic_tui.infra.container_builder.ResolvedImage`): custom as given,
    prebuilt with the project's requirements.txt installed at start, bundled built from them (`ensure`
    replaces the registry lookup and Cloud Build, e.g. in tests)."""
    from kinetic_tui.infra.container_builder import resolve_image

    path = root / REQUIREMENTS
    infra = ctx.infra
    return resolve_image(
        ctx.image_mode,
        accelerator=ctx.accelerator,
        requirements=path.read_text() if path.is_file() else "",
        container_image=ctx.container_image,
        base_image_repo=ctx.base_image_repo,
        ensure=ensure,
        project=infra.project,
        region=infra.region,
        cluster=infra.cluster,
    )


def backend_class(kind: str) -> type[GkeBackend]:
    if kind not in WORKLOADS:
        raise ValidationError(f"backend {kind!r} is not a GKE backend; choose {', '.join(WORKLOADS)}")
    return WORKLOADS[kind]


_backends: dict[tuple[str, ...], GkeBackend] = {}
_backends_lock = threading.Lock()


def workload_backend(infra: ResolvedInfra, kind: str, bucket: str) -> GkeBackend:
    """The cached backend of one workload kind for a cluster's namespace and jobs bucket."""
    key = (kind, target(infra), infra.namespace, bucket, infra.project)
    with _backends_lock:
        if key not in _backends:
            _backends[key] = backend_class(kind)(
                clients_for(infra), GcsStorage(bucket, project=infra.project), infra.namespace
            )
        return _backends[key]


def backend_for(ctx: JobContext) -> GkeBackend:
    """The backend that drives a context's job (its cluster, namespace, bucket and workload kind)."""
    return workload_backend(ctx.infra, ctx.backend, ctx.bucket)


def _upload(packed: Packed, writes: DeferredWrites) -> Prepared:
    writes.flush()
    return upload(packed, writes.storage, Archives())


def submit_gke(
    ctx: JobContext,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    backend: GkeBackend | None = None,
    ensure: Callable[[ImageInputs], ImageBuild] | None = None,
) -> dict[str, Any]:
    """Submit one call; its handle record."""
    check_hosts(ctx)
    backend = backend or backend_for(ctx)
    writes = DeferredWrites(backend.storage)
    packed = pack(ctx, args, kwargs, writes, captured_env(ctx.env_patterns))
    if ctx.image_mode == "bundled":
        with ThreadPoolExecutor(max_workers=1) as pool:
            building = pool.submit(job_image, ctx, packed.root, ensure)
            prepared = _upload(packed, writes)
            image = building.result()
    else:
        image = job_image(ctx, packed.root)
        prepared = _upload(packed, writes)
    return create_workload(backend, gke_record(ctx, backend.storage), prepared, image)


def check_hosts(ctx: JobContext) -> None:
    if not backend_class(ctx.backend).multi_host and ctx.num_nodes > 1:
        raise ValidationError(
            f"accelerator {ctx.accelerator_text} spans {ctx.num_nodes} hosts: use "
            f"backend='pathways' (a LeaderWorkerSet) or omit backend="
        )


def gke_record(ctx: JobContext, storage: Storage) -> dict[str, Any]:
    """The handle record of a GKE job: no pool; output under the job's prefix unless the user chose one."""
    return handle_record(ctx, None, storage, ctx.output_dir or default_output(ctx.job_id, storage))


def default_output(job_id: str, storage: Storage) -> str:
    return storage.uri(f"{job_id}/output/")


def create_workload(
    backend: GkeBackend, record: dict[str, Any], prepared: Prepared, image: ResolvedImage, suspend: bool = False
) -> dict[str, Any]:
    """The last steps of a submission whose artifacts are uploaded: requirements, handle.json, the workload."""
    storage, job_id = backend.storage, record["job_id"]
    runner_args = prepared.runner_args()
    if image.install_requirements:
        key = f"{job_id}/{REQUIREMENTS}"
        storage.put_bytes(key, "".join(f"{line}\n" for line in image.install_requirements).encode())
        runner_args += ["--requirements", storage.uri(key)]
    if prepared.fuse_mounts:  # kept in the handle, so a retry of this job mounts the same data
        record["fuse_mounts"] = [list(mount) for mount in prepared.fuse_mounts]
    record["image_uri"] = image.image
    write_handle(storage, record)
    backend.submit(record, runner_args, image.image, suspend=suspend)
    return record
