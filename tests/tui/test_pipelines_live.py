"""Pipelines view, live: a run's running step and its job id appear in the DAG as the driver (the workspace
supervisor) commits them, Enter on a step opens its job's screen, `c` cancels the selected run (confirmed),
and the run history shows each run's status and duration."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from textual.pilot import Pilot

from kinetic_tui.app import KineticApp
from kinetic_tui.core.console import Console
from kinetic_tui.screens.dialogs import ConfirmScreen
from kinetic_tui.screens.job_detail import JobScreen
from kinetic_tui.widgets.dag_view import DagView
from kinetic_tui.widgets.keyed_table import KeyedTable
from tests.tui.conftest import AppFactory, job_status, notes, settle, wait_for
from tests.tui.test_training_view import open_view

MODULE = """
import time
from pathlib import Path
from kinetic_tui import Pipeline, Step


def gate(name):
    # the gates' directory is a param: a fork server outlives a test, and with it its environment
    def step(inputs):
        gates = Path(inputs["gates"])
        print(f"{name} waiting for its release", flush=True)
        while not (gates / f"{name}.release").exists():
            time.sleep(0.02)
        return {"done": name}
    return step


def gated():
    return Pipeline("gated", [Step("first", gate("first"), {"gates": "params.gates"}),
                              Step("second", lambda i: {"seen": i["x"]}, {"x": "first.done"})], {"gates": ""})
"""


@pytest.fixture
def gates(tui_project: Path, tmp_path: Path) -> Path:
    found = tmp_path / "gates"
    found.mkdir()
    (tui_project / "live_user.py").write_text(MODULE)
    return found


@asynccontextmanager
async def running_step(console: Console, gates: Path, make_app: AppFactory) -> AsyncIterator[tuple[KineticApp, Pilot]]:
    """An app on view 6 once `gated`, run detached (the supervisor drives it), shows its first step running."""
    await console.pipelines.register("live_user:gated")
    await console.pipelines.run("gated", {"gates": str(gates)}, wait=False)
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await open_view(app, pilot, "6")
        await wait_for(lambda: "[▶ first job-" in dag(app), pilot, timeout=30)
        yield app, pilot


def dag(app) -> str:
    return app.query_one(DagView).render().plain


def step_job(run) -> str:
    return next(step.job_id for step in run.steps if step.name == "first")


async def test_the_dag_follows_a_running_step_and_its_job_id_then_the_run_settles(
    console: Console, gates: Path, make_app: AppFactory
) -> None:
    async with running_step(console, gates, make_app) as (app, pilot):
        run = await console.pipelines.get_run("gated", 1)
        assert f"[▶ first {step_job(run)}]" in dag(app) and "[· second]" in dag(app)
        history = app.query_one("#runs", KeyedTable).get_row("#1")
        assert str(history[1]) == "▶ Running" and str(history[2]) != "-"  # running for some time so far
        (gates / "first.release").touch()
        await wait_for(lambda: "[✓ second]" in dag(app), pilot, timeout=30)  # the app's polls follow it
        assert "[✓ first]" in dag(app)  # a settled step no longer shows its job id
        # the run settles after its last step does: the table shows it at the poll that sees it
        await wait_for(lambda: str(app.query_one("#runs", KeyedTable).get_row("#1")[1]) == "✓ Succeeded", pilot)
        done = await console.pipelines.get_run("gated", 1)
        assert done.finished_at is not None and done.started_at is not None and done.finished_at >= done.started_at


async def test_enter_on_a_step_opens_its_job_screen_and_a_step_with_no_job_says_so(
    console: Console, gates: Path, make_app: AppFactory
) -> None:
    async with running_step(console, gates, make_app) as (app, pilot):
        steps = app.query_one("#steps", KeyedTable)
        steps.focus()
        steps.select_key("second")  # still Pending: no job yet
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, JobScreen)
        assert any("'second' of run #1 ran no job (Pending)" in note for note in notes(app, "warning"))
        steps.select_key("first")
        await pilot.press("enter")
        await wait_for(lambda: isinstance(app.screen, JobScreen), pilot)
        run = await console.pipelines.get_run("gated", 1)
        screen = app.screen
        assert screen.job_id == step_job(run)
        await wait_for(
            lambda: any("first waiting for its release" in line for line in screen.log_view.buffer.lines), pilot
        )
        (gates / "first.release").touch()
        await wait_for(lambda: screen.outcome is not None, pilot, timeout=30)  # the job's result, live
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, JobScreen)


async def test_c_cancels_the_selected_running_run_after_asking_and_refuses_a_finished_one(
    console: Console, gates: Path, make_app: AppFactory
) -> None:
    async with running_step(console, gates, make_app) as (app, pilot):
        job_id = step_job(await console.pipelines.get_run("gated", 1))
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen) and "run #1 of gated" in app.screen.question
        await pilot.press("n")
        await settle(app, pilot)
        assert (await console.pipelines.get_run("gated", 1)).status == "Running"
        await pilot.press("c", "y")
        await settle(app, pilot)
        run = await console.pipelines.get_run("gated", 1)
        assert run.status == "Cancelled" and [s.status for s in run.steps] == ["Cancelled", "Cancelled"]
        assert job_status(console, job_id).value == "CANCELLED"
        await app.current_view.reload()
        await pilot.pause()
        assert "Cancelled" in str(app.query_one("#runs", KeyedTable).get_row("#1")[1])
        await pilot.press("c")  # the run is settled now: nothing to ask
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("already finished (Cancelled)" in note for note in notes(app, "warning"))
