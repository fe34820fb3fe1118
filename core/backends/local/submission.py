"""Submitting to the local backend: place every call on a pool and pack it before anything is written, then
upload the artifacts and queue the jobs (one job process per call, or a map's inputs in lanes).

Jobs of the local backend always run as local processes, but their jobs bucket may live elsewhere:
`KINETIC_LOCAL_STORAGE` picks it, `local` (default: a directory under KINETIC_HOME laid out like the
bucket) or `gcs` (the GCS bucket `{project}-kn-{cluster}-jobs`; fake-gcs-server via
STORAGE_EMULATOR_HOST in tests). Handles record `gs://` URIs then, and everything that reads them back
(`attach`, the scheduler, the runner) follows those URIs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kinetic_tui.core.backends.local import lanes
from kinetic_tui.core.backends.local.backend import JobRow, LocalBackend, job_dir_for
from kinetic_tui.core.backends.local.output_dirs import OutputDirs
from kinetic_tui.core.data import replace_data_refs
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.storage import GcsStorage, LocalStorage, Storage, bucket_storage
from kinetic_tui.core.store import jobs_repo
from kinetic_tui.core.store.jobs_repo import DuplicateJob
from kinetic_tui.core.submission.context import JobContext, retry_job_id
from kinetic_tui.core.submission.pack import (
    CONTEXT,
    PAYLOAD,
    Archives,
    DeferredWrites,
    Packed,
    captured_env,
    handle_record,
    input_named,
    module_file,
    pack,
    package_root_for,
    retry_record,
    upload,
    write_handle,
)
from kinetic_tui.core.submission.packaging import build_batch, make_plan

STORAGE_SETTING = "KINETIC_LOCAL_STORAGE"
STORAGE_KINDS = ("local", "gcs")

Call = tuple[JobContext, Sequence[Any], Mapping[str, Any]]


def jobs_storage(bucket: str) -> Storage:
    """The jobs bucket of the local backend, where KINETIC_LOCAL_STORAGE says it lives."""
    kind = os.environ.get(STORAGE_SETTING) or "local"
    if kind == "local":
        return LocalStorage.in_home(bucket)
    if kind == "gcs":
        return GcsStorage(bucket)
    raise ValidationError(f"{STORAGE_SETTING}={kind!r} is not one of: {', '.join(STORAGE_KINDS)}")


def default_output_dir(job_id: str, storage: Storage) -> str:
    """KINETIC_OUTPUT_DIR must be a local directory for a local process: beside the result in a local
    bucket, else in the job's own directory (which outlives the job like its logs)."""
    if isinstance(storage, LocalStorage):
        return storage.uri(f"{job_id}/output/")
    return str(job_dir_for(job_id) / "output")


@dataclass(frozen=True)
class Staged:
    """A call placed on a pool and packed, with nothing written; `submit` uploads it and queues the job."""

    backend: LocalBackend
    packed: Packed
    pool: str
    writes: DeferredWrites
    archives: Archives

    def submit(self) -> dict[str, Any]:
        ctx, storage = self.packed.ctx, self.writes.storage
        self.writes.flush()
        prepared = upload(self.packed, storage, self.archives)
        record = handle_record(ctx, self.pool, storage, ctx.output_dir or default_output_dir(ctx.job_id, storage))
        try:
            write_handle(storage, record)
            self.backend.submit(record, prepared.runner_args(), prepared.volume_paths, ctx.group_id)
        except BaseException:
            self.backend.forget_unqueued([ctx.job_id], storage, [f"{ctx.job_id}/"])
            raise
        return record


@contextmanager
def stage(backend: LocalBackend, calls: Sequence[Call], *, numbered: bool = False) -> Iterator[list[Staged]]:
    """Place and pack every call before any is written, so one bad input of a map submits nothing; the
    staged calls share their archives.

    With `numbered`, a failure names the input (`input 3: ...`).
    """
    views: dict[str, DeferredWrites] = {}
    envs: dict[tuple[str, ...], dict[str, str]] = {}  # captured once per batch: one warning, not one per input
    packed: list[tuple[Packed, str, DeferredWrites]] = []
    for index, (ctx, args, kwargs) in enumerate(calls):
        with input_named(index if numbered else None):
            pool = backend.place(ctx.accelerator_text, ctx.num_nodes, tuple(ctx.volumes))
            if ctx.bucket not in views:
                views[ctx.bucket] = DeferredWrites(jobs_storage(ctx.bucket))
            if ctx.env_patterns not in envs:
                envs[ctx.env_patterns] = captured_env(ctx.env_patterns)
            packed.append((pack(ctx, args, kwargs, views[ctx.bucket], envs[ctx.env_patterns]), pool, views[ctx.bucket]))
    archives = Archives()
    yield [Staged(backend, item, pool, writes, archives) for item, pool, writes in packed]


def lanes_fit(ctx: JobContext, storage: Storage) -> bool:
    """Map inputs run in lanes (see lanes.py) with a local jobs bucket, for one-node accelerators without
    volumes, not debugged; anything else runs one job process per input (a debugged one has its own port)."""
    return ctx.num_nodes == 1 and not ctx.volumes and not ctx.debug and isinstance(storage, LocalStorage)


@dataclass(frozen=True)
class LaneBatch:
    """A map's inputs packed as one batch artifact for lanes, with nothing written yet."""

    backend: LocalBackend
    contexts: Sequence[JobContext]
    pool: str
    writes: DeferredWrites
    batch: bytes
    packed: Packed  # the function's call with no arguments: what the context archive is built from
    archives: Archives

    def submit(self) -> list[dict[str, Any]]:
        """Upload the batch and the archive once under `_groups/GROUP/` and queue every input; if that
        fails, what it wrote goes again (`forget_unqueued`)."""
        first, storage = self.contexts[0], self.writes.storage
        prefix = f"_groups/{first.group_id}"
        outputs = [ctx.output_dir or default_output_dir(ctx.job_id, storage) for ctx in self.contexts]
        ahead = OutputDirs([path for ctx, path in zip(self.contexts, outputs) if not ctx.output_dir])
        try:
            self.writes.flush()
            zip_path, context_sha = self.archives.get(self.packed)
            storage.put_bytes(f"{prefix}/batch.pkl", self.batch)
            storage.put_shared(f"{prefix}/{CONTEXT}", zip_path)
            records = [handle_record(ctx, self.pool, storage, path) for ctx, path in zip(self.contexts, outputs)]
            storage.put_bytes(f"{prefix}/handles.json", json.dumps({r["job_id"]: r for r in records}).encode())
            batch_uri, batch_sha = storage.uri(f"{prefix}/batch.pkl"), hashlib.sha256(self.batch).hexdigest()
            context_uri = storage.uri(f"{prefix}/{CONTEXT}")
            self.backend.submit_lane_inputs(
                [
                    (record, lanes.lane_input(batch_uri, batch_sha, context_uri, context_sha, i))
                    for i, record in enumerate(records)
                ],
                first.group_id or "",
            )
        except BaseException:
            ahead.undo()
            self.backend.forget_unqueued([ctx.job_id for ctx in self.contexts], storage, [f"{prefix}/"])
            raise
        return records


@contextmanager
def stage_lanes(
    backend: LocalBackend,
    contexts: Sequence[JobContext],
    calls: Sequence[tuple[Sequence[Any], Mapping[str, Any]]],
    storage: Storage,
) -> Iterator[LaneBatch]:
    """Place and pack a whole map for lanes before anything is written: the function is pickled once, each
    input on its own, and a bad input is named (`input 3: ...`) with nothing submitted."""
    first = contexts[0]
    pool = backend.place(first.accelerator_text, first.num_nodes)
    writes = DeferredWrites(storage)
    replaced, kept_out = [], []
    for index, (args, kwargs) in enumerate(calls):
        with input_named(index):
            (args_, kwargs_), datas = replace_data_refs((tuple(args), dict(kwargs)), writes)
        replaced.append((args_, kwargs_))
        kept_out += [d.local_path for d in datas if d.local_path is not None]
    root = first.package_root or package_root_for(first.func)  # as one job's: a pipeline's steps name theirs
    sys_path, cwd = first.package_imports or (None, None)
    batch = build_batch(first.func, replaced, captured_env(first.env_patterns), root)
    plan = make_plan(root, module_file(first.func), cwd=cwd, sys_path=sys_path)
    packed = Packed(first, b"", root, plan, tuple(dict.fromkeys(kept_out)))
    yield LaneBatch(backend, contexts, pool, writes, batch, packed, Archives())


def resubmit(backend: LocalBackend, handle: Mapping[str, Any]) -> dict[str, Any]:
    """A new attempt of the same call: the stored payload and archive (or a map's batch artifact) are
    reused under a new job id, so a retry needs neither the function nor its inputs (and works from a
    process that only attached). The id is derived from the attempt it retries: a retry some client
    queued already (and died before recording) is found and returned, never queued a second time."""
    old_id, group_id = handle["job_id"], handle["group_id"]
    job_id = retry_job_id(old_id)
    found = queued_retry(backend, job_id, old_id)
    if found is not None:
        return found
    old = backend.job(old_id)
    storage = bucket_storage(handle["bucket"], handle["result_uri"])
    record = retry_record(dict(handle), job_id, storage, default_output_dir)
    try:
        if old.in_lane:
            handles_key = f"_groups/{group_id}/handles.json"
            handles = {**json.loads(storage.get_bytes(handles_key)), job_id: record}
            storage.put_bytes(handles_key, json.dumps(handles).encode())
            backend.submit_lane_inputs([(record, old.launch["lane_input"])], group_id or "")
            return record
        for name in (PAYLOAD, CONTEXT):
            storage.put_bytes(f"{job_id}/{name}", storage.get_bytes(f"{old_id}/{name}"))
        write_handle(storage, record)
        old_prefix, new_prefix = storage.uri(f"{old_id}/"), storage.uri(f"{job_id}/")
        argv = [arg.replace(old_prefix, new_prefix) for arg in old.launch["runner_args"]]
        backend.submit(record, argv, tuple(old.launch.get("volumes") or ()), group_id)
    except DuplicateJob:  # another client queued the same retry meanwhile
        found = queued_retry(backend, job_id, old_id)
        if found is None:
            raise
        return found
    return record


def queued_retry(backend: LocalBackend, job_id: str, old_id: str) -> dict[str, Any] | None:
    """The handle record of `old_id`'s retry if it is queued already; DuplicateJob when `job_id` is taken
    by a job that is not that retry (an id collision: refused, never mistaken for the retry)."""
    values = jobs_repo.get(backend.store, job_id)
    if values is None:
        return None
    row = JobRow.from_values(values)
    if row.handle.get("retry_of") != old_id:
        raise DuplicateJob(job_id)
    return dict(row.handle)
