"""Tuning studies whose trials are console training runs on one pool, each trial a real training job.

Candidates come from the study's own `HyperparameterTuner` (its grid, planned positions and bayesian
rule), so a console study tries exactly the trials, in the same order, that `HyperparameterTuner.run()`
would. Grid and random plans are fixed up front, so up to the pool's instance count run at once; a
bayesian candidate depends on every finished trial, so bayesian trials run one after another, as the
tuner defines them.

The trials' training runs (training_runs.study) are the source of truth: a snapshot of the study derives
its trials and best from them whenever it is taken (a trial resumed, stopped or failed outside the study
shows at once), and the store.tuning rows are re-derived from them on every advance, so concurrent
advances from several processes converge. Every trial ships the study's step project as packaged when the
study started, whichever process submits it (the client, or the supervisor after the client left).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any, Protocol

from kinetic_tui.core.backends.base import PoolInfo
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.training import (
    CapacityError,
    TrainingCluster,
    TrainingStateError,
    TrainingStatus,
)
from kinetic_tui.core.platform.tuning import HyperparameterTuner, Trial, best_trial
from kinetic_tui.core.store import Store, training_runs_repo
from kinetic_tui.core.supervisor import process as supervisor
from kinetic_tui.core.training.code import package_step
from kinetic_tui.core.training.entry import check_step_ref
from kinetic_tui.core.training.pools import instances
from kinetic_tui.core.training.records import (
    Run,
    RunRepo,
    StudySnapshot,
    TrainingSnapshot,
    TrialSnapshot,
    require_run_name,
)

IN_FLIGHT = (TrainingStatus.IN_PROGRESS, TrainingStatus.STOPPED)
_POLL = 0.2


def trial_name(study: str, trial_id: int) -> str:
    return f"{study}.trial-{trial_id}"


def next_position(tuner: HyperparameterTuner, trials: Sequence[Trial]) -> int:
    """The grid position of the next trial, by the tuner's own rules (bayesian positions are replayed from
    the finished trials, which is exactly how the tuner chose them)."""
    planned = tuner._planned_positions()
    if planned is not None:
        return planned[len(trials)]
    positions: list[int] = []
    for count in range(len(trials) + 1):
        positions.append(tuner._bayesian_next(trials[:count], positions))
    return positions[-1]


def study_status(trials: Sequence[Trial], budget: int) -> TrainingStatus:
    """InProgress while a trial runs; Stopped when one is stopped and none runs; Completed when the budget
    is spent and settled; Pending when the next trial waits for a free instance."""
    statuses = {t.status for t in trials}
    if TrainingStatus.IN_PROGRESS in statuses:
        return TrainingStatus.IN_PROGRESS
    if TrainingStatus.STOPPED in statuses:
        return TrainingStatus.STOPPED
    return TrainingStatus.COMPLETED if len(trials) >= budget else TrainingStatus.PENDING


class Trainings(Protocol):
    """What a study needs of the training service: its trials are trainings it starts and refreshes."""

    store: Store
    runs: RunRepo

    def start(
        self,
        name: str,
        hyperparameters: dict[str, Any],
        epochs: int,
        checkpoint_every: int,
        pool: str | None,
        step: str | None = None,
        interrupt_before_epoch: int | None = None,
        *,
        study: str | None = None,
        code: str | None = None,
    ) -> TrainingSnapshot: ...

    def resume(self, name: str, interrupt_before_epoch: int | None = None) -> TrainingSnapshot: ...

    def refresh(self, name: str | None = None) -> list[TrainingSnapshot]: ...

    def wait(self, name: str, timeout: float | None = None) -> TrainingSnapshot: ...

    def choose_pool(self, name: str | None) -> PoolInfo: ...

    def check_capacity(self, pool: PoolInfo) -> TrainingCluster: ...


class StudyDriver:
    def __init__(self, service: Trainings) -> None:
        self.service = service
        self.store = service.store

    def start(
        self,
        name: str,
        space: dict[str, list[Any]],
        strategy: str,
        max_trials: int,
        seed: int,
        pool: str | None,
        epochs: int,
        checkpoint_every: int,
        wait: bool,
        step: str | None,
    ) -> StudySnapshot:
        require_run_name("study name", name)
        self._require_new(name)
        check_step_ref(step)
        target = self.service.choose_pool(pool)
        self.service.check_capacity(target)
        tuner = HyperparameterTuner(
            space,
            strategy,
            max_trials,
            seed=seed,
            max_epochs=epochs,
            checkpoint_every=checkpoint_every,
            parallelism=instances(target),
        )
        taken = [trial_name(name, i) for i in range(1, tuner.budget + 1)]
        for trial in taken:
            require_run_name("trial name", trial)
        clash = [trial for trial in taken if self.service.runs.exists(trial)]
        if clash:
            raise ValidationError(f"study {name!r} would reuse training names {', '.join(clash)}; pick another name")
        code = package_step(step)
        with self.store.transaction():
            self._require_new(name)
            self.store.tuning.save(name, tuner)
            training_runs_repo.save_study_run(self.store, name, target.name, step, code)
        snapshot = self.advance(name)
        self.keep_moving(name, snapshot)
        while wait and self._unsettled(snapshot):
            running = [t.training for t in snapshot.trials if t.status == TrainingStatus.IN_PROGRESS]
            if running:
                with contextlib.suppress(TimeoutError):
                    self.service.wait(running[0], timeout=_POLL)
            else:
                time.sleep(_POLL)
            snapshot = self.advance(name)
        return snapshot

    def keep_moving(self, name: str, snapshot: StudySnapshot | None = None) -> None:
        """The study's next trials must be submitted even if this client goes away: the supervisor does it."""
        if self._unsettled(snapshot or self.snapshot(name)):
            supervisor.ensure_running()

    def _require_new(self, name: str) -> None:
        if training_runs_repo.study_exists(self.store, name):
            raise ValidationError(f"study {name!r} already exists; pick another name")

    def _unsettled(self, snapshot: StudySnapshot) -> bool:
        """Still moving by itself: a trial runs, or the next one waits for an instance a running job frees."""
        if snapshot.status == TrainingStatus.IN_PROGRESS:
            return True
        return snapshot.status == TrainingStatus.PENDING and any(
            run.job.status is TrainingStatus.IN_PROGRESS for run in self.service.runs.holders(snapshot.pool)
        )

    def advance(self, name: str) -> StudySnapshot:
        """Fold the trials' progress, launch the next candidates that fit, and persist trials and best."""
        tuner = self._tuner(name)
        pool, step, code = self._run_row(name)
        trials = self._refreshed_trials(name)
        if self._resubmit_lost(name):
            trials = self._trials(name)
        while len(trials) < tuner.budget and self._may_launch(tuner, trials):
            trial_id = len(trials) + 1
            hyperparameters = tuner._grid[next_position(tuner, trials)]
            try:
                snapshot = self.service.start(
                    trial_name(name, trial_id),
                    hyperparameters,
                    tuner.max_epochs,
                    tuner.checkpoint_every,
                    pool,
                    step,
                    study=name,
                    code=code,
                )
            except CapacityError:
                break
            except ValidationError:
                if not self.service.runs.exists(trial_name(name, trial_id)):
                    raise
                break  # another process launched this trial first; it persists the study
            trials.append(Trial(trial_id, snapshot.hyperparameters, None, None, TrainingStatus.IN_PROGRESS))
        self._persist(name, tuner, trials)
        return self.snapshot(name)

    def shown(self, name: str) -> StudySnapshot:
        """The study as its trials' trainings are now (their progress folded, the stored rows brought in line),
        without launching anything: what showing a study must say, whether or not it is moving."""
        self._persist(name, self._tuner(name), self._refreshed_trials(name))
        return self.snapshot(name)

    def _refreshed_trials(self, name: str) -> list[Trial]:
        for run in self._runs(name):
            if run.job.status in IN_FLIGHT:
                self.service.refresh(run.job.name)
        return self._trials(name)

    def _resubmit_lost(self, name: str) -> bool:
        """A trial whose first attempt never reached the backend (its submitter died) is the study's to
        submit again: no user decided to stop it, unlike a preempted trial, which waits for `resume`."""
        lost = [run.job.name for run in self._runs(name) if run.meta.unsubmitted is not None]
        for trial in lost:
            with contextlib.suppress(TrainingStateError):  # another process resubmitted it first
                self.service.resume(trial)
        return bool(lost)

    def _persist(self, name: str, tuner: HyperparameterTuner, trials: list[Trial]) -> None:
        """Store the trials and best unless the rows say so already (showing a study writes nothing then)."""
        best = best_trial(trials, tuner.maximize)
        stored = self.store.tuning.get(name).result
        if tuple(stored.trials) == tuple(trials) and stored.best == best:
            return
        record = {
            **tuner.to_record(),
            "trials": [t.to_record() for t in trials],
            "best": None if best is None else best.trial_id,
        }
        self.store.tuning.save(name, HyperparameterTuner.from_record(record))

    def advance_all(self) -> None:
        """Advance every study whose stored rows are not yet Completed (its trials may be settled already:
        the last advance persists them)."""
        for name in self.store.tuning.names():
            stored = self.store.tuning.get(name)
            if study_status(stored.result.trials, stored.config["budget"]) != TrainingStatus.COMPLETED:
                self.advance(name)

    def moving(self) -> list[str]:
        """The studies that still move by themselves: someone must keep advancing them."""
        return [name for name in self.store.tuning.names() if self._unsettled(self.snapshot(name))]

    def snapshot(self, name: str) -> StudySnapshot:
        """The study with its trials and best derived from the trials' trainings as stored."""
        stored = self.store.tuning.get(name)
        pool, _, _ = self._run_row(name)
        trials = self._trials(name)
        best = best_trial(trials, stored.config["maximize"])
        return StudySnapshot(
            name=name,
            strategy=stored.config["strategy"],
            status=study_status(trials, stored.config["budget"]).value,
            pool=pool,
            budget=stored.config["budget"],
            parallelism=stored.config["parallelism"],
            trials=tuple(
                TrialSnapshot(
                    t.trial_id,
                    t.hyperparameters,
                    t.status.value,
                    t.metric,
                    t.artifact_hash,
                    trial_name(name, t.trial_id),
                )
                for t in trials
            ),
            best=None if best is None else best.trial_id,
        )

    @staticmethod
    def _may_launch(tuner: HyperparameterTuner, trials: Sequence[Trial]) -> bool:
        in_flight = sum(t.status in IN_FLIGHT for t in trials)
        if tuner.strategy == "bayesian":
            return in_flight == 0
        return in_flight < tuner.cluster.instance_count

    def _tuner(self, name: str) -> HyperparameterTuner:
        stored = self.store.tuning.get(name)  # NotFoundError naming the known studies
        return HyperparameterTuner.from_record({**stored.config, "trials": [], "best": None})

    def _runs(self, name: str) -> list[Run]:
        runs = self.service.runs.all(study=name)
        return sorted(runs, key=lambda run: _trial_id(run.job.name))

    def _trials(self, name: str) -> list[Trial]:
        return [_trial(run) for run in self._runs(name)]

    def _run_row(self, name: str) -> tuple[str, str | None, str | None]:
        row = training_runs_repo.study_run(self.store, name)
        if row is None:
            raise ValidationError(f"study {name!r} was not started by the console (no run record)")
        return row


def _trial_id(training: str) -> int:
    return int(training.rsplit("-", 1)[1])


def _trial(run: Run) -> Trial:
    job = run.job
    return Trial(_trial_id(job.name), job.hyperparameters, job.metric, job.artifact_hash, job.status, job.error)
