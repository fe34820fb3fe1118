"""The function a console training job runs INSIDE its job process: one attempt of the epoch loop.

The epoch loop is `ManagedTrainingRunner` itself, run on a one-instance cluster, so status, checkpoint,
interrupt and failure semantics (and the artifact hash) are exactly the in-memory mechanism's. The job only
adds I/O around it: a wrapped step reports the epoch the runner has just validated (the runner hands the
next call the state it accepted) before running the next one, so every reported epoch and every written
checkpoint is one the runner kept.

Durable checkpoints: one immutable binary object (a pickle, so a state may hold arrays) per checkpointed
epoch, `{prefix}checkpoint-{epoch:06d}.pkl` (`.json` for trainings started before), in
the jobs bucket under the training's FIRST attempt's output dir (`{first_job_id}/output/training/{name}/`).
Later attempts get the same prefix and the epoch to resume from (the store's checkpoint epoch), so a
checkpoint written after the store last heard of one is simply never used and cannot skew a resume.

Progress goes to stdout as one structured line per event, which the service folds into the store:
`KINETIC_EVENT {"type": "epoch"|"checkpoint"|"completed"|"failed", ...}`.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any, cast

import cloudpickle

from kinetic_tui.core.artifacts import ArtifactStore
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.platform.training import (
    Checkpoint,
    ManagedTrainingRunner,
    TrainingCluster,
    TrainingJob,
    TrainingStatus,
    TrainStep,
    default_train_step,
)
from kinetic_tui.core.storage import Storage, bucket_storage

EVENT_PREFIX = "KINETIC_EVENT "
# EX_TEMPFAIL: "try again later". A self-interrupt exits with it without writing a result, as a preempted
# process would, so the service can tell a deliberate stop from a crash.
PREEMPTED_EXIT_CODE = 75


class TrainingFailed(KineticError):
    """The training step failed; raised in the job so the job itself ends FAILED with the step's error."""


def checkpoint_key(prefix: str, epoch: int) -> str:
    return f"{prefix}checkpoint-{epoch:06d}.pkl"


def write_checkpoint(storage: Storage, prefix: str, record: dict[str, Any]) -> None:
    """A checkpoint is binary (its pickle), so a state may hold arrays and any picklable value."""
    storage.put_bytes(checkpoint_key(prefix, record["epoch"]), cloudpickle.dumps(record))


def read_checkpoint(storage: Storage, prefix: str, epoch: int) -> dict[str, Any]:
    """The checkpoint of `epoch`: the binary one, or the JSON one a training started before wrote."""
    try:
        record: dict[str, Any] = cloudpickle.loads(storage.get_bytes(checkpoint_key(prefix, epoch)))
    except NotFoundError:
        record = json.loads(storage.get_bytes(f"{prefix}checkpoint-{epoch:06d}.json"))
    return record


def emit(event: dict[str, Any]) -> None:
    print(EVENT_PREFIX + json.dumps(event, sort_keys=True), flush=True)


def parse_event(line: str) -> dict[str, Any] | None:
    """The event on a log line, or None for any other line (a user print that looks alike included)."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(EVENT_PREFIX) :])
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("type"), str) else None


def check_step_ref(step: str | None) -> str | None:
    """A user step is `MODULE:FUNC`; only its shape is checked here (it is imported inside the job)."""
    if step is None:
        return None
    module, _, func = step.partition(":") if isinstance(step, str) else ("", "", "")
    if not module or not func or not all(part.isidentifier() for part in (*module.split("."), *func.split("."))):
        raise ValidationError(f"step must be MODULE:FUNC (e.g. mypkg.steps:train_step), got {step!r}")
    return step


def load_step(step: str | None) -> TrainStep:
    checked = check_step_ref(step)
    if checked is None:
        return default_train_step
    module_name, _, attr = checked.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValidationError(f"step {step!r} is not callable")
    return cast(TrainStep, target)  # a callable the user names as a step: its signature is the step contract


class _Reporter:
    """Turns the runner's progress into events and checkpoint objects, once per epoch and checkpoint."""

    def __init__(self, job: TrainingJob, storage: Storage, prefix: str, objective: str) -> None:
        self.job = job
        self.storage = storage
        self.prefix = prefix
        self.objective = objective
        self.reported_epoch = job.current_epoch
        self.saved_epoch = job.checkpoint.epoch if job.checkpoint else 0
        self.last_state: dict[str, Any] = {}

    def wrap(self, step: TrainStep) -> TrainStep:
        def reporting_step(hyperparameters: dict[str, Any], epoch: int, state: dict[str, Any]) -> dict[str, Any]:
            self.flush()
            self.last_state = step(hyperparameters, epoch, state)
            return self.last_state

        return reporting_step

    def flush(self) -> None:
        """Report what the runner accepted since the last flush: the epoch, then its checkpoint."""
        job = self.job
        if job.current_epoch > self.reported_epoch:
            self.reported_epoch = job.current_epoch
            emit({"type": "epoch", "epoch": job.current_epoch, "metric": self.last_state.get(self.objective)})
        checkpoint = job.checkpoint
        if checkpoint is not None and checkpoint.epoch > self.saved_epoch:
            self.saved_epoch = checkpoint.epoch
            record = {"epoch": checkpoint.epoch, "state": checkpoint.state, "metric": checkpoint.metric}
            write_checkpoint(self.storage, self.prefix, record)
            emit({"type": "checkpoint", "epoch": checkpoint.epoch, "metric": checkpoint.metric})


def train(
    name: str,
    hyperparameters: dict[str, Any],
    max_epochs: int,
    checkpoint_every: int,
    checkpoints: dict[str, str],
    *,
    step: str | None = None,
    resume_from: int | None = None,
    interrupt_before_epoch: int | None = None,
    objective: str = "loss",
) -> dict[str, Any]:
    """Run one attempt; return the final TrainingJob record (Completed), raise TrainingFailed (Failed), or
    exit with PREEMPTED_EXIT_CODE when stopped by `interrupt_before_epoch`.

    `checkpoints` = {"bucket", "uri", "prefix"}: the jobs bucket, any URI in it (picks local or GCS
    storage) and the training's checkpoint prefix. `resume_from` is the checkpoint epoch to continue from;
    None starts (or restarts) from epoch 1 with state {}.
    """
    storage = bucket_storage(checkpoints["bucket"], checkpoints["uri"])
    job = TrainingJob(name, hyperparameters, max_epochs, checkpoint_every)
    cluster = TrainingCluster(1)
    if resume_from is not None:
        saved = read_checkpoint(storage, checkpoints["prefix"], resume_from)
        job = TrainingJob.from_record(
            {**job.to_record(), "status": TrainingStatus.STOPPED.value, "current_epoch": resume_from}
        )
        job.checkpoint = Checkpoint(saved["epoch"], saved["state"], saved["metric"])
        cluster.adopt(job)
    reporter = _Reporter(job, storage, checkpoints["prefix"], objective)
    runner = ManagedTrainingRunner(cluster, reporter.wrap(load_step(step)), objective=objective)
    if resume_from is None:
        runner.start(job, interrupt_before_epoch)
    else:
        runner.resume(job, interrupt_before_epoch)
    reporter.flush()
    if job.status is TrainingStatus.STOPPED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(PREEMPTED_EXIT_CODE)  # no result, no cleanup: what a preempted process leaves behind
    if job.status is TrainingStatus.FAILED:
        emit({"type": "failed", "error": job.error})
        raise TrainingFailed(f"training job {name!r} failed: {job.error}")
    # the trained model: the final state, content-addressed in the jobs bucket's artifact store
    model = ArtifactStore(storage).put_value(reporter.last_state)
    emit(
        {
            "type": "completed",
            "epoch": job.current_epoch,
            "metric": job.metric,
            "artifact_hash": job.artifact_hash,
            "model_artifact": model,
        }
    )
    return job.to_record()
