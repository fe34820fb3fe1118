"""`console.jobs`: submit, follow and settle jobs on the backend the profile names.

The backend is chosen once, when the Console is built (the registry picks it: the workspace's local cluster,
or a gke profile's cluster and jobs bucket); every method below is written once against the `Backend`
protocol. The local backend already makes each of its steps atomic (a claim is one transaction), so these
actions do not wrap it in another transaction.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.backends.base import Backend, JobRecord
from kinetic_tui.core.console.functions import known_functions, record_submission, resolve_submission
from kinetic_tui.core.console.references import import_reference
from kinetic_tui.core.console.snapshots import (
    JobResultSnapshot,
    JobSnapshot,
    KnownFunctionSnapshot,
    LogsSnapshot,
    json_safe,
)
from kinetic_tui.core.decorator import RemoteCallable
from kinetic_tui.core.errors import KineticError, ValidationError
from kinetic_tui.core.events import JobStatusChanged, LogBatch
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle, RemoteJobError
from kinetic_tui.core.submission.context import JobContext, check_callable
from kinetic_tui.core.submission.dispatch import submit_call
from kinetic_tui.core.supervisor import process as supervisor
from kinetic_tui.core.validation import MAX_TAIL_LINES, require_int, require_job_id, require_name

if TYPE_CHECKING:
    from kinetic_tui.core.console.workspace import Workspace


class WaitTimeout(KineticError, TimeoutError):
    """A wait gave up; the job keeps running."""


class RemoteJobFailed(KineticError):
    """The job's function raised; the remote traceback and phase travel with the one-line message."""

    def __init__(self, message: str, error_type: str, phase: str | None, traceback: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.phase = phase
        self.traceback = traceback


class Jobs:
    """`console.jobs`: submit, follow and settle jobs on the profile's backend."""

    def __init__(self, workspace: Workspace, source: Backend) -> None:
        self.workspace = workspace
        self.source = source
        self._seen_status: dict[str, str] = {}  # job id -> last status announced
        # what the last look at every job learned (newest first) and where it left off: a poll asks the
        # backend only for what changed since, so its cost follows the active jobs, not the history
        self._known: dict[str, JobSnapshot] = {}
        self._listed: tuple[JobSnapshot, ...] = ()
        self._cursor: object = None
        self._batch_of: dict[str, str] = {}  # map input's job id -> its batch id, as the looks found them
        self._looking = threading.Lock()

    # -- jobs ------------------------------------------------------------------------------------------

    async def submit(
        self,
        ref: str,
        accelerator: str | None = None,
        args: list[Any] | tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        name: str | None = None,
        wait: bool | None = None,
        save: str | None = None,
    ) -> JobSnapshot:
        """Import MODULE:FUNC and submit it like `run_async`; a function decorated with `@run` keeps its
        own settings (its accelerator unless one is given here). `ref` may name a saved submission
        (`kinetic_tui.core.console.functions`); `save` saves this one under that name once it is submitted."""
        if not isinstance(args, (list, tuple)) or not isinstance(kwargs or {}, dict):
            raise ValidationError("args must be a JSON list and kwargs a JSON object")
        if save is not None:
            require_name("--save", save)
            if ":" in save:
                raise ValidationError(f"--save {save!r}: a saved name cannot hold ':' (that reads as MODULE:FUNC)")
        store = self.workspace.store

        def submit() -> str:
            chosen = resolve_submission(store, ref, accelerator, list(args), dict(kwargs or {}))
            target = import_reference(chosen.ref, "function")
            options: dict[str, Any] = {}
            if isinstance(target, RemoteCallable):
                options = dict(target.options)
                target = target.func
            options["accelerator"] = chosen.accelerator or options.get("accelerator") or "cpu"
            try:
                func = check_callable(target)
            except TypeError as exc:
                raise ValidationError(f"function {chosen.ref!r}: {exc}") from None
            ctx = JobContext.from_params(func, **options, display_name=name)
            job_id = submit_call(ctx, tuple(chosen.args), chosen.kwargs).job_id
            record_submission(store, chosen, save, self.workspace.clock())
            return job_id

        job_id = await self.workspace.blocking(submit)
        if self.workspace.wants_wait(wait):
            return await self.wait(job_id)
        return await self.get(job_id)

    async def known_functions(self) -> tuple[KnownFunctionSnapshot, ...]:
        """What `submit` can run by name: the saved submissions, then every MODULE:FUNC submitted here
        (the latest first); the console's submit form and completion offer them."""
        return await self.workspace.blocking(known_functions, self.workspace.store)

    async def get(self, job_id: str) -> JobSnapshot:
        require_job_id(job_id)
        return self._noted(await self.workspace.blocking(self.source.refresh, job_id))

    async def wait(self, job_id: str, timeout: float | None = None) -> JobSnapshot:
        require_job_id(job_id)

        def wait() -> JobSnapshot:
            try:
                row = self.source.wait(job_id, timeout)
            except TimeoutError as exc:
                raise WaitTimeout(str(exc)) from None
            value = None
            if row.status is JobStatus.SUCCEEDED:
                value = JobHandle.from_record(self.source.record(job_id)).result(cleanup=False)
            return self._noted(row, value)

        return await self.workspace.blocking(wait)

    async def logs(self, job_id: str, tail: int | None = None, follow: bool = False) -> LogsSnapshot:
        """The job's log lines (the last `tail`); `follow` reads until the job settles, publishing each
        batch as a LogBatch event while it goes."""
        require_job_id(job_id)
        if tail is not None:
            require_int("tail", tail, 0, MAX_TAIL_LINES)

        def read() -> LogsSnapshot:
            if tail is not None and not follow:
                return LogsSnapshot(job_id, tuple(self.source.tail_logs(job_id, tail)))
            lines: deque[str] = deque(maxlen=tail)
            for batch in self.source.read_logs(job_id, follow=follow):
                lines.extend(batch)
                if follow:
                    self.workspace.events.publish(LogBatch(job_id, tuple(batch)))
            return LogsSnapshot(job_id, tuple(lines))

        return await self.workspace.blocking(read)

    def read_logs(
        self, job_id: str, follow: bool = False, stop: threading.Event | None = None, keep: int | None = None
    ) -> Iterator[list[str]]:
        """Blocking, batch by batch, for a caller's own thread (the job screen's log follower): each read
        runs on this workspace's home. `keep`: see `Backend.read_logs`."""
        require_job_id(job_id)
        batches = self.workspace.run(self.source.read_logs, job_id, follow, stop, keep)
        while (batch := self.workspace.run(next, batches, None)) is not None:
            yield batch

    async def result(self, job_id: str, timeout: float | None = None) -> JobResultSnapshot:
        """The value of a finished job; a job whose function raised is a RemoteJobFailed. With `timeout`,
        first wait that long for the job to end (WaitTimeout leaves it running)."""
        require_job_id(job_id)

        def fetch() -> JobResultSnapshot:
            if timeout is not None:
                try:
                    self.source.wait(job_id, timeout)
                except TimeoutError as exc:
                    raise WaitTimeout(str(exc)) from None
            row = self.source.refresh(job_id)
            if not row.status.finished:
                raise ValidationError(f"job {job_id} is {row.status.value}; no result yet (wait {job_id})")
            try:
                value = JobHandle.from_record(self.source.record(job_id)).result(cleanup=False)
            except RemoteJobError:
                raise
            except Exception as exc:  # the function's own exception, re-raised with its remote traceback
                notes = "\n".join(getattr(exc, "__notes__", ()))
                raise RemoteJobFailed(
                    f"job {job_id} failed in phase {row.phase or 'execute'!r}: {type(exc).__name__}: {exc}",
                    type(exc).__name__,
                    row.phase,
                    notes,
                ) from None
            return JobResultSnapshot.of(job_id, row.status.value, value)

        return await self.workspace.blocking(fetch)

    async def values(self, job_ids: Sequence[str]) -> dict[str, Any]:
        """The returned values of SUCCEEDED jobs (JSON-safe, as `result` gives them), by job id: what a
        listing shows in its result column. Each costs a result read, so callers pass the rows they show;
        a value that can no longer be read (cleaned up, unpicklable here) is left out."""

        def read() -> dict[str, Any]:
            found = {}
            for job_id in job_ids:
                require_job_id(job_id)
                try:
                    found[job_id] = json_safe(JobHandle.from_record(self.source.record(job_id)).result(cleanup=False))
                except Exception:  # a listing outlives a result it cannot read
                    continue
            return found

        return await self.workspace.blocking(read)

    async def cancel(self, job_id: str) -> JobSnapshot:
        require_job_id(job_id)
        return self._noted(await self.workspace.blocking(self.source.cancel, job_id))

    # -- status watching (the TUI's poll task) ---------------------------------------------------------

    async def poll(self) -> list[JobStatusChanged]:
        """One pass: settle finished jobs, start queued ones, announce every status that changed."""

        def poll() -> list[JobStatusChanged]:
            supervisor.revive(self.workspace.store, self.workspace.home)
            return self._look()[1]

        return await self.workspace.blocking(poll)

    def _look(self) -> tuple[tuple[JobSnapshot, ...], list[JobStatusChanged]]:
        """Every job, newest first: what the last look learned updated with what changed since, and the
        status changes it saw (announced). Blocking."""
        changes: list[JobStatusChanged] = []
        with self._looking:
            found = self.source.job_changes(self._cursor)
            known = {} if found.complete else self._known
            if found.complete:
                self._batch_of = {}
            fresh: dict[str, JobSnapshot] = {}
            changed = found.complete
            for row in found.rows:
                status, previous = row.status.value, self._seen_status.get(row.job_id)
                if previous != status:
                    changes.append(JobStatusChanged(row.job_id, status, previous))
                    self._seen_status[row.job_id] = status
                snapshot = JobSnapshot.of(row)
                batch = row.handle.get("group_id")
                if batch:
                    self._batch_of[row.job_id] = str(batch)
                if row.job_id not in known:
                    fresh[row.job_id] = snapshot  # new since the last look: newer than all it knew
                elif known[row.job_id] != snapshot:
                    known[row.job_id] = snapshot
                    changed = True
            if fresh:
                known = {**fresh, **known} if known else fresh
                changed = True
            self._known, self._cursor = known, found.cursor
            if changed:
                self._listed = tuple(known.values())
            listed = self._listed
        for event in changes:
            self.workspace.events.publish(event)
        return listed, changes

    async def watch(self, interval: float = 0.5) -> None:
        """Poll forever; the next poll starts only after the previous one finished."""
        while True:
            await self.poll()
            await asyncio.sleep(interval)

    def _noted(self, row: JobRecord, result: Any = None) -> JobSnapshot:
        """Snapshot a job row, announcing its status if it changed since this console last saw it."""
        status = row.status.value
        previous = self._seen_status.get(row.job_id)
        if previous != status:
            self._seen_status[row.job_id] = status
            self.workspace.events.publish(JobStatusChanged(row.job_id, status, previous))
        return JobSnapshot.of(row, result)

    async def list_with_batches(self, limit: int | None = None) -> tuple[tuple[JobSnapshot, ...], dict[str, str]]:
        """Every job newest first (as `list`, from the same incremental look), and the batch of each map
        input (job id -> batch id): a console shows a map's inputs under their batch."""

        def read() -> tuple[tuple[JobSnapshot, ...], dict[str, str]]:
            if limit is None:
                listed = self._look()[0]
                with self._looking:
                    return listed, dict(self._batch_of)
            jobs, batches = [], {}
            for row in self.source.jobs(None, limit):
                jobs.append(self._noted(row))
                batch = row.handle.get("group_id")
                if batch:
                    batches[row.job_id] = str(batch)
            return tuple(jobs), batches

        return await self.workspace.blocking(read)

    # kept last: a signature below it would read `list[...]` as this method, not the builtin
    async def list(self, status: str | None = None, limit: int | None = None) -> tuple[JobSnapshot, ...]:
        """Newest first; `limit` keeps only the newest N (a console's first page)."""
        wanted = None if status is None else JobStatus.parse(status)
        if wanted is None and limit is None:
            return (await self.workspace.blocking(self._look))[0]
        # snapshotting 10,000 rows is real work: do it in the worker too, off the UI's event loop
        return await self.workspace.blocking(lambda: tuple(self._noted(row) for row in self.source.jobs(wanted, limit)))
