"""A `--step` training's attempts and a study's trials ship the step's project as it was packaged when the
training or the study started: `resume` from the project directory or from anywhere else, and the trials the
supervisor submits after the client left, run the user's step (the code it had then), never fail with
ModuleNotFoundError.

The real `kinetic-tui` executable runs in subprocesses: unlike `python -m`, a console script does not put
its cwd on sys.path, which is how a user's shell runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core.platform.training import ManagedTrainingRunner, TrainingCluster, TrainingJob
from kinetic_tui.core.platform.tuning import HyperparameterTuner
from tests.lifecycle.backend_projects import wait_for
from tests.test_supervisor import read

STEP_SOURCE = """
import time

FACTOR = {factor}


def step(hyperparameters, epoch, state):
    time.sleep({seconds})
    return {{"loss": state.get("loss", 1.0) * FACTOR * (1 - hyperparameters.get("learning_rate", 0.1)), "seen": epoch}}
"""
STEP = "user_steps:step"
TIMEOUT = 90.0


def write_step(project: Path, factor: float, seconds: float = 0.05) -> types.ModuleType:
    """(Re)write the project's step module (`seconds` per epoch); returns the same code loaded here, for the
    in-memory reference."""
    source = STEP_SOURCE.format(factor=factor, seconds=seconds)
    (project / "user_steps.py").write_text(source)
    module = types.ModuleType("user_steps_reference")
    exec(compile(source, "user_steps_reference", "exec"), module.__dict__)
    return module


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user project that only the commands run from inside it can import (never this test process)."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'user-steps'\nversion = '0.1'\n")
    return root


def kt(*args: str, cwd: Path) -> Any:
    """`kinetic-tui ARGS --json` from `cwd`; the command's result."""
    executable = shutil.which("kinetic-tui")
    assert executable, "the kinetic-tui executable must be on PATH"
    done = subprocess.run(
        [executable, *args, "--json"], cwd=cwd, env=dict(os.environ), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])["result"]


def one_instance_pool(project: Path) -> None:
    kt("pool", "remove", "cpu", "--yes", cwd=project)
    kt("pool", "add", "solo", "--accelerator", "cpu", "--nodes", "1", cwd=project)


def trial_statuses(home: Path, study: str) -> list[str]:
    """The study's stored trial rows, read raw: opening the workspace would itself move the study."""
    sql = f"SELECT json_extract(record, '$.status') FROM tuning_trials WHERE study = '{study}' ORDER BY trial_id"
    return [status for (status,) in read(home, sql)]


def straight_run(step: types.ModuleType, epochs: int) -> TrainingJob:
    job = TrainingJob("reference", {}, epochs, 1)
    ManagedTrainingRunner(TrainingCluster(1), step.step).start(job)
    return job


def stopped_training(project: Path) -> dict[str, Any]:
    stopped = kt("train", "t", "--step", STEP, "--epochs", "4", "--interrupt-before-epoch", "3", cwd=project)
    assert (stopped["status"], stopped["checkpoint_epoch"]) == ("Stopped", 2), stopped
    return stopped


def test_resume_from_the_project_directory_ships_the_step(project: Path) -> None:
    reference = write_step(project, 0.5)
    stopped_training(project)
    done = kt("resume", "t", cwd=project)
    assert done["status"] == "Completed", done["error"]
    assert (done["artifact_hash"], done["interruptions"]) == (straight_run(reference, 4).artifact_hash, 1)


def test_every_attempt_runs_the_code_as_packaged_at_start(project: Path, tmp_path: Path) -> None:
    """The project is edited, then moved away, before the resume: the attempt still runs the start's code."""
    reference = write_step(project, 0.5)
    stopped_training(project)
    changed = write_step(project, 0.25)
    project.rename(tmp_path / "moved")
    done = kt("resume", "t", cwd=tmp_path)
    assert done["status"] == "Completed", done["error"]
    assert done["artifact_hash"] == straight_run(reference, 4).artifact_hash
    assert done["artifact_hash"] != straight_run(changed, 4).artifact_hash


@pytest.mark.parametrize("strategy", ["grid", "bayesian"])
def test_trials_the_supervisor_submits_after_the_client_left_run_the_step(
    project: Path, kinetic_home: Path, strategy: str
) -> None:
    """One instance: the client submits trial 1 and exits; the supervisor submits every later trial. The study
    ends as `HyperparameterTuner.run()` with the same step ends, trial for trial."""
    reference = write_step(project, 0.5)
    one_instance_pool(project)
    space = "learning_rate=0.1,0.2,0.3,0.4"
    tune = ("tune", "s", "--space", space, "--strategy", strategy, "--max-trials", "3", "--pool", "solo")
    started = kt(*tune, "--step", STEP, "--detach", cwd=project)
    assert [t["status"] for t in started["trials"]] == ["InProgress"]

    def settled() -> bool:
        statuses = trial_statuses(kinetic_home, "s")
        return len(statuses) == 3 and "InProgress" not in statuses

    wait_for(settled, TIMEOUT, "the supervisor to run the study's three trials")
    study = kt("show", "study", "s", cwd=project)
    trainings = [kt("show", "training", t["training"], cwd=project) for t in study["trials"]]
    assert [t["status"] for t in trainings] == ["Completed"] * 3, [t["error"] for t in trainings]
    expected = HyperparameterTuner(
        {"learning_rate": [0.1, 0.2, 0.3, 0.4]}, strategy, 3, max_epochs=5, train_step=reference.step
    ).run()
    assert study["status"] == "Completed"
    assert [(t["trial_id"], t["hyperparameters"], t["metric"], t["artifact_hash"]) for t in study["trials"]] == [
        (t.trial_id, t.hyperparameters, t.metric, t.artifact_hash) for t in expected.trials
    ]
    assert study["best"] == expected.best.trial_id
