"""Local jobs and their batches (job_groups) in state.db.

Functions that take `conn` run inside a transaction the caller opened (a claim reads and writes in one
`BEGIN IMMEDIATE`, so the statements it is made of must share it); functions that take `db` are single
reads or writes of their own. Rows come back as tuples in `COLUMNS` order; the backend decodes them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.store.db import Database

COLUMNS = (
    "seq, job_id, pool, nodes, status, phase, detail, group_id, created_at, started_at, "
    "finished_at, cancel_requested, hosts, handle, launch, lane, log_start, log_end, result_at, "
    "result_size"
)


_CHUNK = 500
_QUEUE_PAGE = 32


class DuplicateJob(KineticError):
    """A job id that has a row already was queued again; `job_id` names it."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} is queued already")
        self.job_id = job_id


def matching_ids(conn: sqlite3.Connection, ids: list[str], condition: str = "1") -> set[str]:
    """Which of `ids` have a row for which the SQL `condition` holds."""
    found: set[str] = set()
    for start in range(0, len(ids), _CHUNK):  # SQLite bounds the number of parameters of one statement
        chunk = ids[start : start + _CHUNK]
        sql = f"SELECT job_id FROM jobs WHERE job_id IN ({','.join('?' * len(chunk))}) AND ({condition})"
        found.update(job_id for (job_id,) in conn.execute(sql, chunk))
    return found


def insert_pending(
    conn: sqlite3.Connection, jobs: list[tuple[dict[str, Any], dict[str, Any]]], group_id: str | None
) -> None:
    """Queue (handle, launch) pairs as PENDING rows, in order; DuplicateJob (and nothing inserted, the
    caller's transaction rolls back) when one of the ids has a row already: a job is queued once."""
    ids = [handle["job_id"] for handle, _ in jobs]
    taken = matching_ids(conn, ids)
    if taken:
        raise DuplicateJob(next(job_id for job_id in ids if job_id in taken))
    conn.executemany(
        "INSERT INTO jobs (job_id, backend, pool, nodes, status, group_id, created_at, handle, launch) "
        "VALUES (?, 'local', ?, ?, 'PENDING', ?, ?, ?, ?)",
        [
            (
                handle["job_id"],
                handle["pool"],
                handle["num_nodes"],
                group_id,
                handle["submitted_at"],  # epoch seconds; the record's created_at is ISO text
                json.dumps(handle),
                json.dumps(launch),
            )
            for handle, launch in jobs
        ],
    )


def insert_rebuilt(
    conn: sqlite3.Connection,
    handle: dict[str, Any],
    launch: dict[str, Any],
    outcome: tuple[str, str | None, str | None],
    times: tuple[float | None, float | None],
    hosts: list[dict[str, Any]] | None,
) -> bool:
    """A row rebuilt from a job's files after the store lost it: (status, phase, detail) and (started_at,
    finished_at) come from its result files, `hosts` from its live processes. False when the job has a row
    already (a submit that was writing it meanwhile wins)."""
    status, phase, detail = outcome
    started, finished = times
    return bool(
        conn.execute(
            "INSERT INTO jobs (job_id, backend, pool, nodes, status, phase, detail, group_id, created_at, started_at, "
            "finished_at, hosts, handle, launch) VALUES (?, 'local', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (job_id) DO NOTHING",
            (
                handle["job_id"],
                handle.get("pool"),
                handle.get("num_nodes") or 1,
                status,
                phase,
                detail,
                handle.get("group_id"),
                handle.get("created_at") or 0.0,
                started,
                finished,
                None if hosts is None else json.dumps(hosts),
                json.dumps(handle),
                json.dumps(launch),
            ),
        ).rowcount
    )


def known_ids(db: Database) -> set[str]:
    """Every job id the store has a row for."""
    return {job_id for (job_id,) in db.query("SELECT job_id FROM jobs")}


def get(db: Database, job_id: str) -> tuple[Any, ...] | None:
    rows = db.query(f"SELECT {COLUMNS} FROM jobs WHERE job_id = ?", (job_id,))
    return rows[0] if rows else None


def finished_among(db: Database, job_ids: list[str]) -> tuple[set[str], list[tuple[Any, ...]]]:
    """Of `job_ids`: the ones that have a row, and the rows of those that finished (a primary-key lookup
    each; the still-active rows are not decoded by a caller that only settles what ended)."""
    wanted = (json.dumps(job_ids),)
    rows = db.query(f"SELECT {COLUMNS} FROM jobs WHERE job_id IN (SELECT value FROM json_each(?))", wanted)
    return {row[1] for row in rows}, [row for row in rows if row[4] not in ("PENDING", "RUNNING")]


def is_queued(db: Database, job_id: str) -> bool:
    """PENDING and not held by a lane: waiting for the scheduler (a lane's input waits for its lane only)."""
    return bool(db.query("SELECT 1 FROM jobs WHERE job_id = ? AND status = 'PENDING' AND lane IS NULL", (job_id,)))


def recent_ids(db: Database, limit: int = 2000) -> list[str]:
    """The newest `limit` job ids, newest first."""
    return [job_id for (job_id,) in db.query("SELECT job_id FROM jobs ORDER BY seq DESC LIMIT ?", (limit,))]


def newest_first(
    db: Database,
    status: str | None = None,
    group_id: str | None = None,
    limit: int | None = None,
    outside_lanes: bool = False,
) -> list[tuple[Any, ...]]:
    """`outside_lanes` leaves out the map inputs a lane holds (a running one always has its lane): a poll
    that only settles job processes need not decode the rows of a map's hundreds of running inputs."""
    where: list[str] = ["lane IS NULL"] if outside_lanes else []
    params: list[Any] = []
    if status is not None:  # with a group, its index is the narrower one: `+` keeps SQLite off the status index
        where.append("+status = ?" if group_id is not None else "status = ?")
        params.append(status)
    if group_id is not None:
        where.append("group_id = ?")
        params.append(group_id)
    sql = f"SELECT {COLUMNS} FROM jobs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY seq DESC"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return db.query(sql, tuple(params))


def status_counts(db: Database) -> dict[str, int]:
    return dict(db.query("SELECT status, COUNT(*) FROM jobs GROUP BY status"))


def group_statuses(db: Database, group_id: str) -> list[tuple[str, str, float | None]]:
    """(job_id, status, finished_at) of every job of a batch."""
    return db.query("SELECT job_id, status, finished_at FROM jobs WHERE group_id = ?", (group_id,))


def active_in_pool(conn: sqlite3.Connection, pool: str) -> int:
    """How many jobs of `pool` are PENDING or RUNNING."""
    count: int = conn.execute(
        "SELECT COUNT(*) FROM jobs WHERE pool = ? AND status IN ('PENDING', 'RUNNING')", (pool,)
    ).fetchone()[0]
    return count


def any_queued(db: Database, pool: str | None = None) -> bool:
    """Whether a PENDING job not yet in a lane waits in the pool, or in any pool (a read, without the
    write lock)."""
    if pool is None:
        return bool(db.query("SELECT 1 FROM jobs WHERE status = 'PENDING' AND lane IS NULL LIMIT 1"))
    return bool(db.query("SELECT 1 FROM jobs WHERE pool = ? AND status = 'PENDING' AND lane IS NULL LIMIT 1", (pool,)))


def queue(conn: sqlite3.Connection, pool: str) -> Iterator[tuple[Any, ...]]:
    """The pool's PENDING jobs not yet in a lane, in submission order, read a page at a time: a claim stops
    at the first head that does not fit, and a map queues hundreds of rows behind it. Each page is read
    after the caller's writes, so a job the caller put in a lane meanwhile is not among the later ones."""
    last = -1
    while True:
        page = conn.execute(
            f"SELECT {COLUMNS} FROM jobs WHERE pool = ? AND status = 'PENDING' AND lane IS NULL AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (pool, last, _QUEUE_PAGE),
        ).fetchall()
        yield from page
        if len(page) < _QUEUE_PAGE:
            return
        last = page[-1][0]


def mark_running(conn: sqlite3.Connection, job_id: str, now: float) -> None:
    conn.execute("UPDATE jobs SET status = 'RUNNING', started_at = ? WHERE job_id = ?", (now, job_id))


def requeue_unlaunched(conn: sqlite3.Connection, job_id: str) -> bool:
    """A claimed job none of whose processes ran goes back to the queue; False if it has processes or ended."""
    return bool(
        conn.execute(
            "UPDATE jobs SET status = 'PENDING', started_at = NULL "
            "WHERE job_id = ? AND status = 'RUNNING' AND hosts IS NULL",
            (job_id,),
        ).rowcount
    )


def record_hosts(db: Database, job_id: str, hosts: list[dict[str, Any]]) -> None:
    db.write("UPDATE jobs SET hosts = ? WHERE job_id = ?", (json.dumps(hosts), job_id))


def forget_hosts(db: Database, job_id: str) -> None:
    """A running job's recorded hosts never ran: its launch is judged again from its records."""
    db.write("UPDATE jobs SET hosts = NULL WHERE job_id = ? AND status = 'RUNNING'", (job_id,))


def settle(
    conn: sqlite3.Connection, job_id: str, status: str, phase: str | None, detail: str | None, now: float
) -> bool:
    """Give a PENDING or RUNNING job its outcome; False if it had one already (a concurrent settler won).
    A job whose cancel was requested ends CANCELLED whatever its processes said: a settler that read the row
    before the request and then saw the processes the cancel killed must not record them as a failure."""
    return bool(
        conn.execute(
            "UPDATE jobs SET status = CASE WHEN cancel_requested THEN 'CANCELLED' ELSE ? END, "
            "phase = CASE WHEN cancel_requested THEN NULL ELSE ? END, "
            "detail = CASE WHEN cancel_requested THEN 'cancelled' ELSE ? END, finished_at = ? "
            "WHERE job_id = ? AND status IN ('PENDING', 'RUNNING')",
            (status, phase, detail, now, job_id),
        ).rowcount
    )


def request_cancel(db: Database, job_id: str, now: float) -> None:
    """Flag the job for cancellation and, if it is still PENDING, cancel it outright (one transaction)."""
    with db.transaction() as conn:
        conn.execute("UPDATE jobs SET cancel_requested = 1 WHERE job_id = ?", (job_id,))
        conn.execute(
            "UPDATE jobs SET status = 'CANCELLED', detail = 'cancelled', finished_at = ? "
            "WHERE job_id = ? AND status = 'PENDING'",
            (now, job_id),
        )


# -- batches (job_groups) ------------------------------------------------------------------------------


def insert_group(db: Database, group_id: str, max_concurrent: int | None, now: float, func: str | None = None) -> None:
    db.write(
        "INSERT INTO job_groups (group_id, max_concurrent, created_at, func) VALUES (?, ?, ?, ?)",
        (group_id, max_concurrent, now, func),
    )


def ensure_group(conn: sqlite3.Connection, group_id: str, now: float) -> None:
    """The batch's row, unlimited, unless it has one (a rebuilt job of a batch the store lost)."""
    conn.execute("INSERT OR IGNORE INTO job_groups (group_id, created_at) VALUES (?, ?)", (group_id, now))


def max_concurrent(conn: sqlite3.Connection, group_id: str) -> int | None:
    """The batch's concurrency limit (None: unlimited, or not a batch)."""
    row = conn.execute("SELECT max_concurrent FROM job_groups WHERE group_id = ?", (group_id,)).fetchone()
    return None if row is None else row[0]


def group_running(conn: sqlite3.Connection, group_id: str) -> int:
    """What counts against a batch's max_concurrent: its running jobs outside lanes and its open lanes."""
    jobs: int = conn.execute(
        "SELECT COUNT(*) FROM jobs WHERE group_id = ? AND +status = 'RUNNING' AND lane IS NULL", (group_id,)
    ).fetchone()[0]
    lanes: int = conn.execute(
        "SELECT COUNT(*) FROM lanes WHERE group_id = ? AND ended_at IS NULL", (group_id,)
    ).fetchone()[0]
    return jobs + lanes


# -- what changed since a poll, and pruning old history -----------------------------------------------


def changed_since(db: Database, after_seq: int, watched: list[str]) -> list[tuple[Any, ...]]:
    """Newest first: the jobs submitted after `after_seq`, every PENDING or RUNNING job, and the jobs of
    `watched` (the ones a poll last saw active, to learn how they ended). Each term is an index lookup, so
    a poll costs what is active, not the whole history."""
    rows = db.query(
        f"SELECT {COLUMNS} FROM jobs WHERE seq > ? OR status IN ('PENDING', 'RUNNING') "
        "OR job_id IN (SELECT value FROM json_each(?))",
        (after_seq, json.dumps(watched)),
    )
    return sorted(rows, key=lambda row: row[0], reverse=True)  # in SQL, ORDER BY would make it scan by seq


def prunes(db: Database) -> int:
    """How many prunes removed jobs from this store: a poll that saw another number lists afresh."""
    rows = db.query("SELECT value FROM settings WHERE key = 'jobs_prunes'")
    return int(rows[0][0]) if rows else 0


def oldest_finished(db: Database, before: float, limit: int) -> list[str]:
    """Up to `limit` jobs that finished before `before`, oldest first (through the `finished_at` index: the
    cost is what is returned, whatever the history holds). `+status` keeps SQLite off the status index,
    through which this read every finished job and sorted them, for each batch of a prune."""
    rows = db.query(
        "SELECT job_id FROM jobs WHERE finished_at < ? "
        "AND +status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') ORDER BY finished_at LIMIT ?",
        (before, limit),
    )
    return [job_id for (job_id,) in rows]


def delete_orphan_lanes(conn: sqlite3.Connection) -> list[str]:
    """Delete the ended lanes whose batch is gone; returns their directories. A lane still closing when its
    batch's last jobs were pruned kept its row (an open lane's process may still write its directory); this
    removes it at a later prune. Walks the ended lanes only (`lanes_by_end`), a few per map."""
    orphan = "ended_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM job_groups g WHERE g.group_id = lanes.group_id)"
    dirs = [d for (d,) in conn.execute(f"SELECT dir FROM lanes WHERE {orphan}")]
    conn.execute(f"DELETE FROM lanes WHERE {orphan}")
    return dirs


def delete_finished(conn: sqlite3.Connection, job_ids: list[str]) -> tuple[list[str], list[str]]:
    """Delete these jobs' rows (still finished: none came back to life meanwhile) and count the prune; a
    batch left without any job loses its row and its ended lanes' rows. Returns (those batches, the
    directories of those lanes)."""
    ids = json.dumps(job_ids)
    groups = [
        group
        for (group,) in conn.execute(
            "SELECT DISTINCT group_id FROM jobs "
            "WHERE group_id IS NOT NULL AND job_id IN (SELECT value FROM json_each(?))",
            (ids,),
        )
    ]
    conn.execute(
        "DELETE FROM jobs WHERE job_id IN (SELECT value FROM json_each(?)) "
        "AND +status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')",  # by id, not through every finished job
        (ids,),
    )
    conn.execute(
        "INSERT INTO settings (key, value) VALUES ('jobs_prunes', '1') "
        "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
    )
    empty = [
        g for g in groups if conn.execute("SELECT 1 FROM jobs WHERE group_id = ? LIMIT 1", (g,)).fetchone() is None
    ]
    lane_dirs: list[str] = []
    for group in empty:
        conn.execute("DELETE FROM job_groups WHERE group_id = ?", (group,))
        lane_dirs += [
            d for (d,) in conn.execute("SELECT dir FROM lanes WHERE group_id = ? AND ended_at IS NOT NULL", (group,))
        ]
        conn.execute("DELETE FROM lanes WHERE group_id = ? AND ended_at IS NOT NULL", (group,))
    return empty, lane_dirs
