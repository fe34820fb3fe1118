"""What our own processes write under KINETIC_HOME is owner-only (files 0600, directories 0700), whatever the
user's umask: the command line's whole workspace, and from a library client (whose own umask we leave
alone) everything its jobs, lanes, fork server and supervisor write; the home itself is 0700, and one the
user created open to others is tightened at first use with a notice; the runner's downloaded payload copy,
which holds captured secret values in clear, is gone once the job ran."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kinetic_tui.core.backends.local import launcher, trash
from kinetic_tui.core.paths import using_home
from tests.helpers import processes
from tests.lifecycle.run_projects import RESULT_PREFIX, client_result, make_project

TASKS = """
import os
from pathlib import Path

import kinetic_tui as kinetic


@kinetic.run(capture_env_vars=["KT_SECRET"])
def secret(data_dir):
    Path(os.environ["KINETIC_OUTPUT_DIR"], "mine.txt").write_text(os.environ["KT_SECRET"])
    return sorted(os.listdir(data_dir))


@kinetic.run()
def square(x):
    return x * x
"""

CLIENT = f"""
import json

from kinetic_tui import Data
from kinetic_tui.core.backends.local.workspace import local_backend, store
from kinetic_tui.core.backends.registry import workspace_backend
from kinetic_tui.core.profiles import ensure_profiles_file
from kinetic_tui.core.training.service import TrainingService
from kt_perms.tasks import secret, square

ensure_profiles_file()
listed = secret.run_async(Data("data")).result(timeout=60)
squares = square.map(range(6)).results(timeout=60)
training = TrainingService(store(), workspace_backend())
done = training.wait(training.start("t", {{"learning_rate": 0.2}}, 2, 1, None).name)
local_backend().reconcile()
print({RESULT_PREFIX!r} + json.dumps([listed, squares, done.status]))
"""


def _client(project: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """The client as a user with the common umask 022 runs it: nothing relies on the test's own umask."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(KINETIC_HOME=str(home), KT_SECRET="hunter2")
    return subprocess.run(
        [sys.executable, "-c", CLIENT], cwd=project, env=env, capture_output=True, text=True, timeout=180, umask=0o022
    )


def _open_to_others(home: Path) -> list[str]:
    """Every entry under `home` (itself included) with a group or other permission bit set."""
    found = []
    for root, dirs, files in os.walk(home):
        for path in [Path(root)] + [Path(root, name) for name in dirs + files]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode & 0o077 and not path.is_symlink():
                found.append(f"{path.relative_to(home.parent)} {mode:04o}")
    return found


def test_a_job_a_map_and_a_training_leave_only_owner_only_entries_in_a_fresh_home(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"kt_perms/__init__.py": "", "kt_perms/tasks.py": TASKS})
    (project / "data").mkdir()
    (project / "data" / "a.txt").write_text("a")
    home = tmp_path / "fresh" / "home"
    try:
        done = _client(project, home)
        listed, squares, status = client_result(done)
        names = {path.name for path in home.rglob("*")}
        open_to_others = _open_to_others(home)  # while the fork server's socket and lock still exist
    finally:
        processes.stop_infrastructure(home)
    assert (listed, squares, status) == (["a.txt"], [x * x for x in range(6)], "Completed")
    assert "tightened" not in done.stderr  # a home we create is private from the start
    written = ("state.db", "profiles.json", "handle.json", "data-cache", "forkserver.sock", "mine.txt", "lanes")
    for expected in (*written, "progress.jsonl", "results.bin", "supervisor.log", "checkpoint-000001.pkl"):
        assert expected in names, f"{expected} was never written, so its mode was not checked"
    assert any(name.startswith("result") and name.endswith(".pkl") for name in names)

    # a library client keeps its own umask for what it writes itself (state.db, handles, payloads): the
    # files written by our processes (job processes, lanes, the fork server) are owner-only all the same
    def job_written(entry: str) -> bool:
        name = entry.split()[0].rsplit("/", 1)[-1]
        return name in {"forkserver.sock", "mine.txt", "progress.jsonl", "results.bin"} or (
            name.startswith(("result", "checkpoint-", "host-")) and "." in name
        )

    assert [entry for entry in open_to_others if job_written(entry)] == []
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    # A local runner reads the uploaded payload where it lies: no copy of it is left in a work dir.
    assert list(home.rglob("download/*.pkl")) == []
    assert not any("hunter2" in p.read_text(errors="replace") for p in home.rglob("*") if p.name.endswith(".log"))


def test_a_home_open_to_others_is_tightened_once_with_a_notice(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    script = "from kinetic_tui.core.paths import kinetic_home, state_db_path; kinetic_home(); state_db_path()"
    env = {**os.environ, "KINETIC_HOME": str(home)}
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert first.stderr.splitlines() == [f"kinetic-tui: {home} was readable by others (mode 0755); tightened to 0700"]
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    again = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert again.stderr == ""


def test_a_discarded_work_dir_never_carries_a_payload_copy_into_the_trash(
    kinetic_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = kinetic_home / "local" / "jobs" / "job-1" / "work"
    (work / "host-0" / "download").mkdir(parents=True)
    (work / "host-0" / "download" / "payload.pkl").write_bytes(b"secret")  # a runner killed mid-download
    (work / "host-0" / "output.txt").write_text("kept until the trash is emptied")
    monkeypatch.setattr(trash, "_empty_later", lambda trash: None)  # nothing emptied: look at what was moved
    trash.discard(work)
    moved = list((kinetic_home / "local" / "trash").rglob("*"))
    assert [p.name for p in moved if p.is_file()] == ["output.txt"]


def test_the_command_line_leaves_only_owner_only_entries_in_a_fresh_home(tmp_path: Path) -> None:
    """`kinetic-tui` is our process: a script that runs a job and a training writes nothing open to others."""
    project = make_project(tmp_path / "proj", {"kt_perms/__init__.py": "", "kt_perms/tasks.py": TASKS})
    (project / "go.kn").write_text("submit kt_perms.tasks:square --args '[3]'\ntrain t --epochs 2\n")
    home = tmp_path / "fresh" / "home"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["KINETIC_HOME"] = str(home)
    cli = str(Path(sys.executable).with_name("kinetic-tui"))
    try:
        done = subprocess.run(
            [cli, "--script", "go.kn", "--output", "json"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            umask=0o022,
        )
        open_to_others = _open_to_others(home)
        names = {path.name for path in home.rglob("*")}
    finally:
        with using_home(home):
            launcher.shutdown_server()
    assert done.returncode == 0, done.stdout + done.stderr
    for expected in ("state.db", "handle.json", "checkpoint-000001.pkl"):
        assert expected in names, f"{expected} was never written, so its mode was not checked"
    assert open_to_others == []
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
