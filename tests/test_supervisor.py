"""The workspace supervisor: one leased process per home that moves the queue and the studies while no
client looks, comes back when any process of ours touches a workspace with due work, stops on `down`, and
exits by itself when nothing has been due for its linger (0 in this suite, unless a test sets it).

These tests start the real `kinetic-tui` in subprocesses and then only *read* the store through a raw
SQLite connection: opening the workspace through the product would itself revive the supervisor.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.supervisor import duties, loop
from kinetic_tui.core.supervisor import process as supervisor
from kinetic_tui.core.supervisor.lease import Lease
from tests.helpers import processes
from tests.lifecycle.backend_projects import wait_for
from tests.lifecycle.run_projects import client_result, make_project, run_client

TIMEOUT = 60.0
SCRIPT_HEAD = "pool remove cpu\npool add solo --accelerator cpu --nodes 1\n"


def sleep_then_sqrt(seconds: float) -> str:
    """A job that holds the only node for `seconds`, and one queued behind it (both detached)."""
    return (
        f"{SCRIPT_HEAD}submit time:sleep --args '[{seconds}]' --accelerator cpu --detach\n"
        "submit math:sqrt --args '[4]' --accelerator cpu --detach\n"
    )


def kt(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KINETIC_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "kinetic_tui", *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def script(home: Path, text: str) -> subprocess.CompletedProcess[str]:
    done = kt(home, "--script", "-", "--output", "json", stdin=text)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def read(home: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def statuses(home: Path) -> list[str]:
    return [status for (status,) in read(home, "SELECT status FROM jobs ORDER BY seq")]


def looked_at(home: Path) -> list[str]:
    """The statuses a command finds (it settles finished jobs as it looks), oldest job first."""
    done = kt(home, "jobs", "list", "--json")
    assert done.returncode == 0, done.stderr
    return [job["status"] for job in reversed(json.loads(done.stdout)["result"])]


def supervisors(home: Path) -> list[int]:
    return [pid for pid in processes.serving(home) if "kinetic_tui.core.supervisor" in processes.describe(pid)]


def queue_two(home: Path) -> None:
    """A client that queues a 1.5 s job and a second behind it on a one-node pool, then exits."""
    script(home, sleep_then_sqrt(1.5))


def test_a_job_queued_by_an_exited_client_starts_and_the_supervisor_then_exits(kinetic_home: Path) -> None:
    queue_two(kinetic_home)
    assert statuses(kinetic_home)[-1] == "PENDING"
    assert wait_for(lambda: supervisor.running(kinetic_home), 10, "the supervisor to start")
    wait_for(lambda: statuses(kinetic_home)[-1] != "PENDING", TIMEOUT, "the queued job to start")
    wait_for(lambda: supervisor.running(kinetic_home) is None and not supervisors(kinetic_home), 10, "it to exit")
    wait_for(lambda: looked_at(kinetic_home) == ["SUCCEEDED", "SUCCEEDED"], TIMEOUT, "both jobs to succeed")


MAP_MAIN = """
import json, time

import kinetic_tui as kinetic


@kinetic.run()
def nap(x):
    time.sleep(0.02)
    return x


if __name__ == "__main__":
    batch = nap.map(range(40))
    print("RESULT " + json.dumps(batch.group_id))
"""


def test_a_map_whose_client_exited_is_driven_to_its_end_by_the_supervisor_alone(
    kinetic_home: Path, tmp_path: Path
) -> None:
    """Its first lanes take a part of the batch; the supervisor, due while inputs wait and again whenever a
    lane's process ends, opens the next lanes and settles the last ones, with nobody else looking."""
    project = make_project(tmp_path / "mapproj", {"mappkg/__init__.py": "", "mappkg/main.py": MAP_MAIN})
    group_id = client_result(run_client(project, "-m", "mappkg.main"))
    first_lanes = read(kinetic_home, "SELECT COUNT(*) FROM lanes")[0][0]
    assert wait_for(lambda: supervisor.running(kinetic_home), 10, "the supervisor to start")

    def settled() -> bool:
        open_lanes = read(kinetic_home, "SELECT COUNT(*) FROM lanes WHERE ended_at IS NULL")[0][0]
        return open_lanes == 0 and set(statuses(kinetic_home)) == {"SUCCEEDED"}

    wait_for(settled, TIMEOUT, "every input to succeed and every lane to close")
    assert len(statuses(kinetic_home)) == 40
    assert read(kinetic_home, f"SELECT COUNT(*) FROM lanes WHERE group_id = '{group_id}'")[0][0] > first_lanes
    wait_for(lambda: supervisor.running(kinetic_home) is None and not supervisors(kinetic_home), 10, "it to exit")


def test_a_killed_supervisor_is_brought_back_by_the_next_command_and_the_queue_drains(kinetic_home: Path) -> None:
    queue_two(kinetic_home)
    pid = wait_for(lambda: supervisor.running(kinetic_home), 10, "the supervisor to start")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: supervisor.running(kinetic_home) is None, 10, "the lease to be released by the kernel")
    (first, _) = (job_id for (job_id,) in read(kinetic_home, "SELECT job_id FROM jobs ORDER BY seq"))
    first_dir = kinetic_home / "local" / "jobs" / first  # read, never scheduled from: nobody may drive here
    wait_for(lambda: launcher.exit_code(first_dir, 0) is not None, TIMEOUT, "the running job to end")
    assert statuses(kinetic_home)[-1] == "PENDING"  # it ended; with nobody driving, the queued one stays
    assert kt(kinetic_home, "jobs", "list").returncode == 0  # one command, then nobody looks again
    wait_for(lambda: statuses(kinetic_home)[-1] != "PENDING", TIMEOUT, "the queue to drain")


def test_a_study_keeps_submitting_trials_after_its_client_exits(kinetic_home: Path) -> None:
    script(
        kinetic_home,
        SCRIPT_HEAD + "tune s --space lr=0.1,0.3,0.5 --strategy grid --max-trials 3 --pool solo --detach\n",
    )

    def settled() -> bool:
        trials = read(kinetic_home, "SELECT json_extract(record, '$.status') FROM tuning_trials WHERE study = 's'")
        return [status for (status,) in trials] == ["Completed"] * 3

    wait_for(settled, TIMEOUT, "the study's three trials to complete with no client")
    assert read(kinetic_home, "SELECT best FROM tuning_studies")[0][0] is not None
    wait_for(lambda: supervisor.running(kinetic_home) is None, 10, "the supervisor to exit")


def test_down_stops_the_supervisor_before_it_cancels_the_queue(kinetic_home: Path) -> None:
    script(kinetic_home, sleep_then_sqrt(30))
    wait_for(lambda: supervisor.running(kinetic_home), 10, "the supervisor to start")
    done = kt(kinetic_home, "down", "--yes")
    assert done.returncode == 0, done.stderr
    assert supervisor.running(kinetic_home) is None and not supervisors(kinetic_home)
    assert statuses(kinetic_home) == ["CANCELLED", "CANCELLED"]


def test_exactly_one_of_many_starters_serves_the_home(kinetic_home: Path) -> None:
    script(kinetic_home, sleep_then_sqrt(6))
    supervisor.stop(kinetic_home)
    started = []
    threads = [
        threading.Thread(target=lambda: started.append(supervisor.ensure_running(kinetic_home))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert any(started)
    # the losers find the lease taken and exit; the one left is the lease's holder
    wait_for(lambda: len(supervisors(kinetic_home)) == 1, 20, "all but one starter to exit")
    assert supervisors(kinetic_home) == [supervisor.running(kinetic_home)]
    wait_for(lambda: statuses(kinetic_home)[-1] != "PENDING", TIMEOUT, "the queue to drain")


def test_a_supervisor_stopped_as_it_starts_is_stopped_not_left_to_start_later(kinetic_home: Path) -> None:
    """The starter hands its lease to the child, so `stop` in the child's first instants finds and stops
    it; were the lease taken by the child itself, this stop would see nobody and the child would serve."""
    for _ in range(3):
        assert supervisor.ensure_running(kinetic_home)
        assert supervisor.running(kinetic_home) not in (None, 0)  # named from the start
        assert supervisor.stop(kinetic_home) is not None
        assert supervisor.running(kinetic_home) is None
        wait_for(lambda: not supervisors(kinetic_home), 10, "the stopped supervisor to be gone")


def test_the_lease_is_exclusive_and_names_its_holder(kinetic_home: Path) -> None:
    lease = Lease.acquire(kinetic_home)
    assert lease is not None and Lease.acquire(kinetic_home) is None
    assert supervisor.running(kinetic_home) == os.getpid()
    lease.release()
    assert supervisor.running(kinetic_home) is None
    assert supervisor.stop(kinetic_home) is None


class Broken:
    name = "broken"
    pause = None

    def __init__(self) -> None:
        self.tries = 0

    def due(self, home: duties.Supervised) -> bool:
        return True

    def tick(self, home: duties.Supervised) -> None:
        self.tries += 1
        raise RuntimeError("this duty always fails")


class Countdown:
    name = "countdown"
    pause = None

    def __init__(self, rounds: int) -> None:
        self.left = rounds

    def due(self, home: duties.Supervised) -> bool:
        return self.left > 0

    def tick(self, home: duties.Supervised) -> None:
        self.left -= 1


def test_a_failing_duty_does_not_stall_the_others(kinetic_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    countdown = Countdown(5)
    monkeypatch.setattr(duties, "DUTIES", (Broken(), countdown))
    home = duties.Supervised(kinetic_home, None, lambda: None)  # type: ignore[arg-type]
    failings = {duty.name: loop.Failing() for duty in duties.DUTIES}
    for _ in range(5):
        assert all(loop._turn(home, duty, failings[duty.name]) for duty in duties.DUTIES)
    assert countdown.left == 0
    monkeypatch.setattr(duties, "DUTIES", (countdown,))
    loop.serve(home, poll=0.01)  # returns: nothing is due
    assert supervisor.running(kinetic_home) is None


class Stuck:
    """A duty whose round waits until released, as a pipeline driver's round waits out a busy store."""

    name = "stuck"
    pause = None

    def __init__(self) -> None:
        self.entered, self.release, self.rounds = threading.Event(), threading.Event(), 0

    def due(self, home: duties.Supervised) -> bool:
        return self.rounds == 0

    def tick(self, home: duties.Supervised) -> None:
        self.entered.set()
        self.release.wait(60)
        self.rounds += 1


def test_a_duty_stuck_in_its_round_does_not_hold_up_the_others(
    kinetic_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint controllers must restart a dead router while the job queue or a pipeline driver waits."""
    stuck, countdown = Stuck(), Countdown(20)
    monkeypatch.setattr(duties, "DUTIES", (stuck, countdown))
    home = duties.Supervised(kinetic_home, None, lambda: None)  # type: ignore[arg-type]
    seen: list[tuple[int, int]] = []

    def release_once_the_other_is_done() -> None:
        try:
            if stuck.entered.wait(30):
                deadline = time.monotonic() + 30
                while countdown.left and time.monotonic() < deadline:
                    time.sleep(0.01)
                seen.append((stuck.rounds, countdown.left))  # while the stuck round still waits
        finally:
            stuck.release.set()

    releaser = threading.Thread(target=release_once_the_other_is_done)
    releaser.start()
    loop.serve(home, poll=0.01)  # in the main thread, as the supervisor runs it (it sets a signal handler)
    releaser.join()
    assert seen == [(0, 0)], "the other duty waited for the stuck one"
    assert stuck.rounds == 1  # it returned once nothing was due, after the stuck round ended


def test_a_duty_that_keeps_failing_backs_off_and_logs_one_traceback(
    kinetic_home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken, countdown, now = Broken(), Countdown(100), [0.0]
    monkeypatch.setattr(duties, "DUTIES", (broken, countdown))
    home = duties.Supervised(kinetic_home, None, lambda: None)  # type: ignore[arg-type]
    failings = {duty.name: loop.Failing(clock=lambda: now[0]) for duty in duties.DUTIES}
    for _ in range(60):  # a minute of rounds 1 s apart; the pause doubles from 0.2 s, at most 30 s
        for duty in duties.DUTIES:
            loop._turn(home, duty, failings[duty.name])
        now[0] += 1.0
    assert broken.tries == 9 and countdown.left == 40  # tries at 0, 1, 2, 3, 5, 9, 16, 29 and 55 s; 60 rounds
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "this duty always fails" in caplog.records[-1].getMessage()


class Switch:
    """A duty due while `on` is set."""

    name = "switch"
    pause = None

    def __init__(self) -> None:
        self.on, self.rounds = threading.Event(), 0

    def due(self, home: duties.Supervised) -> bool:
        return self.on.is_set()

    def tick(self, home: duties.Supervised) -> None:
        self.rounds += 1
        self.on.clear()


def test_the_loop_lingers_after_its_last_duty_and_serves_one_due_again(
    kinetic_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    switch = Switch()
    monkeypatch.setattr(duties, "DUTIES", (switch,))
    home = duties.Supervised(kinetic_home, None, lambda: None)  # type: ignore[arg-type]
    switch.on.set()
    seen: dict[str, object] = {}

    def poke() -> None:  # the loop runs in the main thread (it sets a signal handler), so this one pokes it
        wait_for(lambda: switch.rounds == 1, 10, "the first round")
        time.sleep(0.3)  # nothing due for 0.3 s: still serving
        seen["serving"] = supervisor.running(kinetic_home)
        switch.on.set()  # due again within the linger: the same loop serves it
        wait_for(lambda: switch.rounds == 2, 10, "the second round")
        seen["second"] = time.monotonic()

    poker = threading.Thread(target=poke, daemon=True)
    poker.start()
    loop.serve(home, poll=0.01, linger=0.8)
    returned = time.monotonic()
    poker.join(10)
    assert seen["serving"] == os.getpid() and switch.rounds == 2
    assert isinstance(seen["second"], float) and returned - seen["second"] >= 0.6  # the linger, less polls
    assert supervisor.running(kinetic_home) is None


@pytest.mark.parametrize(
    ("value", "linger"),
    [(None, loop.LINGER), ("", loop.LINGER), ("2.5", 2.5), ("0", 0.0), ("-3", 0.0), ("soon", loop.LINGER)],
)
def test_the_linger_comes_from_the_environment(
    value: str | None, linger: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv(loop.LINGER_ENV, raising=False)
    else:
        monkeypatch.setenv(loop.LINGER_ENV, value)
    assert loop.linger_from_env() == linger


def test_a_lingering_supervisor_starts_the_next_queued_job_itself_then_exits(
    kinetic_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(loop.LINGER_ENV, "3")
    queue_two(kinetic_home)
    pid = wait_for(lambda: supervisor.running(kinetic_home), 10, "the supervisor to start")
    wait_for(lambda: statuses(kinetic_home)[-1] != "PENDING", TIMEOUT, "the queued job to start")
    script(kinetic_home, "submit time:sleep --args '[1]' --accelerator cpu --detach\n")  # queued by a new client
    assert supervisor.running(kinetic_home) == pid  # it was still serving: nobody started another
    wait_for(lambda: statuses(kinetic_home)[-1] != "PENDING", TIMEOUT, "the third job to start")
    wait_for(lambda: supervisor.running(kinetic_home) is None and not supervisors(kinetic_home), 20, "it to exit")
    assert supervisors(kinetic_home) == []
