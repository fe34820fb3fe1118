"""`map`: one job per input, durable as a group.

Every input becomes its own job at once (PENDING), submitted by the backend the registry picks for the
function's context, which also drives the batch's polls through a `BatchDriver` (the local backend runs the
inputs in lanes and enforces `max_concurrent` in its scheduler; GKE creates one Job per input, suspended
beyond the limit). Retries and fail-fast are driven by whichever client is watching the batch (`wait`, `as_completed`,
`results`); a retry resubmits the stored payload, so a process that only attached with `attach_batch` can
retry too.

Argument dispatch (`input_mode=`, or its other name `dispatch=`), as Kinetic's: "auto" calls `f(**x)` for a
dict whose keys are all identifiers (any other dict is passed whole), `f(*x)` for a list or tuple and `f(x)`
for anything else; "args" unpacks a list or tuple; "kwargs" a dict; "single" always passes `x` as is.

Fail-fast, as Kinetic's: at the first input that failed for good (retries spent), `fail_fast` cancels the
inputs that have not started; with `cancel_running_on_fail` it also stops the running ones.

Where this differs from Kinetic on purpose: a bad input (unpicklable, bad Data) refuses the whole map before
anything is written, so `submission_failures` is empty unless a retry's resubmission failed; inputs are all
queued at once (the scheduler, not the client, holds `max_concurrent`), so the manifest is complete when
`map` returns and `attach_batch` never waits for a submitter.
"""

from __future__ import annotations

import json
import keyword
import secrets
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from kinetic_tui.core.backends.base import BatchDriver, Submitted, manifest_key
from kinetic_tui.core.backends.registry import backend_for_context, lookup_order
from kinetic_tui.core.errors import ArgumentTypeError, KineticError, NotFoundError, ValidationError
from kinetic_tui.core.handle_records import iso_utc
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import NO_PLAIN_VALUE, JobHandle, attach, plain_value
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.core.storage import Storage
from kinetic_tui.core.submission.context import JobContext, new_job_id
from kinetic_tui.core.validation import MAX_SECONDS, require_group_id, require_number

INPUT_MODES = ("auto", "args", "kwargs", "single")
POLL_MIN, POLL_MAX = 0.002, 0.5  # polls back off while nothing settles, but news ends a pause early
FULL_POLL = 0.5  # how often a watching client also reconciles the whole workspace


class BatchError(KineticError):
    """Some inputs failed, as Kinetic reports it: `failures` holds the handles of the failed jobs,
    `partial_results` the values in input order (None where an input failed), `submission_failures` the
    inputs that never became jobs; `errors` maps input index -> the exception of each failed input."""

    def __init__(
        self,
        group_id: str,
        failures: list[JobHandle],
        partial_results: list[Any],
        submission_failures: Mapping[int, Exception] | None = None,
        *,
        errors: Mapping[int, BaseException] | None = None,
    ) -> None:
        self.group_id = group_id
        self.failures = list(failures)
        self.partial_results = list(partial_results)
        self.submission_failures = dict(submission_failures or {})
        self.errors = dict(errors or {})
        failed = len(self.failures) + len(self.submission_failures)
        message = f"batch {group_id}: {failed} of {len(self.partial_results)} inputs failed"
        if self.errors:
            first = min(self.errors)
            message += f"; first: input {first}: {type(self.errors[first]).__name__}: {self.errors[first]}"
        super().__init__(message)

    @property
    def results(self) -> list[Any]:
        """`partial_results`, by the name earlier versions gave it."""
        return self.partial_results


def _kwargs_dict(item: object) -> bool:
    return isinstance(item, dict) and all(
        isinstance(key, str) and key.isidentifier() and not keyword.iskeyword(key) for key in item
    )


def call_args(item: Any, mode: str, named: str = "input_mode") -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The (args, kwargs) one input is called with under `mode` (`named`: the argument the mode came from)."""
    if mode == "kwargs" or (mode == "auto" and _kwargs_dict(item)):
        if not isinstance(item, Mapping):
            raise ArgumentTypeError(f"{named}='kwargs' needs mapping inputs, got {type(item).__name__}")
        return (), dict(item)
    if mode == "args" or (mode == "auto" and isinstance(item, (list, tuple))):
        if not isinstance(item, (list, tuple)):
            raise ArgumentTypeError(f"{named}='args' needs list or tuple inputs, got {type(item).__name__}")
        return tuple(item), {}
    return (item,), {}


def _input_mode(input_mode: str | None, dispatch: str | None) -> tuple[str, str]:
    """The mode and the argument that chose it; both given must agree."""
    if input_mode is not None and dispatch is not None and input_mode != dispatch:
        raise ValidationError(f"input_mode={input_mode!r} and dispatch={dispatch!r} disagree; give one of them")
    named = "dispatch" if dispatch is not None and input_mode is None else "input_mode"
    mode = input_mode or dispatch or "auto"
    if mode not in INPUT_MODES:
        raise ValidationError(f"{named} {mode!r} is not one of: {', '.join(INPUT_MODES)}")
    return mode, named


def _check_tags(tags: object) -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise ValidationError(f"tags must map strings to strings, got {tags!r}")
    return dict(tags)


def map_calls(
    remote: Any,
    inputs: Iterable[Any],
    *,
    input_mode: str | None = None,
    dispatch: str | None = None,
    max_concurrent: int | None = None,
    retries: int = 0,
    fail_fast: bool = False,
    cancel_running_on_fail: bool = False,
    name: str | None = None,
    tags: Mapping[str, str] | None = None,
    project: str | None = None,
    cluster: str | None = None,
) -> BatchHandle:
    """Submit one job per input of the RemoteCallable `remote` and return the batch.

    `name` and `tags` are kept in the manifest (Kinetic's `group_name` and `tags`); `project` and `cluster`
    override the decorator's. Every input is checked and pickled before anything is written, so a bad
    input submits nothing; job ids are chosen up front, so the manifest is written once, before the first
    submission.
    """
    mode, named = _input_mode(input_mode, dispatch)
    if max_concurrent is not None and (
        isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1
    ):
        raise ValidationError(f"max_concurrent must be an integer >= 1 or None, got {max_concurrent!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValidationError(f"retries must be an integer >= 0, got {retries!r}")
    if name is not None and not isinstance(name, str):
        raise ValidationError(f"name must be a string or None, got {name!r}")
    tag_map = _check_tags(tags)
    calls = [call_args(item, mode, named) for item in inputs]
    calls = [((*remote.leading, *args), kwargs) for args, kwargs in calls]
    group_id = new_group_id()
    first = remote._context(group_id=group_id, group_index=0, project=project, cluster=cluster)
    contexts = [first.for_input(new_job_id(), i) if i else first for i in range(len(calls))]
    manifest = batch_manifest(
        contexts,
        name=name,
        tags=tag_map,
        max_concurrent=max_concurrent,
        retries=retries,
        fail_fast=fail_fast,
        cancel_running_on_fail=cancel_running_on_fail,
    )
    submitted = backend_for_context(first).submit_map(contexts, calls, manifest)
    batch = BatchHandle(submitted)
    batch._records.update((record["job_id"], record) for record in submitted.records)
    return batch


def new_group_id() -> str:
    return f"grp-{secrets.token_hex(4)}"


def batch_manifest(
    contexts: Sequence[JobContext],
    *,
    name: str | None = None,
    tags: Mapping[str, str] | None = None,
    max_concurrent: int | None = None,
    retries: int = 0,
    fail_fast: bool = False,
    cancel_running_on_fail: bool = False,
) -> dict[str, Any]:
    """The manifest of a batch of `contexts` (one group: the first context's group id), written before any
    input is queued."""
    first = contexts[0]
    return {
        "group_id": first.group_id,
        "group_kind": "map",
        "group_name": name,
        "tags": dict(tags or {}),
        "func_name": first.func_name,
        "submit_fn_name": first.display_name,
        "created_at": iso_utc(first.created_at),
        "submitted_at": first.created_at,
        "count": len(contexts),
        "total_expected": len(contexts),
        "max_concurrent": max_concurrent,
        "retries": retries,
        "fail_fast": fail_fast,
        "cancel_running_on_fail": cancel_running_on_fail,
        "bucket": first.bucket,
        "attempts": [[ctx.job_id] for ctx in contexts],
        "children": [kinetic_child(i, [ctx.job_id]) for i, ctx in enumerate(contexts)],
    }


def kinetic_child(index: int, attempts: list[str]) -> dict[str, Any]:
    """A manifest entry in Kinetic's shape, so Kinetic's `attach_batch` reads this package's manifests."""
    return {"group_index": index, "job_id": attempts[-1], "attempts": len(attempts)}


def attach_batch(
    group_id: str,
    project: str | None = None,
    cluster: str | None = None,
    poll_interval: float = 10.0,
    poll_timeout: float | None = 1800.0,
) -> BatchHandle:
    """Reattach by group id: through the workspace's store and local buckets, else the profile's backend
    (a GKE profile's jobs bucket; `project`/`cluster` override the profile).

    `poll_interval`/`poll_timeout` are Kinetic's bounds on waiting for a submitter still naming inputs in the
    manifest; they are checked and then have nothing to wait for: a manifest here names every input before
    the first one is submitted."""
    require_group_id(group_id)
    require_number("poll_interval", poll_interval, minimum=0, exclusive=True, maximum=MAX_SECONDS)
    if poll_timeout is not None:
        require_number("poll_timeout", poll_timeout, minimum=0, maximum=MAX_SECONDS)
    for backend in lookup_order(resolve_infra(project=project, cluster=cluster)):
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
        # the inputs' handle records as submitted: a handle is built from one when first asked for (500
        # handles built up front were ~10 ms of a 500-input map that may never ask for them)
        self._records: dict[str, Mapping[str, Any]] = {}
        self._failures: dict[int, BaseException] = {}
        self._results: dict[int, Any] = {}
        self._finished_at: dict[int, float] = {}
        self._failed_jobs: list[JobHandle] | None = None  # what the last `results` saw fail
        self._submission_errors: dict[int, Exception] = {}

    def __len__(self) -> int:
        return len(self.manifest["attempts"])  # one list of attempts per input

    @property
    def name(self) -> str | None:
        return self.manifest.get("group_name")

    @property
    def tags(self) -> dict[str, str]:
        return dict(self.manifest.get("tags") or {})

    @property
    def jobs(self) -> list[JobHandle | None]:
        """The latest attempt of each input, in input order; None where its record is gone."""
        jobs: list[JobHandle | None] = []
        for attempts in self.manifest["attempts"]:
            try:
                jobs.append(self._handle(attempts[-1]))
            except NotFoundError:
                jobs.append(None)
        return jobs

    @property
    def unavailable_children(self) -> dict[int, str]:
        """Input index -> job id of the inputs the manifest names whose record cannot be found."""
        return {i: self.manifest["attempts"][i][-1] for i, job in enumerate(self.jobs) if job is None}

    @property
    def submission_failures(self) -> dict[int, Exception]:
        """Input index -> why its retry could not be submitted (a first submission never fails alone: a bad
        input refuses the whole map)."""
        return dict(self._submission_errors)

    def _record_attempt(self, index: int, handle: JobHandle) -> None:
        attempts = self.manifest["attempts"][index]
        attempts.append(handle.job_id)
        if "children" in self.manifest:
            self.manifest["children"][index] = kinetic_child(index, attempts)
        self._handles[handle.job_id] = handle
        self._storage.put_bytes(manifest_key(self.group_id), json.dumps(self.manifest).encode())

    def _handle(self, job_id: str) -> JobHandle:
        if job_id not in self._handles:
            record = self._records.get(job_id) or self._driver.record(job_id)
            self._handles[job_id] = attach(job_id) if record is None else JobHandle.from_record(record)
        return self._handles[job_id]

    def handles(self) -> list[JobHandle]:
        """The latest attempt of each input, in input order."""
        return [self._handle(attempts[-1]) for attempts in self.manifest["attempts"]]

    def statuses(self) -> list[tuple[int, JobStatus]]:
        """(input index, latest attempt's status) per input, as Kinetic gives them (after settling every
        finished job of the backend)."""
        return list(enumerate(self.status_list()))

    def status_list(self) -> list[JobStatus]:
        """The latest attempt's status per input, in input order."""
        return self._settle(full=True)

    def status_counts(self) -> dict[str, int]:
        return dict(Counter(status.value for status in self.status_list()))

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
        """Retry failed inputs with attempts left; at the first final failure, fail-fast cancels what has not
        started (and, with cancel_running_on_fail, what runs)."""
        statuses = self._settle(full)
        for index, status in enumerate(statuses):
            attempts = self.manifest["attempts"][index]
            if status is JobStatus.FAILED and len(attempts) <= self.manifest["retries"]:
                try:
                    self._record_attempt(index, self._retry(self._handle(attempts[-1])))
                except KineticError as exc:
                    self._submission_errors[index] = exc
                    continue
                statuses[index] = JobStatus.PENDING
        if self.manifest["fail_fast"] and JobStatus.FAILED in statuses:
            stopping = {JobStatus.PENDING, JobStatus.RUNNING}
            if not self.manifest.get("cancel_running_on_fail"):
                stopping = {JobStatus.PENDING}
            self._cancel([i for i, status in enumerate(statuses) if status in stopping])
            statuses = self.status_list()
        return statuses

    def wait(self, timeout: float | None = None) -> list[JobStatus]:
        """Block until every input settled for good (retries included); TimeoutError leaves them running."""
        for _ in self._completed(timeout):
            pass
        return self.status_list()

    def as_completed(self, timeout: float | None = None, poll_interval: float | None = None) -> Iterator[JobHandle]:
        """Final attempts as they settle (a failure that will be retried is not yielded). Polls back off
        from milliseconds up to `poll_interval` seconds (default 0.5) while nothing settles."""
        if poll_interval is not None:
            require_number("poll_interval", poll_interval, minimum=0, exclusive=True, maximum=MAX_SECONDS)
        for index in self._completed(timeout, poll_interval or POLL_MAX, each_input=True):
            yield self._handle(self.manifest["attempts"][index][-1])

    def _completed(self, timeout: float | None, longest: float = POLL_MAX, each_input: bool = False) -> Iterator[int]:
        """Input indices as they settle for good (in finishing order), driving retries and fail-fast. A
        waiter that needs only the end (`wait`, `results`) wakes when room frees for the next inputs, and
        backs off meanwhile: on two cores every poll is time taken from the lanes."""
        each_input = each_input or bool(self.manifest["retries"] or self.manifest["fail_fast"])
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
            delay = POLL_MIN if fresh and each_input else min(delay * 2, longest)
            seconds = delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0.0))
            self._driver.wait_for_news(seconds, each_input)  # so a batch never waits out a whole interval per job

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
                    continue
                data = self._driver.result_bytes(row, files)
                value = plain_value(row, data)
                if value is not NO_PLAIN_VALUE:
                    self._results[index] = value
                    continue
                handle = self._handles.get(job_id)
                if handle is None:
                    handle = self._handles[job_id] = JobHandle.from_record(row.handle)
                self._results[index] = handle.value_from(row, data)
            except Exception as exc:
                self._failures[index] = exc

    def results(
        self,
        ordered: bool = True,
        return_exceptions: bool = False,
        timeout: float | None = None,
        cleanup: bool = True,
    ) -> list[Any]:
        """Every input's value (input order, or completion order with ordered=False). A failure raises
        BatchError with the partial results, unless return_exceptions puts the exception in its place.
        `cleanup` removes each input's inputs and working directories once its value is read (values,
        records and logs stay, so results can be asked again)."""
        if ordered:
            self.wait(timeout)
            order = list(range(len(self)))
        else:
            order = list(self._completed(timeout))
        self._collect(order)
        if cleanup:
            self.cleanup(gcs=True, manifest=False)
        values = [self._failures[i] if i in self._failures else self._results[i] for i in order]
        self._failed_jobs = [self._handle(self.manifest["attempts"][i][-1]) for i in sorted(self._failures)]
        if (self._failures or self._submission_errors) and not return_exceptions:
            raise BatchError(
                self.group_id,
                self._failed_jobs,
                [self._results.get(i) for i in range(len(self))],  # input order, like `failures`
                self._submission_errors,
                errors=self._failures,
            )
        return values

    def failures(self) -> list[JobHandle]:
        """The handles of the inputs that FAILED, as Kinetic gives them (after `results`, the ones it saw)."""
        if self._failed_jobs is not None:
            return list(self._failed_jobs)
        return [
            self._handle(self.manifest["attempts"][i][-1])
            for i, status in enumerate(self.status_list())
            if status is JobStatus.FAILED
        ]

    def errors(self) -> dict[int, BaseException]:
        """Input index -> exception, for the inputs that settled for good without a value."""
        self._collect(
            index
            for index, status in enumerate(self.status_list())
            if status in (JobStatus.FAILED, JobStatus.CANCELLED)
        )
        return dict(self._failures)

    def cancel(self) -> None:
        """Cancel every input, the last first: queued inputs are cancelled before any running one is
        stopped, so stopping a lane never hands its queued inputs to a new lane."""
        self._cancel(range(len(self)))

    def _cancel(self, indices: Iterable[int]) -> None:
        for index in sorted(indices, reverse=True):
            self._driver.cancel(self.manifest["attempts"][index][-1])

    def cleanup(self, k8s: bool = True, gcs: bool = True, manifest: bool | None = None) -> None:
        """What `JobHandle.cleanup(k8s=, gcs=)` removes, for every settled input (unsettled ones are skipped),
        and, with `gcs` (or `manifest=True`), the batch's manifest as Kinetic does."""
        self._driver.cleanup([attempts[-1] for attempts in self.manifest["attempts"]], k8s, gcs)
        if gcs if manifest is None else manifest:
            self._storage.delete_prefix(manifest_key(self.group_id))
