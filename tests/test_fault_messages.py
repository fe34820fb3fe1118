"""Faults are reported as what they are, where they are, and what to do: an unreadable result of a job
that succeeded, and a database the file system refuses."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.console import Console
from kinetic_tui.core.jobs import RemoteJobError
from kinetic_tui.core.store import Store, StoreError
from tests.lifecycle.backend_projects import jobs, reap_jobs, user_project


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"", "is empty; run it again"), (b"\x80\x05 not a pickle", "is unreadable: UnpicklingError")],
)
def test_a_succeeded_jobs_bad_result_file_is_named_not_called_a_failure(jobs, kinetic_home, content, problem):
    handle = kinetic.run()(jobs.add).run_async(2, 3)
    assert handle.result(timeout=30, cleanup=False) == 5
    (result_file,) = kinetic_home.glob(f"local/buckets/*/{handle.job_id}/result.pkl")
    result_file.write_bytes(content)
    expected = f"job {handle.job_id} succeeded but its result file {result_file} {problem}"
    with pytest.raises(RemoteJobError) as raised:
        handle.result(timeout=30)
    assert str(raised.value).startswith(expected)
    with pytest.raises(RemoteJobError) as raised:
        asyncio.run(Console(home=kinetic_home).jobs.result(handle.job_id))
    assert str(raised.value).startswith(expected) and "failed in phase" not in str(raised.value)


class _FailingConnection:
    """A connection whose statements starting with `when` raise `error`; everything else is the real one."""

    def __init__(self, conn: sqlite3.Connection, when: str, error: sqlite3.Error) -> None:
        self.conn, self.when, self.error = conn, when, error

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith(self.when):
            raise self.error
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


@pytest.mark.parametrize(
    ("text", "problem", "fix"),
    [
        ("attempt to write a readonly database", "cannot be written", "writable by this user"),
        ("database or disk is full", "cannot grow: its disk is full", "free space on the disk holding"),
        ("disk I/O error", "could not be read or written", "restore state.db from a backup"),
    ],
)
@pytest.mark.parametrize("when", ["COMMIT", "SELECT"])
def test_file_system_refusals_name_the_database_and_the_fix(tmp_path: Path, monkeypatch, text, problem, fix, when):
    db = tmp_path / "state.db"
    store = Store(db)
    try:
        with store.transaction() as conn:
            conn.execute("CREATE TABLE t (x INTEGER)")
        real = store.connection
        monkeypatch.setattr(store._local, "conn", _FailingConnection(real, when, sqlite3.OperationalError(text)))
        with pytest.raises(StoreError) as raised:
            if when == "COMMIT":
                store.write("INSERT INTO t VALUES (1)")
            else:
                store.query("SELECT x FROM t")
        message = str(raised.value)
        assert message.startswith(f"{db} {problem} ({text}); ") and fix in message
        assert "\n" not in message
        store._local.conn = real  # not monkeypatch.undo(): that would also undo the suite's KINETIC_HOME
        assert store.query("SELECT count(*) FROM t") == [(0,)]  # the failed commit was rolled back
    finally:
        store.close()


def test_an_unrelated_operational_error_stays_a_bug(tmp_path: Path):
    with Store(tmp_path / "state.db") as store, pytest.raises(sqlite3.OperationalError, match="no such table"):
        store.query("SELECT * FROM nowhere")
