"""A launch whose starter dies or gives up: nothing runs unrecorded, and what ran is settled from what it wrote.

Real processes throughout: a client killed between its claim and its spawn, a client killed while the fork
server is stopped with its request, a fork server killed after forking but before replying, a spawn request
that times out while the server is stopped, a cancel while a launch is in flight, and a client that holds
half a request while others spawn.

No clock decides: a launch whose starter died is settled by the first settling pass after the death (that pass
never sleeps), and "the server went on serving" is shown by a server that would hold a half request for an
hour (tests/helpers/fork_servers.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local import forkserver, forkserver_client, lanes, launch_files, launcher
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.paths import kinetic_home
from tests.helpers.fork_servers import start_server
from tests.lifecycle.backend_projects import finish_client, jobs, reap_jobs, start_client, user_project, wait_for

TIMEOUT = 30.0
pytestmark = pytest.mark.skipif(not forkserver.HAVE_PROC, reason="needs Linux /proc")


def _only_job() -> str:
    rows = wait_for(lambda: local_backend().jobs(), TIMEOUT, "the client's job row")
    assert len(rows) == 1
    return rows[0].job_id


def _warm_server(jobs) -> int:
    """Start the home's fork server (by running a job) and return its pid."""
    kinetic.run()(jobs.add).run_async(1, 2).result(timeout=TIMEOUT)
    status = launcher.server_status()
    assert status is not None
    return int(status["pid"])


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _markers(marker_dir: Path) -> list[str]:
    return sorted(p.name for p in marker_dir.iterdir())


T = TypeVar("T")


def _without_waiting(call: Callable[[], T], monkeypatch: pytest.MonkeyPatch) -> T:
    """`call()`, failing the test if it sleeps: what it decides, it decides from what it reads, not from a
    guessed wait (every wait in the backend's settling and cancel paths is a sleeping poll)."""

    def refused(seconds: float) -> None:
        raise AssertionError(f"waited {seconds} s instead of deciding from the launch records")

    with monkeypatch.context() as patch:
        patch.setattr(time, "sleep", refused)
        return call()


def _slow_connection() -> socket.socket:
    """A client that sent the server half a request and sends no more."""
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    slow.connect(str(kinetic_home() / "run" / forkserver.SOCKET_NAME))
    slow.sendall(b'{"op": "spawn", ')
    return slow


def _still_held(slow: socket.socket) -> bool:
    """True while the server keeps the connection open (it has neither answered nor dropped it)."""
    slow.setblocking(False)
    try:
        return slow.recv(1) != b""
    except BlockingIOError:
        return True
    finally:
        slow.setblocking(True)


CLAIM_THEN_DIE = """
    import os, sys
    import kinetic_tui as kinetic
    from kinetic_tui.core.backends.local import launching
    from {package} import jobs

    launching.launch_job = lambda store, row: os._exit(0)  # the client dies between its claim and its spawn
    kinetic.run()(jobs.hold).run_async(0.2, sys.argv[1])
"""


def test_a_job_whose_launcher_died_before_spawning_is_queued_again_and_runs_once(user_project, tmp_path, monkeypatch):
    project, package = user_project
    markers = tmp_path / "markers"
    markers.mkdir()
    client = start_client(project, CLAIM_THEN_DIE.format(package=package).replace("sys.argv[1]", repr(str(markers))))
    client.communicate(timeout=TIMEOUT)
    job_id = _only_job()
    row = local_backend().job(job_id)
    assert (row.status, row.hosts) == (JobStatus.RUNNING, None)  # claimed, its claimer gone: nothing started
    _without_waiting(lambda: local_backend().reconcile(job_id, start=False), monkeypatch)
    assert (local_backend().job(job_id).status, local_backend().job(job_id).hosts) == (JobStatus.PENDING, None)
    assert kinetic.attach(job_id).result(timeout=TIMEOUT)["job"] == job_id
    assert _markers(markers) == [job_id]  # it ran once
    log = launcher.log_path(row.job_dir, 0).read_text()
    assert "ended before starting it; none of it ran, so it is queued again" in log


LANE_THEN_DIE = """
    import os
    import kinetic_tui as kinetic
    from kinetic_tui.core.backends.local import launching
    from {package} import jobs

    launching.launch_lane = lambda store, assignment: os._exit(0)  # dies between opening a lane and starting it
    kinetic.run()(jobs.add).map([(1, 2), (3, 4), (5, 6)])
"""


def test_a_lane_whose_launcher_died_before_spawning_gives_its_inputs_back_at_once(user_project, monkeypatch):
    project, package = user_project
    client = start_client(project, LANE_THEN_DIE.format(package=package))
    client.communicate(timeout=TIMEOUT)
    rows = wait_for(lambda: local_backend().jobs(), TIMEOUT, "the map's rows")
    group = rows[0].group_id
    assert group is not None and {r.lane for r in rows} != {None}  # a lane holds them, never started
    _without_waiting(lambda: local_backend().reconcile(start=False), monkeypatch)
    assert {(r.status, r.lane) for r in local_backend().jobs(group_id=group)} == {(JobStatus.PENDING, None)}
    assert kinetic.attach_batch(group).results(timeout=TIMEOUT) == [3, 7, 11]


SPAWN_VIA_THE_SERVER = """
    import json
    from pathlib import Path
    import kinetic_tui as kinetic
    from kinetic_tui.core.backends.local import forkserver_client
    from {package} import jobs

    receive = forkserver_client.recv_json

    def noted(sock):  # the whole request is in the server's socket: say so, then print the server's answer
        Path({sent!r}).write_text("")
        reply = receive(sock)
        print(json.dumps(reply), flush=True)
        return reply

    forkserver_client.recv_json = noted
    kinetic.run()(jobs.hold).run_async(0.2, {markers!r})
"""


def _spawn_via_the_stopped_server(
    project: Path, package: str, tmp_path: Path
) -> tuple[subprocess.Popen[str], str, Path]:
    """Start a client whose spawn request the (stopped) server holds: (the client, the job id, markers)."""
    markers, sent = tmp_path / "markers", tmp_path / "sent"
    markers.mkdir()
    client = start_client(project, SPAWN_VIA_THE_SERVER.format(package=package, sent=str(sent), markers=str(markers)))
    job_id = wait_for(lambda: [r.job_id for r in local_backend().jobs(status=JobStatus.RUNNING)], TIMEOUT, "the claim")[
        0
    ]
    wait_for(sent.exists, TIMEOUT, "the spawn request to reach the server's socket")
    return client, job_id, markers


def test_a_job_whose_client_was_killed_while_the_server_held_its_request_settles_from_its_result(
    jobs, user_project, tmp_path
):
    """The reported repro: stop the fork server, kill the submitting client, continue the server. (Whether the
    server forks the job of a client already gone is its own race, so the job is followed by attaching, as a user
    would, not by waiting for the server's fork to exit.)"""
    server = _warm_server(jobs)
    with _stopped(server):
        client, job_id, markers = _spawn_via_the_stopped_server(*user_project, tmp_path)
        client.kill()
        client.communicate()
    assert kinetic.attach(job_id).result(timeout=TIMEOUT)["job"] == job_id
    row = local_backend().job(job_id)
    assert (row.status, row.phase) == (JobStatus.SUCCEEDED, None)
    assert _markers(markers) == [job_id]


def _exited(server: int) -> None:
    """The injected server has died. Waited for, not asserted at once: a client sees the server's socket close
    while the server is still exiting, a moment before the kernel marks it dead (a CI run caught that)."""
    wait_for(lambda: not forkserver.pid_alive(server), TIMEOUT, f"the injected server {server} to exit")


def test_a_job_forked_by_a_server_killed_before_replying_is_adopted(jobs, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    server = start_server("before-reply")
    handle = kinetic.run()(jobs.hold).run_async(0.3, str(markers))
    _exited(server)
    assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id
    row = local_backend().job(handle.job_id)
    assert (row.status, row.phase, row.detail) == (JobStatus.SUCCEEDED, None, None)
    assert row.hosts is not None and row.hosts[0].reaper == server  # adopted from the server's record
    assert _markers(markers) == [handle.job_id]


@pytest.mark.parametrize(
    ("mode", "logged"),
    [
        # the server died holding the spawn request, having forked nothing
        ("on-request", "ended before answering the spawn request; none of it ran, so it is queued again"),
        # it recorded the host started and died before its go-ahead: the host exits unrun (its exit status
        # and missing result would otherwise fail a job that never ran)
        ("before-go", "none of it ran, so it is queued again"),
    ],
)
def test_a_job_whose_server_died_before_it_ran_is_queued_again_and_runs_once(jobs, tmp_path, mode, logged):
    """Only our helper failed, and nothing of the job ran: it is not failed but started again, by a new server."""
    markers = tmp_path / "markers"
    markers.mkdir()
    server = start_server(mode)
    handle = kinetic.run()(jobs.hold).run_async(0.0, str(markers))
    assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id
    _exited(server)
    row = local_backend().job(handle.job_id)
    assert (row.status, row.phase, row.detail) == (JobStatus.SUCCEEDED, None, None)
    assert _markers(markers) == [handle.job_id]  # it ran once, in its second launch
    assert logged in launcher.log_path(row.job_dir, 0).read_text()


@pytest.mark.parametrize("mode", ["on-request", "before-go"])  # as for a job, above
def test_a_lane_whose_server_died_before_it_ran_gives_its_inputs_back(jobs, mode):
    server = start_server(mode)
    batch = kinetic.run()(jobs.add).map([(1, 2), (3, 4), (5, 6)])
    assert batch.results(timeout=TIMEOUT) == [3, 7, 11]
    _exited(server)
    rows = local_backend().jobs(group_id=batch.group_id)
    assert {(r.status, r.phase) for r in rows} == {(JobStatus.SUCCEEDED, None)}


def test_a_job_adopted_before_its_host_said_it_never_ran_is_queued_again(jobs, tmp_path):
    """The client adopts the recorded host while it is stopped (so alive); once continued, it finds its
    starter gone and exits unrun, and the next settling pass judges the launch again rather than the exit."""
    markers = tmp_path / "markers"
    markers.mkdir()
    start_server("before-go-stopped")
    handle = kinetic.run()(jobs.hold).run_async(0.0, str(markers))
    local_backend().reconcile(handle.job_id, start=False)  # adopts the recorded host, stopped so alive
    row = local_backend().job(handle.job_id)
    assert row.status is JobStatus.RUNNING and row.hosts is not None, row.detail
    (host,) = row.hosts
    os.kill(host.pid, signal.SIGCONT)
    wait_for(lambda: host.never_ran(row.job_dir), TIMEOUT, "the host to say it never ran")
    assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id
    assert _markers(markers) == [handle.job_id]
    assert "none of it ran, so it is queued again" in launcher.log_path(row.job_dir, 0).read_text()


def test_a_lane_adopted_before_its_host_said_it_never_ran_gives_its_inputs_back(jobs):
    """One input, so one lane: while stopped, the host still holds the dead server's socket and lock (it drops
    them only once let run), so a second lane could not be spawned until it is continued."""
    start_server("before-go-stopped")
    batch = kinetic.run()(jobs.add).map([(1, 2)])
    local_backend().reconcile(start=False)  # adopts the stopped lane's recorded host
    store = local_backend().store
    (lane,) = lanes.active(store)
    assert lane.hosts is not None
    (host,) = lane.hosts
    assert getattr(forkserver.read_proc_stat(host.pid), "state", None) == "T"
    os.kill(host.pid, signal.SIGCONT)
    wait_for(lambda: host.never_ran(lane.dir), TIMEOUT, "the lane's host to say it never ran")
    assert batch.results(timeout=TIMEOUT) == [3]
    assert lanes.get(store, lane.lane_id).ended_at is not None


def test_a_slice_whose_server_died_between_its_hosts_fails_at_once_with_its_started_host_stopped(jobs):
    """The first settling pass after the launch failed settles it (that pass stops host 0, and so waits for
    host 0 to go, but never for a guessed time)."""
    local_backend().add_pool("slice", "v4-2x2x2", 2)
    server = start_server("mid-slice")
    handle = kinetic.run(accelerator="v4-2x2x2")(jobs.hold).run_async(30.0)
    _exited(server)
    local_backend().reconcile(handle.job_id, start=False)
    row = local_backend().job(handle.job_id)
    assert (row.status, row.phase) == (JobStatus.FAILED, "launch")
    assert "died before it started host 1; its started hosts were stopped" in (row.detail or "")
    (host0,) = launcher.launch_state(row.job_dir, 2).started
    assert not host0.is_alive()


def test_a_spawn_request_that_timed_out_is_never_performed(jobs, tmp_path, monkeypatch):
    """The client keeps its end of the timed-out request open, so the continued server's answer to it shows
    that the server read it, and refused it as given up."""
    markers = tmp_path / "markers"
    markers.mkdir()
    server = _warm_server(jobs)
    monkeypatch.setattr(forkserver_client, "START_TIMEOUT", 1.0)
    kept: list[socket.socket] = []
    receive = forkserver_client.recv_json

    def keeping(sock: socket.socket) -> dict:
        kept.append(sock.dup())
        return receive(sock)

    monkeypatch.setattr(forkserver_client, "recv_json", keeping)
    with _stopped(server):
        handle = kinetic.run()(jobs.hold).run_async(0.1, str(markers))
        row = local_backend().job(handle.job_id)
        assert (row.status, row.phase) == (JobStatus.FAILED, "launch")
    (request,) = kept
    with request:
        request.settimeout(TIMEOUT)
        reply = receive(request)
    assert list(reply) == ["taken"] and list(reply["taken"]) == ["abandoned"]
    assert _markers(markers) == []
    assert "did not answer the spawn request: timed out" in (row.detail or "")
    assert not list(row.job_dir.glob("started-*"))
    assert launcher.abandon(row.job_dir)  # the launch stays given up
    assert launcher.server_status() is not None  # the server goes on serving


def test_cancelling_a_job_whose_spawn_the_stopped_server_holds_never_runs_it(jobs, user_project, tmp_path, monkeypatch):
    """The cancel gives the launch up without waiting for the stopped server; the continued server then
    answers the client that the launch was given up (the client prints that answer), and forks nothing."""
    server = _warm_server(jobs)
    with _stopped(server):
        client, job_id, markers = _spawn_via_the_stopped_server(*user_project, tmp_path)
        try:
            row = _without_waiting(lambda: local_backend().cancel(job_id, grace=0.1), monkeypatch)
            assert row.status is JobStatus.CANCELLED
        except BaseException:
            client.kill()
            client.communicate()
            raise
    reply = finish_client(client)
    assert list(reply) == ["taken"] and list(reply["taken"]) == ["abandoned"]
    assert _markers(markers) == []
    assert launcher.launch_state(row.job_dir, 1).started == []


def test_a_client_holding_half_a_request_delays_no_other_spawn(jobs):
    """Before, each spawn behind a slow client waited for it to time out: with a server that would wait an
    hour, the spawns are served while the slow client's connection is still held."""
    start_server("patient")
    with _slow_connection() as slow:
        for _ in range(3):
            handle = kinetic.run()(jobs.add).run_async(1, 2)
            assert local_backend().job(handle.job_id).hosts  # its spawn was answered
            assert handle.result(timeout=TIMEOUT) == 3
        assert _still_held(slow)


def test_a_stopped_client_mid_request_delays_no_reaping(jobs, tmp_path):
    """A server that would hold the slow client an hour reaps a job that ends meanwhile."""
    start_server("patient")
    release = tmp_path / "release"
    handle = kinetic.run()(jobs.gated).run_async(str(release))
    row = wait_for(
        lambda: local_backend().job(handle.job_id).hosts and local_backend().job(handle.job_id), TIMEOUT, "hosts"
    )
    with _slow_connection() as slow:
        release.write_text("")
        wait_for(lambda: launcher.exit_code(row.job_dir, 0) is not None, TIMEOUT, "the exit file")
        assert _still_held(slow)
    assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id


def test_a_client_mid_request_is_dropped_after_the_request_timeout(jobs):
    """The slow client's own connection is closed once it timed out (REQUEST_TIMEOUT, waited for as an event)."""
    _warm_server(jobs)
    with _slow_connection() as slow:
        dropped = threading.Event()

        def wait_drop() -> None:
            with contextlib.suppress(OSError):
                if slow.recv(1) == b"":
                    dropped.set()

        waiter = threading.Thread(target=wait_drop, daemon=True)
        waiter.start()
        waiter.join(forkserver.REQUEST_TIMEOUT + TIMEOUT)
        assert dropped.is_set()  # its connection is closed once it timed out


def test_a_launch_is_taken_by_exactly_one_party(tmp_path):
    """A spawner and an abandoning reader race for the same launch: one wins, both see the same winner."""
    token = launcher.write_claim(tmp_path)
    won, owner = launch_files.take_spawn(str(tmp_path), token, "spawner")
    assert won and "spawner" in owner
    lost, seen = launch_files.take_spawn(str(tmp_path), token, "abandoned")
    assert not lost and seen == owner
    assert not launcher.abandon(tmp_path)
    assert not list(tmp_path.glob("*.tmp"))
