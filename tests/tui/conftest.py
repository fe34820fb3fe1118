"""TUI fixtures: a user project whose functions the tests submit, a console on the test's KINETIC_HOME,
a deterministic workspace built through that console, and an app factory with a fixed clock.

Apps run at 80x24, the smallest terminal the console must work in; `settle` waits for the app's workers so a
test asserts on core state only after the action has really finished.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.command import CommandList
from textual.pilot import Pilot

from kinetic_tui.app import KineticApp
from kinetic_tui.core.console import Console
from kinetic_tui.core.job_status import JobStatus
from tests.helpers import projects
from tests.lifecycle.run_projects import stop_jobs

SIZE = (80, 24)

USER_MODULE = """
import time


def add(a, b):
    print(f"adding {a} and {b}", flush=True)
    return a + b


def boom():
    print("about to fail", flush=True)
    raise ValueError("boom")


def chatty(count):
    for number in range(count):
        print(f"line {number}", flush=True)
    return count


def sleepy(seconds):
    time.sleep(seconds)
    return seconds
"""


@pytest.fixture
def tui_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project dir as the cwd whose module `tui_user` the tests submit by reference."""
    return projects.user_project(tmp_path, monkeypatch, "tui_user", USER_MODULE)


@pytest.fixture
def console(tui_project: Path) -> Iterator[Console]:
    yield Console(default_wait=False)


async def build_workspace(console: Console) -> dict[str, str]:
    """A second pool, a succeeded job, a failed job and a long-running one; returns their ids by role."""
    await console.pools.add("l4pool", "l4", 1)
    done = await console.jobs.submit("tui_user:add", args=[2, 3], name="adder", wait=True)
    failed = await console.jobs.submit("tui_user:boom", name="bomb", wait=True)
    running = await console.jobs.submit("tui_user:sleepy", args=[60], name="napper")
    return {"done": done.job_id, "failed": failed.job_id, "running": running.job_id}


AppFactory = Callable[..., KineticApp]


@pytest.fixture
def make_app(console: Console) -> AppFactory:
    """Apps whose clock stands still a minute after the fixture ran (ages read ~1m and never tick)."""
    frozen = time.time() + 60

    def factory(readonly: bool = False) -> KineticApp:
        return KineticApp(console, readonly=readonly, clock=lambda: frozen, poll_interval=0.2)

    return factory


def notes(app: KineticApp, severity: str | None = None) -> list[str]:
    """The messages of the notifications on screen (optionally of one severity)."""
    return [n.message for n in app._notifications if severity is None or n.severity == severity]


async def settle(app: KineticApp, pilot: Pilot) -> None:
    """Wait until every command the app started has finished, then let the screen catch up."""
    commands = [worker for worker in app.workers if worker.group == "commands"]
    if commands:  # an empty list would mean "every worker", the endless event listener included
        await app.workers.wait_for_complete(commands)
    await pilot.pause()


async def wait_for(condition: Callable[[], bool], pilot: Pilot, timeout: float = 10.0) -> None:
    """Poll `condition` while the app keeps running (real jobs finish on their own time)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.05)


async def palette_enter(app: KineticApp, pilot: Pilot, query: str) -> None:
    """Press Enter in the open command palette once its search has highlighted the command `query` names (the
    search runs in a worker: an Enter before it lands picks nothing, or another command)."""

    def offered() -> bool:
        option = app.screen.query_one(CommandList).highlighted_option if app.screen.query(CommandList) else None
        return option is not None and query.lower() in str(option.prompt).splitlines()[0].lower()

    await wait_for(offered, pilot)
    await pilot.press("enter")


def job_status(console: Console, job_id: str) -> JobStatus:
    return console.workspace.backend.job(job_id).status
