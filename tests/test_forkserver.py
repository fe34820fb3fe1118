"""The warm fork server: isolation between jobs, one server per home, stale sockets, retirement."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from kinetic_tui.core.backends.local import exit_watch, forkserver, launch_files
from kinetic_tui.core.backends.local.launcher import (
    exit_code,
    server_status,
    shutdown_server,
    wait_exit,
    work_dir,
)
from tests.test_launcher import REPO, Jobs, jobs, runner_file, server_processes


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.01)


def test_jobs_forked_from_one_server_see_none_of_each_others_state(jobs: Jobs, tmp_path: Path) -> None:
    seen = []
    pids = set()
    for i, env in enumerate([jobs.env(LEAK_GIVEN="1"), jobs.env()]):
        job_dir, _ = jobs.launch("leak", str(tmp_path / f"seen-{i}.json"), env=env)
        assert wait_exit(job_dir, 1, timeout=20) == [0]
        seen.append(json.loads((tmp_path / f"seen-{i}.json").read_text()))
        pids.add(server_status()["pid"])
    assert len(pids) == 1  # the same warm template served both
    clean = {"cloudpickle_attr": False, "module": False, "globals": 0}
    assert seen[0] == {**clean, "env": ["LEAK_GIVEN"], "cwd": str(work_dir(job_dir.parent / "job-0", 0))}
    assert seen[1] == {**clean, "env": [], "cwd": str(work_dir(job_dir, 0))}  # os.environ was replaced


def test_runner_classes_unpickle_without_the_runner_module(jobs: Jobs, tmp_path: Path) -> None:
    """A cold runner is __main__, so its classes travel by value; forked jobs must match that."""
    job_dir, _ = jobs.launch("pickle", str(tmp_path / "marker.pkl"))
    assert wait_exit(job_dir, 1, timeout=20) == [0]
    assert forkserver.RUNNER_MODULE not in sys.modules
    assert cloudpickle.loads((tmp_path / "marker.pkl").read_bytes()).value == 42


def test_a_killed_server_leaves_a_stale_socket_that_the_next_launch_replaces(jobs: Jobs) -> None:
    job_dir, _ = jobs.launch("hello")
    wait_exit(job_dir, 1, timeout=20)
    old = server_status()["pid"]
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: not forkserver.pid_alive(old))
    assert (jobs.run_dir / forkserver.SOCKET_NAME).exists()
    job_dir, _ = jobs.launch("hello")
    assert wait_exit(job_dir, 1, timeout=20) == [0]
    assert server_status()["pid"] not in (None, old)


def test_a_leftover_socket_file_with_no_listener_is_replaced(jobs: Jobs) -> None:
    jobs.run_dir.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(jobs.run_dir / forkserver.SOCKET_NAME))
    dead.close()
    job_dir, _ = jobs.launch("hello")
    assert wait_exit(job_dir, 1, timeout=20) == [0]
    assert server_status() is not None


def test_a_waiter_wakes_when_its_hosts_are_reaped_not_when_a_later_job_ends(jobs: Jobs) -> None:
    """The spawn connection closes once every host is reaped and their exit files are written; a job
    forked later must not inherit it, or the waiter would sleep until that job ended too."""
    job_dir, _ = jobs.launch("sleep", "0.3", hosts=2)
    later, _ = jobs.launch("sleep", "30")
    started = time.monotonic()
    exit_watch.pause(job_dir, 25.0)
    assert time.monotonic() - started < 20.0  # woken by the close, not by the pause's end
    assert wait_exit(job_dir, 2, timeout=0) == [0, 0]
    assert exit_code(later, 0) is None


def test_a_waiter_on_several_jobs_wakes_when_the_first_is_reaped_and_keeps_the_others(jobs: Jobs) -> None:
    """A batch waits on all its lanes at once; a job without a socket here cuts the pause to the fallback."""
    quick, _ = jobs.launch("sleep", "0.3")
    slow, _ = jobs.launch("sleep", "30")
    started = time.monotonic()
    exit_watch.pause_any([slow, quick], 25.0, 25.0)
    assert time.monotonic() - started < 20.0
    assert wait_exit(quick, 1, timeout=0) == [0] and exit_code(slow, 0) is None
    started = time.monotonic()
    exit_watch.pause_any([slow], 0.3, 0.3)  # its socket was kept: the pause runs its course
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    exit_watch.pause_any([slow, jobs.new_dir()], 25.0, 0.05)  # launched by no one here
    assert time.monotonic() - started < 20.0


def spare_pid() -> int:
    """The oldest spare: the next spawn's host."""
    found: list[list[int]] = []
    wait_until(lambda: bool(found.append(server_status()["spares"]) or found[-1]))
    return found[-1][0]


def test_the_next_job_runs_in_the_spare_forked_once_the_last_one_ended(jobs: Jobs) -> None:
    """The spawn after a job's end costs no fork: the spare, already in its own session, is recorded as
    the host and let run; a new spare follows the next end."""
    first, _ = jobs.launch("hello")
    assert wait_exit(first, 1, timeout=20) == [0]
    spare = spare_pid()
    job_dir, [host] = jobs.launch("hello", "7")
    assert (host.pid, host.pgid) == (spare, spare)
    assert wait_exit(job_dir, 1, timeout=20) == [7]
    assert json.loads((work_dir(job_dir, 0) / "info.json").read_text())["argv"] == ["hello", "7"]
    assert spare_pid() != spare


def test_two_spawns_in_a_row_both_take_spares_once_two_jobs_ended(jobs: Jobs) -> None:
    """A map's two lanes start together: each job's end forks a spare, up to SPARES, and a burst of spawns
    takes them oldest first."""
    ended = [jobs.launch("sleep", "1")[0] for _ in range(2)]  # both run at once: neither takes the other's spare
    assert all(wait_exit(job_dir, 1, timeout=20) == [0] for job_dir in ended)
    wait_until(lambda: len(server_status()["spares"]) == forkserver.SPARES == 2)
    spares = server_status()["spares"]
    started = [jobs.launch("hello") for _ in range(2)]
    assert [hosts[0].pid for _, hosts in started] == spares
    assert all(wait_exit(job_dir, 1, timeout=20) == [0] for job_dir, _ in started)


def test_a_spare_killed_by_someone_is_replaced_by_a_fork_at_the_next_spawn(jobs: Jobs) -> None:
    first, _ = jobs.launch("hello")
    assert wait_exit(first, 1, timeout=20) == [0]
    spare = spare_pid()
    os.kill(spare, signal.SIGKILL)
    wait_until(lambda: not launch_files.pid_alive(spare))
    job_dir, [host] = jobs.launch("hello")
    assert host.pid != spare
    assert wait_exit(job_dir, 1, timeout=20) == [0]


def test_a_spare_exits_without_running_when_its_server_dies(jobs: Jobs) -> None:
    first, _ = jobs.launch("hello")
    assert wait_exit(first, 1, timeout=20) == [0]
    spare = spare_pid()
    os.kill(server_status()["pid"], signal.SIGKILL)
    wait_until(lambda: not launch_files.pid_alive(spare))  # its pipe closed: no job was ever handed to it
    assert not list(jobs.root.rglob("unrun-*.json"))


def test_a_waiter_wakes_when_the_server_dies_and_then_sleeps(jobs: Jobs) -> None:
    job_dir, _ = jobs.launch("sleep", "30")
    os.kill(server_status()["pid"], signal.SIGKILL)
    started = time.monotonic()
    exit_watch.pause(job_dir, 25.0)
    assert time.monotonic() - started < 20.0
    started = time.monotonic()
    exit_watch.pause(job_dir, 0.2)  # the socket is gone: a plain sleep
    assert time.monotonic() - started >= 0.2


CLIENT = """
import os, sys, time
from pathlib import Path
from kinetic_tui.core.backends.local.launcher import launch, server_status
print("ready", flush=True)
while not Path(sys.argv[1]).exists():
    time.sleep(0.001)
launch(Path(sys.argv[2]), ["hello"], {"PATH": os.environ["PATH"]})
print(server_status()["pid"], flush=True)
"""


def test_concurrent_starters_end_with_exactly_one_server(jobs: Jobs, tmp_path: Path) -> None:
    go = tmp_path / "go"
    dirs = [jobs.new_dir() for _ in range(4)]
    clients = [
        subprocess.Popen([sys.executable, "-c", CLIENT, str(go), str(d)], stdout=subprocess.PIPE, text=True, cwd=REPO)
        for d in dirs
    ]
    for client in clients:
        assert client.stdout.readline() == "ready\n"
    go.touch()
    pids = {int(client.communicate(timeout=60)[0]) for client in clients}
    assert all(client.returncode == 0 for client in clients)
    assert len(pids) == 1
    wait_until(lambda: server_processes(jobs.run_dir) == list(pids))  # losing starters exit at once
    for d in dirs:
        assert wait_exit(d, 1, timeout=20) == [0]


def test_an_idle_server_exits_by_itself(jobs: Jobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETIC_FORKSERVER_IDLE", "0.6")
    job_dir, _ = jobs.launch("sleep", "0.3")
    pid = server_status()["pid"]
    wait_exit(job_dir, 1, timeout=20)
    assert forkserver.pid_alive(pid)  # it waited for its job, then the idle period
    wait_until(lambda: not forkserver.pid_alive(pid))
    assert not (jobs.run_dir / forkserver.SOCKET_NAME).exists()


def test_an_edited_runner_retires_the_server_that_imported_the_old_one(jobs: Jobs, runner_file: Path) -> None:
    job_dir, _ = jobs.launch("hello")
    wait_exit(job_dir, 1, timeout=20)
    old = server_status()["pid"]
    runner_file.write_text(runner_file.read_text().replace('print("out"', 'print("new out"'))
    job_dir, _ = jobs.launch("hello")
    assert wait_exit(job_dir, 1, timeout=20) == [0]
    assert "new out 0" in (job_dir / "logs" / "host-0.log").read_text()
    assert server_status()["pid"] != old
    wait_until(lambda: not forkserver.pid_alive(old))


def test_a_changed_startup_environment_gets_its_own_server(jobs: Jobs) -> None:
    jobs.launch("hello")
    old = server_status()["pid"]
    job_dir, _ = jobs.launch("hello", env=jobs.env(PYTHONDONTWRITEBYTECODE="1"))
    assert wait_exit(job_dir, 1, timeout=20) == [0]
    assert server_status()["pid"] != old


def test_shutdown_lets_running_jobs_finish_and_record_their_exit(jobs: Jobs) -> None:
    job_dir, hosts = jobs.launch("sleep", "0.5")
    pid = shutdown_server(timeout=0.05)
    assert not (jobs.run_dir / forkserver.SOCKET_NAME).exists() and server_status() is None
    assert hosts[0].is_alive() and forkserver.pid_alive(pid)
    assert wait_exit(job_dir, 1, timeout=20) == [0]
    wait_until(lambda: not forkserver.pid_alive(pid))
    assert shutdown_server() is None


def test_a_runner_that_cannot_be_imported_still_yields_a_log_and_an_exit_file(jobs: Jobs, runner_file: Path) -> None:
    runner_file.write_text("raise ImportError('broken runner')\n")
    job_dir, _ = jobs.launch("hello")  # the server cannot warm up, so the job starts cold
    assert wait_exit(job_dir, 1, timeout=20) == [1]
    assert "ImportError: broken runner" in (job_dir / "logs" / "host-0.log").read_text()
    assert server_status() is None
    wait_until(lambda: server_processes(jobs.run_dir) == [])


def test_the_server_script_imports_only_the_stdlib_and_starts_isolated(tmp_path: Path) -> None:
    """forkserver.py runs as a script, the reaper under `python -I` (no project path): it and the sibling it
    loads by path (launch_files.py) may import nothing of ours outside the branch taken when imported as a
    module, and its split-off client must not be needed to start it (checked without site-packages)."""
    import ast

    script = Path(forkserver.__file__)
    imported = set()
    for path in (script, script.with_name("launch_files.py")):
        tree = ast.parse(path.read_text())
        as_module = [n for n in tree.body if isinstance(n, ast.If) and "__name__ != '__main__'" in ast.unparse(n.test)]
        skipped = {id(node) for branch in as_module for stmt in branch.body for node in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"relative import in {path.name}"
                imported.add((node.module or "").split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    usage = subprocess.run(
        [sys.executable, "-I", "-S", str(script)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert usage.returncode == 1 and "usage:" in usage.stderr and "Traceback" not in usage.stderr
