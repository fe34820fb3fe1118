"""Operator keys of the jobs view and the job screen: vim moves, marks and one bulk cancel, the next
failure, the detail line, a map's inputs under their batch, cancel from the job screen, and the log
search's match count, and a huge finished log opened at its end."""

from __future__ import annotations

import asyncio

from rich.text import Text
from textual.widgets import Input, Label, Static

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.console import Console
from kinetic_tui.screens.dialogs import ConfirmScreen, FormScreen
from kinetic_tui.screens.job_detail import JobScreen
from kinetic_tui.views.jobs import JobsView
from kinetic_tui.widgets.key_footer import KeyFooter
from kinetic_tui.widgets.log_view import LogView
from tests.tui.conftest import SIZE, AppFactory, build_workspace, job_status, notes, settle, wait_for


async def _view(app, pilot, count: int) -> JobsView:
    await pilot.press("2")
    view = app.current_view
    await wait_for(lambda: len(view.table.keys) == count, pilot)
    return view


def _label(view: JobsView, selector: str) -> str:
    return str(view.query_one(selector, Label).render())


async def test_marks_cancel_together_after_one_confirmation(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    second = await console.jobs.submit("tui_user:sleepy", args=[60], name="napper2")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        view = await _view(app, pilot, 4)
        assert view.table.keys[:2] == [second.job_id, ids["running"]]
        await pilot.press("g", "space", "space", "space")  # the two sleepers and the finished bomb
        assert view.table.marked == {second.job_id, ids["running"], ids["failed"]}
        assert "3 marked" in _label(view, "#jobs-title")
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        question = str(app.screen.query_one("#question").render())
        assert f"Cancel 2 jobs ({second.job_id}, {ids['running']})?" in question and "1 already finished" in question
        await pilot.press("y")
        await settle(app, pilot)
        assert job_status(console, second.job_id).value == job_status(console, ids["running"]).value == "CANCELLED"
        assert view.table.marked == set()


async def test_with_no_marks_cancel_acts_on_the_selected_row_and_is_dimmed_on_a_finished_one(
    make_app: AppFactory, console: Console
) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        view = await _view(app, pilot, 3)
        await pilot.press("j", "k")  # the newest, the sleeper
        assert view.table.selected_key == ids["running"]
        enabled = {hint.description: hint.enabled for hint in app.query_one(KeyFooter).hints()[0]}
        assert enabled["Cancel"]
        await pilot.press("G")  # the oldest: the adder, SUCCEEDED
        await pilot.pause()
        enabled = {hint.description: hint.enabled for hint in app.query_one(KeyFooter).hints()[0]}
        assert not enabled["Cancel"]
        await pilot.press("c")
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("already SUCCEEDED" in note for note in notes(app, "warning"))
        await pilot.press("g", "c", "y")
        await settle(app, pilot)
        assert job_status(console, ids["running"]).value == "CANCELLED"


async def test_f_goes_to_the_next_failure_and_the_detail_line_shows_it_whole(
    make_app: AppFactory, console: Console
) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        view = await _view(app, pilot, 3)
        await pilot.press("f")
        assert view.table.selected_key == ids["failed"]
        assert _label(view, "#jobs-detail") == "bomb · boom · cpu on cpu · phase execute"
        await pilot.press("f")  # the only failure: it wraps round to itself
        assert view.table.selected_key == ids["failed"]


async def test_a_maps_inputs_are_one_batch_row_expandable_in_place(make_app: AppFactory, console: Console) -> None:
    import tui_user

    batch = kinetic.run()(tui_user.add).map([(n, n) for n in range(4)])
    assert await asyncio.to_thread(batch.results, timeout=60) == [0, 2, 4, 6]
    loner = await console.jobs.submit("tui_user:add", args=[1, 1], wait=True)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        view = await _view(app, pilot, 2)  # the loner and one batch row
        assert view.table.keys == [loner.job_id, batch.group_id]
        row = view.table.get_row(batch.group_id)
        assert row[1] == "▸ add ×4" and row[4] == "4/4"
        await pilot.press("j", "enter")
        await wait_for(lambda: len(view.table.keys) == 6, pilot)
        inputs = view.table.keys[2:]
        assert sorted(inputs) == sorted(job.job_id for job in batch.jobs)
        assert all(view.table.get_row(key)[1].startswith("└ ") for key in inputs)
        assert "4 inputs · 4 done · 0 failed" in _label(view, "#jobs-detail")
        await pilot.press("j", "enter")  # an input opens its job screen
        await wait_for(lambda: isinstance(app.screen, JobScreen), pilot)
        await pilot.press("escape", "k", "enter")  # collapse
        await wait_for(lambda: len(view.table.keys) == 2, pilot)


async def test_the_job_screen_cancels_after_asking_and_dims_cancel_once_finished(
    make_app: AppFactory, console: Console
) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.open_job(ids["running"])
        await wait_for(lambda: isinstance(app.screen, JobScreen) and app.screen._status == "RUNNING", pilot)
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert job_status(console, ids["running"]).value == "RUNNING"
        await pilot.press("c", "y")
        await settle(app, pilot)
        assert job_status(console, ids["running"]).value == "CANCELLED"
        screen = app.screen
        await wait_for(lambda: isinstance(screen, JobScreen) and screen._status == "CANCELLED", pilot)
        enabled = {hint.description: hint.enabled for hint in screen.query_one(KeyFooter).hints()[0]}
        assert not enabled["Cancel"]


async def test_log_search_counts_matches_highlights_them_and_opens_empty(
    make_app: AppFactory, console: Console
) -> None:
    job = await console.jobs.submit("tui_user:chatty", args=[30], wait=True)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.open_job(job.job_id)
        await wait_for(
            lambda: (
                isinstance(app.screen, JobScreen) and any(len(log.buffer) >= 30 for log in app.screen.query(LogView))
            ),
            pilot,
        )
        screen = app.screen
        await pilot.press("slash", *"line 1", "enter")  # line 1, 10..19: 11 matches
        status = str(screen.query_one("#log-status", Static).render())
        assert "/line 1: 1/11" in status
        await pilot.press("n", "n")
        assert "/line 1: 3/11" in str(screen.query_one("#log-status", Static).render())
        log = screen.query_one(LogView)
        assert log.highlight == "line 1"
        drawn = Text(log.buffer.lines[screen._match])
        drawn.highlight_words([log.highlight], "reverse", case_sensitive=False)
        assert drawn.spans  # the match is marked where it is drawn
        await pilot.press("slash")
        assert screen.query_one("#log-search").value == ""  # a new search starts empty


async def test_the_submit_form_completes_known_functions_and_takes_kwargs(
    make_app: AppFactory, console: Console
) -> None:
    await console.jobs.submit("tui_user:add", args=[1, 1], wait=True)  # now a function the workspace knows
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2", "s")
        await wait_for(lambda: isinstance(app.screen, FormScreen), pilot)
        ref = app.screen.query_one("#field-ref", Input)
        await pilot.press(*"tui_user:a")
        await wait_for(lambda: ref._suggestion == "tui_user:add", pilot)
        await pilot.press("right")  # accepts the completion
        assert ref.value == "tui_user:add"
        app.screen.query_one("#field-args", Input).value = "[]"
        app.screen.query_one("#field-kwargs", Input).value = '{"a": 40, "b": 2}'
        await pilot.press("enter")
        await settle(app, pilot)
        newest = (await console.jobs.list())[0]
        assert (await console.jobs.wait(newest.job_id, timeout=30)).result == 42


async def test_the_job_screen_opens_a_huge_finished_log_at_its_end_counting_what_it_skipped(
    make_app: AppFactory, console: Console
) -> None:
    job = await console.jobs.submit("tui_user:chatty", args=[2], wait=True)
    backend = local_backend()
    with open(launcher.log_path(backend.job(job.job_id).job_dir, 0), "a") as fh:
        fh.writelines(f"step {i}\n" for i in range(300_000))  # ~3.5 MB: read from its end, the rest counted
    every = sum(len(batch) for batch in backend.read_logs(job.job_id))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.open_job(job.job_id)
        await wait_for(lambda: isinstance(app.screen, JobScreen) and bool(app.screen.query(LogView)), pilot)
        log = app.screen.query_one(LogView)
        await wait_for(lambda: len(log.buffer) + log.buffer.trimmed == every, pilot)
        assert log.buffer.lines == [f"step {i}" for i in range(290_000, 300_000)]
        assert log.status.startswith(f"10000 lines · {every - 10_000} trimmed · following")
        await pilot.press("end")
        assert log.render_line(log.scrollable_content_region.height - 1).text.rstrip() == "step 299999"
