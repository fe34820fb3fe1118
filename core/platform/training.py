"""Managed training: a deterministic epoch loop with checkpoints, spot-style interrupts and capacity.

The point of the module is the artifact-hash contract: however a run is interrupted and resumed (or
restarted when nothing was checkpointed), it ends with the hash of the uninterrupted run. That holds only
because checkpoints are deep copies, the step never sees the job's own hyperparameters dict, and the hash
always covers `max_epochs`, never the epochs of the last attempt.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle

from kinetic_tui.core.errors import KineticError, ValidationError
from kinetic_tui.core.validation import MAX_EPOCHS, json_copy, positive_int

TrainStep = Callable[[dict[str, Any], int, dict[str, Any]], dict[str, Any]]


class CapacityError(KineticError):
    """Every instance of a cluster is held; the job must wait (it stays Pending)."""


class TrainingStateError(KineticError):
    """The action is not allowed in the job's current status."""


class TrainingStatus(enum.StrEnum):
    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPED = "Stopped"


@dataclass(frozen=True)
class Checkpoint:
    """A saved epoch; the state is copied on construction so no later in-place mutation can reach it."""

    epoch: int
    state: dict[str, Any]
    metric: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", copy.deepcopy(self.state))


def default_train_step(hyperparameters: dict[str, Any], epoch: int, state: dict[str, Any]) -> dict[str, Any]:
    """A pure decaying loss: deterministic, so interrupted and straight runs are comparable."""
    loss = state.get("loss", 1.0) * (1 - hyperparameters.get("learning_rate", 0.1))
    return {"loss": loss}


def canonical(value: Any) -> Any:
    """A state as JSON identifies it: JSON values as they are (so a JSON state hashes as it always did);
    an array as its dtype, shape and the SHA-256 of its bytes (C order, whatever its memory layout); bytes as
    their SHA-256; any other value as the SHA-256 of its pickle. TypeError for a value that cannot be pickled."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {key: canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    if isinstance(value, bytes | bytearray):
        return {"__bytes__": hashlib.sha256(value).hexdigest()}
    if all(hasattr(value, name) for name in ("dtype", "shape", "tobytes")):
        digest = hashlib.sha256(value.tobytes()).hexdigest()
        return {"__array__": {"dtype": str(value.dtype), "shape": list(value.shape), "sha256": digest}}
    try:
        pickled = cloudpickle.dumps(value)
    except Exception as exc:  # pickling raises many unrelated types for one meaning
        raise TypeError(f"a {type(value).__name__} in the state cannot be pickled ({exc})") from None
    return {"__pickle__": hashlib.sha256(pickled).hexdigest()}


def compute_artifact_hash(hyperparameters: dict[str, Any], final_state: dict[str, Any], epochs: int) -> str:
    """Identify a trained artifact by what produced it, independent of how often it was interrupted."""
    payload = json.dumps(
        {"hp": hyperparameters, "final_state": canonical(final_state), "epochs": epochs},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class TrainingJob:
    """One training run's durable record; only a `ManagedTrainingRunner` moves it between statuses."""

    def __init__(self, name: str, hyperparameters: dict[str, Any], max_epochs: int, checkpoint_every: int) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValidationError(f"name must be a non-empty string, got {name!r}")
        if not isinstance(hyperparameters, dict):
            raise ValidationError(f"hyperparameters must be a dict, got {type(hyperparameters).__name__}")
        self.name = name
        self.hyperparameters = json_copy("hyperparameters", hyperparameters)
        self.max_epochs = positive_int("max_epochs", max_epochs, MAX_EPOCHS)
        self.checkpoint_every = positive_int("checkpoint_every", checkpoint_every, MAX_EPOCHS)
        self.status = TrainingStatus.PENDING
        self.current_epoch = 0
        self.checkpoint: Checkpoint | None = None
        self.interruptions = 0
        self.metric: Any = None
        self.artifact_hash: str | None = None
        self.error: str | None = None

    def __repr__(self) -> str:
        return f"TrainingJob({self.name!r}, status={self.status.value}, epoch={self.current_epoch}/{self.max_epochs})"

    def to_record(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot, so the store can rebuild an identical job after a restart. A
        checkpoint's state is kept as `canonical` shows it: the state itself when it is JSON; a state with
        arrays or other values is identified there, and lives whole in its binary checkpoint file."""
        checkpoint = self.checkpoint
        return {
            "name": self.name,
            "hyperparameters": copy.deepcopy(self.hyperparameters),
            "max_epochs": self.max_epochs,
            "checkpoint_every": self.checkpoint_every,
            "status": self.status.value,
            "current_epoch": self.current_epoch,
            "checkpoint": None
            if checkpoint is None
            else {"epoch": checkpoint.epoch, "state": canonical(checkpoint.state), "metric": checkpoint.metric},
            "interruptions": self.interruptions,
            "metric": self.metric,
            "artifact_hash": self.artifact_hash,
            "error": self.error,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TrainingJob:
        """Rebuild a job from `to_record()`; a malformed field is rejected by name and nothing is built."""
        missing = sorted(_RECORD_KEYS - set(record)) if isinstance(record, dict) else sorted(_RECORD_KEYS)
        if missing:
            raise ValidationError(f"training record is missing {', '.join(missing)}")
        job = cls(record["name"], record["hyperparameters"], record["max_epochs"], record["checkpoint_every"])
        try:
            status = TrainingStatus(record["status"])
        except ValueError:
            allowed = ", ".join(s.value for s in TrainingStatus)
            raise ValidationError(f"status must be one of {allowed}, got {record['status']!r}") from None
        job.current_epoch = _int_in_range("current_epoch", record["current_epoch"], 0, job.max_epochs)
        saved = record["checkpoint"]
        if saved is not None:
            if not isinstance(saved, dict) or not isinstance(saved.get("state"), dict):
                raise ValidationError(f"checkpoint must be None or {{epoch, state, metric}}, got {saved!r}")
            epoch = _int_in_range("checkpoint.epoch", saved.get("epoch"), 1, job.max_epochs)
            job.checkpoint = Checkpoint(epoch, json_copy("checkpoint.state", saved["state"]), saved.get("metric"))
        interruptions = record["interruptions"]
        if isinstance(interruptions, bool) or not isinstance(interruptions, int) or interruptions < 0:
            raise ValidationError(f"interruptions must be an integer >= 0, got {interruptions!r}")
        job.status = status
        job.interruptions = interruptions
        job.metric = record["metric"]
        job.artifact_hash = record["artifact_hash"]
        job.error = record["error"]
        return job


_RECORD_KEYS = frozenset(TrainingJob("_", {}, 1, 1).to_record())


def _int_in_range(field: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{field} must be an integer in {low}..{high}, got {value!r}")
    return value


class TrainingCluster:
    """A fixed pool of instances; a Stopped job keeps its instance so a resume never waits for capacity."""

    def __init__(self, instance_count: int) -> None:
        self.instance_count = positive_int("instance_count", instance_count)
        self._holders: dict[str, TrainingJob] = {}

    @property
    def in_use(self) -> int:
        return len(self._holders)

    @property
    def holders(self) -> frozenset[str]:
        return frozenset(self._holders)

    def available(self) -> int:
        return self.instance_count - self.in_use

    def holds(self, job: TrainingJob) -> bool:
        return self._holders.get(job.name) is job

    def place(self, job: TrainingJob) -> None:
        """Give `job` an instance; raises before touching anything when none is free."""
        if job.name in self._holders:
            raise TrainingStateError(f"training job {job.name!r} already holds an instance on this cluster")
        if self.available() <= 0:
            raise CapacityError(
                f"no free instance for training job {job.name!r}: all {self.instance_count} are held by "
                f"{', '.join(sorted(self._holders))}"
            )
        self._holders[job.name] = job

    def adopt(self, job: TrainingJob) -> None:
        """Re-attach a restored job that held an instance before a restart (InProgress or Stopped)."""
        if job.status not in (TrainingStatus.IN_PROGRESS, TrainingStatus.STOPPED):
            raise TrainingStateError(
                f"cannot adopt training job {job.name!r}: it is {job.status.value}; "
                f"adopt requires InProgress or Stopped"
            )
        self.place(job)

    def release(self, job: TrainingJob) -> None:
        if not self.holds(job):
            raise TrainingStateError(f"training job {job.name!r} holds no instance on this cluster")
        del self._holders[job.name]


class ManagedTrainingRunner:
    """Drives jobs through their lifecycle on one cluster.

    `objective` (default "loss") names the state key reported as the metric, so the tuner
    can optimise any key a custom step produces.
    """

    def __init__(
        self, cluster: TrainingCluster, train_step: TrainStep = default_train_step, *, objective: str = "loss"
    ) -> None:
        if not isinstance(cluster, TrainingCluster):
            raise ValidationError(f"cluster must be a TrainingCluster, got {type(cluster).__name__}")
        if not callable(train_step):
            raise ValidationError(f"train_step must be callable, got {train_step!r}")
        if not isinstance(objective, str) or not objective:
            raise ValidationError(f"objective must be a non-empty string, got {objective!r}")
        self.cluster = cluster
        self.train_step = train_step
        self.objective = objective

    def start(self, job: TrainingJob, interrupt_before_epoch: int | None = None) -> TrainingJob:
        self._check(job, "start", TrainingStatus.PENDING, interrupt_before_epoch, held=False)
        self.cluster.place(job)
        self._run(job, None, interrupt_before_epoch)
        return job

    def resume(self, job: TrainingJob, interrupt_before_epoch: int | None = None) -> TrainingJob:
        self._check(job, "resume", TrainingStatus.STOPPED, interrupt_before_epoch)
        if job.checkpoint is None:
            raise TrainingStateError(f"cannot resume training job {job.name!r}: it has no checkpoint; restart it")
        self._run(job, job.checkpoint, interrupt_before_epoch)
        return job

    def restart(self, job: TrainingJob, interrupt_before_epoch: int | None = None) -> TrainingJob:
        self._check(job, "restart", TrainingStatus.STOPPED, interrupt_before_epoch)
        job.checkpoint = None
        self._run(job, None, interrupt_before_epoch)
        return job

    def fail(self, job: TrainingJob, reason: str) -> TrainingJob:
        self._check(job, "fail", TrainingStatus.STOPPED, None)
        if not isinstance(reason, str) or not reason:
            raise ValidationError(f"reason must be a non-empty string, got {reason!r}")
        self._finish(job, TrainingStatus.FAILED, error=reason)
        return job

    def _check(
        self, job: TrainingJob, action: str, required: TrainingStatus, interrupt: int | None, held: bool = True
    ) -> None:
        """Every precondition of an action, checked before anything is mutated."""
        if not isinstance(job, TrainingJob):
            raise ValidationError(f"job must be a TrainingJob, got {type(job).__name__}")
        if job.status is not required:
            raise TrainingStateError(
                f"cannot {action} training job {job.name!r}: it is {job.status.value}; "
                f"{action} requires {required.value}"
            )
        if held and not self.cluster.holds(job):
            raise TrainingStateError(
                f"cannot {action} training job {job.name!r}: it holds no instance on this runner's cluster "
                f"(adopt it after a restore)"
            )
        if interrupt is not None:
            _int_in_range("interrupt_before_epoch", interrupt, 1, job.max_epochs)

    def _run(self, job: TrainingJob, origin: Checkpoint | None, interrupt: int | None) -> None:
        """Run epochs from `origin` (None = from scratch) until done, interrupted or failed."""
        job.status = TrainingStatus.IN_PROGRESS
        state = {} if origin is None else copy.deepcopy(origin.state)
        metric = None if origin is None else origin.metric
        for epoch in range(1 if origin is None else origin.epoch + 1, job.max_epochs + 1):
            if epoch == interrupt:
                job.status = TrainingStatus.STOPPED
                job.current_epoch = job.checkpoint.epoch if job.checkpoint else 0
                job.interruptions += 1
                return
            try:
                state, metric = self._step(job, epoch, state)
            except Exception as exc:  # a failing step is the job's outcome, not the caller's crash
                self._finish(job, TrainingStatus.FAILED, error=f"epoch {epoch}: {type(exc).__name__}: {exc}")
                return
            job.current_epoch = epoch
            if epoch % job.checkpoint_every == 0:
                job.checkpoint = Checkpoint(epoch, state, metric)
        job.metric = metric
        job.artifact_hash = compute_artifact_hash(job.hyperparameters, state, job.max_epochs)
        self._finish(job, TrainingStatus.COMPLETED)

    def _step(self, job: TrainingJob, epoch: int, state: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Run one epoch and insist on a state that can be checkpointed, hashed and scored."""
        new_state = self.train_step(copy.deepcopy(job.hyperparameters), epoch, state)
        if not isinstance(new_state, dict):
            raise TypeError(f"train_step must return a dict, got {type(new_state).__name__}")
        try:
            json.dumps(canonical(new_state), sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"train_step must return a state of JSON values, arrays or picklable values: {exc}"
            ) from None
        metric = new_state.get(self.objective)
        if isinstance(metric, bool) or not isinstance(metric, int | float) or math.isnan(metric):
            raise ValueError(f"state[{self.objective!r}] must be a number, got {metric!r}")
        return new_state, metric

    def _finish(self, job: TrainingJob, status: TrainingStatus, error: str | None = None) -> None:
        self.cluster.release(job)
        job.status = status
        job.error = error
