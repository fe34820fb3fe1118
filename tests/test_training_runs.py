"""Console training runs: real jobs on pools, interrupt/resume, the hash contract.

The user steps below are imported INSIDE the job process as `tests.test_training_runs:FUNC`, which is how
a user's `MODULE:FUNC` step reaches the job (the project is on the job's sys.path via context.zip).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core.backends.local.workspace import local_backend, store
from kinetic_tui.core.backends.registry import workspace_backend
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.platform.training import (
    CapacityError,
    ManagedTrainingRunner,
    TrainingCluster,
    TrainingJob,
    TrainingStateError,
    default_train_step,
)
from kinetic_tui.core.training.service import SUBMIT_WINDOW, TrainingService
from tests.helpers.gated_steps import GATED_STEP, resumed_hash

HP = {"learning_rate": 0.2}
ROOT = Path(__file__).resolve().parents[1]


def halving_step(hyperparameters: dict, epoch: int, state: dict) -> dict:
    return {"loss": state.get("loss", 1.0) / 2, "seen": [*state.get("seen", []), epoch]}


def exploding_step(hyperparameters: dict, epoch: int, state: dict) -> dict:
    if epoch == 3:
        raise RuntimeError("gradient exploded")
    return default_train_step(hyperparameters, epoch, state)


def in_memory(
    epochs: int, checkpoint_every: int, step=default_train_step, interrupt: int | None = None, hp: dict = HP
) -> TrainingJob:
    """The mechanism's own run: what the console must agree with."""
    job = TrainingJob("reference", hp, epochs, checkpoint_every)
    ManagedTrainingRunner(TrainingCluster(1), step).start(job, interrupt)
    return job


@pytest.fixture
def service() -> TrainingService:
    return TrainingService(store(), workspace_backend())


@pytest.fixture
def one_node(service: TrainingService) -> str:
    """A pool with exactly one training instance, whatever the machine's core count."""
    service.backend.add_pool("one", "l4", 1)
    return "one"


def state_of(service: TrainingService) -> tuple:
    """Everything a refused call must leave untouched."""
    return ([s.to_dict() for s in service.list()], [row.job_id for row in service.backend.jobs()])


def events(service: TrainingService, job_id: str) -> list[tuple[str, int | None]]:
    """(type, epoch) of each structured progress line in one attempt's log."""
    lines = [line for batch in service.backend.read_logs(job_id) for line in batch]
    parsed = [json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("KINETIC_EVENT ")]
    return [(e["type"], e.get("epoch")) for e in parsed]


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


# -- the contract ------------------------------------------------------------------------------------


@pytest.mark.parametrize("checkpoint_every", [1, 2])
@pytest.mark.parametrize("interrupt", [1, 2, 3, 4])
def test_interrupt_then_resume_ends_with_the_straight_run_hash(service, interrupt, checkpoint_every):
    straight = in_memory(4, checkpoint_every)
    reference = in_memory(4, checkpoint_every, interrupt=interrupt)

    service.start("t", HP, 4, checkpoint_every, None, interrupt_before_epoch=interrupt)
    stopped = service.wait("t")
    assert (stopped.status, stopped.current_epoch, stopped.interruptions, stopped.checkpoint_epoch) == (
        reference.status.value,
        reference.current_epoch,
        reference.interruptions,
        reference.checkpoint.epoch if reference.checkpoint else None,
    )
    assert stopped.artifact_hash is None

    service.resume("t")
    done = service.wait("t")
    assert done.status == "Completed"
    assert done.artifact_hash == straight.artifact_hash
    assert done.metric == straight.metric
    assert (done.current_epoch, done.interruptions, len(done.job_ids)) == (4, 1, 2)
    assert [local_backend().job(j).status for j in done.job_ids] == [JobStatus.FAILED, JobStatus.SUCCEEDED]
    assert local_backend().job(done.job_ids[0]).phase == "preempted"  # the jobs view says why, not "runner"
    resumed_epochs = [epoch for kind, epoch in events(service, done.job_ids[1]) if kind == "epoch"]
    assert resumed_epochs == list(range(stopped.current_epoch + 1, 5))  # continued from the stored checkpoint


def test_straight_run_matches_the_in_memory_runner_and_reports_every_epoch(service):
    done = service.wait(service.start("s", HP, 3, 2, None).name)
    straight = in_memory(3, 2)
    assert (done.status, done.metric, done.artifact_hash, done.checkpoint_epoch) == (
        "Completed",
        straight.metric,
        straight.artifact_hash,
        2,
    )
    assert events(service, done.job_ids[0]) == [
        ("epoch", 1),
        ("epoch", 2),
        ("checkpoint", 2),
        ("epoch", 3),
        ("completed", 3),
    ]
    snapshot = service.get("s").to_dict()
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert {
        "name",
        "status",
        "current_epoch",
        "checkpoint_epoch",
        "interruptions",
        "metric",
        "artifact_hash",
        "max_epochs",
        "hyperparameters",
        "pool",
        "job_ids",
        "error",
    } <= set(snapshot)


def test_checkpoints_are_durable_objects_under_the_first_attempts_output_dir(service):
    service.start("d", HP, 4, 2, None, interrupt_before_epoch=4)
    stopped = service.wait("d")
    service.resume("d")
    done = service.wait("d")
    first = stopped.job_ids[0]
    output = Path(local_backend().job(first).handle["output_dir"])
    saved = sorted(p.name for p in (output / "training" / "d").iterdir())
    assert saved == ["checkpoint-000002.json", "checkpoint-000004.json"]
    assert (
        json.loads((output / "training" / "d" / "checkpoint-000004.json").read_text())["state"]
        == in_memory(4, 2).checkpoint.state
    )
    assert done.job_ids[0] == first


# -- interrupt: a real kill that keeps the instance ------------------------------------------------------


def test_interrupt_kills_the_process_and_the_stopped_job_keeps_its_instance(service, one_node, tmp_path):
    hp = {**HP, "gate": str(tmp_path / "gate")}  # epoch 2 waits for the gate: the kill lands mid-run
    service.start("slow", hp, 6, 1, one_node, step=GATED_STEP)
    wait_for(lambda: service.refresh("slow")[0].checkpoint_epoch)  # a checkpoint, not just an epoch

    stopped = service.interrupt("slow")
    assert stopped.status == "Stopped" and stopped.interruptions == 1
    assert stopped.current_epoch == stopped.checkpoint_epoch == 1
    row = local_backend().job(stopped.job_ids[0])
    assert row.status is JobStatus.CANCELLED and not any(h.is_alive() for h in row.hosts)

    before = state_of(service)
    with pytest.raises(CapacityError, match="'one'.*slow"):
        service.start("other", HP, 2, 1, one_node)
    assert state_of(service) == before

    (tmp_path / "gate").write_text("")
    done = service.wait(service.resume("slow").name)
    assert done.artifact_hash == resumed_hash(hp, 6)
    assert service.wait(service.start("other", HP, 2, 1, one_node).name).status == "Completed"


def test_a_process_killed_from_outside_is_a_preemption_and_resumes(service, tmp_path):
    hp = {**HP, "gate": str(tmp_path / "gate")}
    service.start("reclaimed", hp, 5, 1, None, step=GATED_STEP)
    # wait for a recorded checkpoint: an epoch event alone may precede its checkpoint, and a kill between
    # the two is a preemption with no checkpoint (epoch 0), a different case
    wait_for(lambda: service.refresh("reclaimed")[0].checkpoint_epoch)
    row = local_backend().job(service.get("reclaimed").job_ids[0])
    os.killpg(row.hosts[0].pgid, signal.SIGKILL)
    stopped = service.wait("reclaimed")
    assert (stopped.status, stopped.interruptions) == ("Stopped", 1)
    assert stopped.current_epoch == stopped.checkpoint_epoch == 1
    (tmp_path / "gate").write_text("")
    assert service.wait(service.resume("reclaimed").name).artifact_hash == resumed_hash(hp, 5)


def test_an_attempt_whose_launch_failed_is_stopped_at_its_checkpoint_and_resumes(service, monkeypatch, tmp_path):
    """Our infrastructure failing to start an attempt (phase launch) loses no training: it is Stopped where
    its last checkpoint is, the reason kept, and the next resume ends with the straight hash."""
    service.start("l", HP, 4, 1, None, interrupt_before_epoch=3)
    assert service.wait("l").checkpoint_epoch == 2
    monkeypatch.setenv("KINETIC_RUNNER_FILE", str(tmp_path / "gone.py"))  # no attempt can be started now
    lost = service.wait(service.resume("l").name)
    assert local_backend().job(lost.job_ids[-1]).phase == "launch"
    assert (lost.status, lost.current_epoch, lost.checkpoint_epoch, lost.interruptions) == ("Stopped", 2, 2, 2)
    assert f"attempt {lost.job_ids[-1]} was lost in phase launch (could not start the job: runner file" in lost.error
    assert lost.error.endswith("resume continues from epoch 3")
    monkeypatch.delenv("KINETIC_RUNNER_FILE")
    done = service.wait(service.resume("l").name)
    assert (done.status, done.error, done.artifact_hash) == ("Completed", None, in_memory(4, 1).artifact_hash)


def test_interrupting_a_settled_training_is_refused(service):
    service.wait(service.start("x", HP, 1, 1, None).name)
    before = state_of(service)
    with pytest.raises(TrainingStateError, match="it is Completed; interrupt requires InProgress"):
        service.interrupt("x")
    assert state_of(service) == before


def test_pool_none_picks_a_pool_with_a_free_instance(service, one_node):
    service.backend.remove_pool("cpu")
    service.start("a", HP, 2, 1, None, interrupt_before_epoch=1)
    assert service.wait("a").pool == "one"
    with pytest.raises(CapacityError, match="no pool has a free training instance.*'one'"):
        service.start("b", HP, 2, 1, None)


def in_a_new_process(code: str, check: bool = True) -> Any:
    """Run `code` in a fresh interpreter on this test's home, with `s` a TrainingService on the workspace's
    backend and `tr` its module (and json, os imported): state must come from the store, not this process.
    Returns the process's stdout when `check`, else the completed process."""
    script = (
        "import json, os, kinetic_tui.core.training.service as tr; "
        "from kinetic_tui.core.backends.local.workspace import store; "
        "from kinetic_tui.core.backends.registry import workspace_backend; "
        f"s = tr.TrainingService(store(), workspace_backend()); {code}"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=60
    )
    if not check:
        return done
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_resume_from_a_new_process_gives_the_straight_hash(service):
    service.start("p", HP, 4, 1, None, interrupt_before_epoch=3)
    assert service.wait("p").status == "Stopped"
    out = in_a_new_process("s.resume('p'); print(json.dumps(s.wait('p').to_dict()))")
    assert json.loads(out.splitlines()[-1])["artifact_hash"] == in_memory(4, 1).artifact_hash
    assert service.get("p").status == "Completed"


def die_while_submitting(call: str) -> None:
    """Run `TrainingService.<call>` in a process that dies inside the submission, after the reservation."""
    done = in_a_new_process(f"tr.submit_call = lambda *a, **k: os._exit(3); s.{call}", check=False)
    assert done.returncode == 3


def after_the_submit_window(service: TrainingService) -> TrainingService:
    return TrainingService(service.store, service.backend, clock=lambda: time.time() + SUBMIT_WINDOW)


def test_a_first_attempt_whose_submitter_died_is_stopped_after_the_window_and_resumes_from_epoch_1(service, one_node):
    die_while_submitting("start('orphan', {}, 2, 1, 'one')")
    assert service.refresh("orphan")[0].status == "InProgress"  # maybe still submitting: left alone
    with pytest.raises(TrainingStateError, match="still being submitted"):
        service.interrupt("orphan")

    stopped = after_the_submit_window(service).refresh("orphan")[0]
    assert stopped.status == "Stopped" and "was never submitted" in stopped.error
    with pytest.raises(CapacityError, match="orphan"):  # Stopped keeps its instance, as a preempted run does
        service.start("next", HP, 1, 1, one_node)
    done = service.wait(service.resume("orphan").name)
    assert (done.status, done.artifact_hash) == ("Completed", in_memory(2, 1, hp={}).artifact_hash)
    assert len(done.job_ids) == 2


def test_a_trial_whose_submitter_died_is_submitted_again_by_its_study(service, one_node):
    die_while_submitting("tune('lost', {'lr': [0.1]}, 'grid', 1, pool='one', epochs=2, wait=False)")
    assert service.study("lost").trials[0].status == "InProgress"  # reserved, never queued
    after_the_submit_window(service).refresh()  # what the supervisor's tick does once the window passed
    done = service.wait("lost.trial-1")
    assert (done.status, done.artifact_hash) == ("Completed", in_memory(2, 1, hp={"lr": 0.1}).artifact_hash)
    assert service.study("lost").status == "Completed"


def test_a_resume_whose_submitter_died_is_undone_after_the_window(service):
    service.start("r", HP, 3, 1, None, interrupt_before_epoch=2)
    stopped = service.wait("r")
    die_while_submitting("resume('r')")
    assert service.refresh("r")[0].status == "InProgress"

    undone = after_the_submit_window(service).refresh("r")[0]
    assert undone == stopped  # Stopped again, the lost attempt forgotten
    assert service.wait(service.resume("r").name).artifact_hash == in_memory(3, 1).artifact_hash


# -- steps -------------------------------------------------------------------------------------------


def test_a_user_step_runs_in_the_job_and_keeps_the_contract(service):
    step = "tests.test_training_runs:halving_step"
    service.start("u", HP, 3, 1, None, step=step, interrupt_before_epoch=3)
    service.wait("u")
    done = service.wait(service.resume("u").name)
    expected = in_memory(3, 1, step=halving_step)
    assert (done.metric, done.artifact_hash, done.step) == (0.125, expected.artifact_hash, step)
    assert done.artifact_hash != in_memory(3, 1).artifact_hash


def test_a_step_that_raises_fails_the_training_and_frees_the_instance(service, one_node):
    service.start("boom", HP, 4, 1, one_node, step="tests.test_training_runs:exploding_step")
    failed = service.wait("boom")
    assert failed.status == "Failed"
    assert failed.error == "epoch 3: RuntimeError: gradient exploded"
    assert (failed.current_epoch, failed.checkpoint_epoch, failed.artifact_hash) == (2, 2, None)
    assert local_backend().job(failed.job_ids[0]).status is JobStatus.FAILED
    assert service.wait(service.start("after", HP, 1, 1, one_node).name).status == "Completed"


def test_an_unimportable_step_fails_with_the_import_error(service):
    failed = service.wait(service.start("missing", HP, 2, 1, None, step="no_such_module:step").name)
    assert failed.status == "Failed"
    assert "ModuleNotFoundError" in failed.error and "no_such_module" in failed.error


# -- bad input changes nothing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"epochs": 0}, ValidationError, "max_epochs must be an integer >= 1, got 0"),
        ({"epochs": True}, ValidationError, "max_epochs"),
        ({"checkpoint_every": -1}, ValidationError, "checkpoint_every"),
        ({"interrupt_before_epoch": 5}, ValidationError, r"interrupt_before_epoch must be an integer in 1\.\.4"),
        ({"step": "not a ref"}, ValidationError, "step must be MODULE:FUNC"),
        ({"pool": "nope"}, NotFoundError, "unknown pool 'nope'; pools: cpu"),
        ({"name": "../escape"}, ValidationError, "training job name '../escape' is invalid"),
        ({"hyperparameters": {"lr": object()}}, ValidationError, "JSON-serialisable"),
    ],
)
def test_bad_start_arguments_change_nothing(service, kwargs, error, match):
    args = {"name": "t", "hyperparameters": HP, "epochs": 4, "checkpoint_every": 1, "pool": None, **kwargs}
    before = state_of(service)
    with pytest.raises(error, match=match):
        service.start(**args)
    assert state_of(service) == before


def test_unknown_trainings_and_wrong_states_are_refused_without_changes(service):
    service.wait(service.start("done", HP, 1, 1, None).name)
    before = state_of(service)
    for action in (service.get, service.resume, service.interrupt, service.wait):
        with pytest.raises(NotFoundError, match="training job: unknown 'ghost'; known: done"):
            action("ghost")
    with pytest.raises(
        TrainingStateError, match="cannot resume training job 'done': it is Completed; resume requires Stopped"
    ):
        service.resume("done")
    with pytest.raises(ValidationError, match="'done' already exists"):
        service.start("done", HP, 1, 1, None)
    assert state_of(service) == before


def test_a_pool_shadowed_by_an_earlier_pool_with_the_same_accelerator_is_refused(service):
    service.backend.add_pool("zcpu", "cpu", 4)
    with pytest.raises(ValidationError, match="pool 'zcpu' cannot be targeted.*use --pool cpu"):
        service.start("t", HP, 1, 1, "zcpu")
    assert service.list() == []
