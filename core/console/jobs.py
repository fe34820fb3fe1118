"""Pools and jobs through the console, from the source the profile names (SPEC 1, 7).

A local profile reads the workspace's LocalBackend, which already makes each of its steps atomic (a claim
is one transaction), so these actions do not wrap it in another transaction. A gke profile reads its
cluster: the kinetic Jobs in its namespace, their handles and results in its jobs bucket, and the desired
node pools recorded for (project, cluster). The source is chosen once, when the Console is built; every
method below is written once against the `JobsSource` protocol.

Decisions the spec leaves open, for gke profiles:
- `jobs` lists the kinetic Jobs the cluster still has (Kubernetes deletes a Job 600 s after it finished,
  and at cancel); `status`, `logs` and `result` still answer for any job whose handle.json is in the
  bucket. Workloads without a handle in this profile's bucket are left out. Multi-host (Pathways) jobs
  answer by id but are not listed.
- A job's `pool` is the desired node pool that provides its accelerator (None when none does, e.g. CPU
  jobs on the system pool); `started_at`/`finished_at` are unknown (None).
- A pool's `in_use` is the nodes of its RUNNING jobs and `queued` its PENDING jobs: one refresh per live
  job (a settled job's state is final, so it is remembered and never asked again).
- `pool add|remove` refuse: a node pool changes only with its Pulumi stack, which the CLI applies.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.backends.gke.pools import GkePools
from kinetic_tui.core.backends.local.backend import LocalBackend
from kinetic_tui.core.console.references import import_reference
from kinetic_tui.core.console.snapshots import (
    JobRecord,
    JobResultSnapshot,
    JobSnapshot,
    LogsSnapshot,
    PoolSnapshot,
)
from kinetic_tui.core.decorator import RemoteCallable
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.events import JobStatusChanged, LogBatch
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle, RemoteJobError
from kinetic_tui.core.profiles import ResolvedInfra
from kinetic_tui.core.store.db import Database
from kinetic_tui.core.submission.context import JobContext, check_callable
from kinetic_tui.core.submission.dispatch import submit_call

if TYPE_CHECKING:
    from kinetic_tui.core.backends.gke.backend import GkeBackend, JobState
    from kinetic_tui.core.console.workspace import Workspace
    from kinetic_tui.infra import NodePoolSpec


class WaitTimeout(KineticError, TimeoutError):
    """A wait gave up; the job keeps running."""


class RemoteJobFailed(KineticError):
    """The job's function raised; the remote traceback and phase travel with the one-line message."""

    def __init__(self, message: str, error_type: str, phase: str | None, traceback: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.phase = phase
        self.traceback = traceback


class JobsSource(Protocol):
    """Where the console's pools and jobs live. Blocking: the Console calls it from worker threads."""

    def pools(self) -> list[PoolSnapshot]: ...

    def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool) -> PoolSnapshot: ...

    def remove_pool(self, name: str) -> PoolSnapshot: ...

    def jobs(self, status: JobStatus | None = None, limit: int | None = None) -> list[JobRecord]:
        """Newest first (at most `limit`), after settling what finished (a poll)."""
        ...

    def job(self, job_id: str) -> JobRecord:
        """The job after one poll of it (it may settle, or start)."""
        ...

    def wait(self, job_id: str, timeout: float | None) -> JobRecord: ...

    def read_logs(self, job_id: str, follow: bool = False,
                  stop: threading.Event | None = None) -> Iterator[list[str]]: ...

    def handle(self, job_id: str) -> JobHandle: ...

    def cancel(self, job_id: str) -> JobRecord: ...


class LocalJobs:
    """The workspace's local cluster."""

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend

    def pools(self) -> list[PoolSnapshot]:
        return [PoolSnapshot.of(pool) for pool in self.backend.pools()]

    def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool) -> PoolSnapshot:
        return PoolSnapshot.of(self.backend.add_pool(name, accelerator, nodes, spot))

    def remove_pool(self, name: str) -> PoolSnapshot:
        return PoolSnapshot.of(self.backend.remove_pool(name))

    def jobs(self, status: JobStatus | None = None, limit: int | None = None) -> list[JobRecord]:
        self.backend.reconcile()
        return list(self.backend.jobs(status=status, limit=limit))

    def job(self, job_id: str) -> JobRecord:
        return self.backend.refresh(job_id)

    def wait(self, job_id: str, timeout: float | None) -> JobRecord:
        return self.backend.wait(job_id, timeout)

    def read_logs(self, job_id: str, follow: bool = False,
                  stop: threading.Event | None = None) -> Iterator[list[str]]:
        return self.backend.read_logs(job_id, follow=follow, stop=stop)

    def handle(self, job_id: str) -> JobHandle:
        return JobHandle.from_record(self.backend.job(job_id).handle)

    def cancel(self, job_id: str) -> JobRecord:
        return self.backend.cancel(job_id)


@dataclass(frozen=True)
class ClusterJob:
    """A GKE job as a JobRecord: its state from the cluster, the rest from its handle.json."""

    job_id: str
    pool: str | None
    status: JobStatus
    phase: str | None
    detail: str | None
    created_at: float
    handle: dict[str, Any]
    nodes: int = 1
    started_at: float | None = None  # the backend does not report when a pod started or ended
    finished_at: float | None = None


def provides(spec: NodePoolSpec, accelerator: str) -> bool:
    """A node pool runs a job when the accelerator shape and the pricing (spot or not) both match."""
    config = parse_accelerator(accelerator)
    return dataclasses.replace(config, spot=False) == spec.config and config.spot == spec.is_spot()


class GkeJobs:
    """A gke profile's cluster. The API clients and the bucket are reached on first use, so a console on
    an unreachable cluster still serves everything that is not a pool or a job."""

    def __init__(self, infra: ResolvedInfra, db: Database) -> None:
        self.infra = infra
        self.desired = GkePools(db, infra.project, infra.cluster)
        self._settled: dict[str, JobState] = {}  # final states, never asked again

    @cached_property
    def _backends(self) -> dict[str, GkeBackend]:
        from kinetic_tui.core.backends.gke.backend import backend_class
        from kinetic_tui.core.backends.gke.k8s_client import clients_for
        from kinetic_tui.core.storage import GcsStorage

        clients, storage = clients_for(self.infra), GcsStorage(self.infra.jobs_bucket, project=self.infra.project)
        return {kind: backend_class(kind)(clients, storage, self.infra.namespace) for kind in ("gke", "pathways")}

    def _backend(self, job_id: str) -> GkeBackend:
        """The backend of the job's workload kind; NotFoundError when the bucket has no handle for it."""
        record = self._backends["gke"].handle(job_id)
        return self._backends["pathways" if record.get("backend") == "pathways" else "gke"]

    # -- pools ---------------------------------------------------------------------------------------

    def pools(self) -> list[PoolSnapshot]:
        specs = self.desired.list()
        in_use: Counter[str] = Counter()
        queued: Counter[str] = Counter()
        for job in self._listed(specs):
            if job.pool is not None and job.status is JobStatus.RUNNING:
                in_use[job.pool] += job.nodes
            elif job.pool is not None and job.status is JobStatus.PENDING:
                queued[job.pool] += 1
        return [PoolSnapshot.of_node_pool(spec, in_use[spec.name], queued[spec.name]) for spec in specs]

    def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool) -> PoolSnapshot:
        raise self._stack_only(f"pool add {name} --accelerator {accelerator} --nodes {nodes}"
                               + (" --spot" if spot else ""))

    def remove_pool(self, name: str) -> PoolSnapshot:
        raise self._stack_only(f"pool remove {name}")

    def _stack_only(self, command: str) -> ValidationError:
        return ValidationError(f"node pools of GKE cluster {self.infra.cluster!r} change with its Pulumi stack, "
                               f"not from the console: run `kinetic-tui {command}` (it applies the stack)")

    # -- jobs ----------------------------------------------------------------------------------------

    def jobs(self, status: JobStatus | None = None, limit: int | None = None) -> list[JobRecord]:
        listed = [job for job in self._listed(self.desired.list()) if status is None or job.status is status]
        return listed if limit is None else listed[:limit]

    def job(self, job_id: str) -> JobRecord:
        return self._record(job_id, self._state(job_id), self.desired.list())

    def wait(self, job_id: str, timeout: float | None) -> JobRecord:
        return self._record(job_id, self._remember(self._backend(job_id).wait(job_id, timeout)), self.desired.list())

    def read_logs(self, job_id: str, follow: bool = False,
                  stop: threading.Event | None = None) -> Iterator[list[str]]:
        return self._backend(job_id).read_logs(job_id, follow=follow, stop=stop)

    def handle(self, job_id: str) -> JobHandle:
        return JobHandle.from_record(self._backend(job_id).handle(job_id))

    def cancel(self, job_id: str) -> JobRecord:
        return self._record(job_id, self._remember(self._backend(job_id).cancel(job_id)), self.desired.list())

    def _listed(self, specs: tuple[NodePoolSpec, ...]) -> list[ClusterJob]:
        """Every kinetic Job in the namespace that has a handle in the bucket, newest first (by the
        handle's created_at: the Jobs' creationTimestamps only have whole seconds)."""
        jobs = []
        for job_id in self._backends["gke"].job_ids():
            try:
                jobs.append(self._record(job_id, self._state(job_id), specs))
            except NotFoundError:  # a workload this profile's bucket knows nothing about
                continue
        return sorted(jobs, key=lambda job: job.created_at, reverse=True)

    def _state(self, job_id: str) -> JobState:
        if job_id in self._settled:
            return self._settled[job_id]
        return self._remember(self._backend(job_id).refresh(job_id))

    def _remember(self, state: JobState) -> JobState:
        if state.status.finished:
            self._settled[state.job_id] = state
        return state

    def _record(self, job_id: str, state: JobState, specs: tuple[NodePoolSpec, ...]) -> ClusterJob:
        handle = self._backends["gke"].handle(job_id)  # every kind shares the bucket; read once, cached
        pool = next((spec.name for spec in specs if provides(spec, handle["accelerator"])), None)
        return ClusterJob(job_id, pool, state.status, state.phase, state.detail, handle["created_at"], handle,
                          state.nodes)


def jobs_source(infra: ResolvedInfra, backend: LocalBackend) -> JobsSource:
    """The source a profile's backend names."""
    return GkeJobs(infra, backend.store) if infra.backend == "gke" else LocalJobs(backend)


class Jobs:
    """`console.jobs`: submit, follow and settle jobs on the profile's source."""

    def __init__(self, workspace: Workspace, source: JobsSource) -> None:
        self.workspace = workspace
        self.source = source
        self._seen_status: dict[str, str] = {}  # job id -> last status announced

    # -- jobs ------------------------------------------------------------------------------------------

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

        job_id = await self.workspace.blocking(submit)
        if self.workspace.wants_wait(wait):
            return await self.wait(job_id)
        return await self.get(job_id)

    async def get(self, job_id: str) -> JobSnapshot:
        return self._noted(await self.workspace.blocking(self.source.job, job_id))

    async def wait(self, job_id: str, timeout: float | None = None) -> JobSnapshot:
        def wait() -> JobSnapshot:
            try:
                row = self.source.wait(job_id, timeout)
            except TimeoutError as exc:
                raise WaitTimeout(str(exc)) from None
            value = None
            if row.status is JobStatus.SUCCEEDED:
                value = self.source.handle(job_id).result(cleanup=False)
            return self._noted(row, value)

        return await self.workspace.blocking(wait)

    async def logs(self, job_id: str, tail: int | None = None, follow: bool = False) -> LogsSnapshot:
        """The job's log lines (the last `tail`); `follow` reads until the job settles, publishing each
        batch as a LogBatch event while it goes."""
        def read() -> LogsSnapshot:
            lines: list[str] = []
            for batch in self.source.read_logs(job_id, follow=follow):
                lines.extend(batch)
                if follow:
                    self.workspace.events.publish(LogBatch(job_id, tuple(batch)))
            return LogsSnapshot(job_id, tuple(lines if tail is None else lines[max(len(lines) - tail, 0):]))

        return await self.workspace.blocking(read)

    def read_logs(self, job_id: str, follow: bool = False,
                  stop: threading.Event | None = None) -> Iterator[list[str]]:
        """Blocking, batch by batch, for a caller's own thread (the job screen's log follower): each read
        runs on this workspace's home."""
        batches = self.workspace.run(self.source.read_logs, job_id, follow, stop)
        while (batch := self.workspace.run(next, batches, None)) is not None:
            yield batch

    async def result(self, job_id: str) -> JobResultSnapshot:
        """The value of a finished job; a job whose function raised is a RemoteJobFailed."""
        def fetch() -> JobResultSnapshot:
            row = self.source.job(job_id)
            if not row.status.finished:
                raise ValidationError(f"job {job_id} is {row.status.value}; no result yet (wait {job_id})")
            try:
                value = self.source.handle(job_id).result(cleanup=False)
            except RemoteJobError:
                raise
            except Exception as exc:  # the function's own exception, re-raised with its remote traceback
                notes = "\n".join(getattr(exc, "__notes__", ()))
                raise RemoteJobFailed(f"job {job_id} failed in phase {row.phase or 'execute'!r}: "
                                      f"{type(exc).__name__}: {exc}", type(exc).__name__, row.phase, notes) from None
            return JobResultSnapshot.of(job_id, row.status.value, value)

        return await self.workspace.blocking(fetch)

    async def cancel(self, job_id: str) -> JobSnapshot:
        return self._noted(await self.workspace.blocking(self.source.cancel, job_id))

    # -- status watching (the TUI's poll task) ---------------------------------------------------------

    async def poll(self) -> list[JobStatusChanged]:
        """One pass: settle finished jobs, start queued ones, announce every status that changed."""
        def poll() -> list[JobStatusChanged]:
            changes = []
            for row in self.source.jobs():
                previous = self._seen_status.get(row.job_id)
                if previous != row.status.value:
                    changes.append(JobStatusChanged(row.job_id, row.status.value, previous))
                    self._seen_status[row.job_id] = row.status.value
            for event in changes:
                self.workspace.events.publish(event)
            return changes

        return await self.workspace.blocking(poll)

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

    # kept last: a signature below it would read `list[...]` as this method, not the builtin
    async def list(self, status: str | None = None, limit: int | None = None) -> tuple[JobSnapshot, ...]:
        """Newest first; `limit` keeps only the newest N (a console's first page)."""
        wanted = None if status is None else JobStatus.parse(status)
        # snapshotting 10,000 rows is real work: do it in the worker too, off the UI's event loop
        return await self.workspace.blocking(
            lambda: tuple(self._noted(row) for row in self.source.jobs(wanted, limit)))
