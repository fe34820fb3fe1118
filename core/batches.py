"""`map`: one job per input, durable as a group.

Every input becomes its own job at once (PENDING), submitted by the backend the registry picks for the
function's context, which also drives the batch's polls through a `BatchDriver` (the local backend runs the
inputs in lanes and enforces `max_concurrent` in its scheduler; GKE creates one Job per input, suspended
beyond the limit). Retries and fail-fast are driven by whichever client is watching the batch (`wait`, `as_completed`,
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

from kinetic_tui.core.backends.base import BatchDriver, Submitted, manifest_key
from kinetic_tui.core.backends.registry import backend_for_context, lookup_order
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle, attach
from kinetic_tui.core.storage import Storage
from kinetic_tui.core.submission.context import new_job_id
from kinetic_tui.core.validation import require_group_id

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


def map_calls(
    remote: Any,
    inputs: Iterable[Any],
    max_concurrent: int | None = None,
    retries: int = 0,
    fail_fast: bool = False,
    dispatch: str = "auto",
) -> BatchHandle:
    """Submit one job per input of the RemoteCallable `remote` and return the batch.

    Every input is checked and pickled before anything is written, so a bad input submits nothing; job
    ids are chosen up front, so the manifest is written once, before the first submission.
    """
    if dispatch not in DISPATCH:
        raise ValidationError(f"dispatch {dispatch!r} is not one of: {', '.join(DISPATCH)}")
    if max_concurrent is not None and (
        isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1
    ):
        raise ValidationError(f"max_concurrent must be an integer >= 1 or None, got {max_concurrent!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValidationError(f"retries must be an integer >= 0, got {retries!r}")
    calls = [_call_args(item, dispatch) for item in inputs]
    group_id = f"group-{secrets.token_hex(4)}"
    first = remote._context(group_id=group_id)
    contexts = [replace(first, job_id=new_job_id()) if index else first for index in range(len(calls))]
    manifest = {
        "group_id": group_id,
        "func_name": first.func_name,
        "created_at": time.time(),
        "count": len(calls),
        "max_concurrent": max_concurrent,
        "retries": retries,
        "fail_fast": fail_fast,
        "bucket": first.bucket,
        "attempts": [[ctx.job_id] for ctx in contexts],
    }
    submitted = backend_for_context(first).submit_map(contexts, calls, manifest)
    batch = BatchHandle(submitted)
    batch._handles.update((record["job_id"], JobHandle.from_record(record)) for record in submitted.records)
    return batch


def attach_batch(group_id: str) -> BatchHandle:
    """Reattach by group id: through the workspace's store and local buckets, else the profile's backend
    (a GKE profile's jobs bucket)."""
    require_group_id(group_id)
    for backend in lookup_order():
        found = backend.attach_batch(group_id)
        if found is not None:
            return BatchHandle(found)
    raise NotFoundError(f"unknown batch {group_id!r}: no job of that group and no manifest {manifest_key(group_id)}")


class BatchHandle:
    """The jobs of one `map`, durable through its manifest: any process can watch, retry or cancel them."""

    def __init__(self, submitted: Submitted) -> None:
        self.manifest = submitted.manifest
        self.group_id: str = self.manifest["group_id"]
        self._storage: Storage = submitted.storage
        self._driver: BatchDriver = submitted.driver
        self._handles: dict[str, JobHandle] = {}
        self._failures: dict[int, BaseException] = {}
        self._results: dict[int, Any] = {}
        self._finished_at: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.manifest["attempts"])  # one list of attempts per input

    def _record_attempt(self, index: int, handle: JobHandle) -> None:
        self.manifest["attempts"][index].append(handle.job_id)
        self._handles[handle.job_id] = handle
        self._storage.put_bytes(manifest_key(self.group_id), json.dumps(self.manifest).encode())

    def _handle(self, job_id: str) -> JobHandle:
        if job_id not in self._handles:
            record = self._driver.record(job_id)
            self._handles[job_id] = attach(job_id) if record is None else JobHandle.from_record(record)
        return self._handles[job_id]

    def handles(self) -> list[JobHandle]:
        """The latest attempt of each input, in input order."""
        return [self._handle(attempts[-1]) for attempts in self.manifest["attempts"]]

    def statuses(self) -> list[JobStatus]:
        """The latest attempt's status per input (settling every finished job of the backend first)."""
        return self._settle(full=True)

    def status_counts(self) -> dict[str, int]:
        return dict(Counter(status.value for status in self.statuses()))

    def _settle(self, full: bool) -> list[JobStatus]:
        """Settle what has finished and return the statuses. `full=False` lets the backend settle only this
        batch's own work (each settle starts the next queued job); the full pass also catches lost
        processes and nodes freed by other work."""
        states = self._driver.states([attempts[-1] for attempts in self.manifest["attempts"]], full)
        self._finished_at = {i: finished for i, (_, finished) in enumerate(states) if finished}
        return [status for status, _ in states]

    def _retry(self, handle: JobHandle) -> JobHandle:
        return JobHandle.from_record(self._driver.retry(handle.to_record()))

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
            fresh = sorted(
                (i for i, s in enumerate(statuses) if s.finished and i not in seen),
                key=lambda i: self._finished_at.get(i, 0.0),
            )  # settled in one poll: in finishing order
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
        while time.monotonic() < end and not self._driver.has_news():
            time.sleep(EXIT_POLL)

    def _collect(self, indices: Iterable[int]) -> None:
        """Read the values (or exceptions) of settled inputs; each lane's results file is read once."""
        todo = [i for i in indices if i not in self._results and i not in self._failures]
        if not todo:
            return
        rows = self._driver.settled()
        files: dict[str, bytes] = {}
        for index in todo:
            job_id = self.manifest["attempts"][index][-1]
            row = rows.get(job_id)
            try:
                if row is None:
                    self._results[index] = self._handle(job_id).result(cleanup=False)
                else:
                    handle = self._handles.setdefault(job_id, JobHandle.from_record(row.handle))
                    self._results[index] = handle.value_from(row, self._driver.result_bytes(row, files))
            except Exception as exc:
                self._failures[index] = exc

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
            raise BatchError(
                f"batch {self.group_id}: {len(self._failures)} of {len(self)} inputs failed; "
                f"first: input {first}: {type(self._failures[first]).__name__}: "
                f"{self._failures[first]}",
                dict(self._failures),
                partial,
            )
        return values

    def failures(self) -> dict[int, BaseException]:
        """Input index -> exception, for the inputs that settled for good without a value."""
        self._collect(
            index for index, status in enumerate(self.statuses()) if status in (JobStatus.FAILED, JobStatus.CANCELLED)
        )
        return dict(self._failures)

    def cancel(self) -> None:
        """Cancel every input, the last first: queued inputs are cancelled before any running one is
        stopped, so stopping a lane never hands its queued inputs to a new lane."""
        for attempts in reversed(self.manifest["attempts"]):
            self._driver.cancel(attempts[-1])
