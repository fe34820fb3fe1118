"""A run never holds the workspace and outlives its client: commands from other processes never wait on it,
a killed driver is picked up again, and cancel settles it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local.workspace import store as workspace_store
from kinetic_tui.core.supervisor import process as supervisor
from tests.pipelines.conftest import marks, release, script

CLI = str(Path(sys.executable).with_name("kinetic-tui"))
COMMANDS = [
    ["jobs", "list"],
    ["pools"],
    ["pipelines"],
    ["pool", "add", "extra{i}", "--accelerator", "v5e-2x2", "--nodes", "1"],
    ["pool", "remove", "extra{i}", "--yes"],
]


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _job_finished(name: str) -> bool:
    """The job's status as a handle sees it (a look settles a job that ended while nobody drove it)."""
    rows = workspace_store().query("SELECT job_id FROM jobs WHERE json_extract(handle, '$.display_name') = ?", (name,))
    return bool(rows) and kinetic.attach(rows[0][0]).status().value == "SUCCEEDED"


def test_twenty_commands_from_another_process_never_wait_for_the_write_lock_while_a_step_runs(
    project, tmp_path, monkeypatch
) -> None:
    code, records = script("pipeline register pipe_user:slow\npipeline run slow --detach\n")
    assert code == 0 and records[1]["result"]["status"] == "Running"
    _wait_for(lambda: marks("wait"))  # the step's job is running now
    log = tmp_path / "lock-waits.log"
    env = {**os.environ, "KINETIC_LOCK_LOG": str(log)}
    started = time.monotonic()
    for i in range(20):
        argv = [part.format(i=i // len(COMMANDS)) for part in COMMANDS[i % len(COMMANDS)]]
        done = subprocess.run([CLI, *argv], env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, (argv, done.stderr)
    store = workspace_store()
    assert store.pipelines.runs("slow")[-1].run.status.value == "Running", "the commands ran while the step ran"
    # A transaction held across the step would keep the lock until `release`, after these commands, so a
    # command would wait out its whole busy timeout; a brief wait is another short transaction (the driver's
    # own bookkeeping) and proves nothing is held across user code.
    waits = [float(line.split()[1]) for line in log.read_text().splitlines()] if log.exists() else []
    assert all(wait < 1.0 for wait in waits), waits
    print(f"20 commands in {time.monotonic() - started:.2f} s while the step ran")
    release("wait")
    code, records = script("pipeline resume slow\n")
    assert code == 0 and records[0]["result"]["status"] == "Succeeded"


def test_a_killed_driver_is_picked_up_and_settles_a_step_that_finished_meanwhile_with_the_code_of_run_start(
    project, kinetic_home, monkeypatch
) -> None:
    code, records = script("pipeline register pipe_user:chained\npipeline run chained --detach\n")
    assert code == 0
    _wait_for(lambda: marks("first"))
    _wait_for(lambda: (supervisor.running(kinetic_home) or 0) > 0)  # 0: still starting (never kill pid 0)
    pid = supervisor.running(kinetic_home)
    assert pid is not None and pid > 1
    os.kill(pid, signal.SIGKILL)  # the driver dies while the step's job runs
    # gone; any process of ours that opens the home may already have brought a new driver back
    _wait_for(lambda: supervisor.running(kinetic_home) != pid)
    module = project / "pipe_user.py"
    module.write_text(module.read_text().replace('"version": "old"', '"version": "new"'))  # edited meanwhile
    release("first")  # the step's job finishes with no driver alive
    _wait_for(lambda: _job_finished("chained#1 first"))
    code, records = script("pipeline resume chained\n")
    assert code == 0, records
    run = records[0]["result"]
    assert run["status"] == "Succeeded" and run["executed"] == ["first", "second"]
    assert len(marks("first")) == 1  # settled from its job's result, not run again
    assert run["steps"][1]["outputs"] == {"version": "old", "got": "first"}


def test_cancel_stops_the_running_step_job_and_a_finished_run_is_refused_unchanged(project, monkeypatch) -> None:
    code, records = script("pipeline register pipe_user:slow\npipeline run slow --detach\n")
    _wait_for(lambda: marks("wait"))
    code, records = script("pipeline cancel slow\njobs\n")
    assert code == 0, records
    run = records[0]["result"]
    assert run["status"] == "Cancelled"
    assert [s["status"] for s in run["steps"]] == ["Cancelled", "Cancelled"]
    step_job = next(j for j in records[1]["result"] if j["name"] == "slow#1 wait")
    assert step_job["status"] == "CANCELLED"
    code, records = script("pipeline cancel slow --run 1\n")
    assert code != 0
    assert records[0]["error"]["message"] == "pipeline 'slow' run 1 already finished (Cancelled); nothing to cancel"
