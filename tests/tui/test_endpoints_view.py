"""Endpoints view (view 5): scale and load through their forms change the endpoint in the core."""

from __future__ import annotations

import asyncio
import time

import pytest
from textual.widgets import Input

from kinetic_tui.screens.dialogs import FormScreen
from kinetic_tui.widgets.scaling_chart import ScalingChart
from tests.tui.conftest import notes, settle, wait_for
from tests.tui.test_training_view import open_view


@pytest.fixture
async def endpoint(console):
    """`web` serves fraud (v1 Production) and has seen a scale-out and a hold."""
    await console.training.start("t1", {"learning_rate": 0.3}, epochs=2, wait=True)
    await console.registry.register_from_training("fraud", "t1")
    await console.registry.promote("fraud", 1, "Staging")
    await console.registry.promote("fraud", 1, "Production")
    await console.endpoints.create(
        "web", "fraud", min_instances=1, max_instances=5, target_per_instance=10, tick_seconds=0
    )
    await console.endpoints.observe("web", 45, 0)
    await console.endpoints.observe("web", 5, 1)
    return console


async def fill(pilot, values: dict[str, str]) -> None:
    form = pilot.app.screen
    assert isinstance(form, FormScreen)
    for name, text in values.items():
        form.query_one(f"#field-{name}", Input).value = text
    await pilot.press("enter")
    await settle(pilot.app, pilot)


async def test_the_view_shows_config_chart_and_cache(endpoint, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "5")
        config = str(pilot.app.query_one("#config").render())
        assert "web serves fraud · instances 5 (min 1, max 5)" in config
        chart = pilot.app.query_one(ScalingChart).render().plain
        marks = next(line for line in chart.splitlines() if "↑" in line)
        assert marks.strip() == "↑H"  # the scale-out, then the hold


async def test_scale_form_changes_the_endpoint_config(endpoint, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "5")
        await pilot.press("S")
        await pilot.pause()
        form = pilot.app.screen
        assert form.query_one("#field-max", Input).value == "5"  # prefilled from the endpoint
        await fill(pilot, {"min": "2", "max": "3", "target": "20"})
        after = await endpoint.endpoints.get("web")
        assert (after.min_instances, after.max_instances, after.target_per_instance, after.instance_count) == (
            2,
            3,
            20,
            3,
        )
        assert after.history[-1].action == "reconfigure"


async def test_bad_scale_value_is_a_notification_and_changes_nothing(endpoint, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "5")
        await pilot.press("S")
        await pilot.pause()
        await fill(pilot, {"min": "4", "max": "2"})
        after = await endpoint.endpoints.get("web")
        assert (after.min_instances, after.max_instances) == (1, 5)
        assert any("min" in note for note in notes(app, "error"))


async def test_load_form_drives_ticks_into_the_history(endpoint, make_app):
    before = len((await endpoint.endpoints.get("web")).history)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "5")
        await pilot.press("l")
        await pilot.pause()
        await fill(pilot, {"concurrency": "12", "ticks": "3"})
        await endpoint.aclose()  # the command bar detaches: let the load finish
        after = await endpoint.endpoints.get("web")
        assert len(after.history) == before + 3
        assert all(event.concurrency > 0 for event in after.history[-3:])  # what the router measured
        deadline = time.monotonic() + 30
        while not (await endpoint.endpoints.get("web")).load_events:  # the controller records the load
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        await app.current_view.reload()
        assert app.query_one("#cache").keys == ["1"]  # one model loaded: the Production version
        summary = str(app.query_one("#cache-summary").render())
        assert "loads · 0 evictions" in summary  # one load of fraud:v1 per instance that served it
        assert "recent loads: fraud:v1" in summary and "load times: fraud:v1" in summary
        assert "router pid" in str(app.query_one("#serving").render())


async def test_at_80x24_tab_to_the_cache_brings_its_hit_ratio_and_events_into_view(endpoint, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "5")
        await endpoint.endpoints.invoke("web", "fraud", {"amount": 1})
        await app.reload_visible()
        summary = app.query_one("#cache-summary")
        assert "hit ratio" in str(summary.render())
        footer = app.query_one("#footer")
        assert summary.region.bottom > footer.region.y  # below the fold at first
        await wait_for(lambda: app.focused is app.query_one("#endpoints"), pilot)
        await pilot.press("tab")
        # the scroll that follows the focus lands on a later refresh: wait for it, not for one pause
        await wait_for(lambda: summary.region.bottom <= footer.region.y, pilot)
        assert app.focused is app.query_one("#cache")
        assert summary.region.height == 4 and summary.region.bottom <= footer.region.y  # on screen, whole
