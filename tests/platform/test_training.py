"""Training jobs: the artifact-hash contract (an interrupted-then-resumed run ends with the hash of an
uninterrupted one), the deep-copy rule for checkpoints, capacity and the status machine."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.platform.training import (
    CapacityError,
    Checkpoint,
    ManagedTrainingRunner,
    TrainingCluster,
    TrainingJob,
    TrainingStateError,
    TrainingStatus,
    compute_artifact_hash,
    default_train_step,
)

MAX_EPOCHS = 6


def straight_hash(hp: dict, max_epochs: int, checkpoint_every: int = 1, step=default_train_step) -> str:
    job = TrainingJob("straight", hp, max_epochs, checkpoint_every)
    ManagedTrainingRunner(TrainingCluster(1), step).start(job)
    assert job.status is TrainingStatus.COMPLETED
    return job.artifact_hash


def finish(runner: ManagedTrainingRunner, job: TrainingJob, interrupt=None) -> None:
    """Continue a Stopped job the way the contract allows: resume from a checkpoint, else restart."""
    (runner.resume if job.checkpoint else runner.restart)(job, interrupt)


def test_hash_and_default_step_are_the_specified_formulas():
    hp = {"learning_rate": 0.5}
    expected = hashlib.sha256(b'{"epochs":2,"final_state":{"loss":0.25},"hp":{"learning_rate":0.5}}').hexdigest()
    assert compute_artifact_hash(hp, {"loss": 0.25}, 2) == expected
    assert default_train_step(hp, 1, {"loss": 0.5}) == {"loss": 0.25}
    assert default_train_step({}, 1, {}) == {"loss": 0.9}
    assert straight_hash(hp, 2) == expected


def test_straight_run_completes_and_releases():
    cluster = TrainingCluster(1)
    job = ManagedTrainingRunner(cluster).start(TrainingJob("j", {"learning_rate": 0.5}, 3, 2))
    assert (job.status, job.current_epoch, job.metric, job.error) == (TrainingStatus.COMPLETED, 3, 0.125, None)
    assert job.checkpoint == Checkpoint(2, {"loss": 0.25}, 0.25)  # the last checkpoint stays on the job
    assert cluster.in_use == 0 and cluster.holders == frozenset()


@pytest.mark.parametrize("checkpoint_every", [1, 2, 3, MAX_EPOCHS + 1])
@pytest.mark.parametrize("interrupt", range(1, MAX_EPOCHS + 1))
def test_contract_interrupted_run_ends_with_the_straight_hash(checkpoint_every, interrupt):
    hp = {"learning_rate": 0.3}
    cluster = TrainingCluster(1)
    runner = ManagedTrainingRunner(cluster)
    job = runner.start(TrainingJob("j", hp, MAX_EPOCHS, checkpoint_every), interrupt_before_epoch=interrupt)

    saved = (interrupt - 1) // checkpoint_every * checkpoint_every
    assert job.status is TrainingStatus.STOPPED
    assert (job.current_epoch, job.interruptions) == (saved, 1)
    assert (job.checkpoint.epoch if job.checkpoint else 0) == saved
    assert cluster.holders == {"j"}

    finish(runner, job)
    assert job.status is TrainingStatus.COMPLETED
    assert job.artifact_hash == straight_hash(hp, MAX_EPOCHS, checkpoint_every)
    assert job.interruptions == 1 and cluster.in_use == 0


@settings(max_examples=60)
@given(
    max_epochs=st.integers(1, 8),
    checkpoint_every=st.integers(1, 10),
    lr=st.floats(0.0, 0.95),
    interrupts=st.lists(st.integers(1, 8), max_size=3),
)
def test_contract_holds_for_any_sequence_of_interrupts(max_epochs, checkpoint_every, lr, interrupts):
    hp = {"learning_rate": lr}
    interrupts = [min(i, max_epochs) for i in interrupts]
    runner = ManagedTrainingRunner(TrainingCluster(1))
    job = TrainingJob("j", hp, max_epochs, checkpoint_every)
    runner.start(job, interrupts[0] if interrupts else None)
    for interrupt in [*interrupts[1:], None]:
        if job.status is TrainingStatus.STOPPED:
            finish(runner, job, interrupt)
    assert job.status is TrainingStatus.COMPLETED
    assert job.artifact_hash == straight_hash(hp, max_epochs, checkpoint_every)
    assert job.artifact_hash == compute_artifact_hash(hp, {"loss": job.metric}, max_epochs)


def history_step(hp: dict, epoch: int, state: dict) -> dict:
    """Mutates its state in place and returns the same object: the case the deep-copy rule exists for."""
    state["loss"] = state.get("loss", 1.0) / 2
    state.setdefault("history", []).append(epoch)
    hp["learning_rate"] = "clobbered"  # must not reach the job's own hyperparameters
    return state


def test_in_place_mutation_cannot_alter_a_saved_checkpoint():
    runner = ManagedTrainingRunner(TrainingCluster(1), history_step)
    job = runner.start(TrainingJob("j", {"learning_rate": 0.1}, 5, 2), interrupt_before_epoch=4)
    # epoch 3 mutated the working state in place after the epoch-2 checkpoint was taken
    assert job.checkpoint == Checkpoint(2, {"loss": 0.25, "history": [1, 2]}, 0.25)
    runner.resume(job, interrupt_before_epoch=4)  # runs epoch 3 again on a copy, then stops
    assert job.checkpoint.state == {"loss": 0.25, "history": [1, 2]}
    runner.resume(job)
    assert job.hyperparameters == {"learning_rate": 0.1}
    assert job.artifact_hash == straight_hash({"learning_rate": 0.1}, 5, 2, history_step)
    assert job.checkpoint.state["history"] == [1, 2, 3, 4]


def test_checkpoint_copies_state_on_construction():
    state = {"loss": 1.0, "nested": [1]}
    checkpoint = Checkpoint(1, state, 1.0)
    state["nested"].append(2)
    assert checkpoint.state == {"loss": 1.0, "nested": [1]}
    with pytest.raises(dataclasses.FrozenInstanceError):
        checkpoint.epoch = 2


def test_a_new_job_has_run_no_epoch():
    job = TrainingJob("j", {}, 3, 1)
    assert (job.status, job.current_epoch, job.checkpoint, job.interruptions) == (TrainingStatus.PENDING, 0, None, 0)


def test_job_copies_its_hyperparameters():
    hp = {"learning_rate": 0.2, "layers": [1, 2]}
    job = TrainingJob("j", hp, 1, 1)
    hp["layers"].append(3)
    assert job.hyperparameters == {"learning_rate": 0.2, "layers": [1, 2]}


def test_stopped_job_keeps_its_instance_and_blocks_capacity():
    cluster = TrainingCluster(1)
    runner = ManagedTrainingRunner(cluster)
    a = runner.start(TrainingJob("a", {}, 3, 1), interrupt_before_epoch=2)
    b = TrainingJob("b", {}, 3, 1)
    before = b.to_record()
    with pytest.raises(CapacityError, match="a"):
        runner.start(b)
    assert b.to_record() == before and b.status is TrainingStatus.PENDING
    assert cluster.holders == {"a"} and cluster.available() == 0
    runner.fail(a, "preempted twice")
    assert (a.status, a.error, cluster.in_use) == (TrainingStatus.FAILED, "preempted twice", 0)
    assert runner.start(b).status is TrainingStatus.COMPLETED


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (lambda hp, e, s: [1], "must return a dict"),
        (lambda hp, e, s: 1 / 0, "ZeroDivisionError"),
        (lambda hp, e, s: {"acc": 1.0}, "'loss'"),
        (lambda hp, e, s: {"loss": float("nan")}, "'loss'"),
        (lambda hp, e, s: {"loss": 1.0, "bad": threading.Lock()}, "cannot be pickled"),
        # keys JSON cannot sort would fail the artifact hash at the end: refused at the epoch that made them
        (lambda hp, e, s: {"loss": 1.0, 1: "x"}, "must return a state of JSON values"),
    ],
)
def test_a_bad_step_fails_the_job_and_frees_the_instance(step, message):
    cluster = TrainingCluster(1)
    job = ManagedTrainingRunner(cluster, step).start(TrainingJob("j", {}, 3, 1))
    assert job.status is TrainingStatus.FAILED
    assert message in job.error and "epoch 1" in job.error
    assert (job.artifact_hash, job.metric, cluster.in_use) == (None, None, 0)


def test_step_failing_mid_run_keeps_the_earlier_checkpoint():
    def step(hp, epoch, state):
        if epoch == 3:
            raise RuntimeError("nan in gradients")
        return default_train_step(hp, epoch, state)

    job = ManagedTrainingRunner(TrainingCluster(1), step).start(TrainingJob("j", {}, 4, 1))
    assert job.status is TrainingStatus.FAILED and job.error == "epoch 3: RuntimeError: nan in gradients"
    assert job.checkpoint.epoch == 2 and job.current_epoch == 2


def test_objective_names_the_metric_key():
    step = lambda hp, e, s: {"loss": 1.0, "accuracy": e / 10}  # noqa: E731
    job = ManagedTrainingRunner(TrainingCluster(1), step, objective="accuracy").start(TrainingJob("j", {}, 3, 1))
    assert job.metric == 0.3 and job.checkpoint.metric == 0.3


# ----------------------------------------------------------------- illegal actions change nothing


def restored(status: TrainingStatus, checkpoint: bool = False) -> TrainingJob:
    record = TrainingJob("j", {}, 3, 1).to_record()
    record["status"] = status.value
    if checkpoint:
        record["checkpoint"] = {"epoch": 1, "state": {"loss": 0.9}, "metric": 0.9}
        record["current_epoch"] = 1
    return TrainingJob.from_record(record)


def reached(status: TrainingStatus) -> tuple[ManagedTrainingRunner, TrainingJob]:
    """A job in `status` reached through real actions (InProgress only exists for a restored, adopted job)."""
    runner = ManagedTrainingRunner(TrainingCluster(2))
    job = TrainingJob("j", {}, 3, 2)
    if status is TrainingStatus.IN_PROGRESS:
        job = restored(status)
        runner.cluster.adopt(job)
    elif status is TrainingStatus.COMPLETED:
        runner.start(job)
    elif status is TrainingStatus.FAILED:
        runner.fail(runner.start(job, 1), "x")
    elif status is TrainingStatus.STOPPED:
        runner.start(job, 2)  # no checkpoint yet (checkpoint_every=2)
    return runner, job


ACTIONS = {
    "start": lambda r, j: r.start(j),
    "resume": lambda r, j: r.resume(j),
    "restart": lambda r, j: r.restart(j),
    "fail": lambda r, j: r.fail(j, "reason"),
}
LEGAL = {
    TrainingStatus.PENDING: {"start"},
    TrainingStatus.STOPPED: {"restart", "fail"},  # resume needs a checkpoint this job lacks
}


ILLEGAL = [(s, a) for s in TrainingStatus for a in ACTIONS if a not in LEGAL.get(s, ())]


@pytest.mark.parametrize(("status", "action"), ILLEGAL)
def test_every_illegal_action_raises_and_changes_nothing(status, action):
    runner, job = reached(status)
    before, holders = job.to_record(), runner.cluster.holders
    with pytest.raises(TrainingStateError, match=action):
        ACTIONS[action](runner, job)
    assert job.to_record() == before and runner.cluster.holders == holders


def test_actions_on_a_job_held_by_another_cluster_are_refused():
    other = ManagedTrainingRunner(TrainingCluster(1))
    job = other.start(TrainingJob("j", {}, 3, 1), interrupt_before_epoch=2)
    runner = ManagedTrainingRunner(TrainingCluster(1))
    before = job.to_record()
    for action in ("resume", "restart", "fail"):
        with pytest.raises(TrainingStateError, match="adopt"):
            ACTIONS[action](runner, job)
    assert job.to_record() == before and runner.cluster.in_use == 0


def test_cluster_refuses_double_placement_and_unknown_release():
    cluster = TrainingCluster(2)
    job = TrainingJob("j", {}, 1, 1)
    cluster.place(job)
    with pytest.raises(TrainingStateError, match="already holds"):
        cluster.place(TrainingJob("j", {}, 1, 1))
    with pytest.raises(TrainingStateError, match="holds no instance"):
        cluster.release(TrainingJob("k", {}, 1, 1))
    assert cluster.holders == {"j"}


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("j", {}, 0, 1), "max_epochs"),
        (("j", {}, 2.0, 1), "max_epochs"),
        (("j", {}, True, 1), "max_epochs"),
        (("j", {}, 3, 0), "checkpoint_every"),
        (("j", [("learning_rate", 0.1)], 3, 1), "hyperparameters"),
        (("j", {"lr": object()}, 3, 1), "hyperparameters"),
        (("", {}, 3, 1), "name"),
    ],
)
def test_job_validation_names_the_field(args, field):
    with pytest.raises(ValueError, match=field) as info:
        TrainingJob(*args)
    assert isinstance(info.value, KineticError)


@pytest.mark.parametrize("count", [0, -1, 1.5])
def test_cluster_validation(count):
    with pytest.raises(ValueError, match="instance_count"):
        TrainingCluster(count)


@pytest.mark.parametrize("interrupt", [0, 4, -1, 1.0])
def test_interrupt_outside_the_epochs_is_rejected_before_anything_changes(interrupt):
    cluster = TrainingCluster(1)
    runner = ManagedTrainingRunner(cluster)
    job = TrainingJob("j", {}, 3, 1)
    with pytest.raises(ValueError, match=r"interrupt_before_epoch must be an integer in 1\.\.3"):
        runner.start(job, interrupt)
    assert job.to_record() == TrainingJob("j", {}, 3, 1).to_record() and cluster.in_use == 0
    runner.start(job, 2)
    before = job.to_record()
    with pytest.raises(ValueError, match="interrupt_before_epoch"):
        runner.resume(job, interrupt)
    assert job.to_record() == before


def test_fail_requires_a_reason():
    runner = ManagedTrainingRunner(TrainingCluster(1))
    job = runner.start(TrainingJob("j", {}, 3, 1), 2)
    with pytest.raises(ValueError, match="reason"):
        runner.fail(job, "")
    assert job.status is TrainingStatus.STOPPED and runner.cluster.holders == {"j"}


def test_runner_validation():
    with pytest.raises(ValueError, match="cluster"):
        ManagedTrainingRunner(3)
    with pytest.raises(ValueError, match="train_step"):
        ManagedTrainingRunner(TrainingCluster(1), "step")
    with pytest.raises(ValueError, match="objective"):
        ManagedTrainingRunner(TrainingCluster(1), objective="")
    ManagedTrainingRunner(TrainingCluster(1), train_step=default_train_step, objective="loss")  # by keyword
    with pytest.raises(TypeError):  # the objective only by keyword: a third positional is a mistake
        ManagedTrainingRunner(TrainingCluster(1), default_train_step, "loss")


# ----------------------------------------------------------------------------- persistence


def test_record_round_trip_and_resume_after_restore_gives_the_straight_hash():
    hp = {"learning_rate": 0.25, "layers": [4, 2]}
    job = ManagedTrainingRunner(TrainingCluster(1)).start(TrainingJob("j", hp, 5, 2), interrupt_before_epoch=4)
    record = json.loads(json.dumps(job.to_record()))
    assert record == job.to_record()
    assert record["status"] == "Stopped" and record["checkpoint"]["epoch"] == 2

    copy = TrainingJob.from_record(record)
    assert copy.to_record() == record and copy.status is TrainingStatus.STOPPED
    fresh = TrainingCluster(1)
    fresh.adopt(copy)
    assert fresh.holders == {"j"}
    with pytest.raises(CapacityError):
        fresh.adopt(TrainingJob.from_record({**record, "name": "k"}))
    ManagedTrainingRunner(fresh).resume(copy)
    assert copy.artifact_hash == straight_hash(hp, 5, 2)
    assert TrainingJob.from_record(copy.to_record()).to_record() == copy.to_record()


def test_adopt_refuses_jobs_that_hold_nothing():
    cluster = TrainingCluster(1)
    for status in (TrainingStatus.PENDING, TrainingStatus.COMPLETED, TrainingStatus.FAILED):
        with pytest.raises(TrainingStateError, match="adopt requires InProgress or Stopped"):
            cluster.adopt(restored(status))
    assert cluster.in_use == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"status": "Running"}, "status must be one of Pending, InProgress, Completed, Failed, Stopped"),
        ({"current_epoch": 9}, "current_epoch"),
        ({"current_epoch": -1}, "current_epoch"),
        ({"checkpoint": {"epoch": 0, "state": {}, "metric": None}}, "checkpoint.epoch"),
        ({"checkpoint": {"epoch": 1}}, "checkpoint"),
        ({"interruptions": -1}, "interruptions"),
        ({"interruptions": True}, "interruptions must be an integer >= 0, got True"),
        ({"interruptions": "2"}, "interruptions must be an integer >= 0, got '2'"),
        ({"max_epochs": 0}, "max_epochs"),
    ],
)
def test_from_record_rejects_malformed_fields(change, field):
    record = {**TrainingJob("j", {}, 3, 1).to_record(), **change}
    with pytest.raises(ValueError, match=field):
        TrainingJob.from_record(record)


def test_from_record_takes_a_checkpoint_of_the_first_epoch():
    job = ManagedTrainingRunner(TrainingCluster(1)).start(TrainingJob("j", {}, 3, 1), interrupt_before_epoch=2)
    record = job.to_record()
    assert record["checkpoint"]["epoch"] == 1
    assert TrainingJob.from_record(record).to_record() == record


def test_from_record_names_missing_keys():
    record = TrainingJob("j", {}, 3, 1).to_record()
    del record["metric"], record["error"]
    with pytest.raises(ValueError, match="missing error, metric"):
        TrainingJob.from_record(record)


# ------------------------------------------------------------------ random action sequences


class ClusterMachine(RuleBasedStateMachine):
    """Random start/interrupt/resume/restart/fail sequences against a small cluster, checked against a model."""

    jobs = Bundle("jobs")

    @initialize(instances=st.integers(1, 4))
    def make_cluster(self, instances):
        self.cluster = TrainingCluster(instances)
        self.runner = ManagedTrainingRunner(self.cluster)
        self.all_jobs: list[TrainingJob] = []
        self.expected_hash: dict[str, str] = {}

    @rule(target=jobs, max_epochs=st.integers(1, 4), checkpoint_every=st.integers(1, 5), lr=st.sampled_from([0.1, 0.5]))
    def new_job(self, max_epochs, checkpoint_every, lr):
        job = TrainingJob(f"job-{len(self.all_jobs)}", {"learning_rate": lr}, max_epochs, checkpoint_every)
        self.all_jobs.append(job)
        self.expected_hash[job.name] = straight_hash(job.hyperparameters, max_epochs, checkpoint_every)
        return job

    def attempt(self, action, job, required, interrupt, extra_error=None):
        """Run `action`, predicting from the model whether it must raise, and check a raise changed nothing."""
        before, holders, free = job.to_record(), self.cluster.holders, self.cluster.available()
        if job.status is not required:
            expected = TrainingStateError
        elif interrupt is not None and interrupt > job.max_epochs:
            expected = ValueError
        elif extra_error is not None:
            expected = extra_error
        elif action == "start" and free == 0:
            expected = CapacityError
        else:
            expected = None

        def act():
            if action == "fail":
                return self.runner.fail(job, "spot capacity gone")
            return getattr(self.runner, action)(job, interrupt)

        if expected is None:
            act()
            if action == "start":
                assert self.cluster.in_use == len(holders) + (job.status is TrainingStatus.STOPPED)
            return
        with pytest.raises(expected):
            act()
        assert job.to_record() == before and self.cluster.holders == holders

    @rule(job=jobs, interrupt=st.none() | st.integers(1, 5))
    def start(self, job, interrupt):
        self.attempt("start", job, TrainingStatus.PENDING, interrupt)

    @rule(job=jobs, interrupt=st.none() | st.integers(1, 5))
    def resume(self, job, interrupt):
        no_checkpoint = TrainingStateError if job.checkpoint is None else None
        self.attempt("resume", job, TrainingStatus.STOPPED, interrupt, no_checkpoint)

    @rule(job=jobs, interrupt=st.none() | st.integers(1, 5))
    def restart(self, job, interrupt):
        self.attempt("restart", job, TrainingStatus.STOPPED, interrupt)

    @rule(job=jobs)
    def fail(self, job):
        self.attempt("fail", job, TrainingStatus.STOPPED, None)

    @invariant()
    def capacity_is_never_over_committed(self):
        assert 0 <= self.cluster.in_use <= self.cluster.instance_count

    @invariant()
    def exactly_the_stopped_jobs_hold_instances(self):
        stopped = {j.name for j in self.all_jobs if j.status is TrainingStatus.STOPPED}
        assert self.cluster.holders == stopped  # the runner is synchronous: nothing stays InProgress

    @invariant()
    def completed_jobs_have_the_straight_hash(self):
        for job in self.all_jobs:
            if job.status is TrainingStatus.COMPLETED:
                assert job.artifact_hash == self.expected_hash[job.name]


ClusterMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25)
test_cluster_machine = ClusterMachine.TestCase
