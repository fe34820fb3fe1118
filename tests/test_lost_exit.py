"""A job whose exit status nobody published: its runner's own result decides, never a guess.

The fork server writes a host's exit file when it reaps it. These tests take that away with real
processes: the server stopped (SIGSTOP) or busy with a slow client while a job ends (its child waits
unreaped), the server killed while jobs run (its jobs are orphaned and nobody writes their exit files),
and a reaper that has reaped a host but not yet written its file. A job that succeeded must be
recorded SUCCEEDED and its result returned; a runner that really died without a result stays lost.

No clock decides: a job ends when the test opens its gate (so it is still running when the server is stopped
or killed), the slow client is held by a server that would wait an hour for it, and the waits of `host_exit`
run on a clock that advances only when it sleeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local import forkserver, launcher
from kinetic_tui.core.backends.local.job_rows import JobRow
from kinetic_tui.core.backends.local.launcher import HostProcess
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import RemoteJobError
from kinetic_tui.core.paths import kinetic_home
from tests.helpers.fork_servers import start_server
from tests.lifecycle.backend_projects import jobs, reap_jobs, user_project, wait_for

TIMEOUT = 30.0
pytestmark = pytest.mark.skipif(not forkserver.HAVE_PROC, reason="needs Linux /proc")


def _server_pid() -> int:
    status = launcher.server_status()
    assert status is not None, "no fork server runs"
    return int(status["pid"])


def _started(job_id: str, hosts: int = 1) -> JobRow:
    """The job's row once every host has reached its function."""
    row = wait_for(lambda: local_backend().job(job_id).hosts and local_backend().job(job_id), TIMEOUT, "hosts")
    for host in range(hosts):
        log = launcher.log_path(row.job_dir, host)
        wait_for(lambda log=log: "phase execute:" in log.read_text(), TIMEOUT, f"host {host} to execute")
    return row


def _ended(row: JobRow) -> None:
    """Wait until no process of the job runs (an unreaped child counts as ended)."""
    for host in row.hosts or ():
        wait_for(lambda host=host: not host.is_alive(), TIMEOUT, f"host {host.host} to end")


def _kill_server() -> None:
    pid = _server_pid()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not forkserver.pid_alive(pid), TIMEOUT, "the fork server to die")


def _two_cpu_nodes() -> None:
    backend = local_backend()
    backend.remove_pool("cpu")
    backend.add_pool("cpu", "cpu", 2)


@contextlib.contextmanager
def _stopped_server() -> Iterator[int]:
    """SIGSTOP the home's fork server; SIGCONT it on leaving."""
    pid = _server_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_job_that_ends_while_the_fork_server_is_stopped_succeeds(jobs, tmp_path):
    release = tmp_path / "release"
    handle = kinetic.run()(jobs.gated).run_async(str(release))
    row = _started(handle.job_id)
    with _stopped_server():
        release.write_text("")
        _ended(row)
        assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id  # settled while the server is stopped
        settled = local_backend().job(handle.job_id)
        assert (settled.status, settled.phase, settled.detail) == (JobStatus.SUCCEEDED, None, None)
        assert launcher.exit_code(row.job_dir, 0) is None  # nobody has published its exit status yet
    wait_for(lambda: launcher.exit_code(row.job_dir, 0) == 0, TIMEOUT, "the exit file after SIGCONT")
    assert local_backend().refresh(handle.job_id).status is JobStatus.SUCCEEDED


def test_a_failure_that_ends_while_the_fork_server_is_stopped_keeps_its_phase(jobs, tmp_path):
    release = tmp_path / "release"
    handle = kinetic.run()(jobs.gated_boom).run_async(str(release), "late")
    row = _started(handle.job_id)
    with _stopped_server():
        release.write_text("")
        _ended(row)
        settled = local_backend().refresh(handle.job_id)
    assert (settled.status, settled.phase, settled.detail) == (JobStatus.FAILED, "execute", "ValueError: late")


def test_a_job_that_ends_while_a_slow_client_holds_the_fork_server_succeeds(jobs, tmp_path):
    """A client that sends half a request once held the server (and its reaping) for up to REQUEST_TIMEOUT;
    the unprovoked loss among many concurrent clients was this. The server now reaps meanwhile: one that
    would hold the slow client an hour publishes the exit while the client's connection is still open."""
    start_server("patient")
    release = tmp_path / "release"
    handle = kinetic.run()(jobs.gated).run_async(str(release))
    row = _started(handle.job_id)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as slow:
        slow.connect(str(kinetic_home() / "run" / forkserver.SOCKET_NAME))
        slow.sendall(b'{"op": ')
        release.write_text("")
        _ended(row)
        assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id
        wait_for(lambda: launcher.exit_code(row.job_dir, 0) == 0, TIMEOUT, "the exit file")
        slow.setblocking(False)
        with pytest.raises(BlockingIOError):  # neither answered nor dropped: the server still holds it
            slow.recv(1)
    assert local_backend().job(handle.job_id).status is JobStatus.SUCCEEDED


def test_jobs_orphaned_by_a_killed_fork_server_succeed(jobs, tmp_path):
    _two_cpu_nodes()
    release = tmp_path / "release"
    handles = [kinetic.run()(jobs.gated).run_async(str(release)) for _ in range(2)]
    rows = [_started(h.job_id) for h in handles]
    _kill_server()
    release.write_text("")
    for handle, row in zip(handles, rows):
        assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id
        assert launcher.exit_code(row.job_dir, 0) is None  # its reaper died: no exit file, ever
        assert "job succeeded" in launcher.log_path(row.job_dir, 0).read_text()
        assert local_backend().job(handle.job_id).status is JobStatus.SUCCEEDED


def test_a_job_whose_cold_path_reaper_is_killed_succeeds(jobs, monkeypatch, tmp_path):
    monkeypatch.setenv("KINETIC_NO_FORKSERVER", "1")
    release = tmp_path / "release"
    handle = kinetic.run()(jobs.gated).run_async(str(release))
    row = _started(handle.job_id)
    (host,) = row.hosts or ()
    stat = Path(f"/proc/{host.pid}/stat").read_bytes()
    reaper = int(stat[stat.rindex(b")") + 2 :].split()[1])  # the parent: the cold path's own reaper
    assert launcher.server_status() is None and reaper != 1
    os.kill(reaper, signal.SIGKILL)
    wait_for(lambda: not forkserver.pid_alive(reaper), TIMEOUT, "the reaper to die")
    release.write_text("")
    assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id
    assert local_backend().job(handle.job_id).status is JobStatus.SUCCEEDED


def test_a_runner_that_dies_with_its_fork_server_is_lost(jobs):
    handle = kinetic.run()(jobs.hold).run_async(60.0)
    row = _started(handle.job_id)
    _kill_server()
    os.killpg(row.hosts[0].pgid, signal.SIGKILL)
    _ended(row)
    settled = local_backend().refresh(handle.job_id)
    assert (settled.status, settled.phase) == (JobStatus.FAILED, "lost")
    # an unreaped child still tells its status; one that init reaped tells nothing
    assert settled.detail in ("host 0 exited with -9", "host 0 vanished without an exit status or result")
    with pytest.raises(RemoteJobError, match="FAILED in phase lost"):
        handle.result(timeout=TIMEOUT)


def _slice() -> None:
    local_backend().add_pool("slice", "v4-2x2x2", 2)


def test_a_slice_orphaned_by_a_killed_fork_server_succeeds(jobs, tmp_path):
    _slice()
    release = tmp_path / "release"
    handle = kinetic.run(accelerator="v4-2x2x2")(jobs.gated).run_async(str(release))
    row = _started(handle.job_id, hosts=2)
    _kill_server()
    release.write_text("")
    assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id
    assert [launcher.exit_code(row.job_dir, host) for host in (0, 1)] == [None, None]
    assert local_backend().job(handle.job_id).status is JobStatus.SUCCEEDED


def test_a_slice_whose_worker_dies_with_the_fork_server_names_that_worker(jobs, tmp_path):
    _slice()
    release = tmp_path / "release"
    handle = kinetic.run(accelerator="v4-2x2x2")(jobs.gated).run_async(str(release))
    row = _started(handle.job_id, hosts=2)
    _kill_server()
    os.killpg(row.hosts[1].pgid, signal.SIGKILL)
    release.write_text("")
    _ended(row)
    settled = local_backend().refresh(handle.job_id)
    assert (settled.status, settled.phase) == (JobStatus.FAILED, "lost")
    assert settled.detail in ("host 1 exited with -9", "host 1 vanished without an exit status or result")


def test_a_slice_that_ends_while_the_fork_server_is_stopped_succeeds(jobs, tmp_path):
    _slice()
    release = tmp_path / "release"
    handle = kinetic.run(accelerator="v4-2x2x2")(jobs.gated).run_async(str(release))
    row = _started(handle.job_id, hosts=2)
    with _stopped_server():
        release.write_text("")
        _ended(row)
        assert local_backend().refresh(handle.job_id).status is JobStatus.SUCCEEDED


# -- a reaper between reaping a host and writing its exit file ----------------------------------------------

SLOW_REAPER = """
    import json, os, sys, time
    sys.path.insert(0, {lib!r})
    import forkserver
    child = os.fork()
    if child == 0:
        os._exit(7)
    while forkserver.read_proc_stat(child).state != "Z":
        time.sleep(0.001)
    start = forkserver.proc_start_time(child)
    os.waitpid(child, 0)  # reaped: the child is gone and its exit file is not written yet
    print(json.dumps([child, start, os.getpid(), forkserver.proc_start_time(os.getpid())]), flush=True)
    time.sleep(float(sys.argv[2]))
    forkserver.write_exit(sys.argv[1], 0, 7)
    time.sleep(float(sys.argv[3]))
"""


@contextlib.contextmanager
def _slow_reaper(job_dir: Path, delay: float, linger: float = 0.0) -> Iterator[tuple[HostProcess, int]]:
    """A real reaper whose child has exited 7 and been reaped, and which writes the exit file `delay` s later."""
    code = textwrap.dedent(SLOW_REAPER.format(lib=str(Path(forkserver.__file__).parent)))
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(job_dir), str(delay), str(linger)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        pid, start, reaper, reaper_start = json.loads(proc.stdout.readline())
        yield HostProcess(0, pid, pid, start, reaper, reaper_start), proc.pid
    finally:
        proc.kill()
        proc.wait()


class _Clock:
    """Stands in for the launcher's `time`: it moves only when slept on, and at `publish_at` (if given) it
    writes the exit file as the reaper would, so `host_exit`'s waits are measured exactly, with no clock."""

    def __init__(self, publish: Callable[[], None] | None = None, publish_at: float = 0.0) -> None:
        self.now = 0.0
        self.sleeps = 0
        self.publish, self.publish_at = publish, publish_at

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        if self.publish is not None and self.now >= self.publish_at:
            self.publish()
            self.publish = None


def _on_the_clock(monkeypatch: pytest.MonkeyPatch, clock: _Clock) -> _Clock:
    monkeypatch.setattr(launcher, "time", clock)
    return clock


def test_a_host_reaped_but_not_yet_published_gets_the_status_its_reaper_writes(tmp_path, monkeypatch):
    """It waits for the running reaper, not for a fixed guess: the code written just inside the grace is it."""
    with _slow_reaper(tmp_path, delay=30.0) as (host, _):
        at = launcher.REAP_GRACE * 0.9
        clock = _on_the_clock(monkeypatch, _Clock(lambda: forkserver.write_exit(str(tmp_path), 0, 7), at))
        assert launcher.host_exit(tmp_path, host) == (True, 7)
        assert clock.publish is None and clock.now >= at


def test_a_stopped_reaper_is_not_waited_for(tmp_path, monkeypatch):
    with _slow_reaper(tmp_path, delay=30.0) as (host, reaper):
        os.kill(reaper, signal.SIGSTOP)
        try:
            wait_for(lambda: forkserver.read_proc_stat(reaper).state in ("T", "t"), TIMEOUT, "the reaper to stop")
            clock = _on_the_clock(monkeypatch, _Clock())
            assert launcher.host_exit(tmp_path, host) == (True, None)
            assert clock.sleeps == 0
        finally:
            os.kill(reaper, signal.SIGCONT)


def test_a_dead_reaper_is_not_waited_for(tmp_path, monkeypatch):
    with _slow_reaper(tmp_path, delay=30.0) as (host, reaper):
        os.kill(reaper, signal.SIGKILL)
        wait_for(lambda: not forkserver.pid_alive(reaper), TIMEOUT, "the reaper to die")
        clock = _on_the_clock(monkeypatch, _Clock())
        assert launcher.host_exit(tmp_path, host) == (True, None)
        assert clock.sleeps == 0


def test_a_reaper_that_never_publishes_is_waited_for_at_most_the_grace(tmp_path, monkeypatch):
    """The last poll is at most 0.05 s apart from the one before, so it gives up within that of the grace."""
    with _slow_reaper(tmp_path, delay=30.0) as (host, _):
        clock = _on_the_clock(monkeypatch, _Clock())
        assert launcher.host_exit(tmp_path, host) == (True, None)
        assert launcher.REAP_GRACE <= clock.now < launcher.REAP_GRACE + 0.05
