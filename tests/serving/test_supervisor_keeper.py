"""The router keeps the workspace supervisor alive: clients that only speak HTTP never open the home, so
the router is what brings a supervisor that died back (through `revive`, as the CLI does)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kinetic_tui.core.backends.local.workspace import store as home_store
from kinetic_tui.core.serving import router_process
from kinetic_tui.core.store import serving_repo
from kinetic_tui.core.supervisor import process as supervisor
from tests.serving.served import Home, wait_for

DEADLINE = 10.0  # seconds a condition may take before the test fails (it takes milliseconds)


def test_the_router_brings_a_dead_supervisor_back_each_time_it_dies_and_leaves_a_live_one_alone(
    kinetic_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = home_store()
    serving_repo.add_endpoint(store, "web", {"port": 0})
    serving_repo.set_router(store, "web", {"pid": 1, "port": 0})  # a router serves: work only a supervisor moves
    # what the router's checks find: none runs, then one (pid 4242) for three checks, then none again
    found: Iterator[int | None] = iter([None, 4242, 4242, 4242, None])
    checks: list[int | None] = []
    started: list[Path] = []
    twice = threading.Event()

    def running(home: Path | None = None) -> int | None:
        checks.append(next(found, 4242))
        return checks[-1]

    def ensure_running(home: Path | None = None, at_once: bool = False) -> bool:
        started.append(home or kinetic_home)
        if len(started) == 2:
            twice.set()
        return True

    monkeypatch.setattr(supervisor, "running", running)
    monkeypatch.setattr(supervisor, "ensure_running", ensure_running)

    async def scenario() -> None:
        keeper = asyncio.create_task(router_process.keep_supervisor(store, kinetic_home, every=0.001))
        try:
            assert await asyncio.to_thread(twice.wait, DEADLINE), "the supervisor was not brought back twice"
        finally:
            keeper.cancel()

    try:
        asyncio.run(scenario())
    finally:  # the recorded router is no process: nothing may wait for it to stop
        serving_repo.set_router(store, "web", None)
        serving_repo.set_wanted(store, "web", "stopped")
    assert started == [kinetic_home, kinetic_home]
    assert checks[:5] == [None, 4242, 4242, 4242, None]  # a start only after each check that found none


def test_a_killed_supervisor_comes_back_while_only_http_clients_use_the_endpoint(served: Home) -> None:
    """Nothing here opens the home after the kill (a lease probe does not bring anything back): the
    endpoint's router is what starts the new supervisor."""
    assert served.http("main", {"record": {"x": 1}})[0] == 200
    killed = wait_for(lambda: supervisor.running(served.home), DEADLINE, "the supervisor")
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: supervisor.running(served.home) not in (None, 0, killed), DEADLINE, "a new supervisor")
    assert served.http("main", {"record": {"x": 1}})[0] == 200
