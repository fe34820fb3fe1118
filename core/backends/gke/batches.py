"""`map` on a GKE profile (SPEC 2.6 and 7): one batch/v1 Job per input, all created at submit.

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
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kinetic_tui.core.backends.gke.backend import SUSPENDED, GkeBackend, JobState, backend_for, check_hosts, create_workload, default_output, gke_record, job_image
from kinetic_tui.core.backends.local.backend import JobRow
from kinetic_tui.core.batches import BatchHandle, manifest_key
from kinetic_tui.core.submission.context import JobContext, new_job_id
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.submission.pack import CONTEXT, PAYLOAD, RESULT, Archives, DeferredWrites, Prepared, captured_env, input_named, pack, retry_record, upload
from kinetic_tui.infra.container_builder import ResolvedImage

Call = tuple[Sequence[Any], dict[str, Any]]


def map_on_gke(contexts: Sequence[JobContext], calls: Sequence[Call], manifest: dict[str, Any]) -> GkeBatchHandle:
    """Pack every input (a bad one submits nothing), resolve the image once, write the manifest, then
    create one Job per input, those beyond `max_concurrent` suspended."""
    first = contexts[0]
    if first.backend != "gke":
        raise ValidationError(f"map on the {first.backend} backend is not supported yet; call run_async once per "
                              f"input, or use backend='gke' for one-host accelerators")
    check_hosts(first)
    backend = backend_for(first)
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
    batch = GkeBatchHandle(manifest, backend)
    with tempfile.TemporaryDirectory(prefix="kinetic-pack-") as tmp:
        archives = Archives(Path(tmp))
        for index, item in enumerate(packed):
            handle = create_workload(backend, gke_record(item.ctx, backend.storage),
                                     upload(item, backend.storage, archives), image,
                                     suspend=limit is not None and index >= limit)
            batch._handles[handle.job_id] = handle
    return batch


def attach_gke_batch(group_id: str, storage: Any) -> GkeBatchHandle:
    """A batch of this GKE profile's jobs bucket, rebuilt from its manifest."""
    try:
        manifest = json.loads(storage.get_bytes(manifest_key(group_id)))
    except NotFoundError:
        raise NotFoundError(f"unknown batch {group_id!r}: no {manifest_key(group_id)} in {storage.uri('')}") from None
    first = JobHandle.from_record(json.loads(storage.get_bytes(f"{manifest['attempts'][0][0]}/handle.json")))
    return GkeBatchHandle(manifest, backend_for(first))


class GkeBatchHandle(BatchHandle):
    """A batch whose inputs are Jobs of one GKE cluster. A poll lists the batch's suspended Jobs once and
    refreshes only the other unfinished inputs (a finished state is kept: it cannot change)."""

    def __init__(self, manifest: dict[str, Any], backend: GkeBackend) -> None:
        super().__init__(manifest, backend.storage)
        self.backend = backend
        self._final: dict[str, JobState] = {}

    def _handle(self, job_id: str) -> JobHandle:
        if job_id not in self._handles:
            self._handles[job_id] = JobHandle.from_record(self.backend.handle(job_id))
        return self._handles[job_id]

    def statuses(self) -> list[JobStatus]:
        """The latest attempt's state per input; suspended inputs are released while the batch has room."""
        latest = [attempts[-1] for attempts in self.manifest["attempts"]]
        waiting = self.backend.suspended(self.group_id) if len(self._final) < len(latest) else set()
        states = {job_id: self._final.get(job_id) or (JobState(job_id, JobStatus.PENDING, None, SUSPENDED)
                                                      if job_id in waiting else self.backend.refresh(job_id))
                  for job_id in latest}
        self._release(latest, states)
        for index, job_id in enumerate(latest):
            if states[job_id].status.finished:
                self._final[job_id] = states[job_id]
                self._finished_at.setdefault(index, time.time())
        return [states[job_id].status for job_id in latest]

    def _release(self, latest: list[str], states: dict[str, JobState]) -> None:
        limit = self.manifest["max_concurrent"]
        waiting = [job_id for job_id in latest if states[job_id].detail == SUSPENDED]
        if not waiting:
            return
        active = sum(1 for job_id in latest if not states[job_id].status.finished and job_id not in waiting)
        room = len(waiting) if limit is None else max(limit - active, 0)
        for job_id in waiting[:room]:
            self.backend.release(job_id)
            states[job_id] = JobState(job_id, JobStatus.PENDING, None, "released")

    def _read(self) -> list[JobStatus]:
        return self.statuses()

    def _settle(self, full: bool) -> list[JobStatus]:
        return self.statuses()

    def _news(self) -> bool:
        return False  # nothing local to watch: the poll's backoff paces the cluster's API

    def _retry(self, handle: JobHandle) -> JobHandle:
        """A new Job running the stored payload and archive of `handle`'s job (created suspended when the
        batch has a limit: the next poll releases it if there is room)."""
        storage, job_id = self.backend.storage, new_job_id()
        data = {name: storage.get_bytes(f"{handle.job_id}/{name}") for name in (PAYLOAD, CONTEXT)}
        for name, content in data.items():
            storage.put_bytes(f"{job_id}/{name}", content)
        prepared = Prepared(storage.uri(f"{job_id}/{PAYLOAD}"), storage.uri(f"{job_id}/{CONTEXT}"),
                            storage.uri(f"{job_id}/{RESULT}"), hashlib.sha256(data[PAYLOAD]).hexdigest(),
                            hashlib.sha256(data[CONTEXT]).hexdigest(), ())
        record = retry_record(handle.to_record(), job_id, storage, default_output)
        image = ResolvedImage(handle.backend, self.manifest["image"]["image"],
                              tuple(self.manifest["image"]["install_requirements"]))
        return create_workload(self.backend, record, prepared, image, suspend=self.manifest["max_concurrent"] is not None)

    def _rows(self) -> dict[str, JobRow]:
        return {}

    def cancel(self) -> None:
        """Cancel every input, the last first (suspended ones before running ones)."""
        for attempts in reversed(self.manifest["attempts"]):
            self.backend.cancel(attempts[-1])
