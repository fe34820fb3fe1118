"""JobHandle: the durable, JSON-serialisable record of one job, and what a client can do with it.

A handle carries no live state: every method asks the backend, so a handle rebuilt by `attach` in another
process (or from `handle.json` on another machine) behaves exactly like the one `run_async` returned.

`result(cleanup=True)` removes the job's inputs (payload, archive, working directories) once the result
is read; the result, `handle.json`, the output directory and the logs stay, so `result()` can be asked
again and the console can still show the job.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

import cloudpickle

from kinetic_tui.core.backends.base import Backend, JobInfo
from kinetic_tui.core.backends.registry import (
    backend_for_handle,
    lookup_order,
    workspace_backend,
)
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.storage import Storage, bucket_storage
from kinetic_tui.core.submission.pack import CONTEXT, PAYLOAD, RESULT
from kinetic_tui.core.validation import MAX_TAIL_LINES, require_job_id


class RemoteJobError(KineticError):
    """The job ended without a value to return: cancelled, lost, or its result is unreadable."""


class ResultSerializationError(RemoteJobError):
    """The function returned a value that could not be pickled; `result_repr` shows what it was."""

    def __init__(self, message: str, result_repr: str) -> None:
        super().__init__(message)
        self.result_repr = result_repr


@dataclass(frozen=True)
class JobHandle:
    job_id: str
    backend: str
    project: str
    cluster: str
    zone: str
    namespace: str
    bucket: str
    accelerator: str
    num_nodes: int
    pool: str | None
    func_name: str
    display_name: str
    created_at: float
    group_id: str | None
    profile: str | None
    result_uri: str
    output_dir: str

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> JobHandle:
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(record))
        if missing:
            raise ValidationError(f"job handle is missing {', '.join(missing)}")
        require_job_id(record["job_id"], "job handle's job_id")
        return cls(**{k: record[k] for k in names})

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_record(), indent=2)

    # -- backend access ------------------------------------------------------------------------------

    def runs_on(self) -> Backend:
        """The backend that runs this job, as the registry picks it for the handle's record."""
        return backend_for_handle(
            {
                "backend": self.backend,
                "project": self.project,
                "zone": self.zone,
                "cluster": self.cluster,
                "namespace": self.namespace,
                "bucket": self.bucket,
            }
        )

    def storage(self) -> Storage:
        return bucket_storage(self.bucket, self.result_uri)

    def row(self) -> JobInfo:
        return self.runs_on().refresh(self.job_id)

    # -- the API -------------------------------------------------------------------------------------

    def status(self) -> JobStatus:
        try:
            return self.runs_on().refresh(self.job_id).status
        except NotFoundError:
            return JobStatus.NOT_FOUND

    def logs(self, follow: bool = False) -> Iterator[str]:
        """The job's log lines; with `follow`, yields new lines as they are written until the job settles."""
        for batch in self.runs_on().read_logs(self.job_id, follow=follow):
            yield from batch

    def tail(self, n: int = 100) -> list[str]:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValidationError(f"tail n must be an integer >= 0, got {n!r}")
        if n > MAX_TAIL_LINES:
            raise ValidationError(f"tail n must be an integer >= 0 and <= {MAX_TAIL_LINES}, got {n!r}")
        return self.runs_on().tail_logs(self.job_id, n)

    def wait(self, timeout: float | None = None, on_poll: Callable[[], None] | None = None) -> JobStatus:
        """Block until the job settles (TimeoutError leaves it running); `on_poll` runs between polls."""
        return self.runs_on().wait(self.job_id, timeout, on_poll).status

    def result(self, timeout: float | None = None, cleanup: bool = True) -> Any:
        """The function's value; re-raises the remote exception (original type, remote traceback and phase
        in its notes). TimeoutError leaves the job running."""
        row = self.runs_on().wait(self.job_id, timeout)
        return self.value_from(row, None, cleanup)

    def value_from(self, row: JobInfo, data: bytes | None = None, cleanup: bool = False) -> Any:
        """`result` for a settled row, given its result pickle if the caller already read it (a batch reads
        every lane's results file once)."""
        if row.status is JobStatus.CANCELLED:
            raise RemoteJobError(f"job {self.job_id} was cancelled")
        data = data or self.runs_on().result_bytes(row)  # a map input's, from its lane's results file
        where = "its result in its lane's results file" if data is not None else self._result_uri()
        try:
            data = self.storage().get_bytes(f"{self.job_id}/{RESULT}") if data is None else data
        except NotFoundError:
            raise RemoteJobError(
                f"job {self.job_id} {row.status.value} in phase {row.phase or '?'} without a "
                f"result: {row.detail or 'no detail'}"
            ) from None
        outcome = self._unpickled(row, data, where)
        if cleanup:
            self.cleanup()
        if outcome["success"] and row.status is JobStatus.SUCCEEDED:
            return outcome["result"]
        if outcome.get("serialization_failed"):
            raise ResultSerializationError(
                f"job {self.job_id} returned a value that could not be pickled: {outcome['result_repr']}",
                outcome["result_repr"],
            )
        if outcome["success"]:  # host 0 succeeded but a worker failed: raise what the worker raised
            outcome = self._worker_failure(row)
        exc: BaseException = outcome["exception"]
        exc.add_note(
            f"[kinetic] job {self.job_id} failed in phase '{outcome['phase']}' "
            f"on host {outcome['host_index']}; remote traceback:"
        )
        exc.add_note(outcome["traceback"].rstrip())
        raise exc

    def _result_uri(self) -> str:
        return f"its result file {self.storage().uri(f'{self.job_id}/{RESULT}')}"

    def _unpickled(self, row: JobInfo, data: bytes, where: str) -> dict[str, Any]:
        """The result payload; an empty or unreadable file is reported as such, since the job's own outcome
        (a success, often) is not what went wrong."""
        ended = f"job {self.job_id} {row.status.value.lower()} but {where}"
        if not data:
            raise RemoteJobError(f"{ended} is empty; run it again (the file cannot be recovered)")
        try:
            outcome: dict[str, Any] = cloudpickle.loads(data)
        except Exception as exc:  # truncated, tampered, or a class this process cannot import
            raise RemoteJobError(f"{ended} is unreadable: {type(exc).__name__}: {exc}") from None
        return outcome

    def _worker_failure(self, row: JobInfo) -> dict[str, Any]:
        """The result payload of the first failed worker; RemoteJobError if none wrote one (it was killed)."""
        storage = self.storage()
        for host in range(1, row.nodes):
            try:
                outcome: dict[str, Any] = cloudpickle.loads(
                    storage.get_bytes(f"{self.job_id}/result-worker-{host}.pkl")
                )
            except NotFoundError:
                continue
            if not outcome["success"]:
                return outcome
        raise RemoteJobError(
            f"job {self.job_id} {row.status.value} in phase {row.phase or '?'}: {row.detail or 'no detail'}"
        )

    def cancel(self) -> JobStatus:
        return self.runs_on().cancel(self.job_id).status

    def cleanup(self, k8s: bool = True, gcs: bool = True) -> None:
        """Remove the job's workload (`k8s`: its working directories, or its cluster resources) and its
        uploaded inputs (`gcs`); keep result, handle, output and logs.

        Refused (ValidationError, nothing removed) while the job is pending or running: it still needs them."""
        self.runs_on().cleanup(self.job_id, workload=k8s, uploads=gcs)
        if gcs:
            storage = self.storage()
            for name in (PAYLOAD, CONTEXT):
                storage.delete_prefix(f"{self.job_id}/{name}")


def _handle_from(where: str, record: dict[str, Any]) -> JobHandle:
    try:
        return JobHandle.from_record(record)
    except ValidationError as exc:
        raise ValidationError(f"{where} is corrupt ({exc}); the job's record cannot be rebuilt") from None


def attach(job_id: str) -> JobHandle:
    """Rebuild a handle from the workspace's store or its local buckets, else from the profile's backend
    (a GKE profile's jobs bucket), so another machine can attach too."""
    require_job_id(job_id)
    backends = lookup_order()
    for backend in backends:
        found = backend.find_record(job_id)
        if found is not None:
            return _handle_from(*found)
    raise NotFoundError(backends[-1].lookup_error(job_id))


def list_jobs(status: JobStatus | str | None = None, limit: int | None = None) -> list[JobHandle]:
    """This workspace's jobs, newest first, finished jobs included."""
    wanted = JobStatus.parse(status) if isinstance(status, str) else status
    return [JobHandle.from_record(row.handle) for row in workspace_backend().jobs(status=wanted, limit=limit)]
