"""Reads that must cost what they return, not the workspace's history: their query plans stay off the status
index, through which SQLite would visit every job that ever succeeded (a prune's batch, a lane's opening,
a batch's listing). Each repository function runs on a real store while its statements are traced; each
statement is then planned with EXPLAIN QUERY PLAN."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kinetic_tui.core.store import Store, jobs_repo, lanes_repo

HISTORY_SIZED = "jobs_by_status"


def plans(store: Store, call: Callable[[], object]) -> list[str]:
    """The plan of every SELECT, UPDATE or DELETE that `call` ran on this thread's connection."""
    conn = store.connection
    ran: list[str] = []
    conn.set_trace_callback(ran.append)
    try:
        call()
    finally:
        conn.set_trace_callback(None)
    statements = [sql for sql in ran if sql.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE"))]
    assert statements, "the call ran no statement"
    return [" | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)) for sql in statements]


def in_transaction(store: Store, fn: Callable[..., object], *args: object) -> Callable[[], object]:
    def call() -> object:
        with store.transaction() as conn:
            return fn(conn, *args)

    return call


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "state.db"))


@pytest.mark.parametrize(
    "name",
    [
        "oldest finished (a prune's batch)",
        "delete finished (a prune's batch)",
        "a batch's jobs of one status",
        "a batch's running jobs",
        "a lane opening: the batch's mean input time",
        "a lane opening: the batch's first inputs",
        "a lane opening: how many inputs wait",
        "a lane opening: what its lanes hold",
        "a lane's unstarted inputs failed",
        "a lane's unstarted inputs given back",
        "a lane's in-flight inputs settled",
    ],
)
def test_reads_by_batch_lane_or_age_stay_off_the_status_index(store: Store, name: str) -> None:
    calls: dict[str, Callable[[], object]] = {
        "oldest finished (a prune's batch)": lambda: jobs_repo.oldest_finished(store, 1e12, 500),
        "delete finished (a prune's batch)": in_transaction(store, jobs_repo.delete_finished, ["j-1", "j-2"]),
        "a batch's jobs of one status": lambda: jobs_repo.newest_first(store, "SUCCEEDED", "grp-1", 50),
        "a batch's running jobs": in_transaction(store, jobs_repo.group_running, "grp-1"),
        "a lane opening: the batch's mean input time": in_transaction(store, lanes_repo.mean_input_seconds, "grp-1"),
        "a lane opening: the batch's first inputs": in_transaction(store, lanes_repo.unassigned_inputs, "grp-1", 9),
        "a lane opening: how many inputs wait": in_transaction(store, lanes_repo.unassigned_count, "grp-1"),
        "a lane opening: what its lanes hold": in_transaction(store, lanes_repo.held_inputs, "grp-1"),
        "a lane's unstarted inputs failed": in_transaction(store, lanes_repo.fail_unstarted, "lane-1", "lost", 1.0),
        "a lane's unstarted inputs given back": in_transaction(store, lanes_repo.requeue_unstarted, "lane-1"),
        "a lane's in-flight inputs settled": in_transaction(store, lanes_repo.settle_in_flight, "lane-1", "lost", 1.0),
    }
    found = plans(store, calls[name])
    assert not [plan for plan in found if HISTORY_SIZED in plan], found


def test_the_plans_are_read_from_the_statements_that_ran(store: Store) -> None:
    """The check itself can fail: a listing of one status with no batch is meant to use the status index."""
    found = plans(store, lambda: jobs_repo.newest_first(store, "PENDING", None, 50))
    assert any(HISTORY_SIZED in plan for plan in found), found
