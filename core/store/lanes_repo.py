"""Map lanes in state.db (`lanes`) and what a lane's progress writes onto its inputs' job rows.

Functions that take `conn` run inside the caller's transaction: opening a lane is part of a claim, and
applying a lane's progress advances `lanes.progress` in the same transaction as the job rows it settles,
so each progress line counts once however many processes observe. Lanes come back as tuples in `COLUMNS`
order; the backend decodes them.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, NamedTuple

from kinetic_tui.core.store.db import Database
from kinetic_tui.core.store.jobs_repo import matching_ids

COLUMNS = "lane_id, pool, group_id, dir, hosts, started_at, progress, ended_at"


def open_lanes(db: Database, group_id: str | None = None) -> list[tuple[Any, ...]]:
    """Lanes not closed yet, of every batch or of one."""
    sql = f"SELECT {COLUMNS} FROM lanes WHERE ended_at IS NULL"
    params: tuple[Any, ...] = ()
    if group_id is not None:
        sql, params = sql + " AND group_id = ?", (group_id,)
    return db.query(sql, params)


def any_open(db: Database) -> bool:
    return bool(db.query("SELECT 1 FROM lanes WHERE ended_at IS NULL LIMIT 1"))


def get(db: Database, lane_id: str) -> tuple[Any, ...] | None:
    rows = db.query(f"SELECT {COLUMNS} FROM lanes WHERE lane_id = ?", (lane_id,))
    return rows[0] if rows else None


def current(conn: sqlite3.Connection, lane_id: str) -> tuple[Any, ...]:
    """The lane as the caller's transaction sees it."""
    row: tuple[Any, ...] = conn.execute(f"SELECT {COLUMNS} FROM lanes WHERE lane_id = ?", (lane_id,)).fetchone()
    return row


# -- opening -------------------------------------------------------------------------------------------


def unassigned_count(conn: sqlite3.Connection, group_id: str) -> int:
    """How many of the batch's PENDING inputs no lane holds. `+status` keeps SQLite on the group's index: on
    the status index this read grows with every queued job."""
    count: int = conn.execute(
        "SELECT COUNT(*) FROM jobs WHERE group_id = ? AND +status = 'PENDING' AND lane IS NULL", (group_id,)
    ).fetchone()[0]
    return count


def unassigned_inputs(conn: sqlite3.Connection, group_id: str, limit: int) -> list[tuple[str, str]]:
    """(job_id, launch JSON) of the first `limit` of the batch's PENDING inputs no lane holds, in submission
    order (a lane takes a chunk: the rest stay unread)."""
    return conn.execute(
        "SELECT job_id, launch FROM jobs WHERE group_id = ? AND +status = 'PENDING' AND lane IS NULL "
        "ORDER BY seq LIMIT ?",
        (group_id, limit),
    ).fetchall()


def mean_input_seconds(conn: sqlite3.Connection, group_id: str) -> float | None:
    """How long the batch's inputs that succeeded in lanes took on average; before the first, how long its
    function's took in the last batch that measured them (None if none did). `+status` keeps SQLite on the
    group's index: on the status index it read every job that ever succeeded, so each lane a map opened
    cost more as the workspace's history grew."""
    mean: float | None = conn.execute(
        "SELECT AVG(finished_at - started_at) FROM jobs WHERE group_id = ? AND lane IS NOT NULL "
        "AND +status = 'SUCCEEDED'",
        (group_id,),
    ).fetchone()[0]
    if mean is None:
        row = conn.execute(
            "SELECT t.mean_seconds FROM job_groups g JOIN input_timings t ON t.func = g.func WHERE g.group_id = ?",
            (group_id,),
        ).fetchone()
        mean = None if row is None else row[0]
    return mean


def record_input_seconds(conn: sqlite3.Connection, group_id: str, now: float) -> None:
    """The batch's mean input time so far becomes its function's (what its next batch starts from)."""
    conn.execute(
        "INSERT INTO input_timings (func, mean_seconds, measured_at) "
        "SELECT g.func, AVG(j.finished_at - j.started_at), ? FROM job_groups g JOIN jobs j ON j.group_id = g.group_id "
        "WHERE g.group_id = ? AND g.func IS NOT NULL AND j.lane IS NOT NULL AND +j.status = 'SUCCEEDED' "
        "GROUP BY g.func "
        "ON CONFLICT (func) DO UPDATE SET mean_seconds = excluded.mean_seconds, measured_at = excluded.measured_at",
        (now, group_id),
    )


def held_inputs(conn: sqlite3.Connection, group_id: str) -> int:
    """How many of the batch's inputs its open lanes hold and have not ended (as far as their applied
    progress tells)."""
    held: int = conn.execute(
        "SELECT COUNT(*) FROM jobs WHERE group_id = ? AND lane IS NOT NULL AND +status IN ('PENDING', 'RUNNING')",
        (group_id,),
    ).fetchone()[0]
    return held


def insert(conn: sqlite3.Connection, lane_id: str, pool: str, group_id: str, directory: str, now: float) -> None:
    conn.execute(
        "INSERT INTO lanes (lane_id, pool, group_id, dir, started_at) VALUES (?, ?, ?, ?, ?)",
        (lane_id, pool, group_id, directory, now),
    )


def assign_inputs(conn: sqlite3.Connection, lane_id: str, job_ids: list[str]) -> None:
    conn.executemany("UPDATE jobs SET lane = ? WHERE job_id = ?", [(lane_id, job_id) for job_id in job_ids])


def record_hosts(db: Database, lane_id: str, hosts: list[dict[str, Any]]) -> None:
    db.write("UPDATE lanes SET hosts = ? WHERE lane_id = ?", (json.dumps(hosts), lane_id))


def fail_launch(db: Database, lane_id: str, detail: str, now: float) -> None:
    """The lane's process could not start: its inputs fail and the lane closes, in one transaction."""
    with db.transaction() as conn:
        conn.execute(
            "UPDATE jobs SET status = 'FAILED', phase = 'launch', detail = ?, finished_at = ? "
            "WHERE lane = ? AND +status = 'PENDING'",
            (detail, now, lane_id),
        )
        conn.execute("UPDATE lanes SET ended_at = ? WHERE lane_id = ?", (now, lane_id))


def give_back(db: Database, lane_id: str, now: float) -> None:
    """The lane's process never started through no fault of its inputs: they go back to the queue for another
    lane, and the lane closes, in one transaction."""
    with db.transaction() as conn:
        requeue_unstarted(conn, lane_id)
        close(conn, lane_id, now)


# -- progress ------------------------------------------------------------------------------------------


def input_started(conn: sqlite3.Connection, job_id: str, log_at: int, started_at: float) -> None:
    conn.execute(
        "UPDATE jobs SET log_start = ?, started_at = COALESCE(started_at, ?), "
        "status = CASE status WHEN 'PENDING' THEN 'RUNNING' ELSE status END WHERE job_id = ?",
        (log_at, started_at, job_id),
    )


def input_skipped(conn: sqlite3.Connection, job_id: str) -> None:
    conn.execute("UPDATE jobs SET log_end = log_start WHERE job_id = ?", (job_id,))


class Ran(NamedTuple):
    """An input a lane ended: its outcome and where its log and result are. `log_start` and `started_at`
    are None when its start was applied by an earlier look."""

    job_id: str
    status: str
    phase: str | None
    detail: str | None
    ended_at: float
    log_end: int
    result_at: int
    result_size: int
    log_start: int | None = None
    started_at: float | None = None


def inputs_ended(conn: sqlite3.Connection, ran: list[Ran]) -> list[str]:
    """Settle the inputs (CANCELLED where a cancel was requested) in one write each; returns the ids this
    settled. An input settled already (cancelled while it ran) keeps its status but still records where
    its output is."""
    ids = [r.job_id for r in ran]
    unsettled = matching_ids(conn, ids, "status IN ('PENDING', 'RUNNING')")
    conn.executemany(
        "UPDATE jobs SET status = CASE WHEN cancel_requested THEN 'CANCELLED' ELSE ? END, phase = ?, "
        "detail = CASE WHEN cancel_requested THEN 'cancelled' ELSE ? END, finished_at = ?, log_end = ?, "
        "result_at = ?, result_size = ?, log_start = COALESCE(?, log_start), "
        "started_at = COALESCE(started_at, ?) WHERE job_id = ?",
        [(*r[1:], r.job_id) for r in ran if r.job_id in unsettled],
    )
    conn.executemany(
        "UPDATE jobs SET log_end = ?, result_at = ?, result_size = ?, log_start = COALESCE(?, log_start), "
        "started_at = COALESCE(started_at, ?) WHERE job_id = ?",
        [(*r[5:], r.job_id) for r in ran if r.job_id not in unsettled],
    )
    return [job_id for job_id in ids if job_id in unsettled]


def set_progress(conn: sqlite3.Connection, lane_id: str, offset: int) -> None:
    conn.execute("UPDATE lanes SET progress = ? WHERE lane_id = ?", (offset, lane_id))


# -- closing -------------------------------------------------------------------------------------------


def started_count(conn: sqlite3.Connection, lane_id: str) -> int:
    count: int = conn.execute(
        "SELECT COUNT(*) FROM jobs WHERE lane = ? AND log_start IS NOT NULL", (lane_id,)
    ).fetchone()[0]
    return count


def settle_in_flight(conn: sqlite3.Connection, lane_id: str, detail: str, now: float) -> list[str]:
    """Inputs the lane had started but not finished: FAILED (phase lost) or, if asked, CANCELLED. Returns
    their ids."""
    inflight = conn.execute(
        "SELECT job_id FROM jobs WHERE lane = ? AND log_start IS NOT NULL AND log_end IS NULL "
        "AND +status IN ('PENDING', 'RUNNING')",
        (lane_id,),
    ).fetchall()
    conn.execute(
        "UPDATE jobs SET status = CASE WHEN cancel_requested THEN 'CANCELLED' ELSE 'FAILED' END, "
        "phase = CASE WHEN cancel_requested THEN NULL ELSE 'lost' END, "
        "detail = CASE WHEN cancel_requested THEN 'cancelled' ELSE ? END, finished_at = ? "
        "WHERE lane = ? AND log_start IS NOT NULL AND log_end IS NULL AND +status IN ('PENDING', 'RUNNING')",
        (detail, now, lane_id),
    )
    return [job_id for (job_id,) in inflight]


def requeue_unstarted(conn: sqlite3.Connection, lane_id: str) -> None:
    """Give the inputs the lane never reached back to the queue, for another lane."""
    conn.execute("UPDATE jobs SET lane = NULL WHERE lane = ? AND log_start IS NULL AND +status = 'PENDING'", (lane_id,))


def fail_unstarted(conn: sqlite3.Connection, lane_id: str, detail: str, now: float) -> list[str]:
    """FAIL (phase lost) the lane's inputs still PENDING; returns their ids."""
    unstarted = conn.execute("SELECT job_id FROM jobs WHERE lane = ? AND +status = 'PENDING'", (lane_id,)).fetchall()
    conn.execute(
        "UPDATE jobs SET status = 'FAILED', phase = 'lost', detail = ?, finished_at = ? "
        "WHERE lane = ? AND +status = 'PENDING'",
        (detail, now, lane_id),
    )
    return [job_id for (job_id,) in unstarted]


def close(conn: sqlite3.Connection, lane_id: str, now: float) -> None:
    conn.execute("UPDATE lanes SET ended_at = ? WHERE lane_id = ?", (now, lane_id))
