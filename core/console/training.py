"""`console.training`: training runs and tuning studies, delegated to
`kinetic_tui.core.training.service.TrainingService` (which runs the epoch loop as real jobs on pools). That
service manages its own transactions: a training attempt spans processes, so it cannot sit inside one
console transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kinetic_tui.core.console.references import import_reference
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.events import CheckpointSaved, EpochCompleted, Event, StudyChanged, TrainingChanged

if TYPE_CHECKING:
    from kinetic_tui.core.backends.base import Backend
    from kinetic_tui.core.console.workspace import Workspace
    from kinetic_tui.core.training.service import (
        StudySnapshot,
        TrainingService,
        TrainingSnapshot,
    )


def _training_events(before: TrainingSnapshot | None, after: TrainingSnapshot) -> list[Event]:
    """What changed between two snapshots of one run: epochs done, a new checkpoint, the status."""
    events: list[Event] = []
    start = before.current_epoch if before is not None else 0
    events += [EpochCompleted(after.name, epoch) for epoch in range(start + 1, after.current_epoch + 1)]
    old_checkpoint = before.checkpoint_epoch if before is not None else None
    if after.checkpoint_epoch is not None and after.checkpoint_epoch != old_checkpoint:
        events.append(CheckpointSaved(after.name, after.checkpoint_epoch))
    if before is None or (before.status, before.current_epoch) != (after.status, after.current_epoch):
        events.append(TrainingChanged(after.name, str(after.status), after.current_epoch, after.checkpoint_epoch))
    return events


def check_step(step: str | None) -> None:
    """Import a user's `MODULE:FUNC` step here, before anything is recorded: a step that does not import,
    is missing or is not callable is refused with one line instead of failing the job it would start."""
    if step is not None and not callable(import_reference(step, "step")):
        raise ValidationError(f"step {step!r} is not callable; expected FUNC(hyperparameters, epoch, state) -> state")


class Training:
    def __init__(self, workspace: Workspace, backend: Backend) -> None:
        """`backend` is the profile's: on a gke profile attempts and trials are GKE Jobs."""
        self.workspace = workspace
        self.backend = backend
        self._service: TrainingService | None = None
        self._seen_runs: dict[str, TrainingSnapshot] = {}

    @property
    def service(self) -> TrainingService:
        """Created on first use: importing it pulls in the training entry point, which most verbs never need."""
        if self._service is None:
            from kinetic_tui.core.training.service import TrainingService

            self._service = TrainingService(self.workspace.store, self.backend, clock=self.workspace.clock)
        return self._service

    def _announce(self, snapshot: TrainingSnapshot) -> TrainingSnapshot:
        for event in _training_events(self._seen_runs.get(snapshot.name), snapshot):
            self.workspace.events.publish(event)
        self._seen_runs[snapshot.name] = snapshot
        return snapshot

    async def _training_call(self, method: str, *args: Any, **kwargs: Any) -> TrainingSnapshot:
        call = getattr(self.service, method)
        return self._announce(await self.workspace.blocking(lambda: call(*args, **kwargs)))

    async def _settled(self, snapshot: TrainingSnapshot, wait: bool | None) -> TrainingSnapshot:
        if self.workspace.wants_wait(wait):
            return await self._training_call("wait", snapshot.name)
        return snapshot

    async def start(
        self,
        name: str,
        hyperparameters: dict[str, Any] | None = None,
        epochs: int = 5,
        checkpoint_every: int = 1,
        pool: str | None = None,
        interrupt_before_epoch: int | None = None,
        wait: bool | None = None,
        step: str | None = None,
    ) -> TrainingSnapshot:
        await self.workspace.blocking(check_step, step)
        started = await self._training_call(
            "start",
            name,
            dict(hyperparameters or {}),
            epochs,
            checkpoint_every,
            pool,
            step,
            interrupt_before_epoch=interrupt_before_epoch,
        )
        return await self._settled(started, wait)

    async def interrupt(self, name: str) -> TrainingSnapshot:
        return await self._training_call("interrupt", name)

    async def resume(
        self, name: str, interrupt_before_epoch: int | None = None, wait: bool | None = None
    ) -> TrainingSnapshot:
        resumed = await self._training_call("resume", name, interrupt_before_epoch=interrupt_before_epoch)
        return await self._settled(resumed, wait)

    async def get(self, name: str) -> TrainingSnapshot:
        """The run with its latest progress folded in."""
        return self._announce((await self.workspace.blocking(self.service.refresh, name))[0])

    async def tune(
        self,
        name: str,
        space: dict[str, list[Any]],
        strategy: str,
        max_trials: int,
        seed: int = 0,
        pool: str | None = None,
        wait: bool | None = None,
        step: str | None = None,
    ) -> StudySnapshot:
        service = self.service
        await self.workspace.blocking(check_step, step)
        study = await self.workspace.blocking(
            lambda: service.tune(
                name, space, strategy, max_trials, seed=seed, pool=pool, wait=self.workspace.wants_wait(wait), step=step
            )
        )
        self.workspace.events.publish(StudyChanged(name, str(study.status), len(study.trials)))
        return study

    async def study(self, name: str) -> StudySnapshot:
        return await self.workspace.blocking(self.service.study, name)

    async def studies(self) -> tuple[StudySnapshot, ...]:
        return tuple(await self.workspace.blocking(self.service.studies))

    # kept last: a signature below it would read `list[...]` as this method, not the builtin
    async def list(self) -> tuple[TrainingSnapshot, ...]:
        return tuple(self._announce(s) for s in await self.workspace.blocking(self.service.refresh))
