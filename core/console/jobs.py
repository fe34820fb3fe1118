"""Pools and jobs through the console: thin over the local backend, which already makes each of its
steps atomic (a claim is one transaction), so these actions do not wrap it in another transaction."""
from __future__ import annotations

import asyncio
from typing import Any

from core.console.base import ConsoleBase, import_reference
from core.console.snapshots import JobResultSnapshot, JobSnapshot, LogsSnapshot, PoolSnapshot
from core.context import JobContext, check_callable
from core.decorator import RemoteCallable
from core.dispatch import submit_call
from core.errors import KineticError, ValidationError
from core.events import JobStatusChanged, LogBatch, PoolChanged
from core.job_status import JobStatus
from core.jobs import JobHandle, RemoteJobError


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
        self._seen_status: dict[str, str] = {}  # job id -> last status announced

    # -- pools -----------------------------------------------------------------------------------------

    async def pools(self) -> tuple[PoolSnapshot, ...]:
        return tuple(PoolSnapshot.of(pool) for pool in await self._blocking(self.backend.pools))

    async def pool(self, name: str) -> PoolSnapshot:
        return PoolSnapshot.of(await self._blocking(self.backend.pool, name))

    async def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool = False) -> PoolSnapshot:
        pool = await self._blocking(self.backend.add_pool, name, accelerator, nodes, spot)
        self.events.publish(PoolChanged(pool.name, "added"))
        return PoolSnapshot.of(pool)

    async def remove_pool(self, name: str) -> PoolSnapshot:
        pool = await self._blocking(self.backend.remove_pool, name)
        self.events.publish(PoolChanged(pool.name, "removed"))
        return PoolSnapshot.of(pool)

    # -- jobs ------------------------------------------------------------------------------------------

    async def jobs(self, status: str | None = None) -> tuple[JobSnapshot, ...]:
        wanted = None if status is None else JobStatus.parse(status)

        def listing() -> tuple[JobSnapshot, ...]:
            self.backend.reconcile()
            return tuple(self._noted(row) for row in self.backend.jobs(status=wanted))

        return await self._blocking(listing)

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
        def status() -> JobSnapshot:
            JobHandle.from_record(self.backend.job(job_id).handle).status()  # settles or starts it, as a poll does
            return self._noted(self.backend.job(job_id))

        return await self._blocking(status)

    async def wait_job(self, job_id: str, timeout: float | None = None) -> JobSnapshot:
        def wait() -> JobSnapshot:
            try:
                row = self.backend.wait(job_id, timeout)
            except TimeoutError as exc:
                raise WaitTimeout(str(exc)) from None
            value = None
            if row.status is JobStatus.SUCCEEDED:
                value = JobHandle.from_record(row.handle).result(cleanup=False)
            return self._noted(row, value)

        return await self._blocking(wait)

    async def logs(self, job_id: str, tail: int | None = None, follow: bool = False) -> LogsSnapshot:
        """The job's log lines (the last `tail`); `follow` reads until the job settles, publishing each
        batch as a LogBatch event while it goes."""
        def read() -> LogsSnapshot:
            lines: list[str] = []
            for batch in self.backend.read_logs(job_id, follow=follow):
                lines.extend(batch)
                if follow:
                    self.events.publish(LogBatch(job_id, tuple(batch)))
            return LogsSnapshot(job_id, tuple(lines if tail is None else lines[max(len(lines) - tail, 0):]))

        return await self._blocking(read)

    async def result(self, job_id: str) -> JobResultSnapshot:
        """The value of a finished job; a job whose function raised is a RemoteJobFailed."""
        def fetch() -> JobResultSnapshot:
            row = self.backend.job(job_id)
            if not row.status.finished:
                self.backend.reconcile(job_id)
                row = self.backend.job(job_id)
            if not row.status.finished:
                raise ValidationError(f"job {job_id} is {row.status.value}; no result yet (wait {job_id})")
            try:
                value = JobHandle.from_record(row.handle).result(cleanup=False)
            except RemoteJobError:
                raise
            except Exception as exc:  # the function's own exception, re-raised with its remote traceback
                notes = "\n".join(getattr(exc, "__notes__", ()))
                raise RemoteJobFailed(f"job {job_id} failed in phase {row.phase or 'execute'!r}: "
                                      f"{type(exc).__name__}: {exc}", type(exc).__name__, row.phase, notes) from None
            return JobResultSnapshot.of(job_id, row.status.value, value)

        return await self._blocking(fetch)

    async def cancel(self, job_id: str) -> JobSnapshot:
        return await self._blocking(lambda: self._noted(self.backend.cancel(job_id)))

    # -- status watching (the TUI's poll task) ---------------------------------------------------------

    async def poll_jobs(self) -> list[JobStatusChanged]:
        """One pass: settle finished processes, start queued jobs, announce every status that changed."""
        def poll() -> list[JobStatusChanged]:
            self.backend.reconcile()
            changes = []
            for row in self.backend.jobs():
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

    def _noted(self, row: Any, result: Any = None) -> JobSnapshot:
        """Snapshot a job row, announcing its status if it changed since this console last saw it."""
        status = row.status.value
        previous = self._seen_status.get(row.job_id)
        if previous != status:
            self._seen_status[row.job_id] = status
            self.events.publish(JobStatusChanged(row.job_id, status, previous))
        return JobSnapshot.of(row, result)
