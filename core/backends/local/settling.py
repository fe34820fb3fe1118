"""Settling local jobs: judging a job whose processes are done, and recording its outcome once.

A job claimed but not launched yet has no processes to judge: launching.adopt_launch settles its launch
first.

A host's own result summary (`result.json`, `result-worker-{i}.json`, written by its runner before it
exits) outranks a missing exit status: a host whose status nobody can tell any more (its reaper, the fork
server, was killed) is judged by that summary, and only a host with neither is lost.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time

from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.job_rows import JobRow, job_dir_for
from kinetic_tui.core.backends.local.volumes import remove_volume_roots
from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.storage import bucket_storage
from kinetic_tui.core.store import Store, jobs_repo, volume_locks_repo
from kinetic_tui.core.training.entry import PREEMPTED_EXIT_CODE

Outcome = tuple[JobStatus, str | None, str | None]  # (status, phase, detail)


def outcome(row: JobRow) -> Outcome | None:
    """(status, phase, detail) once every host has ended, or None while one runs or is being launched."""
    if row.hosts is None:
        return None
    codes = []
    for host in row.hosts:
        ended, code = launcher.host_exit(row.job_dir, host)
        if not ended:
            return None
        codes.append(code)
    if row.cancel_requested:
        return JobStatus.CANCELLED, None, "cancelled"
    return _judge(row, codes)


def _judge(row: JobRow, codes: list[int | None]) -> Outcome:
    storage = bucket_storage(row.handle["bucket"], row.handle["result_uri"])
    summaries = {}
    for host in range(row.nodes):
        name = "result.json" if host == 0 else f"result-worker-{host}.json"
        with contextlib.suppress(NotFoundError):  # the host wrote no result
            summaries[host] = json.loads(storage.get_bytes(f"{row.job_id}/{name}"))
    for host, code in enumerate(codes):
        summary = summaries.get(host)
        if summary is not None and not summary["success"]:
            where = "" if row.nodes == 1 else f"host {host}: "
            return JobStatus.FAILED, summary["phase"], f"{where}{summary['error_type']}: {summary['error']}"
        if code is None:
            if summary is not None:
                continue  # its runner recorded its success; nobody is left to tell its exit status
            return JobStatus.FAILED, "lost", f"host {host} vanished without an exit status or result"
        if code == PREEMPTED_EXIT_CODE and summary is None:
            return (
                JobStatus.FAILED,
                "preempted",
                (
                    f"host {host} stopped as preempted (exit {code}, EX_TEMPFAIL); "
                    "a training resumes from its last checkpoint"
                ),
            )
        if code != 0:
            return JobStatus.FAILED, "lost" if code < 0 else "runner", f"host {host} exited with {code}"
    if 0 not in summaries:
        return JobStatus.FAILED, "lost", "the job exited without writing its result"
    return JobStatus.SUCCEEDED, None, None


def finish(store: Store, job_id: str, status: JobStatus, phase: str | None, detail: str | None) -> bool:
    """Settle a job once (a concurrent settler loses quietly) and release its volumes."""
    with store.transaction() as conn:
        changed = jobs_repo.settle(conn, job_id, status.value, phase, detail, time.time())
        _release_volumes(conn, job_id, changed)
    return changed


def requeue(store: Store, row: JobRow, token: str | None, why: str) -> bool:
    """Put a claimed job none of whose processes ran back in the queue (it keeps its place), unless its
    launch `token` is no longer current (it was claimed again meanwhile); the reason goes to its log. A job
    asked to cancel is cancelled instead."""
    if row.cancel_requested:
        return finish(store, row.job_id, JobStatus.CANCELLED, None, "cancelled")
    with store.transaction() as conn:  # claims write their record under this lock, so the token read is current
        changed = launcher.claim_token(row.job_dir) == token and jobs_repo.requeue_unlaunched(conn, row.job_id)
        if changed:
            _release_volumes(conn, row.job_id, changed)
    if changed:
        launcher.note(row.job_dir, f"launch: {why}; none of it ran, so it is queued again")
    return changed


def _release_volumes(conn: sqlite3.Connection, job_id: str, settled: bool) -> None:
    """The paths are removed before their locks go, in the same transaction: a job queued for the same
    path may be launched the moment the lock is released and must find the path free."""
    if settled and volume_locks_repo.holds_any(conn, job_id):
        remove_volume_roots(job_dir_for(job_id))
    volume_locks_repo.release(conn, job_id)
