"""TrainingService: training jobs and tuning studies as real jobs on pools.

Each attempt of a training job is a job of the profile's backend (a local process, or a GKE Job) running
`kinetic_tui.core.training.entry.train`; its progress comes back as structured log lines that `refresh()`
folds into the store, so any process (the TUI, the CLI, a script, a new process after a crash) sees and
drives the same trainings.

Capacity: a pool offers `nodes // nodes-per-job` training instances. A training holds one from start until
it is Completed or Failed; a Stopped training keeps it (as a TrainingCluster does), so a resume never waits
and new training starts (and trials) get CapacityError while Stopped trainings fill the pool. On the local
backend a Stopped training's OS process is gone, so its nodes are free for plain jobs (`submit`): the
instance is kept in the training accounting, not reserved in the backend's queue.
"""

from __future__ import annotations

import builtins  # the class defines `list`, so its annotations name the builtin explicitly
import json
import time
from collections.abc import Callable
from typing import Any

from kinetic_tui.core.backends.base import Backend, PoolInfo
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.platform.training import (
    CapacityError,
    Checkpoint,
    TrainingCluster,
    TrainingJob,
    TrainingStateError,
    TrainingStatus,
)
from kinetic_tui.core.storage import bucket_storage
from kinetic_tui.core.store import Store
from kinetic_tui.core.submission.context import JobContext
from kinetic_tui.core.submission.dispatch import submit_call
from kinetic_tui.core.submission.packaging.snapshot import open_snapshot
from kinetic_tui.core.training.code import package_step
from kinetic_tui.core.training.entry import check_step_ref, checkpoint_key, train
from kinetic_tui.core.training.pools import accelerator, instances, require_targetable, targetable
from kinetic_tui.core.training.progress import events_in, fold, settle
from kinetic_tui.core.training.records import Run, RunMeta, RunRepo, StudySnapshot, TrainingSnapshot, require_run_name
from kinetic_tui.core.training.studies import StudyDriver

SUBMIT_WINDOW = 60.0  # seconds a reserved attempt may take to reach the backend's queue

__all__ = ["CapacityError", "StudySnapshot", "TrainingService", "TrainingSnapshot", "TrainingStateError"]


class TrainingService:
    """The console's training facade; every method is safe to call from several processes at once."""

    def __init__(self, store: Store, backend: Backend, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.backend = backend
        self.clock = clock
        self.runs = RunRepo(store)
        self._studies = StudyDriver(self)

    # -- queries -------------------------------------------------------------------------------------

    def get(self, name: str) -> TrainingSnapshot:
        """The stored state (no folding: call `refresh` to pick up progress)."""
        return TrainingSnapshot.of(self.runs.get(name))

    def list(self) -> list[TrainingSnapshot]:
        return [TrainingSnapshot.of(run) for run in self.runs.all()]

    def study(self, name: str) -> StudySnapshot:
        """The study as its trials' trainings are now, their progress folded in."""
        return self._studies.shown(name)

    def studies(self) -> builtins.list[StudySnapshot]:
        return [self._studies.snapshot(name) for name in self.store.tuning.names()]

    # -- actions -------------------------------------------------------------------------------------

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
    ) -> TrainingSnapshot:
        """Place the training on a pool instance (CapacityError when none is free) and submit attempt 1.

        `code` is the snapshot of the step's project to ship (a study's, taken when it started); without one,
        the step's project is packaged now, and every later attempt ships that same snapshot."""
        require_run_name("training job name", name)
        job = TrainingJob(name, hyperparameters, epochs, checkpoint_every)
        _check_interrupt(interrupt_before_epoch, job.max_epochs)
        check_step_ref(step)
        if self.runs.exists(name):
            raise ValidationError(f"training job {name!r} already exists; pick another name")
        target = self.choose_pool(pool)
        code = code or package_step(step)
        ctx = self._context(target, name, code)
        prefix = f"{ctx.job_id}/output/training/{name}/"
        checkpoints = {"bucket": ctx.bucket, "uri": self.backend.bucket_uri(ctx.bucket, prefix), "prefix": prefix}
        meta = RunMeta(
            pool=target.name, checkpoints=checkpoints, step=step, study=study, started_at=self.clock(), code=code
        )
        run = Run(job, meta)
        with self.store.transaction():  # the capacity check and the reservation are one action
            if self.runs.exists(name):
                raise ValidationError(f"training job {name!r} already exists; pick another name")
            self.check_capacity(target).place(job)
            self._reserve_attempt(run, ctx)
        return self._submit(run, ctx, None, interrupt_before_epoch, undo=lambda: self.runs.delete(name))

    def resume(self, name: str, interrupt_before_epoch: int | None = None) -> TrainingSnapshot:
        """Submit a new attempt from the stored checkpoint, or from epoch 1 when there is none (restart)."""
        run = self.runs.get(name)
        _require(run, "resume", TrainingStatus.STOPPED)
        _check_interrupt(interrupt_before_epoch, run.job.max_epochs)
        # a run recorded before its code was packaged at start packages the step's project now, once
        code = run.meta.code or package_step(run.meta.step)
        ctx = self._context(self.backend.pool(run.meta.pool), name, code)
        with self.store.transaction():
            run = self.runs.get(name)
            _require(run, "resume", TrainingStatus.STOPPED)
            run.meta.code = code
            run.meta.unsubmitted = None
            self._reserve_attempt(run, ctx)
        resume_from = run.job.checkpoint.epoch if run.job.checkpoint else None
        resumed = self._submit(
            run, ctx, resume_from, interrupt_before_epoch, undo=lambda: self._unreserve_attempt(name, ctx.job_id)
        )
        if run.meta.study is not None:  # a trial: its study moves again, whether or not this client stays
            self._studies.keep_moving(run.meta.study)
        return resumed

    def interrupt(self, name: str) -> TrainingSnapshot:
        """Kill the current attempt as a spot preemption would; the training becomes Stopped.

        An attempt that finished first wins: the snapshot then says Completed (or Failed).
        """
        self._refresh_one(name)
        run = self.runs.get(name)
        _require(run, "interrupt", TrainingStatus.IN_PROGRESS)
        try:
            self.backend.cancel(run.current_job_id)
        except NotFoundError:
            raise TrainingStateError(
                f"cannot interrupt training job {name!r}: its attempt {run.current_job_id} "
                f"is still being submitted; retry in a moment"
            ) from None
        return self._refresh_one(name)

    def refresh(self, name: str | None = None) -> builtins.list[TrainingSnapshot]:
        """Fold new progress of one training (or of every InProgress one, advancing every open study)."""
        if name is not None:
            return [self._refresh_one(name)]
        for run in self.runs.all():
            if run.job.status is TrainingStatus.IN_PROGRESS:
                self._refresh_one(run.job.name)
        self._studies.advance_all()
        return self.list()

    def moving_studies(self) -> builtins.list[str]:
        """The studies whose next trials nobody but a driver would submit."""
        return self._studies.moving()

    def wait(self, name: str, timeout: float | None = None) -> TrainingSnapshot:
        """Block until the training settles (Completed, Failed or Stopped); TimeoutError leaves it running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            snapshot = self._refresh_one(name)
            if snapshot.status != TrainingStatus.IN_PROGRESS:
                return snapshot
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"training job {name!r} is still InProgress after {timeout} s; it keeps running")
            try:
                self.backend.wait(snapshot.job_ids[-1], remaining)
            except NotFoundError:  # another process is still submitting this attempt
                time.sleep(0.05)

    def tune(
        self,
        name: str,
        space: dict[str, builtins.list[Any]],
        strategy: str,
        max_trials: int,
        seed: int = 0,
        pool: str | None = None,
        epochs: int = 5,
        checkpoint_every: int = 1,
        wait: bool = True,
        step: str | None = None,
    ) -> StudySnapshot:
        """Run a study whose trials are training jobs on one pool, at most its instance count at once."""
        return self._studies.start(name, space, strategy, max_trials, seed, pool, epochs, checkpoint_every, wait, step)

    # -- pools ---------------------------------------------------------------------------------------

    def choose_pool(self, name: str | None) -> PoolInfo:
        """The named pool, or the first (by name) with a free training instance."""
        if name is not None:
            pool = self.backend.pool(name)
            require_targetable(self.backend, pool)
            return pool
        pools = [p for p in self.backend.pools() if targetable(self.backend, p)]
        refusals = []
        for pool in pools:
            try:
                self.check_capacity(pool)
            except CapacityError as exc:
                refusals.append(str(exc))
                continue
            return pool
        raise CapacityError("no pool has a free training instance: " + "; ".join(refusals or ["no pools"]))

    def check_capacity(self, pool: PoolInfo) -> TrainingCluster:
        """The pool's training instances with their holders adopted, as the mechanism models it; raises
        CapacityError (naming the holders) when none is free."""
        cluster = TrainingCluster(instances(pool))
        for run in self.runs.holders(pool.name):
            cluster.adopt(run.job)
        if cluster.available() <= 0:
            raise CapacityError(
                f"pool {pool.name!r}: all {cluster.instance_count} training instances are held "
                f"by {', '.join(sorted(cluster.holders))}; resume or finish a Stopped one, or "
                f"use another pool"
            )
        return cluster

    # -- attempts ------------------------------------------------------------------------------------

    def _context(self, pool: PoolInfo, name: str, code: str | None) -> JobContext:
        """An attempt with a user step ships the snapshot of the step's project with the imports it was
        packaged with: the job imports the step by name next to our entry. Without one the entry's own root
        ships."""
        root, imports = open_snapshot(code) if code else (None, None)
        return JobContext.from_params(
            train, accelerator(pool), display_name=f"train {name}", package_root=root, package_imports=imports
        )

    def _reserve_attempt(self, run: Run, ctx: JobContext) -> None:
        """Mark the run InProgress under the attempt's job id BEFORE submitting it (inside the caller's
        transaction), so a concurrent refresh never mistakes the previous, settled attempt for this one."""
        run.job.status = TrainingStatus.IN_PROGRESS
        run.job.error = None  # why the previous attempt stopped, if our infrastructure lost it
        run.meta.job_ids.append(ctx.job_id)
        run.meta.attempt_at = self.clock()
        self.runs.save(run)

    def _unreserve_attempt(self, name: str, job_id: str) -> None:
        """Undo a resume that never reached the backend: Stopped again, the attempt forgotten."""
        with self.store.transaction():
            run = self.runs.get(name)
            if run.current_job_id == job_id:
                run.job.status = TrainingStatus.STOPPED
                run.meta.job_ids.pop()
                self.runs.save(run)

    def _submit(
        self, run: Run, ctx: JobContext, resume_from: int | None, interrupt: int | None, undo: Callable[[], None]
    ) -> TrainingSnapshot:
        """Submit the reserved attempt; `undo` restores the run if submission fails."""
        job = run.job
        kwargs = {"step": run.meta.step, "resume_from": resume_from, "interrupt_before_epoch": interrupt}
        try:
            submit_call(
                ctx, (job.name, job.hyperparameters, job.max_epochs, job.checkpoint_every, run.meta.checkpoints), kwargs
            )
        except BaseException:
            undo()
            raise
        return TrainingSnapshot.of(run)

    def _refresh_one(self, name: str) -> TrainingSnapshot:
        run = self.runs.get(name)
        job_id = run.current_job_id
        if run.job.status is not TrainingStatus.IN_PROGRESS:
            return TrainingSnapshot.of(run)
        try:  # the state is read before the log, so a settled attempt comes with its whole log
            row = self.backend.refresh(job_id)
        except NotFoundError:
            return self._settle_lost_submission(run)
        events = events_in(line for batch in self.backend.read_logs(job_id) for line in batch)
        exit_code = self.backend.exit_code(job_id) if row.status.finished else None
        with self.store.transaction():
            run = self.runs.get(name)
            if run.job.status is TrainingStatus.IN_PROGRESS and run.current_job_id == job_id:
                fold(run, events, lambda epoch: self._load_checkpoint(run, epoch))
                if row.status.finished:
                    settle(run, row, events, exit_code)
                self.runs.save(run)
        return TrainingSnapshot.of(run)

    def _settle_lost_submission(self, run: Run) -> TrainingSnapshot:
        """An attempt reserved but not queued: still being submitted, or its submitter died in between.
        After SUBMIT_WINDOW the run is Stopped, resumable, so it never holds its instance with nothing
        running: a lost resume is undone (the attempt forgotten); a lost first attempt stays recorded as
        `unsubmitted`, and resuming it starts from epoch 1. A study resubmits its own lost trials."""
        if self.clock() - (run.meta.attempt_at or 0) < SUBMIT_WINDOW:
            return TrainingSnapshot.of(run)
        lost = run.current_job_id
        if len(run.meta.job_ids) > 1:
            self._unreserve_attempt(run.job.name, lost)
            return self.get(run.job.name)
        with self.store.transaction():
            fresh = self.runs.get(run.job.name)
            if fresh.job.status is TrainingStatus.IN_PROGRESS and fresh.current_job_id == lost:
                fresh.job.status = TrainingStatus.STOPPED
                fresh.job.error = f"attempt {lost} was never submitted (its submitting process died?); resume it"
                fresh.meta.unsubmitted = lost
                self.runs.save(fresh)
            return TrainingSnapshot.of(fresh)

    def _load_checkpoint(self, run: Run, epoch: int) -> Checkpoint:
        where = run.meta.checkpoints
        saved = json.loads(
            bucket_storage(where["bucket"], where["uri"]).get_bytes(checkpoint_key(where["prefix"], epoch))
        )
        return Checkpoint(saved["epoch"], saved["state"], saved["metric"])


def _require(run: Run, action: str, status: TrainingStatus) -> None:
    if run.job.status is not status:
        raise TrainingStateError(
            f"cannot {action} training job {run.job.name!r}: it is {run.job.status.value}; "
            f"{action} requires {status.value}"
        )


def _check_interrupt(interrupt: Any, max_epochs: int) -> None:
    if interrupt is None:
        return
    if isinstance(interrupt, bool) or not isinstance(interrupt, int) or not 1 <= interrupt <= max_epochs:
        raise ValidationError(f"interrupt_before_epoch must be an integer in 1..{max_epochs}, got {interrupt!r}")
