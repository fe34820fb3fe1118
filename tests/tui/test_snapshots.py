"""Snapshot tests of every console view at 80x24 and 120x40, on the deterministic workspace of
`snapshot_workspace` (built once per session), with the app's clock fixed and animations off.

Each scenario waits for the state it shows (the app's refresh, a job's whole log, a dialog) before the
screenshot, so the SVG depends only on the workspace. Update with
`pytest tests/tui/test_snapshots.py --snapshot-update`, then look at the SVGs before committing them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from kinetic_tui.app import KineticApp
from kinetic_tui.core.console import Console
from kinetic_tui.core.supervisor import process as supervisor
from kinetic_tui.screens.help import HelpScreen
from kinetic_tui.screens.job_detail import JobScreen
from kinetic_tui.views.forms import StagePicker
from kinetic_tui.widgets.command_bar import CommandBar
from tests.tui.snapshot_live import live_workspace
from tests.tui.snapshot_workspace import VIEWED_AT, locked_workspace

Scenario = Callable[[Pilot], Awaitable[None]]
SnapCompare = Callable[..., bool]  # pytest-textual-snapshot's fixture
SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
SCORER, CORRUPT = "job-00000001", "job-00000002"  # the workspace's first two jobs: logs, and a traceback
WAIT = 10.0


@pytest.fixture(scope="session")
def snapshot_home() -> Iterator[Path]:
    with locked_workspace() as home:
        yield home


@pytest.fixture
def snapshot_app(snapshot_home: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., KineticApp]:
    """Apps on the snapshot workspace: the clock an hour after it was built, one poll (so each pool's
    utilisation history holds exactly one sample), no animations."""
    monkeypatch.setenv("KINETIC_HOME", str(snapshot_home))

    def factory(readonly: bool = False) -> KineticApp:
        app = KineticApp(Console(default_wait=False), readonly=readonly, clock=lambda: VIEWED_AT, poll_interval=3_600)
        app.animation_level = "none"
        return app

    return factory


async def wait_until(pilot: Pilot, condition: Callable[[], bool]) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the screen never reached the state the snapshot shows")
        await pilot.pause(0.05)


async def ready(pilot: Pilot) -> None:
    """The header label and the first poll have finished, and what is on screen shows fresh data."""
    app = pilot.app
    assert isinstance(app, KineticApp)
    await pilot.pause()
    started = [worker for worker in app.workers if worker.group in ("startup", "refresh", "names")]
    if started:
        await app.workers.wait_for_complete(started)
    await app.reload_visible()
    await pilot.pause()


def view(*keys: str) -> Scenario:
    async def scenario(pilot: Pilot) -> None:
        await ready(pilot)
        await pilot.press(*keys)
        await ready(pilot)

    return scenario


def job(job_id: str) -> Scenario:
    """Open `job_id` from the jobs view with Enter; wait for its whole log and its outcome (a remote
    traceback starts at the user's frame, so it names no machine-specific path)."""

    async def scenario(pilot: Pilot) -> None:
        await view("2")(pilot)
        app = pilot.app
        app.current_view.table.select_key(job_id)  # type: ignore[union-attr]
        await pilot.press("enter")
        expected = len((await app.service.jobs.logs(job_id)).lines)  # type: ignore[attr-defined]

        def loaded() -> bool:  # the outcome laid out too: it shows in the frame after it arrived
            screen = app.screen
            return (
                isinstance(screen, JobScreen)
                and screen.outcome is not None
                and len(screen.log_view.buffer) == expected
                and screen.query_one("#job-outcome").region.height > 0
            )

        await wait_until(pilot, loaded)
        await pilot.pause()

    return scenario


async def promote_dialog(pilot: Pilot) -> None:
    """The Production version's picker: None is an illegal target, shown disabled with the reason."""
    await view("4")(pilot)
    pilot.app.current_view.main_table.select_key("fraud:v2")  # type: ignore[union-attr]
    await pilot.press("p")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, StagePicker))


async def help_modal(pilot: Pilot) -> None:
    """`?` on the jobs view once its rows are in: a dimmed key's reason names the selected job."""
    await view("2")(pilot)
    await ready(pilot)
    await pilot.press("question_mark")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))


async def command_bar(pilot: Pilot) -> None:
    """`:p` then Tab: the candidates listed above the prompt, the first one as ghost text."""
    await ready(pilot)
    await pilot.press("colon")
    await ready(pilot)  # the object names for completion arrive in a worker
    await pilot.press("p", "tab")
    bar = pilot.app.query_one(CommandBar)
    await wait_until(pilot, lambda: bool(bar.prompt._suggestion))  # the ghost text comes from a worker
    await pilot.pause()


SCENARIOS: dict[str, Scenario] = {
    "clusters": view("1"),
    "jobs": view("2"),
    "job-logs": job(SCORER),
    "job-traceback": job(CORRUPT),
    "training": view("3"),
    "registry": view("4"),
    "promote-dialog": promote_dialog,
    "endpoints": view("5"),
    "pipelines": view("6"),
    "help": help_modal,
    "command-bar": command_bar,
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", SCENARIOS)
def test_view(name: str, size: str, snapshot_app: Callable[..., KineticApp], snap_compare: SnapCompare) -> None:
    assert snap_compare(snapshot_app(), terminal_size=SIZES[size], run_before=SCENARIOS[name])


@pytest.mark.parametrize("size", SIZES)
def test_readonly_jobs_view_hides_submit_and_cancel(
    size: str, snapshot_app: Callable[..., KineticApp], snap_compare: SnapCompare
) -> None:
    assert snap_compare(snapshot_app(readonly=True), terminal_size=SIZES[size], run_before=view("2"))


@pytest.fixture(scope="session")
def live_home() -> Iterator[Path]:
    with live_workspace() as home:
        yield home


@pytest.mark.parametrize("size", SIZES)
def test_pipelines_view_with_running_steps(
    size: str, live_home: Path, monkeypatch: pytest.MonkeyPatch, snap_compare: SnapCompare
) -> None:
    """Run #2 caught with both training steps running: their job ids in the DAG, the run's time so far."""
    # no driver: the run stays as built
    monkeypatch.setattr(supervisor, "ensure_running", lambda *args, **kwargs: False)
    # the home is the console's, not the environment's: its step jobs run on for the session (the suite's
    # leftover check judges the environment's home at each test's end)
    app = KineticApp(Console(home=live_home, default_wait=False), clock=lambda: VIEWED_AT, poll_interval=3_600)
    app.animation_level = "none"
    assert snap_compare(app, terminal_size=SIZES[size], run_before=view("6"))


@pytest.mark.parametrize("size", [(60, 20), (120, 20)], ids=["narrow", "short"])
def test_terminal_too_small(
    size: tuple[int, int], snapshot_app: Callable[..., KineticApp], snap_compare: SnapCompare
) -> None:
    async def too_small(pilot: Pilot) -> None:
        await ready(pilot)
        assert pilot.app.query_one("#too-small", Static).display

    assert snap_compare(snapshot_app(), terminal_size=size, run_before=too_small)
