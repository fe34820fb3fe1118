"""`console.registry`: the model registry. It is re-read inside each action's transaction, so the CLI and
the TUI (two processes) never act on each other's stale copy."""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

from kinetic_tui.core.console.snapshots import (
    GroupSnapshot,
    ModelVersionSnapshot,
    TransitionSnapshot,
)
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.events import Event, ModelRegistered, TransitionMade
from kinetic_tui.core.platform.registry import ModelRegistry, Stage
from kinetic_tui.core.platform.training import TrainingStatus

if TYPE_CHECKING:
    from kinetic_tui.core.console.training import Training
    from kinetic_tui.core.console.workspace import Workspace


def group_snapshot(registry: ModelRegistry, group: str) -> GroupSnapshot:
    production = registry.get_latest_production(group)
    return GroupSnapshot(
        group,
        production.version if production else None,
        tuple(ModelVersionSnapshot.of(model) for model in registry.versions(group)),
        tuple(TransitionSnapshot.of(event) for event in registry.history(group)),
    )


class Registry:
    def __init__(self, workspace: Workspace, training: Training) -> None:
        self.workspace = workspace
        self.training = training

    def load(self) -> ModelRegistry:
        """The registry as committed (call inside an action to act on it)."""
        return self.workspace.store.registry.load_registry(self.workspace.clock)

    @overload
    async def models(self, group: None = None) -> tuple[GroupSnapshot, ...]: ...
    @overload
    async def models(self, group: str) -> GroupSnapshot: ...
    async def models(self, group: str | None = None) -> GroupSnapshot | tuple[GroupSnapshot, ...]:
        """One group's versions, stages and history; without a group, every group."""

        def read() -> GroupSnapshot | tuple[GroupSnapshot, ...]:
            registry = self.load()
            if group is not None:
                return group_snapshot(registry, group)
            return tuple(group_snapshot(registry, name) for name in registry.groups())

        return await self.workspace.query(read)

    async def version(self, group: str, version: int) -> ModelVersionSnapshot:
        return await self.workspace.query(lambda: ModelVersionSnapshot.of(self.load().get(group, version)))

    async def register_from_training(self, group: str, training: str) -> ModelVersionSnapshot:
        """A new version holding a Completed training job's artifact hash, metric and name (as source)."""

        def act() -> tuple[ModelVersionSnapshot, list[Event]]:
            run = service.get(training)
            if run.status != TrainingStatus.COMPLETED or not run.artifact_hash:
                raise ValidationError(
                    f"training job {training!r} is {run.status}; only a Completed training job "
                    f"has an artifact to register"
                )
            model = self.load().register(group, run.artifact_hash, {"metric": run.metric}, training)
            return ModelVersionSnapshot.of(model), [ModelRegistered(group, model.version, model.artifact_hash)]

        service = self.training.service
        await self.workspace.blocking(service.refresh, training)  # fold an attempt that finished since the last look
        return await self.workspace.act(act)

    async def promote(
        self, group: str, version: int, stage: str | Stage, archive_existing: bool = True
    ) -> ModelVersionSnapshot:
        """Move a version to `stage`; promoting to Production archives the incumbent in the same commit."""

        def act() -> tuple[ModelVersionSnapshot, list[Event]]:
            registry = self.load()
            before = len(registry.history(group))
            model = registry.transition(group, version, stage, archive_existing)
            events: list[Event] = [
                TransitionMade(group, event.version, event.from_stage.value, event.to_stage.value)
                for event in registry.history(group)[before:]
            ]
            return ModelVersionSnapshot.of(model), events

        return await self.workspace.act(act)
