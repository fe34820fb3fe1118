"""Claiming nodes for queued local jobs: the queue walk, in one `BEGIN IMMEDIATE` transaction.

Scheduling is shared by every process that touches the workspace (the console, the CLI, a client waiting
on a handle, the reaper of a finished job): whoever looks first does the work. The claim re-reads the
pool's usage under the write lock, so no job starts twice and no pool is ever over-committed, however
many processes schedule at once. Each claim records who claims (launcher.write_claim), so that once its
launcher dies any process can tell whether the job started. Queue order is strict FIFO per pool: a head
job that does not fit blocks the jobs behind it, so a big slice is never starved by small ones. A map
input at the head opens a lane (lanes.py) that takes a chunk of its batch and holds one node.
"""

from __future__ import annotations

import sqlite3
import time

from kinetic_tui.core.backends.local import lanes, launcher
from kinetic_tui.core.backends.local.job_rows import JobRow
from kinetic_tui.core.backends.local.volumes import lock_volumes
from kinetic_tui.core.store import Store, jobs_repo, pools_repo


def claim(store: Store, pool_name: str | None) -> tuple[list[JobRow], list[lanes.Assignment]]:
    """Walk each pool's queue (or `pool_name`'s) in order: a job that fits is claimed RUNNING; a map input
    at the head opens a lane. The first head that does not fit blocks the rest. Launching is the
    caller's, after the commit: a start may take a while and must not hold the write lock."""
    now = time.time()
    claimed: list[JobRow] = []
    assigned: list[lanes.Assignment] = []
    if pool_name is not None and not jobs_repo.any_queued(store, pool_name):
        return claimed, assigned  # no write lock for an empty queue: whoever queues a job schedules it
    with store.transaction() as conn:
        for name, capacity in pools_repo.capacities(conn, pool_name):
            used = pools_repo.nodes_in_use(conn, name)
            taken: set[str] = set()
            for values in jobs_repo.queue(conn, name):
                if values[1] in taken:  # a lane opened in this pass took it (checked before decoding the row)
                    continue
                row = JobRow.from_values(values)
                room = _group_room(conn, row.group_id)
                if used + row.nodes > capacity or room == 0:
                    break
                if row.in_lane and row.group_id is not None:
                    free = capacity - used if room is None else min(capacity - used, room)
                    assignment = lanes.assign(conn, row.group_id, name, free, now)
                    taken.update(job_id for job_id, _ in assignment.inputs)
                    assigned.append(assignment)
                    used += 1
                    continue
                if not lock_volumes(conn, row):
                    break
                launcher.write_claim(row.job_dir)  # under the write lock, so no claim of the job interleaves
                jobs_repo.mark_running(conn, row.job_id, now)
                used += row.nodes
                claimed.append(row)
    return claimed, assigned


def _group_room(conn: sqlite3.Connection, group_id: str | None) -> int | None:
    """How many more of the group may run (None: no limit)."""
    if group_id is None:
        return None
    limit = jobs_repo.max_concurrent(conn, group_id)
    if limit is None:
        return None
    return max(limit - jobs_repo.group_running(conn, group_id), 0)
