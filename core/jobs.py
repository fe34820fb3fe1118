"""JobHandle: the durable, JSON-serialisable record of one job, and what a client can do with it.

A handle carries no live state: every method asks the backend, so a handle rebuilt by `attach` in another
process (or from `handle.json` on another machine) behaves exactly like the one `run_async` returned.

`result(cleanup=True)` removes the job's inputs (payload, archive, working directories) once the result
is read; the result, `handle.json`, the output directory and the logs stay, so `result()` can be asked
again and the console can still show the job.
"""

from __future__ import annotations

import functools
import json
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import cloudpickle

from kinetic_tui.core import cleanup_later
from kinetic_tui.core.backends.base import Backend, JobInfo
from kinetic_tui.core.backends.registry import (
    backend_for_handle,
    lookup_order,
)
from kinetic_tui.core.debugging import DEBUG_WAIT_TIMEOUT, DEBUGPY_PORT, DebugSession, attach_debugger
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError, one_line
from kinetic_tui.core.handle_records import ALIASES, normalize
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.log_echo import LogEcho
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.core.storage import Storage, bucket_storage
from kinetic_tui.core.submission.pack import CONTEXT, PAYLOAD, RESULT
from kinetic_tui.core.validation import MAX_SECONDS, MAX_TAIL_LINES, require_job_id, require_number

CLEANUP_TIMEOUT, CLEANUP_POLL = 180.0, 2.0  # Kinetic's defaults: how long to wait for a removal to be confirmed


class RemoteJobError(KineticError, RuntimeError):
    """The job ended without a value to return: cancelled, lost, or its result is unreadable (a RuntimeError,
    as Kinetic raises it)."""


class ResultSerializationError(RemoteJobError):
    """The function returned a value that could not be pickled; `result_repr` shows what it was."""

    def __init__(self, message: str, result_repr: str) -> None:
        super().__init__(message)
        self.result_repr = result_repr


NO_PLAIN_VALUE = object()


def plain_value(row: JobInfo, data: bytes | None) -> Any:
    """The value of a job that succeeded, from its result pickle at hand (a map input's, from its lane),
    without a handle (a map's 500 handles were a tenth of collecting it); NO_PLAIN_VALUE for anything else,
    which `JobHandle.value_from` reads and explains."""
    if data is None or row.status is not JobStatus.SUCCEEDED:
        return NO_PLAIN_VALUE
    try:
        outcome = cloudpickle.loads(data)
    except Exception:  # the handle reports what is wrong with the file
        return NO_PLAIN_VALUE
    return outcome["result"] if outcome.get("success") else NO_PLAIN_VALUE


@dataclass(frozen=True)
class JobHandle:
    """A job, by Kinetic's field names (and this package's own after them); `cluster` and `bucket` are the
    names earlier versions used for `cluster_name` and `bucket_name`."""

    job_id: str
    backend: str
    project: str
    cluster_name: str
    zone: str
    namespace: str
    bucket_name: str
    k8s_name: str
    image_uri: str
    accelerator: str
    func_name: str
    display_name: str
    created_at: str  # ISO-8601 UTC, whole seconds, as Kinetic writes it
    group_id: str | None = None
    group_kind: str | None = None
    group_index: int | None = None
    debug: bool = False
    num_nodes: int = 1
    pool: str | None = None
    profile: str | None = None
    result_uri: str = ""
    output_dir: str = ""
    submitted_at: float = 0.0  # epoch seconds, exact: what ordering and ages use

    @property
    def cluster(self) -> str:
        return self.cluster_name

    @property
    def bucket(self) -> str:
        return self.bucket_name

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> JobHandle:
        """From a `handle.json` record of this package (any version) or of Kinetic; unknown keys are ignored."""
        full = normalize(record)
        require_job_id(full["job_id"], "job handle's job_id")
        return cls(**{f.name: full[f.name] for f in fields(cls)})

    from_dict = from_record

    def to_record(self) -> dict[str, Any]:
        """Every field, plus the names earlier versions read: what `handle.json` holds."""
        record = asdict(self)
        record.update({ours: record[kinetic_key] for kinetic_key, ours in ALIASES})
        return record

    def to_dict(self) -> dict[str, Any]:
        """The record without its None fields, as Kinetic's `to_dict` gives it (Kinetic reads it back)."""
        return {key: value for key, value in self.to_record().items() if value is not None}

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
                "cluster": self.cluster_name,
                "namespace": self.namespace,
                "bucket": self.bucket_name,
            }
        )

    def storage(self) -> Storage:
        return bucket_storage(self.bucket_name, self.result_uri)

    def row(self) -> JobInfo:
        return self.runs_on().refresh(self.job_id)

    # -- the API -------------------------------------------------------------------------------------

    def status(self) -> JobStatus:
        try:
            return self.runs_on().refresh(self.job_id).status
        except NotFoundError:
            return JobStatus.NOT_FOUND

    def logs(self, follow: bool = False) -> str | None:
        """The job's log as text, as Kinetic returns it; with `follow`, print it to stdout as it is written
        until the job settles, and return None. `log_lines` yields the lines instead."""
        if not follow:
            return _text(list(self.log_lines()))
        for line in self.log_lines(follow=True):
            print(line, flush=True)
        return None

    def log_lines(self, follow: bool = False) -> Iterator[str]:
        """The job's log lines; with `follow`, yields new lines as they are written until the job settles."""
        for batch in self.runs_on().read_logs(self.job_id, follow=follow):
            yield from batch

    def tail(self, n: int = 100) -> str:
        """The log's last `n` lines as text, as Kinetic returns them; `tail_lines` gives the list."""
        return _text(self.tail_lines(n))

    def tail_lines(self, n: int = 100) -> list[str]:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValidationError(f"tail n must be an integer >= 0, got {n!r}")
        if n > MAX_TAIL_LINES:
            raise ValidationError(f"tail n must be an integer >= 0 and <= {MAX_TAIL_LINES}, got {n!r}")
        return self.runs_on().tail_logs(self.job_id, n)

    def wait(self, timeout: float | None = None, on_poll: Callable[[], None] | None = None) -> JobStatus:
        """Block until the job settles (TimeoutError leaves it running); `on_poll` runs between polls."""
        return self.runs_on().wait(self.job_id, timeout, on_poll).status

    def debug_attach(
        self, local_port: int = DEBUGPY_PORT, working_dir: str | None = None, timeout: float = DEBUG_WAIT_TIMEOUT
    ) -> DebugSession:
        """Wait until the job's debugpy listens, reach it (a port-forward to `local_port` on a cluster; the
        job's own address on this machine), print the VS Code attach configuration and return the session
        (close it when done). DebugError when the job is no debug job or ends first."""
        return attach_debugger(self, local_port, working_dir, timeout)

    def result(
        self,
        timeout: float | None = None,
        cleanup: bool | None = None,
        cleanup_timeout: float = CLEANUP_TIMEOUT,
        cleanup_poll_interval: float = CLEANUP_POLL,
        stream_logs: bool | None = None,
        on_status_change: Callable[[JobStatus], None] | None = None,
    ) -> Any:
        """The function's value; re-raises the remote exception (original type, remote traceback and phase
        in its notes). TimeoutError leaves the job running.

        `cleanup` (default: yes, except for a debug job) removes the job's inputs once the result is read;
        `stream_logs` prints the job's output while waiting; `on_status_change(status)` is called with the
        first status seen and each change after it (an exception it raises is reported, not propagated)."""
        check_wait_options(cleanup_timeout, cleanup_poll_interval)
        watcher = _Watcher(self, bool(stream_logs), on_status_change)
        try:
            row = self.runs_on().wait(self.job_id, timeout, watcher.poll if watcher.active else None)
        finally:
            watcher.finish()
        watcher.observe(row.status)
        return self.value_from(
            row, None, (not self.debug) if cleanup is None else cleanup, (cleanup_timeout, cleanup_poll_interval)
        )

    def value_from(
        self,
        row: JobInfo,
        data: bytes | None = None,
        cleanup: bool = False,
        cleanup_timing: tuple[float, float] = (CLEANUP_TIMEOUT, CLEANUP_POLL),
    ) -> Any:
        """`result` for a settled row, given its result pickle if the caller already read it (a batch reads
        every lane's results file once); `cleanup_timing` is `cleanup`'s (timeout, poll interval)."""
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
        clean = functools.partial(
            self.cleanup, cleanup_timeout=cleanup_timing[0], cleanup_poll_interval=cleanup_timing[1]
        )
        if cleanup and cleanup_later.deferring():
            cleanup_later.later(clean)
        elif cleanup:
            try:
                clean()
            except TimeoutError as slow:  # as Kinetic: a slow removal must not cost the caller the result
                warnings.warn(f"cleanup after reading the result: {slow}", stacklevel=3)
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

    def cancel(
        self, cleanup_timeout: float = CLEANUP_TIMEOUT, cleanup_poll_interval: float = CLEANUP_POLL
    ) -> JobStatus:
        """Stop the job; it stays CANCELLED (its record is kept). Waits up to `cleanup_timeout` seconds,
        polling every `cleanup_poll_interval`, for the job to settle and then for what ran it to be gone
        (its processes here, its workload object on a cluster); TimeoutError naming what is left."""
        check_wait_options(cleanup_timeout, cleanup_poll_interval)
        status = self.runs_on().cancel(self.job_id).status
        deadline = time.monotonic() + cleanup_timeout
        while not status.finished:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.job_id} is still {status.value} {cleanup_timeout:g} s after cancel")
            _pause(cleanup_poll_interval, deadline)
            status = self.status()
        self._await_gone(False, deadline, cleanup_timeout, cleanup_poll_interval)
        return status

    def wait_removed(
        self, files: bool = True, timeout: float = CLEANUP_TIMEOUT, poll_interval: float = CLEANUP_POLL
    ) -> None:
        """Wait, polling every `poll_interval` up to `timeout` seconds, until nothing of the stopped job runs
        and (with `files`) its workload is removed; TimeoutError naming what is still there."""
        check_wait_options(timeout, poll_interval)
        self._await_gone(files, time.monotonic() + timeout, timeout, poll_interval)

    def _await_gone(self, files: bool, deadline: float, timeout: float, poll_interval: float) -> None:
        backend = self.runs_on()
        while (left := backend.leftover(self.job_id, files)) is not None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.job_id}: {left} still there {timeout:g} s later")
            _pause(poll_interval, deadline)

    def cleanup(
        self,
        k8s: bool = True,
        gcs: bool = True,
        cleanup_timeout: float = CLEANUP_TIMEOUT,
        cleanup_poll_interval: float = CLEANUP_POLL,
    ) -> None:
        """`k8s`: remove what runs the job (its working directories here, its workload on a cluster); `gcs`: its
        uploaded inputs (payload, archive). The result, `handle.json`, the output and the logs stay, so the
        job can still be shown and its result read again.

        With `k8s`, waits up to `cleanup_timeout` seconds, polling every `cleanup_poll_interval`, until the
        workload is gone (TimeoutError naming what is left). Refused (ValidationError, nothing removed) while
        the job is pending or running: it still needs them."""
        check_wait_options(cleanup_timeout, cleanup_poll_interval)
        deadline = time.monotonic() + cleanup_timeout
        self.runs_on().cleanup(self.job_id, workload=k8s, uploads=gcs)
        if gcs:
            storage = self.storage()
            for name in (PAYLOAD, CONTEXT):
                storage.delete_prefix(f"{self.job_id}/{name}")
        if k8s:
            self._await_gone(True, deadline, cleanup_timeout, cleanup_poll_interval)


class _Watcher:
    """What `result` does while it waits: echo the log, report status changes (each at most every 50 ms)."""

    def __init__(self, handle: JobHandle, stream: bool, on_change: Callable[[JobStatus], None] | None) -> None:
        self.handle, self.on_change = handle, on_change
        self.echo = LogEcho(handle.runs_on().log_reader(handle.job_id)) if stream else None
        self.active = stream or on_change is not None
        self.seen: JobStatus | None = None
        self.checked = 0.0

    def poll(self) -> None:
        if self.echo is not None:
            self.echo.pump()
        if self.on_change is not None and time.monotonic() - self.checked >= 0.05:
            self.checked = time.monotonic()
            self.observe(self.handle.status())

    def observe(self, status: JobStatus) -> None:
        if self.on_change is None or status is self.seen:
            return
        self.seen = status
        try:
            self.on_change(status)
        except Exception as exc:  # a callback's bug must not lose the result
            warnings.warn(f"on_status_change raised for job {self.handle.job_id}: {one_line(exc)}", stacklevel=3)

    def finish(self) -> None:
        if self.echo is not None:
            self.echo.pump(final=True)


def _pause(poll_interval: float, deadline: float) -> None:
    time.sleep(min(poll_interval, max(deadline - time.monotonic(), 0.0)))


def check_wait_options(timeout: object, poll_interval: object) -> None:
    require_number("cleanup_timeout", timeout, minimum=0, maximum=MAX_SECONDS)
    require_number("cleanup_poll_interval", poll_interval, minimum=0, exclusive=True, maximum=MAX_SECONDS)


def _text(lines: list[str]) -> str:
    """Log lines as the text a pod's log reads back: newline-terminated."""
    return "".join(f"{line}\n" for line in lines)


def _handle_from(where: str, record: dict[str, Any]) -> JobHandle:
    try:
        return JobHandle.from_record(record)
    except ValidationError as exc:
        raise ValidationError(f"{where} is corrupt ({exc}); the job's record cannot be rebuilt") from None


def attach(
    job_id: str,
    project: str | None = None,
    cluster: str | None = None,
    zone: str | None = None,
    namespace: str | None = None,
) -> JobHandle:
    """Rebuild a handle from the workspace's store or its local buckets, else from the backend of the profile
    (with `project`/`cluster`/`zone`/`namespace` overriding it: a GKE profile's jobs bucket), so another
    machine can attach too."""
    require_job_id(job_id)
    backends = lookup_order(resolve_infra(project=project, zone=zone, cluster=cluster, namespace=namespace))
    for backend in backends:
        found = backend.find_record(job_id)
        if found is not None:
            return _handle_from(*found)
    raise NotFoundError(backends[-1].lookup_error(job_id))


def list_jobs(
    project: str | None = None,
    zone: str | None = None,
    cluster: str | None = None,
    namespace: str | None = None,
    status: JobStatus | str | None = None,
    limit: int | None = None,
) -> list[JobHandle]:
    """This workspace's jobs and the profile's cluster's (the arguments override the profile as in `run`),
    newest first, finished jobs included."""
    wanted = JobStatus.parse(status) if isinstance(status, str) else status
    infra = resolve_infra(project=project, zone=zone, cluster=cluster, namespace=namespace)
    found: dict[str, JobHandle] = {}
    for backend in lookup_order(infra):
        for row in backend.jobs(status=wanted, limit=limit):
            found.setdefault(row.job_id, JobHandle.from_record(row.handle))
    handles = sorted(found.values(), key=lambda handle: handle.submitted_at, reverse=True)
    return handles if limit is None else handles[:limit]
