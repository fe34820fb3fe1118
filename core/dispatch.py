"""Submit one call: context -> pool -> artifacts -> handle.json -> backend (SPEC 2.3, 2.5)."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from core.context import JobContext, new_job_id
from core.errors import ValidationError
from core.jobs import JobHandle
from core.paths import kinetic_home
from core.storage.local import LocalStorage
from core.submit import CONTEXT, PAYLOAD, RESULT, handle_record, prepare, write_handle
from core.workspace import local_backend


def submit_call(ctx: JobContext, args: Sequence[Any], kwargs: Mapping[str, Any]) -> JobHandle:
    """Queue the call and return its handle; every check runs before anything is written."""
    if ctx.backend != "local":
        raise ValidationError(f"the {ctx.backend} backend is not available in this build yet; use a local "
                              f"profile (kinetic-tui profile use local)")
    backend = local_backend()
    pool = backend.place(ctx.accelerator_text, ctx.num_nodes, tuple(ctx.volumes))
    storage = LocalStorage(kinetic_home() / "local" / "buckets", ctx.bucket)
    prepared = prepare(ctx, args, kwargs, storage)
    record = handle_record(ctx, pool, storage)
    write_handle(storage, record)
    backend.submit(record, prepared.runner_args(), prepared.volume_paths, ctx.group_id)
    return JobHandle.from_record(record)


def resubmit(handle: JobHandle) -> JobHandle:
    """A new attempt of the same call: the stored payload and archive are reused under a new job id, so a
    retry needs neither the function nor its inputs (and works from a process that only attached)."""
    backend = local_backend()
    old = backend.job(handle.job_id)
    storage = handle.storage()
    job_id = new_job_id()
    for name in (PAYLOAD, CONTEXT):
        storage.put_bytes(f"{job_id}/{name}", storage.get_bytes(f"{handle.job_id}/{name}"))
    record = {**handle.to_record(), "job_id": job_id, "created_at": time.time(),
              "result_uri": storage.uri(f"{job_id}/{RESULT}"), "output_dir": storage.uri(f"{job_id}/output/")}
    write_handle(storage, record)
    old_prefix, new_prefix = storage.uri(f"{handle.job_id}/"), storage.uri(f"{job_id}/")
    argv = [arg.replace(old_prefix, new_prefix) for arg in old.launch["runner_args"]]
    backend.submit(record, argv, tuple(old.launch.get("volumes") or ()), handle.group_id)
    return JobHandle.from_record(record)
