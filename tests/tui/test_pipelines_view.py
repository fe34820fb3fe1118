"""Pipelines view (view 6): the canonical pipeline's DAG with statuses, and rerun with param edits."""

from __future__ import annotations

import pytest
from textual.widgets import TextArea

from kinetic_tui.views.forms import ParamsForm
from kinetic_tui.widgets.dag_view import DagView
from tests.tui.conftest import settle
from tests.tui.test_training_view import open_view

CANONICAL = "kinetic_tui.core.demo.canonical:canonical_pipeline"


@pytest.fixture
async def pipeline(console):
    await console.pipelines.register(CANONICAL)
    await console.pipelines.run("canonical", wait=True)
    return console


def edit_line(text: str, key: str, value: str) -> str:
    return "\n".join(f"{key}={value}" if line.startswith(f"{key}=") else line for line in text.splitlines())


async def test_dag_shows_each_step_status_by_glyph_and_the_branch_taken(pipeline, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "6")
        dag = pilot.app.query_one(DagView).render().plain
        assert "[✓ preprocess]" in dag and "⑂true" in dag and "[⊘ notify]" in dag
        layers = [line for line in dag.splitlines() if line.startswith("L")]
        assert layers[:3] == ["L1  [✓ preprocess]", "L2  [✓ train_a] [✓ train_b]", "L3  [✓ evaluate]"]


async def test_rerun_with_an_edited_param_records_a_new_run_with_it(pipeline, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "6")
        await pilot.press("R")
        await pilot.pause()
        form = pilot.app.screen
        assert isinstance(form, ParamsForm)
        area = form.query_one(TextArea)
        assert "threshold=0.8" in area.text.splitlines()
        area.text = edit_line(area.text, "threshold", "0.99")
        await pilot.press("ctrl+s")
        await settle(pilot.app, pilot)
        # the command bar detaches: the run goes on in the supervisor; follow it to the end
        run = await pipeline.pipelines.resume("canonical", 2, wait=True)
        assert (run.run, run.params["threshold"], run.params["raw_rows"]) == (2, 0.99, 400)
        assert run.branch_taken == {"accuracy_gate": False}
        await app.current_view.reload()
        await pilot.pause()
        assert "[✓ notify]" in pilot.app.query_one(DagView).render().plain  # the new run is shown


async def test_a_bad_param_line_keeps_the_form_open_and_runs_nothing(pipeline, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "6")
        await pilot.press("R")
        await pilot.pause()
        form = pilot.app.screen
        form.query_one(TextArea).text = "threshold=not json"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert pilot.app.screen is form
        assert "line 1: threshold: not JSON" in str(form.query_one("#error").render())
        await pilot.press("escape")
        await settle(pilot.app, pilot)
        assert len((await pipeline.pipelines.get("canonical")).runs) == 1


async def test_readonly_hides_rerun(pipeline, make_app):
    app = make_app(readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "6")
        await pilot.press("R")
        await pilot.pause()
        assert not isinstance(pilot.app.screen, ParamsForm)
        assert len((await pipeline.pipelines.get("canonical")).runs) == 1


async def test_choosing_an_older_run_shows_its_statuses_and_cache_keys(pipeline, make_app):
    await pipeline.pipelines.rerun("canonical", wait=True)  # identical params: every step Cached
    first = await pipeline.pipelines.get_run("canonical", 1)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "6")
        assert "[≡ preprocess]" in app.query_one(DagView).render().plain  # the latest run, cached
        await pilot.press("tab", "up")  # to the runs table, then from run #2 to run #1
        await pilot.pause()
        assert "[✓ preprocess]" in app.query_one(DagView).render().plain
        steps = app.query_one("#steps")
        key = next(step.cache_key for step in first.steps if step.name == "preprocess")
        assert str(steps.get_row("preprocess")[3]) == key[:8]
