"""The local backend behind the `Backend` protocol: a thin adapter over the workspace's `LocalBackend`, which
keeps its own method names; what the protocol adds (submission, batches, lookups by id) is composed here
from the local submission and batch modules."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

from kinetic_tui.core.backends.base import (
    Call,
    DebugEndpoint,
    JobChanges,
    JobInfo,
    LogReader,
    Submitted,
    read_record,
)
from kinetic_tui.core.backends.local import batch, launcher, submission
from kinetic_tui.core.backends.local.backend import JobRow, LocalBackend, Pool
from kinetic_tui.core.backends.local.prune import prune
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.profiles import ResolvedInfra
from kinetic_tui.core.storage import LocalStorage
from kinetic_tui.core.submission.context import JobContext


class LocalInterface:
    """The workspace's local cluster as a `Backend`."""

    kind = "local"

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend

    # -- submission ---------------------------------------------------------------------------------------

    def submit_call(self, ctx: JobContext, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        with submission.stage(self.backend, [(ctx, args, kwargs)]) as (one,):
            return one.submit()

    def submit_map(self, contexts: Sequence[JobContext], calls: Sequence[Call], manifest: dict[str, Any]) -> Submitted:
        return batch.submit_map(self.backend, contexts, calls, manifest)

    def attach_batch(self, group_id: str) -> Submitted | None:
        return batch.attach_batch(self.backend, group_id)

    # -- one job --------------------------------------------------------------------------------------------

    def find_record(self, job_id: str) -> tuple[str, dict[str, Any]] | None:
        """From the store, else from `handle.json` in the local buckets (or a lane map's handles.json)."""
        try:
            return "state.db", self.backend.job(job_id).handle
        except NotFoundError:
            pass
        buckets = kinetic_home() / "local" / "buckets"
        if not buckets.is_dir():
            return None
        for path in sorted(buckets.glob(f"*/{job_id}/handle.json")):
            return read_record(str(path), path.read_bytes())
        for path in sorted(buckets.glob("*/_groups/*/handles.json")):
            records = json.loads(path.read_bytes())  # a map run in lanes keeps its handles in one file
            if job_id in records:
                return read_record(str(path), json.dumps(records[job_id]).encode())
        return None

    def lookup_error(self, job_id: str) -> str:
        return self.backend.unknown_job_message(job_id)

    def record(self, job_id: str) -> dict[str, Any]:
        return self.backend.job(job_id).handle

    def refresh(self, job_id: str) -> JobRow:
        return self.backend.refresh(job_id)

    def finished_among(self, job_ids: Sequence[str]) -> dict[str, JobRow | None]:
        return self.backend.finished_among(list(job_ids))

    def wait(self, job_id: str, timeout: float | None = None, on_poll: Callable[[], None] | None = None) -> JobRow:
        return self.backend.wait(job_id, timeout, on_poll)

    def read_logs(
        self, job_id: str, follow: bool = False, stop: threading.Event | None = None, keep: int | None = None
    ) -> Iterator[list[str]]:
        return self.backend.read_logs(job_id, follow=follow, stop=stop, keep=keep)

    def log_reader(self, job_id: str) -> LogReader:
        return self.backend.log_reader(job_id)

    def tail_logs(self, job_id: str, n: int) -> list[str]:
        return self.backend.log_reader(job_id).tail(n)

    def bucket_uri(self, bucket: str, key: str) -> str:
        return LocalStorage.in_home(bucket).uri(key)  # local processes read the local copy of any bucket

    def exit_code(self, job_id: str) -> int | None:
        return launcher.exit_code(self.backend.job(job_id).job_dir, 0)

    def result_bytes(self, info: JobInfo) -> bytes | None:
        return self.backend.lane_result(cast(JobRow, info))  # this backend's own rows

    def cancel(self, job_id: str) -> JobRow:
        return self.backend.cancel(job_id)

    def cleanup(self, job_id: str, workload: bool = True, uploads: bool = True) -> None:
        self.backend.cleanup(job_id, workload)  # the uploads are the handle's: the storage is the caller's

    def leftover(self, job_id: str, files: bool) -> str | None:
        return self.backend.leftover(job_id, files)

    def debug_endpoint(self, job_id: str, host: str, port: int, local_port: int) -> DebugEndpoint:
        """A local job listens on this machine: its own address is where to attach."""
        return DebugEndpoint(host, port)

    def cluster_endpoints(self) -> None:
        """The workspace serves a local endpoint: its router and instances are this machine's processes."""
        return None

    # -- listings and pools ---------------------------------------------------------------------------------

    def jobs(self, status: JobStatus | None = None, limit: int | None = None) -> list[JobRow]:
        self.backend.reconcile()
        return self.backend.jobs(status=status, limit=limit)

    def job_changes(self, cursor: object = None) -> JobChanges:
        self.backend.reconcile()
        return self.backend.job_changes(cursor)

    def prune(self, before: float) -> tuple[int, int]:
        pruned = prune(self.backend.store, before)
        return pruned.removed, pruned.kept

    def pools(self) -> list[Pool]:
        return self.backend.pools()

    def pool(self, name: str) -> Pool:
        return self.backend.pool(name)

    def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool = False) -> Pool:
        return self.backend.add_pool(name, accelerator, nodes, spot)

    def remove_pool(self, name: str) -> Pool:
        return self.backend.remove_pool(name)

    def placement(self, accelerator: str, num_nodes: int) -> str | None:
        return self.backend.place(accelerator, num_nodes)


def workspace_backend(infra: Callable[[], ResolvedInfra], bucket: str) -> LocalInterface:
    """The registry's factory: every local profile and handle runs on the workspace's own local cluster."""
    return LocalInterface(local_backend())
