"""A missing or empty state.db beside job data is refused with the fix, never taken as a new workspace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.store import Store, StoreError
from tests.lifecycle.backend_projects import jobs, reap_jobs, user_project

CONSOLE = "import sys; from kinetic_tui.app import run_app; sys.exit(run_app(home=sys.argv[1]))"


def _tree(home: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns) for p in home.rglob("*")}


def _fresh_process(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KINETIC_HOME": str(home)}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)


def _until_trash_emptied(trash: Path) -> None:
    """Settling the job put its working directory in the trash, which this process empties in a background
    thread; the test's snapshot of the home is taken after the last removal changed the trash."""
    deadline = time.monotonic() + 30
    while trash.exists() and any(trash.iterdir()):
        assert time.monotonic() < deadline, f"{trash} still holds {list(trash.iterdir())}"
        time.sleep(0.01)


@pytest.fixture
def lost_store(jobs, kinetic_home: Path, tmp_path: Path, request) -> Iterator[tuple[Path, str]]:
    """A home that ran a job, whose state.db was then truncated (or deleted); restored afterwards so the
    teardown can stop what the job started."""
    job_id = kinetic.run()(jobs.add).run_async(2, 3).job_id
    assert kinetic.attach(job_id).result(timeout=30) == 5
    _until_trash_emptied(kinetic_home / "local" / "trash")
    db = kinetic_home / "state.db"
    backup = tmp_path / "state.db.bak"
    with Store(db) as store:  # fold the WAL into the file so the copy is the whole database
        store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copyfile(db, backup)
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if request.param == "empty":
        db.write_bytes(b"")
    else:
        db.unlink()
    yield db, request.param
    db.unlink(missing_ok=True)
    shutil.copyfile(backup, db)


@pytest.mark.parametrize("lost_store", ["empty", "missing"], indirect=True)
def test_cli_script_and_console_refuse_a_lost_store_and_change_nothing(lost_store, kinetic_home, tmp_path):
    db, how = lost_store
    before = _tree(kinetic_home)
    script = tmp_path / "list.kn"
    script.write_text("jobs\n")
    runs = {
        "cli": _fresh_process(kinetic_home, "kinetic-tui", "jobs", "list"),
        "script": _fresh_process(kinetic_home, "kinetic-tui", "--script", str(script)),
        "console": _fresh_process(kinetic_home, sys.executable, "-c", CONSOLE, str(kinetic_home)),
    }
    state = "empty (0 bytes)" if how == "empty" else "missing"
    for name, run in runs.items():
        assert run.returncode == 1, (name, run.stdout, run.stderr)
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in run.stderr, (name, run.stderr)
        assert f"{db} is {state} but this home holds job data" in lines[0], (name, lines)
        assert "restore state.db from a backup" in lines[0]
    assert _tree(kinetic_home) == before  # state.db stays as it was, the job's directories stay
    assert (db.stat().st_size == 0) if how == "empty" else not db.exists()


def test_an_empty_file_in_a_home_without_job_data_is_a_new_workspace(tmp_path):
    db = tmp_path / "state.db"
    db.write_bytes(b"")
    with Store(db) as store:
        assert store.schema_version() > 0


def test_the_refusal_names_the_job_data_it_found(tmp_path):
    handle = tmp_path / "local" / "buckets" / "b" / "job-0123abcd" / "handle.json"
    handle.parent.mkdir(parents=True)
    handle.write_text("{}")
    with pytest.raises(StoreError, match=f"state.db is missing but this home holds job data \\({handle}\\)"):
        Store(tmp_path / "state.db")
    assert not (tmp_path / "state.db").exists()
