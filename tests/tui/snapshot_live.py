"""A deterministic workspace whose pipeline run is caught mid-flight, for the snapshot of the pipelines view
with running steps: the same pixels on every run and machine.

The run is real: run #1 of `live` ran to the end, and run #2 was driven by the supervisor's own driver in
this process (as `snapshot_workspace.drive_here` does, so its step jobs get counted ids) until both of its
training steps were Running with their jobs really running, then left alone. Those jobs wait on a release
file at a fixed path (the module's source is part of every step's cache key), so nothing changes while the
snapshot is taken; afterwards the file is created and the run is driven to its end. What would differ
between builds is pinned through the store once the run stands still: run #1's start and end and run #2's
start (so run #2 reads as running for RUNNING_FOR s on the app's fixed clock), and every step's duration.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.console import Console
from kinetic_tui.core.pipelines.driver import RunDriver
from kinetic_tui.core.store import pipeline_steps_repo
from kinetic_tui.core.supervisor import process as supervisor
from tests.tui.snapshot_workspace import FROZEN, VIEWED_AT, counted_job_ids

ROOT = Path("/tmp/kinetic-tui-snapshots-live")
MODULE_NAME = "snap_live"
RUN_TOOK, RUNNING_FOR = 42.0, 75.0
MODULE = f'''
import time
from pathlib import Path

from kinetic_tui import Pipeline, Step

RELEASE = Path("{ROOT}/release")


def wait_for_release():
    while not RELEASE.exists():
        time.sleep(0.02)


def fetch(inputs):
    return {{"rows": list(range(inputs["rows"]))}}


def train_a(inputs):
    wait_for_release()
    return {{"model": "a", "seen": len(inputs["rows"])}}


def train_b(inputs):
    wait_for_release()
    return {{"model": "b", "seen": len(inputs["rows"])}}


def report(inputs):
    return {{"models": [inputs["a"], inputs["b"]]}}


def live():
    return Pipeline(
        "live",
        [
            Step("fetch", fetch, {{"rows": "params.rows"}}),
            Step("train_a", train_a, {{"rows": "fetch.rows"}}),
            Step("train_b", train_b, {{"rows": "fetch.rows"}}),
            Step("report", report, {{"a": "train_a.model", "b": "train_b.model"}}),
        ],
        {{"rows": 4}},
    )
'''
TRAINING = ("train_a", "train_b")


def _drive(console: Console, until: Callable[[], bool]) -> None:
    """Rounds of the supervisor's driver, here, until `until()`."""
    driver = RunDriver(console.workspace.store, console.pipelines.backend)
    deadline = time.monotonic() + 60
    while not console.workspace.run(until):
        assert time.monotonic() < deadline, "the live run never reached the state the snapshot shows"
        console.workspace.run(driver.tick)
        time.sleep(0.02)


def _settled(console: Console, number: int) -> bool:
    found = pipeline_steps_repo.header(console.workspace.store, "live", number)
    return found is not None and found[0] is not None and found[0].value != "Running"


def _training_runs(console: Console) -> bool:
    """Both training steps are Running and their jobs' processes are up (each waits on the release)."""
    rows = pipeline_steps_repo.steps(console.workspace.store, "live", 2)
    backend = console.workspace.backend
    return all(
        rows[name].status.value == "Running"
        and rows[name].job_id is not None
        and backend.refresh(rows[name].job_id).status.value == "RUNNING"
        for name in TRAINING
    )


def _pin(console: Console) -> None:
    """Run times and step durations fixed (see the module docstring)."""
    store = console.workspace.store
    with store.transaction():
        for number, text in store.query("SELECT number, record FROM pipeline_runs WHERE pipeline = 'live'"):
            record = json.loads(text)
            record["started_at"] = FROZEN + 60.0 if number == 1 else VIEWED_AT - RUNNING_FOR
            if number == 1:
                record["finished_at"] = FROZEN + 60.0 + RUN_TOOK
            for step in record.get("steps", {}).values():
                step["duration"] = 0.0
            store.write(
                "UPDATE pipeline_runs SET record = ? WHERE pipeline = 'live' AND number = ?",
                (json.dumps(record), number),
            )
        for number, step, text in store.query(
            "SELECT number, step, result FROM pipeline_steps WHERE pipeline = 'live'"
        ):
            result = {**json.loads(text), "duration": 0.0}
            store.write(
                "UPDATE pipeline_steps SET result = ? WHERE pipeline = 'live' AND number = ? AND step = ?",
                (json.dumps(result), number, step),
            )


@contextmanager
def live_workspace() -> Iterator[Path]:
    """Build the workspace at ROOT under a lock beside it (two sessions take turns) and yield its home with
    run #2 mid-flight; afterwards the run is released and driven to its end, and ROOT removed."""
    ROOT.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{ROOT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(ROOT, ignore_errors=True)
        home, project = ROOT / "home", ROOT / "project"
        project.mkdir(parents=True)
        (project / "pyproject.toml").write_text("[project]\nname = 'snap-live'\n")
        (project / f"{MODULE_NAME}.py").write_text(MODULE)
        saved_cwd, saved_path = os.getcwd(), list(sys.path)
        os.chdir(project)
        sys.path.insert(0, str(project))
        console = Console(home=home, clock=lambda: FROZEN, default_wait=True)
        try:
            with counted_job_ids(), mock.patch.object(supervisor, "ensure_running", lambda *args, **kwargs: False):
                asyncio.run(_start(console))
                (ROOT / "release").touch()
                _drive(console, lambda: _settled(console, 1))
                (ROOT / "release").unlink()
                asyncio.run(console.pipelines.run("live", {"rows": 6}, wait=False))
                _drive(console, lambda: _training_runs(console))
            _pin(console)
            yield home
        finally:
            (ROOT / "release").touch()
            with mock.patch.object(supervisor, "ensure_running", lambda *args, **kwargs: False):
                _drive(
                    console, lambda: _settled(console, 2) or not pipeline_steps_repo.running(console.workspace.store)
                )
                asyncio.run(console.aclose())
            console.workspace.run(launcher.shutdown_server)  # the fork server of this home, not the environment's
            os.chdir(saved_cwd)
            sys.path[:] = saved_path
            sys.modules.pop(MODULE_NAME, None)
            shutil.rmtree(ROOT, ignore_errors=True)


async def _start(console: Console) -> None:
    await console.pools.remove("cpu")
    await console.pools.add("cpu", "cpu", 4)
    await console.pipelines.register(f"{MODULE_NAME}:live")
    await console.pipelines.run("live", wait=False)
