"""A study's trials follow their trainings: a trial resumed, failed or completed outside the study's own
advance shows as it is whenever the study is shown, and a resumed trial sets the study moving again, so the
supervisor completes it after the client that resumed it left."""

from __future__ import annotations

import os
from pathlib import Path

from kinetic_tui.core.backends.local.workspace import store
from kinetic_tui.core.backends.registry import workspace_backend
from kinetic_tui.core.supervisor import process as supervisor
from kinetic_tui.core.training.service import TrainingService
from tests.helpers.gated_steps import GATE_TIMEOUT, HOME_GATE, HOME_GATED_STEP, home_gated_step
from tests.lifecycle.backend_projects import wait_for
from tests.test_training_code import kt, one_instance_pool, project, trial_statuses

__all__ = ["project"]  # the fixture, shared with the code-shipping tests

SPACE = {"learning_rate": [0.1, 0.3, 0.5]}
FAIL_MARKER = "fail-the-next-epoch"
# The user project's own step behind the home's gate: a trial started with the gate shut is still running at
# its second epoch whenever the test interrupts it, however fast or loaded the machine.
GATED_USER_STEP = f"""
import os
import time
from pathlib import Path


def step(hyperparameters, epoch, state):
    gate = Path(os.environ["KINETIC_HOME"]) / {HOME_GATE!r}
    deadline = time.monotonic() + {GATE_TIMEOUT!r}
    while epoch > 1 and not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {{"loss": state.get("loss", 1.0) * (1 - hyperparameters["learning_rate"]), "seen": epoch}}
"""


def fails_when_told(hyperparameters: dict, epoch: int, state: dict) -> dict:
    """`home_gated_step` (so a trial can be interrupted mid-run), until the marker file exists in the home (the
    job sees the home): then it raises."""
    if (Path(os.environ["KINETIC_HOME"]) / FAIL_MARKER).exists():
        raise RuntimeError("told to fail")
    return home_gated_step(hyperparameters, epoch, state)


def test_a_trial_whose_training_failed_after_a_resume_shows_failed(kinetic_home: Path, monkeypatch) -> None:
    # no supervisor: one that advanced the study would start its second trial while this one is judged
    monkeypatch.setattr(supervisor, "ensure_running", lambda *args, **kwargs: False)
    service = TrainingService(store(), workspace_backend())
    service.backend.add_pool("two", "l4", 2)
    study = service.tune(
        "f", SPACE, "bayesian", 2, pool="two", epochs=4, wait=False, step="tests.test_study_trials:fails_when_told"
    )
    trial = study.trials[0].training
    assert service.interrupt(trial).status == "Stopped"
    assert [t.status for t in service.study("f").trials] == ["Stopped"]

    (kinetic_home / FAIL_MARKER).touch()
    service.resume(trial)
    failed = service.wait(trial)  # the training alone is refreshed: the study is not advanced
    assert failed.status == "Failed" and failed.error.endswith("RuntimeError: told to fail")
    shown = service.study("f")
    assert [t.status for t in shown.trials] == ["Failed"] and shown.best is None
    assert [t.status for t in service.studies()[0].trials] == ["Failed"]


def test_a_study_whose_stopped_trial_was_resumed_is_due_for_the_supervisor(kinetic_home: Path) -> None:
    """What revives a missing supervisor reads the trials' trainings, not the study's rows of its last advance."""
    service = TrainingService(store(), workspace_backend())
    service.backend.add_pool("one", "l4", 1)
    study = service.tune("r", SPACE, "grid", 2, pool="one", epochs=4, wait=False, step=HOME_GATED_STEP)
    service.interrupt(study.trials[0].training)
    assert service.study("r").status == "Stopped" and not service.store.tuning.any_may_move()
    supervisor.stop(kinetic_home)
    (kinetic_home / HOME_GATE).touch()
    service.resume(study.trials[0].training)  # its rows still say Stopped: nobody advanced the study
    assert service.store.tuning.any_may_move()
    service.wait(study.trials[0].training)


def test_a_trial_resumed_after_the_client_left_lets_the_supervisor_complete_the_study(
    project: Path, kinetic_home: Path
) -> None:
    (project / "gated_user_steps.py").write_text(GATED_USER_STEP)
    one_instance_pool(project)
    tune = ("tune", "s", "--space", "learning_rate=0.1,0.3", "--strategy", "grid", "--max-trials", "2")
    kt(*tune, "--pool", "solo", "--step", "gated_user_steps:step", "--detach", cwd=project)
    assert kt("interrupt", "s.trial-1", cwd=project)["status"] == "Stopped"
    # the stopped trial keeps the only instance: the study waits for it, nobody moves it
    assert kt("show", "study", "s", cwd=project)["status"] == "Stopped"
    wait_for(lambda: supervisor.running(kinetic_home) is None, 10, "the supervisor to exit with nothing due")

    (kinetic_home / HOME_GATE).touch()
    assert kt("resume", "s.trial-1", "--detach", cwd=project)["status"] == "InProgress"
    wait_for(lambda: trial_statuses(kinetic_home, "s") == ["Completed"] * 2, 60, "the supervisor to finish the study")
    assert kt("show", "study", "s", cwd=project)["status"] == "Completed"
