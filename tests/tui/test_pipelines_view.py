"""Pipelines view (view 6): the canonical pipeline's DAG with statuses, and rerun with param edits."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App
from textual.widgets import Input, Label

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


async def test_dag_shows_each_step_status_by_glyph_and_the_branch_taken(pipeline, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "6")
        dag = pilot.app.query_one(DagView).render().plain
        assert "[✓ preprocess]" in dag and "⑂true" in dag and "[⊘ notify]" in dag
        layers = [line for line in dag.splitlines() if line.startswith("L")]
        assert layers[:3] == ["L1  [✓ preprocess]", "L2  [✓ train_a] [✓ train_b]", "L3  [✓ evaluate]"]


class FormHost(App[None]):
    """A bare app that opens the form and keeps what it dismissed with."""

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__()
        self.params = params
        self.answers: list[dict[str, Any] | None] = []

    def on_mount(self) -> None:
        self.push_screen(ParamsForm("Rerun p with params:", self.params), self.answers.append)


async def test_the_form_has_one_field_per_param_the_first_selected_so_typing_replaces_it() -> None:
    app = FormHost({"raw_rows": 400, "seed": 7, "label": "a b", "threshold": 0.8})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        form = app.screen
        fields = list(form.query(Input))
        assert [str(label.render()) for label in form.query(Label)][1:5] == ["raw_rows", "seed", "label", "threshold"]
        assert [field.value for field in fields] == ["400", "7", '"a b"', "0.8"]  # JSON, as --param takes it
        assert app.focused is fields[0] and fields[0].selected_text == "400"
        await pilot.press("1", "2", "0", "0")
        assert fields[0].value == "1200"
        await pilot.press("down", "down", "up")
        assert app.focused is fields[1] and fields[1].selected_text == "7"
        await pilot.press("enter")
        await pilot.pause()
    assert app.answers == [{"raw_rows": 1200}]  # only what changed: a rerun keeps the rest


async def test_a_bad_value_is_named_focused_and_the_form_stays_open() -> None:
    app = FormHost({"raw_rows": 400, "seed": 7})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        form = app.screen
        await pilot.press("down", *"abc", "enter")  # a bare word is not JSON, as with `--param seed=abc`
        await pilot.pause()
        assert app.screen is form and app.answers == []
        error = str(form.query_one("#error").render())
        assert (
            error == "expected a JSON value for 'seed', got invalid JSON (Expecting value: line 1 column 1 "
            "(char 0)) in 'abc'"
        )
        assert app.focused is form.query_one("#param-1") and app.focused.selected_text == "abc"
        await pilot.press(*'"abc"', "enter")  # a JSON string is a value
        await pilot.pause()
    assert app.answers == [{"seed": "abc"}]


async def test_esc_cancels_an_unchanged_form_overrides_nothing_and_json_true_is_not_1() -> None:
    app = FormHost({"on": 1})
    async with app.run_test(size=(80, 24)) as pilot:
        for keys in (["escape"], ["enter"], [*"true", "enter"]):  # Python says True == 1; JSON does not
            await pilot.pause()
            await pilot.press(*keys)
            await pilot.pause()
            app.push_screen(ParamsForm("again", {"on": 1}), app.answers.append)
    assert app.answers == [None, {}, {"on": True}]


async def test_rerun_with_an_edited_param_records_a_new_run_with_it(pipeline, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot, "6")
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(pilot.app.screen, ParamsForm)
        await pilot.press(*["down"] * 5)  # raw_rows, seed, label_noise, learning_rate, epochs, threshold
        await pilot.press(*"0.99", "enter")
        await settle(pilot.app, pilot)
        # the command bar detaches: the run goes on in the supervisor; follow it to the end
        run = await pipeline.pipelines.resume("canonical", 2, wait=True)
        assert (run.run, run.params["threshold"], run.params["raw_rows"]) == (2, 0.99, 400)
        assert run.branch_taken == {"accuracy_gate": False}
        await app.current_view.reload()
        await pilot.pause()
        assert "[✓ notify]" in pilot.app.query_one(DagView).render().plain  # the new run is shown


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
