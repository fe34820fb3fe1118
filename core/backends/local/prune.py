"""Removing old finished jobs from a local workspace: their store rows and every file they left.

`prune` walks the `finished_at` index from the oldest end, one batch at a time, so it costs what it removes
and never reads the rest of the history. Per batch: the jobs' directories (the job directory, its prefix in
each local bucket, and the directories of a batch none of whose jobs is left) are renamed into the
workspace trash, then their rows are deleted in one transaction, then the trash is emptied. A crash between
the steps leaves rows whose files are gone (the next prune removes them) or a full trash (the next process
empties it), never files without a row, which `doctor --repair` would bring back as jobs. A lane still
closing when its batch's last jobs go keeps its row and directory until a prune after it has ended.

What is kept: every job still PENDING or RUNNING, and the jobs of the steps of Running pipeline runs (their
drivers still read them). Artifacts live in the bucket's `_artifacts/` prefix and are never under a job, so
pruning jobs cannot remove one that a cache entry, a run or a model still references.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from kinetic_tui.core.backends.local.job_rows import job_dir_for
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.store import Store, jobs_repo, pipeline_steps_repo
from kinetic_tui.core.validation import require_job_id

BATCH = 500


@dataclass(frozen=True)
class Pruned:
    removed: int  # jobs whose rows and files are gone
    kept: int  # finished before the cutoff, kept because a Running pipeline run still reads them


def prune(store: Store, before: float, batch: int = BATCH) -> Pruned:
    """Remove every finished job that finished before `before` (epoch seconds), but what is kept (above)."""
    held = pipeline_steps_repo.running_step_jobs(store)
    buckets = [path for path in (kinetic_home() / "local" / "buckets").glob("*") if not path.name.startswith(".")]
    trash = kinetic_home() / "local" / "trash"
    removed, kept, limit = 0, 0, batch
    while True:
        rows = jobs_repo.oldest_finished(store, before, limit)
        chosen = [job_id for job_id in rows if job_id not in held]
        kept = len(rows) - len(chosen)  # held jobs stay at the oldest end: ask for that many more
        if chosen:
            _remove(store, chosen, buckets, trash)
            removed += len(chosen)
        if len(rows) < limit:
            break
        limit = batch + kept
    with store.transaction() as conn:
        orphans = jobs_repo.delete_orphan_lanes(conn)
    if orphans:
        trash.mkdir(parents=True, exist_ok=True)
        for directory in orphans:
            _to_trash(Path(directory), trash)
        _empty(trash)
    return Pruned(removed, kept)


def _remove(store: Store, job_ids: list[str], buckets: list[Path], trash: Path) -> None:
    trash.mkdir(parents=True, exist_ok=True)
    for job_id in job_ids:
        require_job_id(job_id)  # a name that could leave the bucket is never removed
        for path in (job_dir_for(job_id), *(bucket / job_id for bucket in buckets)):
            _to_trash(path, trash)
    with store.transaction() as conn:
        groups, lane_dirs = jobs_repo.delete_finished(conn, job_ids)
    for directory in [*map(Path, lane_dirs), *(bucket / "_groups" / group for bucket in buckets for group in groups)]:
        _to_trash(directory, trash)
    _empty(trash)


def _to_trash(path: Path, trash: Path) -> None:
    try:
        os.rename(path, trash / f"pruned-{path.name}-{os.getpid()}-{time.monotonic_ns()}")
    except FileNotFoundError:
        return
    except OSError:  # another file system: remove it in place
        shutil.rmtree(path, ignore_errors=True)


def _empty(trash: Path) -> None:
    for entry in trash.iterdir():
        if entry.name.startswith("pruned-"):
            shutil.rmtree(entry, ignore_errors=True)
