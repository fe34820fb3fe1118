"""Training view (view 3): interrupt and resume a real training job on a pool from the keyboard;
studies list their trials with the best one marked."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kinetic_tui.core.console import Console
from kinetic_tui.core.platform.training import ManagedTrainingRunner, TrainingCluster, TrainingJob
from kinetic_tui.screens.dialogs import FormScreen
from kinetic_tui.views.training import train_line
from kinetic_tui.widgets.key_footer import KeyFooter
from kinetic_tui.widgets.keyed_table import KeyedTable
from tests.helpers.gated_steps import GATED_STEP, resumed_hash
from tests.tui.conftest import notes, settle

HALVING_STEP = "tests.tui.test_training_view:halving_step"


def halving_step(hyperparameters: dict, epoch: int, state: dict) -> dict:
    return {"loss": state.get("loss", 1.0) / 2}


def training(console: Console, name: str):
    return console.training.service.refresh(name)[0]


async def start_gated(console: Console, name: str, epochs: int, gate: Path) -> dict:
    """Start a training whose epochs after the first wait for `gate`; return once epoch 1's checkpoint is
    recorded (its epoch event alone may come first)."""
    service, hp = console.training.service, {"learning_rate": 0.2, "gate": str(gate)}
    await asyncio.to_thread(service.start, name, hp, epochs, 1, None, GATED_STEP)
    deadline = time.monotonic() + 30
    while not training(console, name).checkpoint_epoch:
        assert time.monotonic() < deadline, f"training {name} never checkpointed an epoch"
        await asyncio.sleep(0.05)
    return hp


async def open_view(app, pilot, key: str = "3") -> None:
    """Switch to view `key` and load it now rather than on the app's next tick."""
    await pilot.press(key)
    await app.current_view.reload()
    await pilot.pause()


async def test_interrupt_stops_a_running_training_and_resume_completes_it(console, make_app, tmp_path):
    gate = tmp_path / "gate"
    hp = await start_gated(console, "slow", 6, gate)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        await pilot.press("i")
        await settle(app, pilot)
        stopped = training(console, "slow")
        assert (stopped.status, stopped.interruptions, stopped.checkpoint_epoch) == ("Stopped", 1, 1)
        gate.write_text("")
        await pilot.press("r")
        await settle(app, pilot)
        await asyncio.to_thread(console.training.service.wait, "slow", 30)
        done = training(console, "slow")
        assert (done.status, done.current_epoch, done.interruptions, len(done.job_ids)) == ("Completed", 6, 1, 2)
        assert done.artifact_hash == resumed_hash(hp, 6)  # epoch 1 kept from the checkpoint: a restart differs


async def test_interrupting_a_settled_training_is_dimmed_explained_and_changes_nothing(console, make_app):
    await console.training.start("done", {"learning_rate": 0.3}, epochs=2, wait=True)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        await pilot.pause()
        hints = {hint.description: hint.enabled for hint in app.query_one(KeyFooter).hints()[0]}
        assert (hints["Interrupt"], hints["Resume"], hints["Train"]) == (False, False, True)
        await pilot.press("i")
        await settle(app, pilot)
        after = training(console, "done")
        assert (after.status, after.interruptions) == ("Completed", 0)
        assert any("done is Completed; interrupt needs InProgress" in note for note in notes(app, "warning"))
        await pilot.press("question_mark")
        assert ("r", "Resume (not now: done is Completed; resume needs Stopped)") in app.screen.view_keys


async def test_readonly_hides_interrupt_and_resume(console, make_app, tmp_path):
    await start_gated(console, "slow", 4, tmp_path / "gate")
    app = make_app(readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        bindings = app.screen.active_bindings.values()
        assert not {"train", "interrupt", "resume"} & {b.binding.action for b in bindings}  # hidden, not greyed
        await pilot.press("i")
        await settle(app, pilot)
        assert training(console, "slow").interruptions == 0
    (tmp_path / "gate").write_text("")
    await asyncio.to_thread(console.training.service.wait, "slow", 30)


async def test_a_study_lists_its_trials_with_the_best_marked(console, make_app):
    study = await console.training.tune("lr", {"learning_rate": [0.1, 0.5]}, "grid", 2, wait=True)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        trials = app.query_one("#trials", KeyedTable)
        marked = [key for key in trials.keys if str(trials.get_row(key)[-1]) == "★ best"]
        assert marked == [f"#{study.best}"]
        best = next(trial for trial in study.trials if trial.trial_id == study.best)
        assert best.hyperparameters == {"learning_rate": 0.5}  # the lowest loss
        assert app.query_one("#trainings", KeyedTable).keys == []  # trials are not listed twice


async def test_the_train_form_starts_a_training_with_the_users_step(console, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        await pilot.press("t")
        assert isinstance(app.screen, FormScreen)
        app.screen.query_one("#field-name").value = "mine"
        app.screen.query_one("#field-hp").value = "learning_rate=0.3 optimizer=adam"
        app.screen.query_one("#field-epochs").value = "2"
        app.screen.query_one("#field-step").value = HALVING_STEP
        await pilot.press("enter")
        await settle(app, pilot)
        done = await asyncio.to_thread(console.training.service.wait, "mine", 30)
        assert (done.status, done.step, done.metric) == ("Completed", HALVING_STEP, 0.25)
        assert done.hyperparameters == {"learning_rate": 0.3, "optimizer": "adam"}


async def test_the_train_form_refuses_a_bad_step_with_a_notification(console, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        await pilot.press("t")
        app.screen.query_one("#field-name").value = "bad"
        app.screen.query_one("#field-step").value = "tests.tui.test_training_view:no_such_step"
        await pilot.press("enter")
        await settle(app, pilot)
        assert any("has no attribute 'no_such_step'" in note for note in notes(app, "error"))
        assert await console.training.list() == ()


def test_the_train_form_leaves_empty_optional_fields_out() -> None:
    assert train_line({"name": "t", "hp": "", "epochs": "5", "pool": "", "step": ""}) == "train t --epochs 5"
    assert (
        train_line({"name": "a b", "hp": "lr=0.1 k=v", "epochs": "", "pool": "p", "step": "m:f"})
        == "train 'a b' --hp lr=0.1 --hp k=v --pool p --step m:f"
    )
