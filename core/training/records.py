"""What the console persists per training run, and the immutable snapshots it hands out.

The mechanism's `TrainingJob` record (store.training) stays the single meaning of status, current epoch,
checkpoint, interruptions, metric and artifact hash; `training_runs` adds only what a run on a pool needs
on top: the pool, the step reference, where its checkpoints live, its attempts and the last epoch metric.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.training import TrainingJob, TrainingStatus
from kinetic_tui.core.store import Store, training_runs_repo

# Names become storage keys (the checkpoint prefix) and command arguments: one safe path segment.
NAME_RULE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
HOLDING = (TrainingStatus.IN_PROGRESS, TrainingStatus.STOPPED)


def require_run_name(field_name: str, name: Any) -> str:
    if not isinstance(name, str) or not re.match(NAME_RULE, name):
        raise ValidationError(
            f"{field_name} {name!r} is invalid: use 1-128 letters, digits, '_', '.' or '-', "
            f"starting with a letter or digit"
        )
    return name


@dataclass
class RunMeta:
    pool: str
    checkpoints: dict[str, str]
    step: str | None = None
    study: str | None = None
    started_at: float | None = None
    attempt_at: float | None = None
    job_ids: list[str] = field(default_factory=list)
    last_metric: Any = None
    code: str | None = None  # the snapshot digest of the step's project every attempt ships
    unsubmitted: str | None = None  # the attempt that never reached the backend (its submitter died), if any


@dataclass
class Run:
    """One training run as stored: the mechanism's job plus the console's metadata."""

    job: TrainingJob
    meta: RunMeta

    @property
    def current_job_id(self) -> str:
        """The latest attempt's job id; every stored run has one (its first attempt is reserved as it is saved)."""
        return self.meta.job_ids[-1]


@dataclass(frozen=True)
class TrainingSnapshot:
    name: str
    status: str
    current_epoch: int
    checkpoint_epoch: int | None
    interruptions: int
    metric: Any
    artifact_hash: str | None
    max_epochs: int
    checkpoint_every: int
    hyperparameters: dict[str, Any]
    pool: str
    job_ids: tuple[str, ...]
    error: str | None
    step: str | None
    study: str | None
    last_metric: Any
    started_at: float | None

    @classmethod
    def of(cls, run: Run) -> TrainingSnapshot:
        job, meta = run.job, run.meta
        return cls(
            name=job.name,
            status=job.status.value,
            current_epoch=job.current_epoch,
            checkpoint_epoch=job.checkpoint.epoch if job.checkpoint else None,
            interruptions=job.interruptions,
            metric=job.metric,
            artifact_hash=job.artifact_hash,
            max_epochs=job.max_epochs,
            checkpoint_every=job.checkpoint_every,
            hyperparameters=copy.deepcopy(job.hyperparameters),
            pool=meta.pool,
            job_ids=tuple(meta.job_ids),
            error=job.error,
            step=meta.step,
            study=meta.study,
            last_metric=meta.last_metric,
            started_at=meta.started_at,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (job_ids as a list), for `--output json` and the TUI."""
        return {**asdict(self), "job_ids": list(self.job_ids)}


@dataclass(frozen=True)
class TrialSnapshot:
    trial_id: int
    hyperparameters: dict[str, Any]
    status: str
    metric: Any
    artifact_hash: str | None
    training: str


@dataclass(frozen=True)
class StudySnapshot:
    name: str
    strategy: str
    status: str
    pool: str
    budget: int
    parallelism: int
    trials: tuple[TrialSnapshot, ...]
    best: int | None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "trials": [asdict(t) for t in self.trials]}


class RunRepo:
    """training_runs rows, always written together with the store.training record of the same name."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def exists(self, name: str) -> bool:
        return training_runs_repo.training_exists(self.store, name)

    def get(self, name: str) -> Run:
        job = self.store.training.get(name)  # NotFoundError naming the known trainings
        row = training_runs_repo.run_meta(self.store, name)
        if row is None:
            raise ValidationError(f"training job {name!r} was not started by the console (no run record)")
        return Run(job, _meta(*row))

    def all(self, pool: str | None = None, study: str | None = None) -> list[Run]:
        """Runs by name, of every pool and study or of the ones given."""
        return [
            Run(TrainingJob.from_record(json.loads(record)), _meta(pool, study, meta))
            for record, pool, study, meta in training_runs_repo.runs(self.store, pool, study)
        ]

    def holders(self, pool: str) -> list[Run]:
        """Runs holding an instance of `pool` (InProgress or Stopped)."""
        return [run for run in self.all(pool=pool) if run.job.status in HOLDING]

    def save(self, run: Run) -> None:
        with self.store.transaction():
            self.store.training.save(run.job)
            meta = {k: v for k, v in asdict(run.meta).items() if k not in ("pool", "study")}
            training_runs_repo.save_run(self.store, run.job.name, run.meta.pool, run.meta.study, meta)

    def delete(self, name: str) -> None:
        """Undo a start whose submission failed (training_runs goes with it by cascade)."""
        training_runs_repo.delete_training(self.store, name)


def _meta(pool: str, study: str | None, meta: str) -> RunMeta:
    return RunMeta(pool=pool, study=study, **json.loads(meta))
