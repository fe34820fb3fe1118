"""The app shell: view switching (views and the bar mount lazily), the `:` bar, completion, palette, help,
filter, readonly, quit, errors, and the size floor. Every action is checked against the core's state, not
only the screen."""

from __future__ import annotations

from pathlib import Path

from textual.command import CommandPalette
from textual.pilot import Pilot
from textual.widgets import Static

from kinetic_tui.app import KineticApp
from kinetic_tui.core.console import Console
from kinetic_tui.screens.dialogs import ConfirmScreen
from kinetic_tui.screens.help import HelpScreen
from kinetic_tui.screens.job_detail import JobScreen
from kinetic_tui.views.base import View
from kinetic_tui.views.clusters import ClustersView
from kinetic_tui.views.jobs import JobsView
from kinetic_tui.views.pipelines import PipelinesView
from kinetic_tui.views.training import TrainingView
from kinetic_tui.widgets.command_bar import CommandBar, apply_completion, complete_line
from kinetic_tui.widgets.key_footer import KeyFooter
from kinetic_tui.widgets.output_panel import OutputPanel
from tests.test_console_support import state_dump
from tests.tui.conftest import (
    SIZE,
    AppFactory,
    build_workspace,
    job_status,
    notes,
    palette_enter,
    settle,
    wait_for,
)


async def _command(app: KineticApp, pilot: Pilot, line: str) -> None:
    await pilot.press("colon")
    app.query_one(CommandBar).prompt.value = line
    await pilot.press("enter")
    await settle(app, pilot)


async def test_number_keys_switch_views_and_the_header_names_the_current_one(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.current_view, ClustersView)
        await pilot.press("2")
        assert isinstance(app.current_view, JobsView)
        assert app.focused is app.current_view.table
        header = str(app.query_one("#header", Static).render())
        assert "profile local (local)" in header and "2 Jobs" in header
        await pilot.press("1")
        assert isinstance(app.current_view, ClustersView)


async def test_only_the_first_view_is_mounted_at_start_and_each_other_mounts_once(make_app: AppFactory) -> None:
    """Lazy mounting, for a cheap first paint: nothing unseen is styled before the first frame."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert [type(view) for view in app.query(View)] == [ClustersView]
        assert not app.query(CommandBar)  # the hidden bar too
        header = str(app.query_one("#header", Static).render())
        assert "1 Clusters" in header and "6 Pipelines" in header  # every tab, mounted or not
        await pilot.press("3")
        training = app.current_view
        assert isinstance(training, TrainingView) and training.display and training.children
        assert not app.query_one(ClustersView).display
        await pilot.press("1", "3")
        assert app.current_view is training  # the same widget again, not a second copy
        assert [type(view) for view in app.query(View)] == [ClustersView, TrainingView]
        assert [view.display for view in app.query(View)] == [False, True]


async def test_the_bar_mounts_above_the_footer_on_first_use_and_serves_both_prompts(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon")
        bar = app.query_one(CommandBar)
        assert bar.display and app.focused is bar.prompt
        footer = app.query_one(KeyFooter)
        assert app.screen.children.index(bar) == app.screen.children.index(footer) - 1
        assert bar.region.bottom <= footer.region.y
        await pilot.press("escape", "slash")
        assert list(app.query(CommandBar)) == [bar] and bar.display


TINY_PIPELINE = """
from kinetic_tui.core.platform.pipelines import Pipeline, Step


def one(inputs):
    return {"x": 1}


tiny = Pipeline("tiny", [Step("one", one, {})], {})
"""


async def test_the_palette_jumps_to_an_object_in_a_view_not_yet_mounted(
    make_app: AppFactory,
    console: Console,
    tui_project: Path,
) -> None:
    (tui_project / "tui_pipes.py").write_text(TINY_PIPELINE)
    await console.pipelines.register("kinetic_tui.core.demo.canonical:canonical_pipeline")
    await console.pipelines.register("tui_pipes:tiny")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert not app.query(PipelinesView)
        await pilot.press("ctrl+p", *"Pipeline tiny")
        await palette_enter(app, pilot, "Pipeline tiny")
        await wait_for(lambda: isinstance(app.current_view, PipelinesView), pilot)
        view = app.current_view
        await wait_for(lambda: view.main_table.selected_key == "tiny", pilot)
        assert view.main_table.keys == ["canonical", "tiny"]  # revealed, not merely the first row
        assert app.focused is view.main_table


async def test_a_command_bar_line_changes_core_state(make_app: AppFactory, console: Console) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _command(app, pilot, "pool add tpus --accelerator v5litepod-2x2 --nodes 1")
        assert [p.name for p in await console.pools.list()] == ["cpu", "tpus"]
        assert not app.query_one(CommandBar).display
        output = app.query_one(OutputPanel)
        assert output.display and "tpus" in output.text  # the whole output, in the panel


async def test_a_parse_error_shows_its_column_and_changes_nothing(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        before = state_dump()
        await _command(app, pilot, "pool add x --accelerator l4 --nodes zero")
        bar = app.query_one(CommandBar)
        assert bar.display  # stays open for a fix
        hint = str(bar.query_one("#bar-hint", Static).render())
        assert hint.index("^") == len("pool add x --accelerator l4 --nodes ")
        assert not notes(app, "error")  # inline only: no toast covering it
        assert state_dump() == before


async def test_tab_completes_verbs_flags_and_live_job_ids(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon", *"canc", "tab")
        bar = app.query_one(CommandBar)
        assert bar.prompt.value == "cancel "
        await wait_for(lambda: bool(bar.names.get("job")), pilot)
        await pilot.press(*ids["running"][:-1], "tab")
        assert bar.prompt.value == f"cancel {ids['running']} "
        bar.prompt.value = "pool add x --acc"
        await pilot.press("tab")
        assert bar.prompt.value == "pool add x --accelerator "


def test_completion_knows_which_argument_names_which_kind_of_object() -> None:
    names = {
        "job": ["job-aaaa0001", "job-aaab0002"],
        "pool": ["cpu", "gpus"],
        "endpoint": ["fraud-ep"],
        "group": ["fraud"],
    }
    assert complete_line("cancel job-aaa", names) == ["job-aaaa0001", "job-aaab0002"]
    assert complete_line("pool remove g", names) == ["gpus"]
    assert complete_line("show model f", names) == ["fraud"]
    assert complete_line("observe fraud-ep ", names) == []  # CONCURRENCY is a number, not an object
    assert complete_line("load ", names) == ["fraud-ep"]
    assert complete_line("jobs --status RU", names) == ["RUNNING"]
    assert apply_completion("cancel job-aaa", ["job-aaaa0001", "job-aaab0002"]) == "cancel job-aaa"
    assert apply_completion("cancel job-a", ["job-aaaa0001", "job-aaab0002"]) == "cancel job-aaa"
    assert apply_completion("pool remove g", ["gpus"]) == "pool remove gpus "


async def test_the_palette_jumps_to_views_and_opens_jobs(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"Go to Jobs")
        await palette_enter(app, pilot, "Go to Jobs")
        await pilot.pause()
        assert isinstance(app.current_view, JobsView)
        await pilot.press("ctrl+p", *f"Job {ids['done']}")
        await palette_enter(app, pilot, f"Job {ids['done']}")
        await wait_for(lambda: isinstance(app.screen, JobScreen), pilot)
        assert app.screen.job_id == ids["done"]


async def test_the_palette_runs_view_actions_through_the_same_path(make_app: AppFactory, console: Console) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p", *"Clusters: Add pool")
        await palette_enter(app, pilot, "Clusters: Add pool")
        await wait_for(lambda: type(app.screen).__name__ == "FormScreen", pilot)
        await pilot.press("escape")
        assert [p.name for p in await console.pools.list()] == ["cpu"]


async def test_help_lists_the_keys_of_the_current_view(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.view_keys)
        assert keys["s"] == "Submit" and keys["c"] == "Cancel (not now: no job selected)" and keys["o"] == "Sort"
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_slash_filters_the_current_table_and_escape_clears_it(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        view = app.current_view
        await wait_for(lambda: len(view.table.keys) == 3, pilot)
        await pilot.press("slash", *"bomb")
        assert view.table.keys == [ids["failed"]]
        await pilot.press("enter")  # keeps the filter
        assert view.table.keys == [ids["failed"]]
        await pilot.press("slash", "escape")
        assert len(view.table.keys) == 3


async def test_readonly_hides_mutating_keys_and_they_do_nothing(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app(readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        view = app.current_view
        await wait_for(lambda: ids["running"] in view.table.keys, pilot)
        view.table.select_key(ids["running"])
        shown = {binding.key for _, binding, _, _ in app.screen.active_bindings.values()}
        assert "s" not in shown and "c" not in shown and "o" in shown  # hidden from the footer, not greyed
        assert {b.key for b in view.visible_bindings()} == {"enter", "f", "o", "O", "space"}
        await pilot.press("question_mark")
        assert set(dict(app.screen.view_keys).values()) == {
            "Open",
            "Failed",
            "Mark",
            "Sort",
            "Reverse",
        }  # `?` lists no mutation
        await pilot.press("escape")
        await pilot.press("c")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("s")
        assert app.screen is app.screen_stack[0]
        await _command(app, pilot, f"cancel {ids['running']}")
        bar = app.query_one(CommandBar)
        await wait_for(lambda: "read-only" in str(bar.query_one("#bar-hint", Static).render()), pilot)  # inline
        await pilot.press("1", "a", "d")
        assert app.screen is app.screen_stack[0]
    assert job_status(console, ids["running"]).value == "RUNNING"
    assert [p.name for p in await console.pools.list()] == ["cpu", "l4pool"]


async def test_q_quits(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_a_failing_action_is_a_notification_and_the_app_keeps_running(
    make_app: AppFactory,
    console: Console,
) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.run_command("pool remove cpu")  # a key's command; the running job holds the pool
        await settle(app, pilot)
        assert any("pending or running jobs" in note for note in notes(app, "error"))
        app.run_command("cancel job-00000000")
        await settle(app, pilot)
        assert any("job-00000000" in note for note in notes(app, "error"))
        assert app.is_running
        await pilot.press("2")
        assert isinstance(app.current_view, JobsView)
    assert [p.name for p in await console.pools.list()] == ["cpu", "l4pool"]
    assert job_status(console, ids["running"]).value == "RUNNING"


async def test_below_80x24_the_console_says_the_terminal_is_too_small(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        message = app.query_one("#too-small", Static)
        assert message.display and message.region.size == (60, 20)
        assert "Terminal too small" in str(message.render())
        corners = [(0, 0), (59, 0), (0, 19), (59, 19)]  # the header's, and the footer's row
        assert all(app.screen.get_widget_at(x, y)[0] is message for x, y in corners)
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        assert not message.display
        assert app.screen.get_widget_at(0, 0)[0] is app.query_one("#header")
        assert isinstance(app.screen.get_widget_at(0, SIZE[1] - 1)[0], KeyFooter)
