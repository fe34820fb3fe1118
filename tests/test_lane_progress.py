"""What a look at a lane writes to the store, on a real store: an input's start and end read in one look
are one write with the same outcome as two looks; a cancelled input keeps its status; the queue is read a
page at a time and a page read after the caller's writes leaves out what the caller put in a lane; a row's
JSON is decoded when first asked for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core.backends.local import lanes
from kinetic_tui.core.backends.local.job_rows import JobRow
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.store import Store, jobs_repo, lanes_repo

GROUP = "grp-1"
LANE = "lane-1"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "state.db"))


def queue_inputs(store: Store, count: int, pool: str = "cpu") -> list[str]:
    ids = [f"job-{i:04d}" for i in range(count)]
    handles = [{"job_id": j, "pool": pool, "num_nodes": 1, "submitted_at": float(i)} for i, j in enumerate(ids)]
    with store.transaction() as conn:
        jobs_repo.insert_pending(conn, [(h, {"job_dir": "/tmp", "lane_input": {}}) for h in handles], GROUP)
    return ids


def put_in_lane(store: Store, ids: list[str]) -> None:
    with store.transaction() as conn:
        lanes_repo.assign_inputs(conn, LANE, ids)


def start(job_id: str, at: float, log: int) -> dict[str, Any]:
    return {"job": job_id, "start": at, "log": log}


def end(job_id: str, at: float, log: int, result_at: int, ok: bool = True) -> dict[str, Any]:
    outcome = {"success": ok, "phase": None if ok else "execute", "error_type": "ValueError", "error": "bad"}
    return {"job": job_id, "end": at, "log": log, "at": result_at, "size": 7, **outcome}


def apply(store: Store, events: list[dict[str, Any]]) -> list[str]:
    with store.transaction() as conn:
        return lanes._apply(conn, events)


def row(store: Store, job_id: str) -> JobRow:
    values = jobs_repo.get(store, job_id)
    assert values is not None
    return JobRow.from_values(values)


def outcome(r: JobRow) -> tuple[Any, ...]:
    return (r.status, r.phase, r.detail, r.started_at, r.finished_at, r.log_start, r.log_end, r.result_at)


def test_a_start_and_end_read_in_one_look_write_what_two_looks_write(store: Store) -> None:
    one, two = queue_inputs(store, 2)
    put_in_lane(store, [one, two])
    events = [start(one, 10.0, 0), end(one, 11.0, 40, 0), start(two, 12.0, 40), end(two, 13.0, 90, 7, ok=False)]
    assert apply(store, events) == [one, two]
    together = [outcome(row(store, job_id)) for job_id in (one, two)]

    again = Store(str(Path(store.path).with_name("other.db")))
    queue_inputs(again, 2)
    put_in_lane(again, [one, two])
    settled = [apply(again, [event]) for event in events]
    assert settled == [[], [one], [], [two]]
    assert [outcome(row(again, job_id)) for job_id in (one, two)] == together
    assert together[0] == (JobStatus.SUCCEEDED, None, None, 10.0, 11.0, 0, 40, 0)
    assert together[1] == (JobStatus.FAILED, "execute", "ValueError: bad", 12.0, 13.0, 40, 90, 7)


def test_an_input_cancelled_while_it_ran_keeps_its_status_and_gets_its_offsets(store: Store) -> None:
    (job_id,) = queue_inputs(store, 1)
    put_in_lane(store, [job_id])
    with store.transaction() as conn:
        conn.execute(
            "UPDATE jobs SET status = 'CANCELLED', detail = 'cancelled', cancel_requested = 1 WHERE job_id = ?",
            (job_id,),
        )
    assert apply(store, [start(job_id, 5.0, 3), end(job_id, 6.0, 9, 14)]) == []
    r = row(store, job_id)
    assert (r.status, r.detail, r.started_at, r.log_start, r.log_end, r.result_at) == (
        JobStatus.CANCELLED,
        "cancelled",
        5.0,
        3,
        9,
        14,
    )


def test_a_start_without_its_end_marks_the_input_running_and_a_skip_ends_its_log_range(store: Store) -> None:
    running, skipped = queue_inputs(store, 2)
    put_in_lane(store, [running, skipped])
    assert apply(store, [start(skipped, 1.0, 5), {"job": skipped, "skip": 1.5}, start(running, 2.0, 5)]) == []
    assert (row(store, running).status, row(store, running).log_start) == (JobStatus.RUNNING, 5)
    assert (row(store, skipped).log_start, row(store, skipped).log_end) == (5, 5)


def test_the_queue_is_read_in_pages_that_leave_out_what_the_walk_put_in_a_lane(store: Store) -> None:
    ids = queue_inputs(store, 70)
    seen = []
    with store.transaction() as conn:
        for values in jobs_repo.queue(conn, "cpu"):
            seen.append(values[1])
            if len(seen) == 1:  # a lane takes the next 40 while the walk is on its first page
                lanes_repo.assign_inputs(conn, LANE, ids[1:41])
    assert seen == ids[:32] + ids[41:]  # the first page was read before the lane; later pages after it


def test_a_row_decodes_its_json_when_first_asked_and_compares_by_its_state(store: Store) -> None:
    (job_id,) = queue_inputs(store, 1)
    values = jobs_repo.get(store, job_id)
    assert values is not None
    fresh, asked = JobRow.from_values(values), JobRow.from_values(values)
    assert isinstance(fresh.handle_data, str)
    assert asked.handle["job_id"] == job_id and asked.launch["job_dir"] == "/tmp"
    assert isinstance(asked.handle_data, dict)
    assert fresh == asked


def test_json_lines_decodes_each_line_as_one_document() -> None:
    docs = [{"job": "job-1", "start": 1.5}, {"text": "two\nlines, a comma, ] and ["}, [], "x"]
    data = "\n".join(json.dumps(doc) for doc in docs).encode() + b"\n"
    assert lanes.json_lines(data) == docs
    assert lanes.json_lines(b"") == [] and lanes.json_lines(b"\n") == []
