"""Local job processes: logs, exit files, worker ids, detachment, termination, both start paths.

Jobs run a stand-in runner (FAKE_RUNNER) whose first argument picks a behaviour. Every test that starts
processes uses the `jobs` fixture, which kills leftover process groups and stops the fork server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinetic_tui.core.backends.local import forkserver
from kinetic_tui.core.backends.local.launch_files import read_proc_stat
from kinetic_tui.core.backends.local.launcher import (
    HostProcess,
    claim_token,
    exit_code,
    is_alive,
    launch,
    log_path,
    server_status,
    shutdown_server,
    terminate,
    wait_exit,
    work_dir,
)
from kinetic_tui.core.errors import ValidationError

REPO = Path(__file__).resolve().parents[1]

FAKE_RUNNER = """
import json, os, signal, subprocess, sys, time
from pathlib import Path

import cloudpickle

STATE = []


class Marker:
    def __init__(self, value):
        self.value = value


def main(argv):
    mode, args = argv[0], argv[1:]
    if mode == "hello":
        print("out", os.environ.get("TPU_WORKER_ID"))
        print("err", os.environ.get("TPU_WORKER_ID"), file=sys.stderr)
        info = {"worker": os.environ.get("TPU_WORKER_ID"), "cwd": os.getcwd(), "argv": sys.argv[1:]}
        Path("info.json").write_text(json.dumps(info))
        return int(args[0]) if args else 0
    if mode == "raise":
        raise RuntimeError("boom")
    if mode == "exit":
        sys.exit(args[0])
    if mode == "sleep":
        time.sleep(float(args[0]))
        Path("done").write_text("done")
        return 0
    if mode == "hang":  # optionally deaf to SIGTERM, with a grandchild in the same process group
        if args and args[0] == "ignore-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if args and args[0] == "note-term":  # deaf too, but says it got SIGTERM; ends once released
            signal.signal(signal.SIGTERM, lambda *_: Path("got-term").write_text(""))
            Path("ready").write_text("ready")
            while not Path("release").exists():
                time.sleep(0.01)
            return 0
        child = subprocess.Popen(["sleep", "60"])
        Path("child.pid").write_text(str(child.pid))
        Path("ready").write_text("ready")
        time.sleep(60)
    if mode == "leak":  # report, then pollute, what a previous job could have left behind
        seen = {
            "cloudpickle_attr": hasattr(cloudpickle, "_kinetic_leak"),
            "module": "kinetic_leak_module" in sys.modules,
            "env": sorted(k for k in os.environ if k.startswith("LEAK")),
            "globals": len(STATE),
            "cwd": os.getcwd(),
        }
        cloudpickle._kinetic_leak = True
        sys.modules["kinetic_leak_module"] = sys
        os.environ["LEAK_FROM_JOB"] = "1"
        STATE.append(1)
        os.chdir("/")
        Path(args[0]).write_text(json.dumps(seen))
        return 0
    if mode == "pickle":
        Path(args[0]).write_bytes(cloudpickle.dumps(Marker(42)))
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
"""


def server_processes(run_dir: Path) -> list[int]:
    """Live fork-server processes for run_dir, found by their command line; its forks (the hosts it
    started and the spare it keeps ready) have the same one, but lead their own process groups."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmdline and os.fsencode(str(run_dir)) in cmdline and is_alive(int(entry)):
            stat = read_proc_stat(int(entry))
            if stat is not None and stat.pgrp != int(entry):
                pids.append(int(entry))
    return pids


class Jobs:
    """Launches stand-in jobs in fresh job directories and remembers them for cleanup."""

    def __init__(self, root: Path, runner: Path, home: Path) -> None:
        self.root = root
        self.runner = runner
        self.run_dir = home / "run"
        self.started: list[HostProcess] = []

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], **extra}

    def new_dir(self) -> Path:
        job_dir = self.root / f"job-{len(list(self.root.iterdir()))}"
        job_dir.mkdir()
        return job_dir

    def launch(self, *argv: str, hosts: int = 1, env: dict[str, str] | None = None) -> tuple[Path, list[HostProcess]]:
        job_dir = self.new_dir()
        started = launch(job_dir, list(argv), env if env is not None else self.env(), hosts)
        self.started.extend(started)
        return job_dir, started

    def cleanup(self) -> None:
        status = server_status()
        leftovers = [HostProcess(0, pid, pid) for pid in (status or {}).get("children", [])]
        terminate(self.started + leftovers, grace=0.2)
        shutdown_server(timeout=5.0)
        for pid in server_processes(self.run_dir):  # e.g. a server a test left half-dead
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def runner_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinetic_home: Path) -> Path:
    path = tmp_path / "fake_runner.py"
    path.write_text(FAKE_RUNNER)
    monkeypatch.setenv("KINETIC_RUNNER_FILE", str(path))
    return path


@pytest.fixture
def jobs(tmp_path: Path, runner_file: Path, kinetic_home: Path):
    root = tmp_path / "jobs"
    root.mkdir()
    manager = Jobs(root, runner_file, kinetic_home)
    yield manager
    manager.cleanup()


@pytest.fixture(params=["forkserver", "cold"])
def path_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "cold":
        monkeypatch.setenv("KINETIC_NO_FORKSERVER", "1")
    return request.param


def wait_for(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


def test_output_goes_to_the_log_and_the_exit_code_to_exit_file(jobs: Jobs, path_mode: str) -> None:
    job_dir, [host] = jobs.launch("hello", "3")
    assert wait_exit(job_dir, 1, timeout=20) == [3]
    assert (job_dir / "exit-0").read_text() == "3\n"
    assert log_path(job_dir, 0).read_text().splitlines() == ["err 0", "out 0"]
    info = json.loads((work_dir(job_dir, 0) / "info.json").read_text())
    assert info == {"worker": "0", "cwd": str(work_dir(job_dir, 0)), "argv": ["hello", "3"]}
    assert host.pgid == host.pid and not host.is_alive()


def test_each_host_gets_its_worker_id_log_and_exit_file(jobs: Jobs, path_mode: str) -> None:
    job_dir, hosts = jobs.launch("hello", hosts=2)
    assert [h.host for h in hosts] == [0, 1] and hosts[0].pid != hosts[1].pid
    assert wait_exit(job_dir, 2, timeout=20) == [0, 0]
    for i in (0, 1):
        assert json.loads((work_dir(job_dir, i) / "info.json").read_text())["worker"] == str(i)
        assert log_path(job_dir, i).read_text().splitlines() == [f"err {i}", f"out {i}"]


def run_both_paths(jobs: Jobs, monkeypatch: pytest.MonkeyPatch, *argv: str) -> list[tuple]:
    outcomes = []
    for cold in ("", "1"):
        monkeypatch.setenv("KINETIC_NO_FORKSERVER", cold)
        job_dir, _ = jobs.launch(*argv, hosts=2)
        codes = wait_exit(job_dir, 2, timeout=20)
        token = claim_token(job_dir) or "no claim"  # each launch has its own: compare the names without it
        files = sorted(str(p.relative_to(job_dir)).replace(token, "TOKEN") for p in job_dir.rglob("*"))
        last_lines = [log_path(job_dir, i).read_text().splitlines()[-1] for i in (0, 1)]
        outcomes.append((codes, files, last_lines))
    return outcomes


@pytest.mark.parametrize(
    ("argv", "codes", "last_line"),
    [
        (("hello", "5"), [5, 5], "out 1"),
        (("raise",), [1, 1], "RuntimeError: boom"),
        (("exit", "bad input"), [1, 1], "bad input"),
    ],
)
def test_fork_server_and_cold_path_produce_the_same_files(
    jobs: Jobs, monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...], codes: list[int], last_line: str
) -> None:
    warm, cold = run_both_paths(jobs, monkeypatch, *argv)
    assert warm == cold
    assert warm[0] == codes and warm[2][1] == last_line
    assert "exit-1" in warm[1] and "logs/host-1.log" in warm[1] and "work/host-1" in warm[1]


def test_a_job_survives_the_client_that_launched_it(jobs: Jobs, path_mode: str) -> None:
    job_dir = jobs.new_dir()
    client = (
        "import json, os, sys\nfrom pathlib import Path\nfrom kinetic_tui.core.backends.local.launcher import launch\n"
        "hosts = launch(Path(sys.argv[1]), ['sleep', '0.5'], {'PATH': os.environ['PATH']})\n"
        "print(json.dumps([h.to_dict() for h in hosts]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", client, str(job_dir)], capture_output=True, text=True, check=True, cwd=REPO, timeout=60
    )
    [host] = [HostProcess.from_dict(d) for d in json.loads(out.stdout)]
    jobs.started.append(host)
    assert exit_code(job_dir, 0) is None and host.is_alive()  # the client is gone, the job is not
    assert wait_exit(job_dir, 1, timeout=20) == [0]
    assert (work_dir(job_dir, 0) / "done").read_text() == "done"


def test_terminate_sends_sigterm_to_the_group(jobs: Jobs, path_mode: str) -> None:
    job_dir, hosts = jobs.launch("hang")
    wait_for(work_dir(job_dir, 0) / "ready")
    grandchild = int((work_dir(job_dir, 0) / "child.pid").read_text())
    terminate(hosts, grace=10)
    assert not hosts[0].is_alive() and not is_alive(grandchild)
    assert wait_exit(job_dir, 1, timeout=10) == [-signal.SIGTERM]


def test_terminate_kills_a_job_deaf_to_sigterm_after_the_grace(jobs: Jobs, path_mode: str) -> None:
    job_dir, hosts = jobs.launch("hang", "ignore-term", hosts=2)
    for i in (0, 1):
        wait_for(work_dir(job_dir, i) / "ready")
    terminate(hosts, grace=0.5)
    assert not any(h.is_alive() for h in hosts)
    assert wait_exit(job_dir, 2, timeout=10) == [-signal.SIGKILL, -signal.SIGKILL]


def test_terminate_leaves_a_job_deaf_to_sigterm_alone_within_the_grace(jobs: Jobs) -> None:
    """The grace is honoured without a clock: the job has had its SIGTERM and is still alive while terminate
    waits (grace 60 s), and ends on its own once released, not by SIGKILL."""
    job_dir, hosts = jobs.launch("hang", "note-term")
    wait_for(work_dir(job_dir, 0) / "ready")
    waiting = threading.Thread(target=terminate, args=(hosts,), kwargs={"grace": 60}, daemon=True)
    waiting.start()
    wait_for(work_dir(job_dir, 0) / "got-term")
    assert waiting.is_alive() and hosts[0].is_alive()
    (work_dir(job_dir, 0) / "release").write_text("")
    waiting.join(30)
    assert not waiting.is_alive()
    assert wait_exit(job_dir, 1, timeout=10) == [0]


def test_terminate_is_a_no_op_for_finished_jobs(jobs: Jobs) -> None:
    job_dir, hosts = jobs.launch("hello")
    wait_exit(job_dir, 1, timeout=20)
    waiting = threading.Thread(target=terminate, args=(hosts,), kwargs={"grace": 3600}, daemon=True)
    waiting.start()
    waiting.join(30)  # a deadline: one that waited out the grace would hold the job an hour
    assert not waiting.is_alive()
    assert exit_code(job_dir, 0) == 0


def test_a_reused_pid_is_neither_alive_nor_killed() -> None:
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        real = forkserver.proc_start_time(other.pid)
        assert real is not None
        stranger = HostProcess(0, other.pid, other.pid, start_time=real - 1)  # same pid, older process
        assert not stranger.is_alive()
        terminate([stranger], grace=0)
        assert other.poll() is None
        assert HostProcess(0, other.pid, other.pid, start_time=real).is_alive()
    finally:
        other.kill()
        other.wait()


@given(st.integers(0, 1 << 10), st.integers(1, 1 << 22), st.one_of(st.none(), st.integers(0, 1 << 40)))
def test_host_process_round_trips_through_json(host: int, pid: int, start_time: int | None) -> None:
    record = HostProcess(host, pid, pid, start_time)
    assert HostProcess.from_dict(json.loads(json.dumps(record.to_dict()))) == record


@given(st.integers(-255, 255))
def test_exit_files_round_trip(tmp_path_factory: pytest.TempPathFactory, code: int) -> None:
    job_dir = tmp_path_factory.mktemp("exit")
    forkserver.write_exit(str(job_dir), 3, code)
    assert exit_code(job_dir, 3) == code
    assert [p.name for p in job_dir.iterdir()] == ["exit-3"]


def test_wait_exit_times_out_and_leaves_the_job_running(jobs: Jobs) -> None:
    job_dir, hosts = jobs.launch("sleep", "5")
    with pytest.raises(TimeoutError, match=r"hosts \[0\]"):
        wait_exit(job_dir, 1, timeout=0.05)
    assert hosts[0].is_alive()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hosts": 0}, "hosts must be an integer >= 1"),
        ({"env": {"A=B": "x"}}, "env key 'A=B'"),
        ({"env": {"A": 1}}, r"env\['A'\] must be a string"),
        ({"argv": ["ok", None]}, "argv must be a list of strings"),
        ({"runner": Path("/nonexistent/runner.py")}, "runner file '/nonexistent/runner.py' does not exist"),
    ],
)
def test_bad_arguments_are_refused_before_anything_changes(jobs: Jobs, kwargs: dict, message: str) -> None:
    job_dir = jobs.new_dir()
    call = {"argv": ["hello"], "env": jobs.env(), "hosts": 1, **kwargs}
    with pytest.raises(ValidationError, match=message):
        launch(job_dir, **call)
    assert list(job_dir.iterdir()) == []
    assert not (jobs.run_dir / forkserver.SOCKET_NAME).exists()


def test_a_job_directory_is_launched_once(jobs: Jobs) -> None:
    job_dir, _ = jobs.launch("hello")
    wait_exit(job_dir, 1, timeout=20)
    with pytest.raises(ValidationError, match="already launched: exit-0 exists"):
        launch(job_dir, ["hello"], jobs.env())
    with pytest.raises(ValidationError, match="is not an existing directory"):
        launch(job_dir / "missing", ["hello"], jobs.env())


def test_bad_idle_setting_is_refused(jobs: Jobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETIC_FORKSERVER_IDLE", "soon")
    with pytest.raises(ValidationError, match="KINETIC_FORKSERVER_IDLE must be a positive number"):
        jobs.launch("hello")
