"""`map` on a GKE profile: one batch/v1 Job per input, all created at submit.

GKE has no queue of ours to hold a batch back, so `max_concurrent` uses Kubernetes' own switch: the inputs
beyond the limit are created suspended (`spec.suspend`: the Job exists, labelled `kinetic/group-id`, but
starts no pod), and whichever client watches the batch (`wait`, `results`, `as_completed`, or a process
that reattached with `attach_batch`) releases the next ones as others settle. Nothing is lost when every
client exits; the suspended inputs just wait until a client looks again (the README says so). Retries
resubmit the stored payload and archive under a new job id, like the local backend's. Multi-host slices
(the Pathways backend) cannot be mapped yet.

Imported only for GKE profiles: it needs the `gcp` extra.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kinetic_tui.core.backends.base import (
    Call,
    JobInfo,
    JobRecord,
    JobState,
    Submitted,
    manifest_key,
)
from kinetic_tui.core.backends.gke.backend import SUSPENDED, GkeBackend
from kinetic_tui.core.backends.gke.submission import (
    check_hosts,
    create_workload,
    default_output,
    gke_record,
    job_image,
)
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.storage import Storage
from kinetic_tui.core.submission.context import JobContext, new_job_id
from kinetic_tui.core.submission.pack import (
    CONTEXT,
    PAYLOAD,
    RESULT,
    Archives,
    DeferredWrites,
    Prepared,
    captured_env,
    input_named,
    pack,
    retry_record,
    upload,
)
from kinetic_tui.infra.container_builder import ResolvedImage


def submit_map(
    backend: GkeBackend, contexts: Sequence[JobContext], calls: Sequence[Call], manifest: dict[str, Any]
) -> Submitted:
    """Pack every input (a bad one submits nothing), resolve the image once, write the manifest, then
    create one Job per input, those beyond `max_concurrent` suspended."""
    storage = backend.storage
    if not contexts:
        storage.put_bytes(manifest_key(manifest["group_id"]), json.dumps(manifest).encode())
        return Submitted(manifest, storage, GkeBatchDriver(manifest, backend), [])
    first = contexts[0]
    if first.backend != "gke":
        raise ValidationError(
            f"map on the {first.backend} backend is not supported yet; call run_async once per "
            f"input, or use backend='gke' for one-host accelerators"
        )
    check_hosts(first)
    writes = DeferredWrites(backend.storage)
    env = captured_env(first.env_patterns)
    packed = []
    for index, (ctx, (args, kwargs)) in enumerate(zip(contexts, calls)):
        with input_named(index):
            packed.append(pack(ctx, args, kwargs, writes, env))
    image = job_image(first, packed[0].root)
    manifest["image"] = {"image": image.image, "install_requirements": list(image.install_requirements)}
    backend.storage.put_bytes(manifest_key(manifest["group_id"]), json.dumps(manifest).encode())
    writes.flush()
    limit = manifest["max_concurrent"]
    records = []
    archives = Archives()
    for index, item in enumerate(packed):
        records.append(
            create_workload(
                backend,
                gke_record(item.ctx, backend.storage),
                upload(item, backend.storage, archives),
                image,
                suspend=limit is not None and index >= limit,
            )
        )
    return Submitted(manifest, backend.storage, GkeBatchDriver(manifest, backend), records)


def attach_batch(backend: GkeBackend, group_id: str) -> Submitted | None:
    """A batch of this GKE profile's jobs bucket, rebuilt from its manifest (None when it has none)."""
    storage: Storage = backend.storage
    try:
        manifest = json.loads(storage.get_bytes(manifest_key(group_id)))
    except NotFoundError:
        return None
    return Submitted(manifest, storage, GkeBatchDriver(manifest, backend), [])


class GkeBatchDriver:
    """The inputs are Jobs of one GKE cluster. A poll lists the batch's Jobs and its live inputs' pods in
    bulk (`GkeBackend.batch_states`) for the unfinished inputs only (a finished state is kept: it cannot
    change)."""

    def __init__(self, manifest: dict[str, Any], backend: GkeBackend) -> None:
        self.manifest = manifest
        self.group_id: str = manifest["group_id"]
        self.backend = backend
        self._final: dict[str, JobState] = {}
        self._finished_at: dict[str, float] = {}

    def record(self, job_id: str) -> dict[str, Any] | None:
        return self.backend.handle(job_id)

    def states(self, latest: Sequence[str], full: bool) -> list[tuple[JobStatus, float | None]]:
        """The latest attempt's state per input; suspended inputs are released while the batch has room."""
        unsettled = [job_id for job_id in latest if job_id not in self._final]
        fresh = self.backend.batch_states(self.group_id, unsettled) if unsettled else {}
        states = {job_id: self._final.get(job_id) or fresh[job_id] for job_id in latest}
        self._release(latest, states)
        for job_id in latest:
            if states[job_id].status.finished:
                self._final[job_id] = states[job_id]
                self._finished_at.setdefault(job_id, time.time())
        return [(states[job_id].status, self._finished_at.get(job_id)) for job_id in latest]

    def _release(self, latest: Sequence[str], states: dict[str, JobState]) -> None:
        limit = self.manifest["max_concurrent"]
        waiting = [job_id for job_id in latest if states[job_id].detail == SUSPENDED]
        if not waiting:
            return
        active = sum(1 for job_id in latest if not states[job_id].status.finished and job_id not in waiting)
        room = len(waiting) if limit is None else max(limit - active, 0)
        for job_id in waiting[:room]:
            self.backend.release(job_id)
            states[job_id] = JobState(job_id, JobStatus.PENDING, None, "released")

    def wait_for_news(self, seconds: float, each_input: bool) -> None:
        time.sleep(seconds)  # nothing local to watch: the poll's backoff paces the cluster's API

    def retry(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """A new Job running the stored payload and archive of `record`'s job (created suspended when the
        batch has a limit: the next poll releases it if there is room)."""
        storage, job_id = self.backend.storage, new_job_id()
        data = {name: storage.get_bytes(f"{record['job_id']}/{name}") for name in (PAYLOAD, CONTEXT)}
        for name, content in data.items():
            storage.put_bytes(f"{job_id}/{name}", content)
        prepared = Prepared(
            storage.uri(f"{job_id}/{PAYLOAD}"),
            storage.uri(f"{job_id}/{CONTEXT}"),
            storage.uri(f"{job_id}/{RESULT}"),
            hashlib.sha256(data[PAYLOAD]).hexdigest(),
            hashlib.sha256(data[CONTEXT]).hexdigest(),
            (),
        )
        retried = retry_record(dict(record), job_id, storage, default_output)
        image = ResolvedImage(
            record["backend"], self.manifest["image"]["image"], tuple(self.manifest["image"]["install_requirements"])
        )
        return create_workload(
            self.backend, retried, prepared, image, suspend=self.manifest["max_concurrent"] is not None
        )

    def settled(self) -> dict[str, JobRecord]:
        return {}  # each value comes from its job's own prefix

    def result_bytes(self, info: JobInfo, files: dict[str, bytes]) -> bytes | None:
        return None

    def cancel(self, job_id: str) -> None:
        """Cancel one input (the batch cancels the last first: suspended ones before running ones)."""
        self.backend.cancel(job_id)

    def cleanup(self, job_ids: Sequence[str], k8s: bool, gcs: bool) -> None:
        for job_id in job_ids:
            if job_id not in self._final:  # only a settled input's workload and inputs may go
                continue
            if k8s:
                self.backend.cleanup(job_id)  # the workload, and every input under the job's prefix
            elif gcs:
                for name in (PAYLOAD, CONTEXT):
                    self.backend.storage.delete_prefix(f"{job_id}/{name}")
