"""Job rows rebuilt from the files a job leaves: its `handle.json` in the jobs bucket, its result summary
beside the result pickle, and its live processes.

Decisions: the outcome comes from the runner's own records first (a failed summary on any host: FAILED in
that phase; host 0's success summary: SUCCEEDED), then from live processes (RUNNING, with those processes
as its hosts, so the next reconcile settles it as usual); a job with neither is FAILED in phase `lost`,
saying so. A job directory without a `handle.json` (its bucket was elsewhere, or removed) cannot be
rebuilt and stays a problem. Map inputs run in lanes keep no `handle.json` of their own and are not
rebuilt here.

An interrupted submission is not a lost job: a client killed between writing a job's files and queuing its
row leaves a `handle.json` with nothing of a run beside it (no result summary, an empty or no job
directory). It was never acknowledged (a submit returns only once the row is queued) and never ran, so
`--repair` removes its files, as the client would have had it lived, instead of recording a job nobody
submitted. With a lost store every job looks like that, so there everything is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinetic_tui.core.doctor.processes import WorkProcess
from kinetic_tui.core.errors import KineticError, NotFoundError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.storage import Storage, bucket_storage
from kinetic_tui.core.store import Store, jobs_repo
from kinetic_tui.core.submission.pack import CONTEXT, HANDLE, PAYLOAD, Prepared
from kinetic_tui.core.validation import is_job_id

LOST_DETAIL = "rebuilt by `doctor --repair`: the store had lost this job, which left no result and no running process"


@dataclass(frozen=True)
class OnDisk:
    """A job the home has files of: its directory and its handle.json, either of which may be missing."""

    job_id: str
    job_dir: Path | None
    handle: Path | None


def jobs_on_disk(home: Path) -> dict[str, OnDisk]:
    local = home / "local"
    dirs = {p.name: p for p in _named_jobs(local.glob("jobs/job-*"))}
    handles = {p.parent.name: p for p in _named_jobs(local.glob(f"buckets/*/job-*/{HANDLE}"), parent=True)}
    return {
        job_id: OnDisk(job_id, dirs.get(job_id), handles.get(job_id)) for job_id in sorted(dirs.keys() | handles.keys())
    }


def _named_jobs(paths: Iterable[Path], parent: bool = False) -> Iterable[Path]:
    """The paths whose job directory name has the job id shape (anything else under the home is not a job)."""
    return (p for p in paths if is_job_id((p.parent if parent else p).name))


def interrupted(job: OnDisk) -> bool:
    """Whether the job is a submission stopped before its row was queued (see the module's docstring)."""
    if job.handle is None or (job.handle.parent / "result.json").exists():
        return False
    return job.job_dir is None or not any(job.job_dir.iterdir())


def discard(job: OnDisk) -> str:
    """Remove an interrupted submission's files (its bucket directory and empty job directory)."""
    assert job.handle is not None
    try:
        shutil.rmtree(job.handle.parent)
        if job.job_dir is not None:
            job.job_dir.rmdir()
    except OSError as exc:
        return f"could not remove the interrupted submission {job.job_id}: {exc}"
    return f"removed the files of {job.job_id}, whose submission was interrupted before it was queued (it never ran)"


def rebuild(store: Store, home: Path, job: OnDisk, live: list[WorkProcess]) -> str:
    """Insert the job's row from its files; one line saying what was recorded (or why it could not be)."""
    if job.handle is None:
        return f"could not rebuild {job.job_id}: it has no {HANDLE}"
    try:
        handle = json.loads(job.handle.read_text())
        if not isinstance(handle, dict) or handle.get("job_id") != job.job_id:
            raise ValueError(f"it does not describe {job.job_id}")
        storage = bucket_storage(handle["bucket"], handle["result_uri"])
        status, phase, detail = _outcome(storage, handle, live)
    except (OSError, ValueError, KeyError, TypeError, KineticError) as exc:
        return f"could not rebuild {job.job_id}: {job.handle} is unusable ({exc})"
    job_dir = job.job_dir or home / "local" / "jobs" / job.job_id
    launch = _launch(storage, handle, job_dir)
    hosts = _hosts(live) if status is JobStatus.RUNNING else None
    finished = None if status is JobStatus.RUNNING else _finished_at(storage, job)
    with store.transaction() as conn:
        if handle.get("group_id"):
            jobs_repo.ensure_group(conn, handle["group_id"], handle.get("created_at") or time.time())
        inserted = jobs_repo.insert_rebuilt(
            conn, handle, launch, (status.value, phase, detail), (handle.get("created_at"), finished), hosts
        )
    if not inserted:
        return f"left {job.job_id} alone: it has a row now"
    said = f" in phase {phase!r}" if phase else ""
    return f"rebuilt {job.job_id} as {status.value}{said}" + (f" ({len(live)} live processes)" if hosts else "")


def _outcome(
    storage: Storage, handle: dict[str, Any], live: list[WorkProcess]
) -> tuple[JobStatus, str | None, str | None]:
    job_id, nodes = handle["job_id"], int(handle.get("num_nodes") or 1)
    summaries = {}
    for host in range(nodes):
        name = "result.json" if host == 0 else f"result-worker-{host}.json"
        try:
            summaries[host] = json.loads(storage.get_bytes(f"{job_id}/{name}"))
        except NotFoundError:
            continue
    for host, summary in sorted(summaries.items()):
        if not summary["success"]:
            where = "" if nodes == 1 else f"host {host}: "
            return JobStatus.FAILED, summary["phase"], f"{where}{summary['error_type']}: {summary['error']}"
    if 0 in summaries:
        return JobStatus.SUCCEEDED, None, None
    if live:
        return JobStatus.RUNNING, None, None
    return JobStatus.FAILED, "lost", LOST_DETAIL


def _launch(storage: Storage, handle: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    """What a retry of the job needs: the runner's arguments over the stored payload and archive (none when
    either is gone, so a retry says so)."""
    job_id = handle["job_id"]
    try:
        digests = [hashlib.sha256(storage.get_bytes(f"{job_id}/{name}")).hexdigest() for name in (PAYLOAD, CONTEXT)]
        args = Prepared(
            storage.uri(f"{job_id}/{PAYLOAD}"),
            storage.uri(f"{job_id}/{CONTEXT}"),
            handle["result_uri"],
            digests[0],
            digests[1],
            (),
        ).runner_args()
    except NotFoundError:
        args = []
    return {
        "job_dir": str(job_dir),
        "runner_args": args,
        "argv": [*args, "--workdir", "."],
        "volumes": [],
        "output_dir": handle.get("output_dir"),
    }


def _hosts(live: list[WorkProcess]) -> list[dict[str, Any]]:
    """One process per host, its group's leader where it is alive (the group is what cancel signals)."""
    chosen: dict[int, WorkProcess] = {}
    for process in sorted(live, key=lambda p: (p.pid != p.pgid, p.pid)):
        chosen.setdefault(process.host, process)
    return [chosen[host].as_host().to_dict() for host in sorted(chosen)]


def _finished_at(storage: Storage, job: OnDisk) -> float:
    """When the job last wrote: its result summary, else its directory or handle."""
    for path in (Path(storage.uri(f"{job.job_id}/result.json")), job.job_dir, job.handle):
        if path is not None and path.exists():
            return path.stat().st_mtime
    return time.time()
