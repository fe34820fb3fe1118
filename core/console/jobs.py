"""Pools and jobs through the console, from the backend the profile names (SPEC 1, 7).

The backend is chosen once, when the Console is built (the registry picks it: the workspace's local
cluster, or a gke profile's cluster and jobs bucket); every method below is written once against the
`Backend` protocol. The local backend already makes each of its steps atomic (a claim is one transaction),
so these actions do not wrap it in another transaction.
"""
from __future__ import annotations

import asyncio
from typing import Any

from kinetic_tui.core.backends.base import Backend
from kinetic_tui.core.backends.registry import backend_for
from kinetic_tui.core.console.base import ConsoleBase, import_reference
from kinetic_tui.core.console.snapshots import (
    JobRecord,
    JobResultSnapshot,
    JobSnapshot,
    LogsSnapshot,
    PoolSnapshot,
)
from kinetic_tui.core.decorator import RemoteCallable
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.events import JobStatusChanged, LogBatch, PoolChanged
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle, RemoteJobError
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.core.submission.context import JobContext, check_callable
from kinetic_tui.core.submission.dispatch import submit_call


class WaitTimeout(KineticError, TimeoutError):
    """A wait gave up; the job keeps running."""


class RemoteJobFailed(KineticError):
    """The job's function raised; the remote traceback and phase travel with the one-line message."""

    def __init__(self, message: str, error_type: str, phase: str | None, traceback: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.phase = phase
        self.traceback = traceback


class JobsMixin(ConsoleBase):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.jobs_source: Backend = backend_for(resolve_infra())
        self._seen_status: dict[str, str] = {}  # job id -> last status announced

    # -- pools -----------------------------------------------------------------------------------------

    async def pools(self) -> tuple[PoolSnapshot, ...]:
        return tuple(PoolSnapshot.of(pool) for pool in await self._blocking(self.jobs_source.pools))

    async def pool(self, name: str) -> PoolSnapshot:
        pools = await self.pools()
        for pool in pools:
            if pool.name == name:
                return pool
        raise NotFoundError(f"unknown pool {name!r}; pools: {', '.join(p.name for p in pools) or 'none'}")

    async def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool = False) -> PoolSnapshot:
        pool = PoolSnapshot.of(await self._blocking(self.jobs_source.add_pool, name, accelerator, nodes, spot))
        self.events.publish(PoolChanged(pool.name, "added"))
        return pool

    async def remove_pool(self, name: str) -> PoolSnapshot:
        pool = PoolSnapshot.of(await self._blocking(self.jobs_source.remove_pool, name))
        self.events.publish(PoolChanged(pool.name, "removed"))
        return pool

    # -- jobs ------------------------------------------------------------------------------------------

    async def jobs(self, status: str | None = None, limit: int | None = None) -> tuple[JobSnapshot, ...]:
        """Newest first; `limit` keeps only the newest N (a console's first page)."""
        wanted = None if status is None else JobStatus.parse(status)
        # snapshotting 10,000 rows is real work: do it in the worker too, off the UI's event loop
        return await self._blocking(
            lambda: tuple(self._noted(row) for row in self.jobs_source.jobs(wanted, limit)))

    async def submit(self, ref: str, accelerator: str | None = None, args: list[Any] | tuple[Any, ...] = (),
                     kwargs: dict[str, Any] | None = None, name: str | None = None,
                     wait: bool | None = None) -> JobSnapshot:
        """Import MODULE:FUNC and submit it like `run_async`; a function decorated with `@run` keeps its
        own settings (its accelerator unless one is given here)."""
        if not isinstance(args, (list, tuple)) or not isinstance(kwargs or {}, dict):
            raise ValidationError("args must be a JSON list and kwargs a JSON object")

        def submit() -> str:
            target = import_reference(ref, "function")
            options: dict[str, Any] = {}
            if isinstance(target, RemoteCallable):
                target, options = target.func, dict(target.options)
            options["accelerator"] = accelerator or options.get("accelerator") or "cpu"
            try:
                func = check_callable(target)
            except TypeError as exc:
                raise ValidationError(f"function {ref!r}: {exc}") from None
            ctx = JobContext.from_params(func, **options, display_name=name)
            return submit_call(ctx, tuple(args), dict(kwargs or {})).job_id

        job_id = await self._blocking(submit)
        if self._wants_wait(wait):
            return await self.wait_job(job_id)
        return await self.job(job_id)

    async def job(self, job_id: str) -> JobSnapshot:
        return self._noted(await self._blocking(self.jobs_source.refresh, job_id))

    async def wait_job(self, job_id: str, timeout: float | None = None) -> JobSnapshot:
        def wait() -> JobSnapshot:
            try:
                row = self.jobs_source.wait(job_id, timeout)
            except TimeoutError as exc:
                raise WaitTimeout(str(exc)) from None
            value = None
            if row.status is JobStatus.SUCCEEDED:
                value = JobHandle.from_record(self.jobs_source.record(job_id)).result(cleanup=False)
            return self._noted(row, value)

        return await self._blocking(wait)

    async def logs(self, job_id: str, tail: int | None = None, follow: bool = False) -> LogsSnapshot:
        """The job's log lines (the last `tail`); `follow` reads until the job settles, publishing each
        batch as a LogBatch event while it goes."""
        def read() -> LogsSnapshot:
            lines: list[str] = []
            for batch in self.jobs_source.read_logs(job_id, follow=follow):
                lines.extend(batch)
                if follow:
                    self.events.publish(LogBatch(job_id, tuple(batch)))
            return LogsSnapshot(job_id, tuple(lines if tail is None else lines[max(len(lines) - tail, 0):]))

        return await self._blocking(read)

    async def result(self, job_id: str) -> JobResultSnapshot:
        """The value of a finished job; a job whose function raised is a RemoteJobFailed."""
        def fetch() -> JobResultSnapshot:
            row = self.jobs_source.refresh(job_id)
            if not row.status.finished:
                raise ValidationError(f"job {job_id} is {row.status.value}; no result yet (wait {job_id})")
            try:
                value = JobHandle.from_record(self.jobs_source.record(job_id)).result(cleanup=False)
            except RemoteJobError:
                raise
            except Exception as exc:  # the function's own exception, re-raised with its remote traceback
                notes = "\n".join(getattr(exc, "__notes__", ()))
                raise RemoteJobFailed(f"job {job_id} failed in phase {row.phase or 'execute'!r}: "
                                      f"{type(exc).__name__}: {exc}", type(exc).__name__, row.phase, notes) from None
            return JobResultSnapshot.of(job_id, row.status.value, value)

        return await self._blocking(fetch)

    async def cancel(self, job_id: str) -> JobSnapshot:
        return self._noted(await self._blocking(self.jobs_source.cancel, job_id))

    # -- status watching (the TUI's poll task) ---------------------------------------------------------

    async def poll_jobs(self) -> list[JobStatusChanged]:
        """One pass: settle finished jobs, start queued ones, announce every status that changed."""
        def poll() -> list[JobStatusChanged]:
            changes = []
            for row in self.jobs_source.jobs():
                previous = self._seen_status.get(row.job_id)
                if previous != row.status.value:
                    changes.append(JobStatusChanged(row.job_id, row.status.value, previous))
                    self._seen_status[row.job_id] = row.status.value
            for event in changes:
                self.events.publish(event)
            return changes

        return await self._blocking(poll)

    async def watch_jobs(self, interval: float = 0.5) -> None:
        """Poll forever; the next poll starts only after the previous one finished."""
        while True:
            await self.poll_jobs()
            await asyncio.sleep(interval)

    def _noted(self, row: JobRecord, result: Any = None) -> JobSnapshot:
        """Snapshot a job row, announcing its status if it changed since this console last saw it."""
        status = row.status.value
        previous = self._seen_status.get(row.job_id)
        if previous != status:
            self._seen_status[row.job_id] = status
            self.events.publish(JobStatusChanged(row.job_id, status, previous))
        return JobSnapshot.of(row, result)
