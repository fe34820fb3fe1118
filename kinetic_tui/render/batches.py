"""A map's inputs as one row: the jobs list shows each batch where its newest input would be, collapsed
to its progress (`17/20`), and its inputs under it when expanded. Pure functions over snapshots."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kinetic_tui.core.console.snapshots import JobSnapshot
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.render.formatting import NONE_CELL, humanize_age

Row = tuple[str, ...]
COLLAPSED, EXPANDED, MEMBER = "▸", "▾", "└"


def group_keys(
    job_ids: Iterable[str], batches: Mapping[str, str], expanded: set[str]
) -> tuple[list[str], dict[str, list[str]]]:
    """(the rows' keys in order, each batch's inputs newest first). A job outside any batch keeps its
    place; a batch takes the place of its newest input, followed by its inputs when it is expanded."""
    order: list[str] = []
    members: dict[str, list[str]] = {}
    for job_id in job_ids:
        batch = batches.get(job_id)
        if batch is None:
            order.append(job_id)
            continue
        if batch not in members:
            members[batch] = []
            order.append(batch)
        members[batch].append(job_id)
    keys: list[str] = []
    for key in order:
        keys.append(key)
        if key in expanded:
            keys += members[key]
    return keys, members


def batch_counts(jobs: Sequence[JobSnapshot]) -> dict[str, int]:
    """How many inputs are done (finished, any way), failed and running."""
    statuses = [JobStatus(job.status) for job in jobs]
    return {
        "done": sum(status.finished for status in statuses),
        "failed": statuses.count(JobStatus.FAILED),
        "running": statuses.count(JobStatus.RUNNING),
    }


def batch_row(batch: str, jobs: Sequence[JobSnapshot], now: float, expanded: bool) -> Row:
    """(batch id, `▸ name ×N`, accelerator, pool, `done/N` with failures, age of the first input, -)."""
    first = jobs[-1]  # inputs are newest first: the last one was submitted first
    counts = batch_counts(jobs)
    progress = f"{counts['done']}/{len(jobs)}" + (f" ✗{counts['failed']}" if counts["failed"] else "")
    return (
        batch,
        f"{EXPANDED if expanded else COLLAPSED} {first.name or first.func} ×{len(jobs)}",
        first.accelerator or NONE_CELL,
        first.pool or NONE_CELL,
        progress,
        humanize_age(first.created_at, now),
        NONE_CELL,
    )


def member_row(row: Row) -> Row:
    """An input's row under its expanded batch: its name indented under the batch's."""
    return (row[0], f"{MEMBER} {row[1]}", *row[2:])


def batch_detail(batch: str, jobs: Sequence[JobSnapshot]) -> str:
    counts = batch_counts(jobs)
    return (
        f"batch {batch} · {len(jobs)} inputs · {counts['done']} done · {counts['failed']} failed · "
        f"{counts['running']} running · Enter expands or collapses"
    )
