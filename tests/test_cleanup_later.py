"""A blocking call hands back its value before the job's inputs are removed (core/cleanup_later.py): the
removal runs in the home it was queued in, while the next call waits, after DELAY in the cleanup thread, or
before the process exits; a failure is a warning. `result(cleanup=True)` still removes before returning."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType

import pytest

from kinetic_tui.core import cleanup_later
from kinetic_tui.core.paths import home_path, using_home
from tests.lifecycle.run_projects import load_module, make_project

TASKS = """
import kinetic_tui as kinetic


@kinetic.run()
def square(x):
    return x * x
"""


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    project = make_project(tmp_path / "proj", {"kt_later/__init__.py": "", "kt_later/tasks.py": TASKS})
    return load_module(monkeypatch, project, "kt_later.tasks")


def inputs_of(home: Path, job_id: str) -> list[Path]:
    """What cleanup removes: the uploaded payload and archive, and the working directory."""
    found = [*(home / "local" / "buckets").glob(f"*/{job_id}/payload.pkl")]
    found += (home / "local" / "buckets").glob(f"*/{job_id}/context.zip")
    return found + [p for p in [home / "local" / "jobs" / job_id / "work"] if p.exists()]


def last_job(home: Path) -> str:
    return max((home / "local" / "jobs").iterdir(), key=lambda p: p.stat().st_mtime).name


def test_a_call_returns_first_and_its_inputs_go_when_the_next_call_waits(tasks: ModuleType, kinetic_home: Path) -> None:
    cleanup_later.DELAY, delay = 60.0, cleanup_later.DELAY  # only the next call's wait may take it
    try:
        assert tasks.square(3) == 9
        first = last_job(kinetic_home)
        assert inputs_of(kinetic_home, first)  # handed back before its inputs were removed
        assert tasks.square(4) == 16  # its wait removed the first call's inputs
        assert inputs_of(kinetic_home, first) == []
        assert inputs_of(kinetic_home, last_job(kinetic_home))
    finally:
        cleanup_later.DELAY = delay
    assert cleanup_later.drain()
    assert inputs_of(kinetic_home, last_job(kinetic_home)) == []
    assert (kinetic_home / "local" / "buckets").glob("*/*/result.pkl")  # the result stays


def test_the_cleanup_thread_takes_what_no_wait_took(tasks: ModuleType, kinetic_home: Path) -> None:
    assert tasks.square(5) == 25
    job_id = last_job(kinetic_home)
    deadline = time.monotonic() + 10 + cleanup_later.DELAY
    while inputs_of(kinetic_home, job_id) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert inputs_of(kinetic_home, job_id) == []


def test_a_cleanup_runs_in_the_home_it_was_queued_in(tmp_path: Path) -> None:
    seen = []
    with using_home(tmp_path / "queued-here"):
        cleanup_later.later(lambda: seen.append(home_path()))
    with using_home(tmp_path / "elsewhere"):
        cleanup_later.run_pending()
    assert seen == [tmp_path / "queued-here"]


def test_a_failing_cleanup_is_a_warning_and_the_rest_still_run() -> None:
    ran = []

    def broken() -> None:
        raise OSError("disk gone")

    cleanup_later.later(broken)
    cleanup_later.later(lambda: ran.append(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cleanup_later.run_pending()
    assert ran == [1]
    assert [str(w.message) for w in caught] == ["cleanup after a job's result: OSError: disk gone"]


EXITING = """
import sys
sys.path.insert(0, sys.argv[1])
from kt_later import tasks
print(tasks.square(6), flush=True)
"""


def test_a_script_that_exits_right_after_a_call_leaves_no_inputs(tasks: ModuleType, kinetic_home: Path) -> None:
    project = Path(tasks.__file__).parent.parent
    run = subprocess.run([sys.executable, "-c", EXITING, str(project)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "36"
    assert inputs_of(kinetic_home, last_job(kinetic_home)) == []
