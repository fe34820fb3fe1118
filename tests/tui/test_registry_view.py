"""Registry view (view 4): versions newest first; promote through the stage picker, whose focus starts one
step up the graph; illegal targets disabled; archiving Production asks first, and promoting over it says
so in the picker."""

from __future__ import annotations

import pytest

from kinetic_tui.core.console import Console
from kinetic_tui.screens.dialogs import ConfirmScreen
from kinetic_tui.views.forms import StagePicker
from kinetic_tui.widgets.stage_graph import StageGraph
from tests.tui.conftest import settle
from tests.tui.test_training_view import open_view


@pytest.fixture
async def registry(console):
    """fraud: v1 Production, v2 None (both from one real training run)."""
    await console.training.start("t1", {"learning_rate": 0.3}, epochs=2, wait=True)
    for _ in range(2):
        await console.registry.register_from_training("fraud", "t1")
    await console.registry.promote("fraud", 1, "Staging")
    await console.registry.promote("fraud", 1, "Production")
    return console


async def stages(console: Console) -> dict[int, str]:
    return {model.version: model.stage for model in (await console.registry.models("fraud")).versions}


async def open_picker(pilot, version: int) -> StagePicker:
    table = pilot.app.current_view.main_table
    assert pilot.app.focused is table
    assert table.select_key(f"fraud:v{version}")
    await pilot.press("p")
    await pilot.pause()
    assert isinstance(pilot.app.screen, StagePicker)
    return pilot.app.screen


async def test_promote_moves_the_selected_version_to_the_chosen_stage(registry, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "4")
        picker = await open_picker(pilot, 2)
        assert pilot.app.focused.id == "stage-staging"  # the first legal target
        await pilot.press("enter")
        await settle(app, pilot)
        assert await stages(registry) == {1: "Production", 2: "Staging"}
        assert picker not in pilot.app.screen_stack
        graph = pilot.app.query_one(StageGraph).render().plain
        assert "▸v2" in graph and "v1" in graph


async def test_illegal_targets_are_shown_disabled_and_pressing_them_changes_nothing(registry, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "4")
        picker = await open_picker(pilot, 2)
        production = picker.query_one("#stage-production")
        assert production.disabled
        reasons = " ".join(str(label.render()) for label in picker.query(".reason"))
        assert "None → Production is not an allowed transition; allowed: Staging, Archived" in reasons
        await pilot.click("#stage-production")
        await pilot.pause()
        assert pilot.app.screen is picker
        await pilot.press("escape")
        await settle(app, pilot)
        assert await stages(registry) == {1: "Production", 2: "None"}


async def test_archiving_production_asks_and_no_keeps_it(registry, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "4")
        await open_picker(pilot, 1)
        assert pilot.app.focused.id == "stage-archived"  # Production's first step; None is disabled
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(pilot.app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(app, pilot)
        assert await stages(registry) == {1: "Production", 2: "None"}
        await open_picker(pilot, 1)
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await settle(app, pilot)
        assert await stages(registry) == {1: "Archived", 2: "None"}
        history = (await registry.registry.models("fraud")).history
        assert (history[-1].version, history[-1].from_stage, history[-1].to_stage) == (1, "Production", "Archived")


async def test_readonly_hides_promote_and_the_key_does_nothing(registry, make_app):
    app = make_app(readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "4")
        assert "promote" not in {b.binding.action for b in pilot.app.screen.active_bindings.values()}
        await pilot.press("p")
        await pilot.pause()
        assert not isinstance(pilot.app.screen, StagePicker)
        assert await stages(registry) == {1: "Production", 2: "None"}


async def test_promoting_over_the_production_version_says_so_in_the_picker(registry, make_app):
    await registry.registry.promote("fraud", 2, "Staging")
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "4")
        assert app.current_view.main_table.keys == ["fraud:v2", "fraud:v1"]  # newest first
        picker = await open_picker(pilot, 2)
        assert pilot.app.focused.id == "stage-production"  # Staging's step up
        consequence = " ".join(str(label.render()) for label in picker.query(".consequence"))
        assert "fraud:v1 leaves Production and is Archived" in consequence
        await pilot.press("escape")
        await settle(app, pilot)
        assert await stages(registry) == {1: "Production", 2: "Staging"}
        await open_picker(pilot, 2)
        await pilot.press("enter")  # choosing it, with the consequence on screen, is the confirmation
        await settle(app, pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert await stages(registry) == {1: "Archived", 2: "Production"}


async def test_the_filter_narrows_the_versions_and_the_graph_follows(registry, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "4")
        await pilot.press("slash", *"v2")
        await pilot.pause()
        assert app.current_view.main_table.keys == ["fraud:v2"]
        assert "▸v2" in app.query_one(StageGraph).render().plain
