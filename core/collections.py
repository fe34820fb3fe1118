"""`map`: one job per input, durable as a group (SPEC 2.6).

Every input becomes its own job at once (PENDING); the scheduler enforces `max_concurrent` per group, so
the limit holds even when the submitting client exits. Retries and fail-fast are driven by whichever
client is watching the batch (`wait`, `as_completed`, `results`); a retry resubmits the stored payload,
so a process that only attached with `attach_batch` can retry too.

Argument dispatch (`dispatch=`): "auto" calls `f(**x)` for a dict, `f(*x)` for a tuple and `f(x)` for
anything else; "args" always unpacks `*x`; "kwargs" always `**x`; "single" always passes `x` as is.
"""
from __future__ import annotations

import json
import secrets
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from core.dispatch import resubmit, submit_call
from core.errors import KineticError, NotFoundError, ValidationError
from core.job_status import JobStatus
from core.jobs import JobHandle, attach
from core.paths import kinetic_home
from core.storage.local import LocalStorage
from core.workspace import local_backend

DISPATCH = ("auto", "args", "kwargs", "single")


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


def _manifest_key(group_id: str) -> str:
    return f"_groups/{group_id}/manifest.json"


def map_calls(remote: Any, inputs: Iterable[Any], max_concurrent: int | None = None, retries: int = 0,
              fail_fast: bool = False, dispatch: str = "auto") -> BatchHandle:
    """Submit one job per input of the RemoteCallable `remote` and return the batch."""
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
    storage = LocalStorage(kinetic_home() / "local" / "buckets", first.bucket)
    manifest = {"group_id": group_id, "func_name": first.func_name, "created_at": time.time(),
                "count": len(calls), "max_concurrent": max_concurrent, "retries": retries,
                "fail_fast": fail_fast, "bucket": first.bucket, "attempts": [[] for _ in calls]}
    storage.put_bytes(_manifest_key(group_id), json.dumps(manifest).encode())
    local_backend().store.write("INSERT INTO job_groups VALUES (?, ?, ?)", (group_id, max_concurrent, time.time()))
    batch = BatchHandle(manifest, storage)
    for index, (args, kwargs) in enumerate(calls):
        ctx = first if index == 0 else remote._context(group_id=group_id)
        batch._record_attempt(index, submit_call(ctx, args, kwargs))
    return batch


def attach_batch(group_id: str) -> BatchHandle:
    buckets = kinetic_home() / "local" / "buckets"
    for path in sorted(buckets.glob(f"*/_groups/{group_id}/manifest.json")) if buckets.is_dir() else []:
        manifest = json.loads(path.read_text())
        return BatchHandle(manifest, LocalStorage(buckets, manifest["bucket"]))
    raise NotFoundError(f"unknown batch {group_id!r}: no manifest {_manifest_key(group_id)} in the local buckets")


class BatchHandle:
    def __init__(self, manifest: dict[str, Any], storage: LocalStorage) -> None:
        self.manifest = manifest
        self.group_id: str = manifest["group_id"]
        self._storage = storage
        self._handles: dict[str, JobHandle] = {}
        self._failures: dict[int, BaseException] = {}
        self._results: dict[int, Any] = {}

    def __len__(self) -> int:
        return self.manifest["count"]

    def _record_attempt(self, index: int, handle: JobHandle) -> None:
        self.manifest["attempts"][index].append(handle.job_id)
        self._handles[handle.job_id] = handle
        self._storage.put_bytes(_manifest_key(self.group_id), json.dumps(self.manifest).encode())

    def _handle(self, job_id: str) -> JobHandle:
        if job_id not in self._handles:
            self._handles[job_id] = attach(job_id)
        return self._handles[job_id]

    def handles(self) -> list[JobHandle]:
        """The latest attempt of each input, in input order."""
        return [self._handle(attempts[-1]) for attempts in self.manifest["attempts"]]

    def statuses(self) -> list[JobStatus]:
        local_backend().reconcile()
        rows = {row.job_id: row.status for row in local_backend().jobs(group_id=self.group_id)}
        return [rows.get(attempts[-1], JobStatus.NOT_FOUND) for attempts in self.manifest["attempts"]]

    def status_counts(self) -> dict[str, int]:
        return dict(Counter(status.value for status in self.statuses()))

    def _advance(self) -> list[JobStatus]:
        """Retry failed inputs with attempts left; with fail_fast, cancel the rest at the first final failure."""
        statuses = self.statuses()
        for index, status in enumerate(statuses):
            attempts = self.manifest["attempts"][index]
            if status is JobStatus.FAILED and len(attempts) <= self.manifest["retries"]:
                self._record_attempt(index, resubmit(self._handle(attempts[-1])))
                statuses[index] = JobStatus.PENDING
        if self.manifest["fail_fast"] and JobStatus.FAILED in statuses:
            self.cancel()
            statuses = self.statuses()
        return statuses

    def wait(self, timeout: float | None = None) -> list[JobStatus]:
        """Block until every input settled for good (retries included); TimeoutError leaves them running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.002
        while True:
            statuses = self._advance()
            if all(status.finished for status in statuses):
                return statuses
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"batch {self.group_id}: {self.status_counts()} after {timeout} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def as_completed(self, timeout: float | None = None) -> Iterator[JobHandle]:
        """Final attempts as they settle (a failure that will be retried is not yielded)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen: set[int] = set()
        delay = 0.002
        while len(seen) < len(self):
            statuses = self._advance()
            fresh = [i for i, s in enumerate(statuses) if s.finished and i not in seen]
            for index in fresh:
                seen.add(index)
                yield self._handle(self.manifest["attempts"][index][-1])
            if not fresh:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"batch {self.group_id}: {self.status_counts()} after {timeout} s")
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    def _collect(self, index: int) -> None:
        if index in self._results or index in self._failures:
            return
        try:
            self._results[index] = self._handle(self.manifest["attempts"][index][-1]).result(cleanup=False)
        except Exception as exc:  # noqa: BLE001 - every failure of the remote call belongs to the batch
            self._failures[index] = exc

    def results(self, ordered: bool = True, return_exceptions: bool = False, timeout: float | None = None) -> list[Any]:
        """Every input's value (input order, or completion order with ordered=False). A failure raises
        BatchError with the partial results, unless return_exceptions puts the exception in its place."""
        order: list[int] = []
        if ordered:
            self.wait(timeout)
            order = list(range(len(self)))
        else:
            for handle in self.as_completed(timeout):
                order.append(next(i for i, a in enumerate(self.manifest["attempts"]) if a[-1] == handle.job_id))
        for index in order:
            self._collect(index)
        values = [self._failures[i] if i in self._failures else self._results[i] for i in order]
        if self._failures and not return_exceptions:
            partial = [self._results.get(i) for i in order]
            first = min(self._failures)
            raise BatchError(f"batch {self.group_id}: {len(self._failures)} of {len(self)} inputs failed; "
                             f"first: input {first}: {type(self._failures[first]).__name__}: "
                             f"{self._failures[first]}", dict(self._failures), partial)
        return values

    def failures(self) -> dict[int, BaseException]:
        """Input index -> exception, for the inputs that settled for good without a value."""
        for index, status in enumerate(self.statuses()):
            if status in (JobStatus.FAILED, JobStatus.CANCELLED):
                self._collect(index)
        return dict(self._failures)

    def cancel(self) -> None:
        backend = local_backend()
        for attempts in self.manifest["attempts"]:
            backend.cancel(attempts[-1])


def map(fn: Any, inputs: Iterable[Any], max_concurrent: int | None = None, retries: int = 0,  # noqa: A001
        fail_fast: bool = False, dispatch: str = "auto", **run_options: Any) -> BatchHandle:
    """`kinetic.map(f, inputs)`: `f` is a `@run` function, or a plain one run with `run_options`."""
    from core.decorator import RemoteCallable, run

    remote = fn if isinstance(fn, RemoteCallable) else run(**run_options)(fn)
    return map_calls(remote, inputs, max_concurrent=max_concurrent, retries=retries, fail_fast=fail_fast,
                     dispatch=dispatch)
