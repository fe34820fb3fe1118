"""The model registry through the console. The registry is re-read inside each action's transaction, so
the CLI and the TUI (two processes) never act on each other's stale copy."""
from __future__ import annotations

from kinetic_tui.core.console.training_ops import TrainingMixin
from kinetic_tui.core.console.snapshots import GroupSnapshot, ModelVersionSnapshot, TransitionSnapshot
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.events import Event, ModelRegistered, TransitionMade
from kinetic_tui.core.platform.registry import ModelRegistry, Stage
from kinetic_tui.core.platform.training import TrainingStatus


def group_snapshot(registry: ModelRegistry, group: str) -> GroupSnapshot:
    production = registry.get_latest_production(group)
    return GroupSnapshot(group, production.version if production else None,
                         tuple(ModelVersionSnapshot.of(model) for model in registry.versions(group)),
                         tuple(TransitionSnapshot.of(event) for event in registry.history(group)))


class RegistryMixin(TrainingMixin):
    def registry(self) -> ModelRegistry:
        """The registry as committed (call inside an action to act on it)."""
        return self.store.registry.load_registry(self.clock)

    async def models(self, group: str | None = None) -> GroupSnapshot | tuple[GroupSnapshot, ...]:
        """One group's versions, stages and history; without a group, every group."""
        def read() -> GroupSnapshot | tuple[GroupSnapshot, ...]:
            registry = self.registry()
            if group is not None:
                return group_snapshot(registry, group)
            return tuple(group_snapshot(registry, name) for name in registry.groups())

        return await self._query(read)

    async def model_version(self, group: str, version: int) -> ModelVersionSnapshot:
        return await self._query(lambda: ModelVersionSnapshot.of(self.registry().get(group, version)))

    async def register_from_training(self, group: str, training: str) -> ModelVersionSnapshot:
        """A new version holding a Completed training job's artifact hash, metric and name (as source)."""
        def act() -> tuple[ModelVersionSnapshot, list[Event]]:
            run = service.get(training)
            if run.status != TrainingStatus.COMPLETED or not run.artifact_hash:
                raise ValidationError(f"training job {training!r} is {run.status}; only a Completed training job "
                                      f"has an artifact to register")
            model = self.registry().register(group, run.artifact_hash, {"metric": run.metric}, training)
            return ModelVersionSnapshot.of(model), [ModelRegistered(group, model.version, model.artifact_hash)]

        service = self.training_service()
        await self._blocking(service.refresh, training)  # fold an attempt that finished since the last look
        return await self._act(act)

    async def promote(self, group: str, version: int, stage: str | Stage,
                      archive_existing: bool = True) -> ModelVersionSnapshot:
        """Move a version to `stage`; promoting to Production archives the incumbent in the same commit."""
        def act() -> tuple[ModelVersionSnapshot, list[Event]]:
            registry = self.registry()
            before = len(registry.history(group))
            model = registry.transition(group, version, stage, archive_existing)
            events: list[Event] = [TransitionMade(group, event.version, event.from_stage.value, event.to_stage.value)
                                   for event in registry.history(group)[before:]]
            return ModelVersionSnapshot.of(model), events

        return await self._act(act)
