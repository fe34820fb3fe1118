"""Endpoints outlive their client: stop drains and stops every process, start brings the endpoint back
from the store, a crashed instance is replaced while its request in flight gets a 503 at once, and after
every process of ours was killed `endpoint start` restores the endpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from kinetic_tui.core.paths import using_home
from kinetic_tui.core.store import serving_repo
from tests.helpers import processes
from tests.serving.served import Home, wait_for


def test_stop_then_start_keeps_config_port_and_history(served: Home) -> None:
    served.run("endpoint create cycle --model g --tick-seconds 0")
    served.run("observe cycle 0 --tick 0")
    port = served.config("cycle").port
    stopped = served.run("endpoint stop cycle")
    assert stopped["serving"]["router_pid"] is None and stopped["serving"]["instances"] == []
    try:
        started = served.run("endpoint start cycle")
        assert started["serving"]["port"] == port and len(started["history"]) == 1
        assert served.http("cycle", {"record": {"x": 1}})[0] == 200
        assert "listening" in "\n".join(served.run("endpoint logs cycle")["lines"])
    finally:
        served.run("endpoint stop cycle")


def test_a_crashed_instance_is_replaced_and_its_request_gets_503_at_once(served: Home) -> None:
    served.run("endpoint create fragile --model g --tick-seconds 0")
    try:
        (first,) = wait_for(lambda: served.instances("fragile"), 60, "an instance")
        answers: list[tuple[int, object, float]] = []

        def slow_request() -> None:
            status, body = served.http("fragile", {"record": {"sleep": 30}, "model": "g:v5"})
            answers.append((status, body, time.monotonic()))

        wait_for(lambda: first[0] in served.http("fragile", path="")[1]["instances"], 30, "the router routing to it")
        thread = threading.Thread(target=slow_request)
        thread.start()
        wait_for(
            lambda: served.http("fragile", path="")[1]["in_flight_by_instance"].get(first[0]) == 1,
            30,
            "the request in flight on that instance",
        )
        killed = time.monotonic()
        os.kill(first[3], signal.SIGKILL)
        thread.join(30)
        ((status, body, when),) = answers
        assert status == 503 and body["error"]["type"] == "InstanceLost" and when - killed < 10
        replaced = wait_for(
            lambda: [row for row in served.instances("fragile") if row[0] != first[0]], 60, "a replacement"
        )
        assert replaced and served.http("fragile", {"record": {"x": 1}})[0] == 200
        assert any(e["instance"] == first[0] for e in served.events("fragile", "lost"))
    finally:
        served.run("endpoint stop fragile")


def test_after_every_process_was_killed_start_restores_the_endpoint(served: Home) -> None:
    served.run("endpoint create phoenix --model g --tick-seconds 0")
    served.run("observe phoenix 0 --tick 0")
    try:
        wait_for(lambda: served.instances("phoenix"), 60, "an instance")
        served.kill_all()
        assert not processes.serving(served.home)
        restored = served.run("endpoint start phoenix")
        assert len(restored["history"]) == 1
        wait_for(lambda: served.http("phoenix", {"record": {"x": 1}})[0] == 200, 60, "serving again")
        wait_for(lambda: served.answering("main"), 60, "the other endpoints back too")
    finally:
        served.run("endpoint stop phoenix")


def test_an_instance_recorded_but_never_submitted_is_forgotten_and_replaced(served: Home) -> None:
    """The controller records an instance before it submits its job; killed in between, it leaves a row
    with no job, which the next controller must not count as serving."""
    served.run("endpoint create halfway --model g --tick-seconds 0")
    try:
        wait_for(lambda: served.instances("halfway"), 60, "an instance")
        served.kill_all()
        with using_home(served.home):
            from kinetic_tui.core.backends.local.workspace import store

            serving_repo.add_instance(store(), "halfway", "job-0badc0de")
        served.run("endpoint start halfway")
        wait_for(lambda: served.instances("halfway"), 60, "a real instance in its place")
        assert {"instance": "job-0badc0de", "status": "never submitted", "kind": "lost"} in served.events(
            "halfway", "lost"
        )
        assert all(row[0] != "job-0badc0de" for row in served.instances("halfway", state=None))
        wait_for(lambda: served.answering("main"), 60, "the other endpoints back too")
    finally:
        served.run("endpoint stop halfway")


def test_a_dead_routers_pid_given_to_another_process_is_neither_taken_for_it_nor_signalled(served: Home) -> None:
    """The kernel reuses pids: once a router is gone, its recorded pid may name any process. The controller
    must bring the router back rather than wait on that process, and `endpoint stop` must never signal it."""
    served.run("endpoint create reused --model g --tick-seconds 0")
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        wait_for(lambda: served.answering("reused"), 60, "the endpoint answering")
        with using_home(served.home):
            from kinetic_tui.core.backends.local.workspace import store

            router = serving_repo.endpoint(store(), "reused")[2]  # type: ignore[index]
            os.kill(router["pid"], signal.SIGKILL)
            serving_repo.set_router(store(), "reused", router | {"pid": stranger.pid})
        wait_for(lambda: served.answering("reused"), 60, "a new router in place of the dead one")
        shown = served.run("show endpoint reused")["serving"]["router_pid"]
        assert shown not in (None, stranger.pid)
        with using_home(served.home):
            from kinetic_tui.core.backends.local.workspace import store

            os.kill(shown, signal.SIGKILL)  # and once more, now to stop it: the stop must leave the stranger be
            serving_repo.set_router(store(), "reused", router | {"pid": stranger.pid})
        served.run("endpoint stop reused")
        assert stranger.poll() is None, "endpoint stop signalled a process that is not its router"
    finally:
        stranger.kill()
        stranger.wait()
        served.run("endpoint stop reused")
