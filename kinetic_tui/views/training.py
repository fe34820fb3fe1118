"""View 3, Training: training jobs with their epoch progress, tuning studies and the trials of the selected
study (best marked). `t` starts a training (a form, the user's own step included), `i` interrupts the
selected training (a spot preemption), `r` resumes a Stopped one."""

from __future__ import annotations

import shlex
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Label

from kinetic_tui.core.platform.training import TrainingStatus
from kinetic_tui.core.training.records import StudySnapshot
from kinetic_tui.render.tables import study_row, training_row, trial_row
from kinetic_tui.screens.dialogs import Field
from kinetic_tui.views.forms import TableView, ViewBody
from kinetic_tui.widgets.keyed_table import KeyedTable

BEST = "★ best"
TRAIN_FORM = (
    Field("name", "Name", placeholder="e.g. baseline"),
    Field("hp", "Hyperparameters", placeholder="K=V K=V, e.g. learning_rate=0.2"),
    Field("epochs", "Epochs", "5"),
    Field("pool", "Pool", placeholder="optional"),
    Field("step", "Step", placeholder="optional MODULE:FUNC, e.g. mypkg.steps:train_step"),
)


def train_line(values: dict[str, str]) -> str:
    """The train form's answers as a `train` line (one --hp per K=V word); the parser judges them, and the
    console imports the step before anything starts."""
    words = ["train", values["name"]]
    for pair in values.get("hp", "").split():
        words += ["--hp", pair]
    for flag, field in (("--epochs", "epochs"), ("--pool", "pool"), ("--step", "step")):
        if values.get(field, "").strip():
            words += [flag, values[field].strip()]
    return shlex.join(words)


class TrainingView(TableView):
    key = "3"
    title = "Training"
    MAIN = "trainings"
    WHAT = "training job"
    BINDINGS = [
        Binding("t", "train", "Train", id="training.train"),
        Binding("i", "interrupt", "Interrupt", id="training.interrupt"),
        Binding("r", "resume", "Resume", id="training.resume"),
    ]
    ACTION_VERBS = {"train": "train", "interrupt": "interrupt", "resume": "resume"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.studies: dict[str, StudySnapshot] = {}

    def compose(self) -> ComposeResult:
        with ViewBody():
            yield Label("Training jobs", classes="section")
            yield KeyedTable(
                [
                    ("name", None),  # auto: a name is never cut (the rows differ at its end)
                    ("status", None),
                    ("epochs", None),
                    ("ckpt", None),
                    ("int", None),
                    ("metric", None),
                    ("artifact", 8),
                ],
                id="trainings",
            )
            yield Label("Tuning studies", classes="section")
            yield KeyedTable(
                [("study", None), ("strategy", None), ("status", None), ("trials", None), ("best", None)], id="studies"
            )
            yield Label("Trials", id="trials-title", classes="section")
            yield KeyedTable(
                [
                    ("trial", None),
                    ("hyperparameters", 26),
                    ("status", None),
                    ("metric", None),
                    ("artifact", 8),
                    ("best", None),
                ],
                id="trials",
            )

    async def reload(self) -> None:
        trainings = await self.console.training.list()
        studies = await self.console.training.studies()
        # trials are training jobs too; they are listed under their study, not twice
        self.show_rows([training_row(t) for t in trainings if t.study is None])
        self.studies = {study.name: study for study in studies}
        self.query_one("#studies", KeyedTable).sync([study_row(study) for study in studies])
        self._show_trials()

    def _show_trials(self) -> None:
        study = self.studies.get(self.query_one("#studies", KeyedTable).selected_key or "")
        title = "Trials" if study is None else f"Trials of {study.name} ({BEST} = best {study.strategy} trial)"
        self.query_one("#trials-title", Label).update(title)
        trials, best = ((), None) if study is None else (study.trials, study.best)
        self.query_one("#trials", KeyedTable).sync(
            [(*trial_row(trial), BEST if trial.trial_id == best else "") for trial in trials]
        )

    @on(DataTable.RowHighlighted, "#studies")
    def study_chosen(self) -> None:
        self._show_trials()

    def why_not(self, action: str) -> str | None:
        """Interrupt acts on an InProgress training and resume on a Stopped one (the core's rule, shown
        before the key is pressed)."""
        needs = {"interrupt": TrainingStatus.IN_PROGRESS, "resume": TrainingStatus.STOPPED}.get(action)
        if needs is None:
            return None
        name = self.main_table.selected_key if self.is_mounted else None
        row = next((row for row in self.rows if row[0] == name), None)
        if row is None:
            return "no training job selected"
        status = row[1].split()[-1]
        return None if status == needs.value else f"{name} is {status}; {action} needs {needs.value}"

    def action_train(self) -> None:
        self.run_after_form("Start a training", TRAIN_FORM, train_line)

    def action_interrupt(self) -> None:
        self._act_on_selected("interrupt")

    def action_resume(self) -> None:
        self._act_on_selected("resume")

    def _act_on_selected(self, verb: str) -> None:
        """The core decides whether the training's status allows `verb`; the view says why not first."""
        reason = self.why_not(verb)
        if reason is not None:
            self.notify(reason, severity="warning")
            return
        name = self.chosen_key()
        if name is not None:
            self.host.run_command(f"{verb} {shlex.quote(name)}")
