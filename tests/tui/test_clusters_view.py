"""View 1: clusters from profiles, pools with usage history, add (form) and remove (confirmed)."""

from __future__ import annotations

from textual.pilot import Pilot

from kinetic_tui.app import KineticApp
from kinetic_tui.core.console import Console
from kinetic_tui.core.profiles import create_profile, use_profile
from kinetic_tui.screens.dialogs import ConfirmScreen, FormScreen
from kinetic_tui.views.clusters import ClustersView, pool_add_line
from kinetic_tui.widgets.virtual_table import VirtualTable
from tests.test_console_support import state_dump
from tests.tui.conftest import SIZE, AppFactory, build_workspace, notes, settle, wait_for


def _cells(table: VirtualTable, key: str) -> list[str]:
    return [str(cell) for cell in table.get_row(key)]


async def test_clusters_come_from_profiles_with_backend_and_reachability(make_app: AppFactory) -> None:
    create_profile("prod", "gke", "acme", "europe-west4-a", "big", None)  # the first profile becomes current
    use_profile("local")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#clusters", VirtualTable)
        await wait_for(lambda: len(table.keys) == 2, pilot)
        assert _cells(table, "local") == ["local", "local", "kinetic-cluster", "✓ reachable", "● current"]
        assert _cells(table, "prod") == ["prod", "gke", "big", "? not checked here", ""]


async def test_pools_show_usage_queue_kind_and_a_sampled_history(make_app: AppFactory, console: Console) -> None:
    await console.pools.add("one", "l4", 1)
    await console.jobs.submit("tui_user:sleepy", args=[60], accelerator="l4")
    await console.jobs.submit("tui_user:sleepy", args=[60], accelerator="l4")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: len(app.pool_history.get("one", ())) >= 3, pilot)
        pools = app.query_one("#pools", VirtualTable)
        await wait_for(lambda: _cells(pools, "one")[3] == "1", pilot)
        _name, accelerator, nodes, used, queued, kind, utilisation = _cells(pools, "one")
        assert (accelerator, nodes, used, queued, kind) == ("l4x1", "1", "1", "1", "emulated")
        assert utilisation.endswith("100%") and "█" in utilisation
        assert set(app.pool_history["one"]) <= {0, 1} and app.pool_history["one"][-1] == 1


async def test_add_pool_through_the_form(make_app: AppFactory, console: Console) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a")
        assert isinstance(app.screen, FormScreen)
        form = app.screen
        form.query_one("#field-name").value = "gpus"
        form.query_one("#field-accelerator").value = "l4x2"
        form.query_one("#field-nodes").value = "3"
        form.query_one("#field-spot").value = True
        await pilot.press("enter")
        await settle(app, pilot)
        pool = await console.pools.get("gpus")
        assert (pool.accelerator, pool.nodes, pool.spot) == ("l4x2", 3, True)
        assert "gpus" in app.query_one("#pools", VirtualTable).keys


async def test_a_bad_form_value_is_named_and_adds_nothing(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        before = state_dump()
        await pilot.press("a")
        app.screen.query_one("#field-name").value = "gpus"
        app.screen.query_one("#field-accelerator").value = "h900"
        await pilot.press("enter")
        await settle(app, pilot)
        assert any("--accelerator" in note and "h900" in note for note in notes(app, "error"))
        assert state_dump() == before


def test_the_form_becomes_one_quoted_command_line() -> None:
    assert (
        pool_add_line({"name": "a b", "accelerator": "l4", "nodes": "2", "spot": "false"})
        == "pool add 'a b' --accelerator l4 --nodes 2"
    )
    assert pool_add_line({"name": "x", "accelerator": "l4", "nodes": "1", "spot": "true"}).endswith(" --spot")


async def _select_pool(app: KineticApp, pilot: Pilot, name: str) -> None:
    pools = app.query_one("#pools", VirtualTable)
    await wait_for(lambda: name in pools.keys, pilot)
    pools.focus()
    pools.select_key(name)


async def test_remove_pool_asks_first_and_no_keeps_it(make_app: AppFactory, console: Console) -> None:
    await console.pools.add("gpus", "l4", 1)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _select_pool(app, pilot, "gpus")
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmScreen) and "gpus" in app.screen.question
        await pilot.press("n")
        await settle(app, pilot)
        assert [p.name for p in await console.pools.list()] == ["cpu", "gpus"]
        await pilot.press("d", "y")
        await settle(app, pilot)
        assert [p.name for p in await console.pools.list()] == ["cpu"]
        await wait_for(lambda: "gpus" not in app.query_one("#pools", VirtualTable).keys, pilot)


async def test_removing_a_busy_pool_is_refused_with_a_notification(make_app: AppFactory, console: Console) -> None:
    await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _select_pool(app, pilot, "cpu")
        await pilot.press("d", "y")
        await settle(app, pilot)
        assert any("pending or running jobs" in note for note in notes(app, "error"))
        assert isinstance(app.current_view, ClustersView) and app.is_running
    assert [p.name for p in await console.pools.list()] == ["cpu", "l4pool"]


async def test_the_pools_title_counts_what_the_filter_shows_and_takes_the_filter_literally(
    make_app: AppFactory,
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        pools = app.query_one("#pools", VirtualTable)
        await wait_for(lambda: pools.keys == ["cpu"], pilot)
        view = app.query_one(ClustersView)
        view.filter("[b]x")  # what a user typed, markup brackets included
        assert pools.keys == []
        # the title reads back as markup: the brackets come back escaped, so they are drawn as typed
        assert str(pools.border_title).endswith(" · filter '\\[b]x': 0/1")
        view.filter("")
        assert pools.keys == ["cpu"] and str(pools.border_title).endswith("in use now)")
