"""View 2 and the job screen: submit, cancel (confirmed), sort, keyed table updates, live logs, result and
remote traceback, log search and save."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from rich.console import RenderableType
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Static

from kinetic_tui import app as app_module
from kinetic_tui.app import KineticApp
from kinetic_tui.core.console import Console
from kinetic_tui.core.console.snapshots import JobSnapshot
from kinetic_tui.core.errors import KineticError
from kinetic_tui.screens.dialogs import ConfirmScreen, FormScreen
from kinetic_tui.screens.help import HelpScreen
from kinetic_tui.screens.job_detail import JobScreen
from kinetic_tui.views import jobs as jobs_screen
from kinetic_tui.views.clusters import ClustersView
from kinetic_tui.views.jobs import JobsView, submit_line
from kinetic_tui.widgets.keyed_table import KeyedTable
from kinetic_tui.widgets.log_view import LogView
from tests.tui.conftest import SIZE, AppFactory, build_workspace, job_status, notes, settle, wait_for


async def _command(app: KineticApp, pilot: Pilot, line: str) -> None:
    app.run_command(line)
    await settle(app, pilot)


async def _jobs_view(app: KineticApp, pilot: Pilot, count: int) -> JobsView:
    await pilot.press("2")
    view = app.current_view
    await wait_for(lambda: len(view.table.keys) == count, pilot)
    return view


async def test_rows_show_id_name_accelerator_pool_status_age_duration(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        view = await _jobs_view(app, pilot, 3)
        assert view.table.keys == [ids["running"], ids["failed"], ids["done"]]  # newest first
        job_id, name, accelerator, pool, status, age, took = (str(c) for c in view.table.get_row(ids["failed"]))
        assert (job_id, name, accelerator, pool, status) == (ids["failed"], "bomb", "cpu", "cpu", "✗ FAILED")
        assert age.endswith("s") and took.endswith("s")


async def test_submit_form_creates_a_job(make_app: AppFactory, console: Console) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2", "s")
        await wait_for(lambda: isinstance(app.screen, FormScreen), pilot)
        app.screen.query_one("#field-ref").value = "tui_user:add"
        app.screen.query_one("#field-args").value = "[20, 22]"
        app.screen.query_one("#field-name").value = "answer"
        await pilot.press("enter")
        await settle(app, pilot)
        jobs = await console.jobs.list()
        assert [(job.name, job.func) for job in jobs] == [("answer", "add")]
        done = await console.jobs.wait(jobs[0].job_id, timeout=30)
        assert done.result == 42


def test_the_submit_form_leaves_empty_optional_fields_out() -> None:
    assert submit_line({"ref": "m:f", "accelerator": "", "args": "[1]", "name": ""}) == "submit m:f --args '[1]'"
    assert (
        submit_line({"ref": "m:f", "accelerator": "l4", "args": "", "name": "a b"})
        == "submit m:f --accelerator l4 --name 'a b'"
    )


async def test_cancel_asks_first_no_keeps_the_job_yes_cancels_it(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        view = await _jobs_view(app, pilot, 3)
        view.table.select_key(ids["running"])
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen) and ids["running"] in app.screen.question
        await pilot.press("n")
        await settle(app, pilot)
        assert job_status(console, ids["running"]).value == "RUNNING"
        await pilot.press("c", "y")
        await settle(app, pilot)
        assert job_status(console, ids["running"]).value == "CANCELLED"
        await wait_for(lambda: str(view.table.get_row(ids["running"])[4]) == "⊘ CANCELLED", pilot)


async def test_cancel_on_a_finished_job_is_refused_without_asking(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        view = await _jobs_view(app, pilot, 3)
        view.table.select_key(ids["done"])
        await pilot.press("c")
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("already SUCCEEDED" in note for note in notes(app, "warning"))
        await _command(app, pilot, f"cancel {ids['failed']}")  # the bar's path leaves it as it was too
        assert app.is_running
    assert job_status(console, ids["done"]).value == "SUCCEEDED"
    assert job_status(console, ids["failed"]).value == "FAILED"


async def test_o_cycles_the_sort_column_and_the_cursor_stays_on_its_job(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        view = await _jobs_view(app, pilot, 3)
        view.table.select_key(ids["failed"])
        await pilot.press("o", "o")  # by id, then by name
        assert view.sort_column == 1
        assert [str(view.table.get_row(k)[1]) for k in view.table.keys] == ["adder", "bomb", "napper"]
        assert view.table.selected_key == ids["failed"]
        await pilot.press("O")
        assert [str(view.table.get_row(k)[1]) for k in view.table.keys] == ["napper", "bomb", "adder"]
        for _ in range(6):
            await pilot.press("o")
        assert view.sort_column is None and view.table.keys == [ids["running"], ids["failed"], ids["done"]]
        assert "newest first" in str(view.query_one("#jobs-title", Static).render())


async def test_a_reload_renders_rows_only_for_the_visible_page_until_a_filter_needs_them_all(
    make_app: AppFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = tuple(
        JobSnapshot(
            f"job-{n:08x}", f"job {n}", "f", "cpu", "cpu", "SUCCEEDED", None, None, 1000.0 - n, 1000.0 - n, 1001.0 - n
        )
        for n in range(5000)
    )
    rendered: list[str] = []
    real_job_row = jobs_screen.job_row
    monkeypatch.setattr(jobs_screen, "job_row", lambda job, now: rendered.append(job.job_id) or real_job_row(job, now))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:

        async def listing(limit: int | None = None) -> tuple[tuple[JobSnapshot, ...], dict[str, str]]:
            return jobs[:limit], {}

        monkeypatch.setattr(app.service.jobs, "list_with_batches", listing)
        view = await _jobs_view(app, pilot, 5000)
        await pilot.pause()
        assert view.table.selected_key == jobs[0].job_id
        assert 0 < len(set(rendered)) < SIZE[1]  # the visible page, not 5,000 rows
        view.filter("job 49")
        assert len(set(rendered)) == 5000  # filtering reads every row's text
        assert view.table.keys == [job.job_id for job in jobs if job.name.startswith("job 49")]
        assert view.table.row_count == 111
        assert "111/5000 match 'job 49'" in str(view.query_one("#jobs-title", Static).render())


async def _open(app: KineticApp, pilot: Pilot, job_id: str) -> LogView:
    app.open_job(job_id)
    await wait_for(lambda: isinstance(app.screen, JobScreen) and bool(app.screen.query(LogView)), pilot)
    return app.screen.query_one(LogView)


class _TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield KeyedTable((("ID", None), ("STATUS", None)))


async def test_keyed_sync_updates_changed_cells_in_place_and_keeps_row_identity() -> None:
    app = _TableApp()
    async with app.run_test(size=SIZE):
        table = app.query_one(KeyedTable)
        table.sync([("b", "· PENDING"), ("a", "▶ RUNNING")])
        row_b = table.rows[next(key for key in table.rows if key.value == "b")]
        table.select_key("a")
        table.sync([("c", "· PENDING"), ("b", "✓ SUCCEEDED"), ("a", "▶ RUNNING")])
        assert table.keys == ["c", "b", "a"]
        assert [str(cell) for cell in table.get_row("b")] == ["b", "✓ SUCCEEDED"]
        assert table.rows[next(key for key in table.rows if key.value == "b")] is row_b  # updated, not re-added
        assert table.selected_key == "a"
        table.sync([("a", "▶ RUNNING")])
        assert table.keys == ["a"] and table.row_count == 1
        many = [(f"k{i:05d}", "x") for i in range(500)]
        table.sync(many)
        table.sync(many[::2])  # a big removal rebuilds instead of 250 O(n) deletions
        assert table.keys == [row[0] for row in many[::2]] and table.row_count == 250


async def test_the_job_screen_streams_a_real_jobs_log_and_shows_its_result(
    make_app: AppFactory,
    console: Console,
) -> None:
    job = await console.jobs.submit("tui_user:chatty", args=[40], name="talker")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _jobs_view(app, pilot, 1)
        await pilot.press("enter")
        assert isinstance(app.screen, JobScreen) and app.screen.job_id == job.job_id
        log = app.screen.query_one(LogView)
        await wait_for(lambda: "line 39" in log.buffer.lines, pilot)
        assert [line for line in log.buffer.lines if line.startswith("line ")] == [f"line {n}" for n in range(40)]
        await wait_for(lambda: app.screen.outcome is not None, pilot)
        assert app.screen.outcome == "✓ result: 40"
        assert "SUCCEEDED" in str(app.screen.query_one("#job-summary", Static).render())
        await pilot.press("escape")
        assert isinstance(app.current_view, JobsView) and not isinstance(app.screen, JobScreen)


async def test_a_failed_job_shows_its_remote_traceback_and_phase(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.open_job(ids["failed"])
        await wait_for(lambda: isinstance(app.screen, JobScreen) and app.screen.outcome is not None, pilot)
        outcome = app.screen.outcome
        assert outcome.startswith("✗ ValueError in phase execute")
        assert "tui_user.py" in outcome and 'raise ValueError("boom")' in outcome
        log = app.screen.query_one(LogView)
        await wait_for(lambda: "about to fail" in log.buffer.lines, pilot)


async def test_log_follow_new_lines_marker_search_and_toggles(make_app: AppFactory, console: Console) -> None:
    job = await console.jobs.submit("tui_user:add", args=[1, 1], wait=True)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        log = await _open(app, pilot, job.job_id)
        await wait_for(lambda: len(log.buffer) > 0, pilot)
        log.feed([f"extra {n}" for n in range(100)])
        await wait_for(lambda: log.buffer.lines[-1] == "extra 99", pilot)
        assert log.buffer.follow
        await pilot.press("up")
        log.feed(["late 1", "late 2"])
        await wait_for(lambda: log.buffer.new_lines == 2, pilot)
        assert "2 new lines" in log.status
        await pilot.press("end")
        assert log.buffer.follow and log.buffer.new_lines == 0
        await pilot.press("slash", *"extra 1", "enter")
        assert log.buffer.lines[app.screen._match] == "extra 1"
        await pilot.press("n")
        assert log.buffer.lines[app.screen._match] == "extra 10"
        await pilot.press("N")
        assert log.buffer.lines[app.screen._match] == "extra 1"
        await pilot.press("w", "t")
        assert log.buffer.wrap and log.buffer.show_timestamps
        assert "wrap · timestamps" in log.status


async def test_the_job_screen_has_its_own_help_and_number_keys_leave_it(make_app: AppFactory, console: Console) -> None:
    job = await console.jobs.submit("tui_user:add", args=[1, 1], wait=True)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _open(app, pilot, job.job_id)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.view_keys)
        assert keys["w"] == "Wrap" and keys["s"] == "Save" and keys["/"] == "Search"
        await pilot.press("1")  # a dialog keeps the keyboard
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "colon")
        assert isinstance(app.screen, JobScreen)  # no command bar behind the job screen
        await pilot.press("1")
        assert not isinstance(app.screen, JobScreen) and isinstance(app.current_view, ClustersView)


async def test_save_writes_the_buffer_to_the_path_asked_for(
    make_app: AppFactory,
    console: Console,
    tmp_path: Path,
) -> None:
    job = await console.jobs.submit("tui_user:chatty", args=[5], wait=True)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        log = await _open(app, pilot, job.job_id)
        await wait_for(lambda: "line 4" in log.buffer.lines, pilot)
        await pilot.press("s")
        target = tmp_path / "saved.log"
        app.screen.query_one("#field-path").value = str(target)
        await pilot.press("enter")
        await pilot.pause()
        assert target.read_text().splitlines() == log.buffer.lines
        assert any(str(target) in note for note in notes(app))
        await pilot.press("s")
        app.screen.query_one("#field-path").value = str(tmp_path / "missing" / "dir" / "x.log")
        await pilot.press("enter")
        await pilot.pause()
        assert any("cannot save" in note for note in notes(app, "error"))


async def test_a_job_screen_for_an_unknown_job_notifies_and_the_app_keeps_running(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.open_job("job-00000000")
        await wait_for(lambda: any("job-00000000" in note for note in notes(app, "error")), pilot)
        assert app.is_running
        await pilot.press("escape", "2")
        assert isinstance(app.current_view, JobsView)


async def test_the_first_load_paints_the_newest_page_then_the_whole_list(
    make_app: AppFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = tuple(
        JobSnapshot(
            f"job-{n:08x}", f"job {n}", "f", "cpu", "cpu", "SUCCEEDED", None, None, 1000.0 - n, 1000.0 - n, 1001.0 - n
        )
        for n in range(jobs_screen.FIRST_PAGE * 3)
    )
    asked: list[int | None] = []
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:

        async def listing(limit: int | None = None) -> tuple[tuple[JobSnapshot, ...], dict[str, str]]:
            asked.append(limit)
            return jobs[:limit], {}

        monkeypatch.setattr(app.service.jobs, "list_with_batches", listing)
        view = await _jobs_view(app, pilot, len(jobs))
        assert asked[:2] == [jobs_screen.FIRST_PAGE, None]  # the newest page first, then everything
        await view.reload()
        assert asked[-1] is None  # once shown, reloads list everything


class _JobsFrames(KineticApp):
    """Records how many rows the Jobs view's table held in each frame drawn while the view is shown."""

    CSS_PATH = Path(app_module.__file__).with_name(KineticApp.CSS_PATH)  # else relative to this file

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self.jobs_frames: list[int] = []

    def _display(self, screen: Screen[Any], renderable: RenderableType | None) -> None:
        super()._display(screen, renderable)
        view = self.current_view
        if renderable is not None and isinstance(view, JobsView) and view.is_mounted:
            self.jobs_frames.append(len(view.table.keys))


async def test_the_jobs_view_is_drawn_with_its_newest_rows_on_its_first_visit(console: Console) -> None:
    """Its first frame has the rows: mounted empty and filled by the next refresh, they came frames later."""
    await build_workspace(console)
    app = _JobsFrames(console)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.focused is not None, pilot)
        await pilot.press("2")
        await wait_for(lambda: bool(app.jobs_frames), pilot)
        assert app.jobs_frames[0] == 3


@pytest.mark.parametrize("preload", ["slow", "failing"])
async def test_a_view_whose_preload_is_slow_or_fails_mounts_without_it_and_its_refresh_fills_it(
    make_app: AppFactory, console: Console, monkeypatch: pytest.MonkeyPatch, preload: str
) -> None:
    await build_workspace(console)

    async def slow(self: JobsView) -> None:
        await asyncio.sleep(60)

    async def failing(self: JobsView) -> None:
        raise KineticError("store busy")

    monkeypatch.setattr(JobsView, "preload", slow if preload == "slow" else failing)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await wait_for(lambda: isinstance(app.current_view, JobsView), pilot)  # not after the 60 s
        view = app.current_view
        await wait_for(lambda: len(view.table.keys) == 3, pilot)
        assert not notes(app, "error")
