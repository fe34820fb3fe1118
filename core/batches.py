"""`map`: one job per input, durable as a group (SPEC 2.6).

Every input becomes its own job at once (PENDING). On the local backend they run in lanes
(core/backends/local/lanes.py) and the scheduler enforces `max_concurrent` per group, so the limit holds even
when the submitting client exits; on GKE each input is a Job (core/backends/gke/batches.py, `GkeBatchHandle`).
Retries and fail-fast are driven by whichever client is watching the batch (`wait`, `as_completed`,
`results`); a retry resubmits the stored payload, so a process that only attached with `attach_batch` can
retry too.

Argument dispatch (`dispatch=`): "auto" calls `f(**x)` for a dict, `f(*x)` for a tuple and `f(x)` for
anything else; "args" always unpacks `*x`; "kwargs" always `**x`; "single" always passes `x` as is.
"""
from __future__ import annotations

import json
import secrets
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from kinetic_tui.core.backends.local import lanes, launcher
from kinetic_tui.core.backends.local.backend import JobRow
from kinetic_tui.core.submission.context import new_job_id
from kinetic_tui.core.submission.dispatch import jobs_storage, lanes_fit, resubmit, stage, stage_lanes
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle, attach
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.core.storage import LocalStorage, Storage, bucket_storage
from kinetic_tui.core.store import jobs_repo
from kinetic_tui.core.backends.local.workspace import local_backend

DISPATCH = ("auto", "args", "kwargs", "single")
POLL_MIN, POLL_MAX = 0.002, 0.5  # polls back off while nothing settles...
EXIT_POLL = 0.003  # ...but exit files, one stat each, are checked this often in between
FULL_POLL = 0.5  # how often a watching client also reconciles the whole workspace


class BatchError(KineticError):
    """Some inputs failed: `failures` maps input index -> exception; `results` holds the partial results
    (None where an input failed)."""

    def __init__(self, message: str, failures: dict[int, BaseException], results: list[Any]) -> None:
        super().__init__(message)
        self.failures = failures
        self.results = results


def _call_args(item: Any, dispatch: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if dispatch == "kwargs" or (dispatch == "auto" and isinstance(item, Mapping)):
        if not isinstance(item, Mapping):
            raise ValidationError(f"dispatch='kwargs' needs mapping inputs, got {type(item).__name__}")
        return (), dict(item)
    if dispatch == "args" or (dispatch == "auto" and isinstance(item, tuple)):
        try:
            return tuple(item), {}
        except TypeError:
            raise ValidationError(f"dispatch='args' needs iterable inputs, got {type(item).__name__}") from None
    return (item,), {}


def manifest_key(group_id: str) -> str:
    return f"_groups/{group_id}/manifest.json"


def map_calls(remote: Any, inputs: Iterable[Any], max_concurrent: int | None = None, retries: int = 0,
              fail_fast: bool = False, dispatch: str = "auto") -> BatchHandle:
    """Submit one job per input of the RemoteCallable `remote` and return the batch.

    Every input is checked and pickled before anything is written, so a bad input submits nothing; job
    ids are chosen up front, so the manifest is written once, before the first submission.
    """
    if dispatch not in DISPATCH:
        raise ValidationError(f"dispatch {dispatch!r} is not one of: {', '.join(DISPATCH)}")
    if max_concurrent is not None and (isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int)
                                       or max_concurrent < 1):
        raise ValidationError(f"max_concurrent must be an integer >= 1 or None, got {max_concurrent!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValidationError(f"retries must be an integer >= 0, got {retries!r}")
    calls = [_call_args(item, dispatch) for item in inputs]
    group_id = f"group-{secrets.token_hex(4)}"
    first = remote._context(group_id=group_id)
    contexts = [replace(first, job_id=new_job_id()) if index else first for index in range(len(calls))]
    manifest = {"group_id": group_id, "func_name": first.func_name, "created_at": time.time(),
                "count": len(calls), "max_concurrent": max_concurrent, "retries": retries,
                "fail_fast": fail_fast, "bucket": first.bucket, "attempts": [[ctx.job_id] for ctx in contexts]}
    if calls and first.backend in ("gke", "pathways"):
        from kinetic_tui.core.backends.gke.batches import map_on_gke  # needs the gcp extra

        return map_on_gke(contexts, calls, manifest)
    storage = jobs_storage(first.bucket)
    in_lanes = bool(calls) and lanes_fit(first, storage)
    staging: Any = stage_lanes(contexts, calls, storage) if in_lanes else \
        stage([(ctx, args, kwargs) for ctx, (args, kwargs) in zip(contexts, calls)], numbered=True)
    with staging as staged:
        storage.put_bytes(manifest_key(group_id), json.dumps(manifest).encode())
        jobs_repo.insert_group(local_backend().store, group_id, max_concurrent, time.time())
        batch = BatchHandle(manifest, storage)
        handles = staged.submit() if in_lanes else [item.submit() for item in staged]
        batch._handles.update((handle.job_id, handle) for handle in handles)
    return batch


def attach_batch(group_id: str) -> BatchHandle:
    """Reattach by group id: through the store's jobs of the group (whatever bucket they use), else by
    looking for the manifest in the local buckets (a batch with no inputs has no jobs), else (on a GKE
    profile) in the profile's jobs bucket."""
    rows = local_backend().jobs(group_id=group_id, limit=1)
    if rows:
        storage = bucket_storage(rows[0].handle["bucket"], rows[0].handle["result_uri"])
        return BatchHandle(json.loads(storage.get_bytes(manifest_key(group_id))), storage)
    buckets = kinetic_home() / "local" / "buckets"
    for path in sorted(buckets.glob(f"*/_groups/{group_id}/manifest.json")) if buckets.is_dir() else []:
        manifest = json.loads(path.read_text())
        return BatchHandle(manifest, LocalStorage.in_home(manifest["bucket"]))
    infra = resolve_infra()
    if infra.backend in ("gke", "pathways"):
        from kinetic_tui.core.backends.gke.batches import attach_gke_batch
        from kinetic_tui.core.storage.gcs import GcsStorage

        return attach_gke_batch(group_id, GcsStorage(infra.jobs_bucket, project=infra.project))
    raise NotFoundError(f"unknown batch {group_id!r}: no job of that group and no manifest {manifest_key(group_id)}")


class BatchHandle:
    """The jobs of one `map`, durable through its manifest: any process can watch, retry or cancel them."""

    def __init__(self, manifest: dict[str, Any], storage: Storage) -> None:
        self.manifest = manifest
        self.group_id: str = manifest["group_id"]
        self._storage = storage
        self._handles: dict[str, JobHandle] = {}
        self._failures: dict[int, BaseException] = {}
        self._results: dict[int, Any] = {}
        self._finished_at: dict[int, float] = {}
        self._running: list[JobRow] = []

    def __len__(self) -> int:
        return self.manifest["count"]

    def _record_attempt(self, index: int, handle: JobHandle) -> None:
        self.manifest["attempts"][index].append(handle.job_id)
        self._handles[handle.job_id] = handle
        self._storage.put_bytes(manifest_key(self.group_id), json.dumps(self.manifest).encode())

    def _handle(self, job_id: str) -> JobHandle:
        if job_id not in self._handles:
            self._handles[job_id] = attach(job_id)
        return self._handles[job_id]

    def handles(self) -> list[JobHandle]:
        """The latest attempt of each input, in input order."""
        return [self._handle(attempts[-1]) for attempts in self.manifest["attempts"]]

    def statuses(self) -> list[JobStatus]:
        """The latest attempt's status per input (settling every finished process of the workspace first)."""
        local_backend().reconcile()
        return self._read()

    def _read(self) -> list[JobStatus]:
        backend = local_backend()
        states = backend.group_statuses(self.group_id)
        latest = [states.get(attempts[-1]) for attempts in self.manifest["attempts"]]
        self._finished_at = {i: state[1] for i, state in enumerate(latest) if state and state[1]}
        running = any(state and state[0] is JobStatus.RUNNING for state in latest)
        self._running = [row for row in backend.jobs(status=JobStatus.RUNNING, group_id=self.group_id)
                         if not row.in_lane] if running else []
        return [state[0] if state else JobStatus.NOT_FOUND for state in latest]

    def _exited(self) -> list[str]:
        """Running inputs outside lanes whose every host has an exit file: settling them needs no liveness scan."""
        return [row.job_id for row in self._running
                if row.hosts and all(launcher.exit_code(row.job_dir, h.host) is not None for h in row.hosts)]

    def _news(self) -> bool:
        """Something to settle: an input's process exited, or one of the batch's lanes progressed or ended."""
        return bool(self._exited()) or any(lane.has_news() for lane in lanes.active(local_backend().store,
                                                                                   self.group_id))

    def status_counts(self) -> dict[str, int]:
        return dict(Counter(status.value for status in self.statuses()))

    def _settle(self, full: bool) -> list[JobStatus]:
        """Settle what has finished and return the statuses. `full=False` settles only this batch's exited
        inputs and lanes (each settle starts the next queued job); the full reconcile also catches lost
        processes and nodes freed by other work."""
        if full:
            return self.statuses()
        backend = local_backend()
        for job_id in self._exited():
            backend.reconcile(job_id)
        backend.observe_lanes(lanes.active(backend.store, self.group_id), patient=False)
        return self._read()

    def _retry(self, handle: JobHandle) -> JobHandle:
        return resubmit(handle)

    def _advance(self, full: bool = True) -> list[JobStatus]:
        """Retry failed inputs with attempts left; with fail_fast, cancel the rest at the first final failure."""
        statuses = self._settle(full)
        for index, status in enumerate(statuses):
            attempts = self.manifest["attempts"][index]
            if status is JobStatus.FAILED and len(attempts) <= self.manifest["retries"]:
                self._record_attempt(index, self._retry(self._handle(attempts[-1])))
                statuses[index] = JobStatus.PENDING
        if self.manifest["fail_fast"] and JobStatus.FAILED in statuses:
            self.cancel()
            statuses = self.statuses()
        return statuses

    def wait(self, timeout: float | None = None) -> list[JobStatus]:
        """Block until every input settled for good (retries included); TimeoutError leaves them running."""
        for _ in self._completed(timeout):
            pass
        return self.statuses()

    def as_completed(self, timeout: float | None = None) -> Iterator[JobHandle]:
        """Final attempts as they settle (a failure that will be retried is not yielded)."""
        for index in self._completed(timeout):
            yield self._handle(self.manifest["attempts"][index][-1])

    def _completed(self, timeout: float | None) -> Iterator[int]:
        """Input indices as they settle for good, driving retries and fail-fast on every poll."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen: set[int] = set()
        delay, last_full = POLL_MIN, -FULL_POLL
        while len(seen) < len(self):
            full = time.monotonic() - last_full >= FULL_POLL
            last_full = time.monotonic() if full else last_full
            statuses = self._advance(full)
            fresh = sorted((i for i, s in enumerate(statuses) if s.finished and i not in seen),
                           key=lambda i: self._finished_at.get(i, 0.0))  # settled in one poll: in finishing order
            for index in fresh:
                seen.add(index)
                yield index
            if len(seen) == len(self):
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"batch {self.group_id}: {self.status_counts()} after {timeout} s")
            delay = POLL_MIN if fresh else min(delay * 2, POLL_MAX)
            self._pause(delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0.0)))

    def _pause(self, seconds: float) -> None:
        """Sleep up to `seconds`, but return as soon as there is news: settling an input frees its node (or
        its lane moves on), so a batch never waits out a whole poll interval per job."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self._news():
            time.sleep(EXIT_POLL)

    def _collect(self, indices: Iterable[int]) -> None:
        """Read the values (or exceptions) of settled inputs; each lane's results file is read once."""
        todo = [i for i in indices if i not in self._results and i not in self._failures]
        if not todo:
            return
        backend = local_backend()
        rows = self._rows()
        files: dict[str, bytes] = {}
        for index in todo:
            job_id = self.manifest["attempts"][index][-1]
            row = rows.get(job_id)
            try:
                if row is None:
                    self._results[index] = self._handle(job_id).result(cleanup=False)
                else:
                    handle = self._handles.setdefault(job_id, JobHandle.from_record(row.handle))
                    self._results[index] = handle.value_from(row, backend.lane_result(row, files))
            except Exception as exc:  # noqa: BLE001 - every failure of the remote call belongs to the batch
                self._failures[index] = exc

    def _rows(self) -> dict[str, JobRow]:
        """The batch's rows in the workspace's store (a GKE batch has none: each value comes from its job)."""
        return {row.job_id: row for row in local_backend().jobs(group_id=self.group_id)}

    def results(self, ordered: bool = True, return_exceptions: bool = False, timeout: float | None = None) -> list[Any]:
        """Every input's value (input order, or completion order with ordered=False). A failure raises
        BatchError with the partial results, unless return_exceptions puts the exception in its place."""
        if ordered:
            self.wait(timeout)
            order = list(range(len(self)))
        else:
            order = list(self._completed(timeout))
        self._collect(order)
        values = [self._failures[i] if i in self._failures else self._results[i] for i in order]
        if self._failures and not return_exceptions:
            partial = [self._results.get(i) for i in range(len(self))]  # input order, like `failures`
            first = min(self._failures)
            raise BatchError(f"batch {self.group_id}: {len(self._failures)} of {len(self)} inputs failed; "
                             f"first: input {first}: {type(self._failures[first]).__name__}: "
                             f"{self._failures[first]}", dict(self._failures), partial)
        return values

    def failures(self) -> dict[int, BaseException]:
        """Input index -> exception, for the inputs that settled for good without a value."""
        self._collect(index for index, status in enumerate(self.statuses())
                      if status in (JobStatus.FAILED, JobStatus.CANCELLED))
        return dict(self._failures)

    def cancel(self) -> None:
        """Cancel every input, the last first: queued inputs are cancelled before any running one is
        stopped, so stopping a lane never hands its queued inputs to a new lane."""
        backend = local_backend()
        for attempts in reversed(self.manifest["attempts"]):
            backend.cancel(attempts[-1])


def map(fn: Any, inputs: Iterable[Any], max_concurrent: int | None = None, retries: int = 0,  # noqa: A001
        fail_fast: bool = False, dispatch: str = "auto", **run_options: Any) -> BatchHandle:
    """`kinetic.map(f, inputs)`: `f` is a `@run` function, or a plain one run with `run_options`."""
    from kinetic_tui.core.decorator import RemoteCallable, run

    remote = fn if isinstance(fn, RemoteCallable) else run(**run_options)(fn)
    return map_calls(remote, inputs, max_concurrent=max_concurrent, retries=retries, fail_fast=fail_fast,
                     dispatch=dispatch)
