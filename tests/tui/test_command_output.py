"""The `:` bar as an operator uses it: output in a panel that stays until Esc, errors inline in the bar
(no toast), Esc handing the keys back to the view, and view names that switch views as k9s does."""

from __future__ import annotations

from textual.pilot import Pilot

from kinetic_tui.app import KineticApp
from kinetic_tui.bar_words import VIEW_NAMES
from kinetic_tui.core.console import Console
from kinetic_tui.views.clusters import ClustersView
from kinetic_tui.views.jobs import JobsView
from kinetic_tui.views.registry import RegistryView
from kinetic_tui.views.training import TrainingView
from kinetic_tui.widgets.command_bar import CommandBar
from kinetic_tui.widgets.output_panel import MAX_HEIGHT, OutputPanel
from tests.tui.conftest import SIZE, AppFactory, notes, settle, wait_for


async def _type(app: KineticApp, pilot: Pilot, line: str) -> CommandBar:
    await pilot.press("colon", *line, "enter")
    await settle(app, pilot)
    return app.query_one(CommandBar)


def _hint(bar: CommandBar) -> str:
    return str(bar.query_one("#bar-hint").render())


async def test_a_long_output_stays_whole_in_a_scrollable_panel_until_esc(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _type(app, pilot, "help")
        output = app.query_one(OutputPanel)
        assert output.display and app.focused is output
        assert len(output.text.splitlines()) > MAX_HEIGHT and "…" not in output.text  # nothing cut
        assert output.region.height <= MAX_HEIGHT
        await pilot.press("G")
        await pilot.pause()
        assert output.scroll_y > 0  # scrolls to the end of the text
        await pilot.press("k", "j")  # keys scroll it and leave it open (it sets no timer: only Esc closes it)
        await pilot.pause()
        assert output.display and app.focused is output
        await pilot.press("escape")
        assert not output.display and app.focused is not None and app.focused in app.current_view.query("*")
        assert not notes(app)


async def test_bare_view_names_switch_views_and_with_arguments_run_the_verb(make_app: AppFactory, console) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _type(app, pilot, "jobs")
        assert isinstance(app.current_view, JobsView) and not app.query(OutputPanel)
        for word, kind in (("training", TrainingView), ("models", RegistryView), ("pools", ClustersView)):
            await _type(app, pilot, word)
            await wait_for(lambda kind=kind: isinstance(app.current_view, kind), pilot)
        await _type(app, pilot, "jobs --status RUNNING")  # the verb, its answer in the panel
        assert isinstance(app.current_view, ClustersView) and app.query_one(OutputPanel).display
        assert "endpoints" in VIEW_NAMES and "pipelines" in VIEW_NAMES


async def test_an_unknown_view_name_lists_the_views_and_esc_gives_the_keys_back(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        bar = await _type(app, pilot, "jbos")
        assert bar.display and "no view or verb 'jbos'; views: clusters, pools, jobs, training" in _hint(bar)
        assert not notes(app, "error")
        await pilot.press("escape", "2")  # Esc leaves the bar: `2` is a key again, not typed text
        assert not bar.display
        await wait_for(lambda: isinstance(app.current_view, JobsView), pilot)


async def test_a_refused_command_comes_back_into_the_bar_with_its_error(make_app: AppFactory, console: Console) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        bar = await _type(app, pilot, "pool remove nosuch")
        await wait_for(lambda: bar.display and "✗" in _hint(bar), pilot)
        assert bar.prompt.value == "pool remove nosuch" and "nosuch" in _hint(bar)
        assert not notes(app, "error")  # inline, with no toast over it
        await pilot.press("escape", "q")
        await pilot.pause()
        assert app.return_code is not None  # `q` quit: it was a key, not typed into the bar
