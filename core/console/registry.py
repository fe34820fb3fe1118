"""`console.registry`: the model registry. It is re-read inside each action's transaction, so the CLI and
the TUI (two processes) never act on each other's stale copy."""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

from kinetic_tui.core.artifacts import workspace_artifacts
from kinetic_tui.core.console.snapshots import (
    GroupSnapshot,
    ModelVersionSnapshot,
    TransitionSnapshot,
)
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.events import Event, ModelRegistered, TransitionMade
from kinetic_tui.core.platform.registry import ModelRegistry, Stage
from kinetic_tui.core.platform.training import TrainingStatus
from kinetic_tui.core.serving.model import package_predict
from kinetic_tui.core.store import artifacts_repo, serving_repo

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

    async def register_from_training(
        self, group: str, training: str, predict: str | None = None
    ) -> ModelVersionSnapshot:
        """A new version holding a Completed training job's artifact hash, metric and name (as source), and
        what it serves: the training's final state and `predict` (MODULE:FUNC, checked to import and be
        callable here, its project kept by value; None: the built-in predict of the built-in step)."""

        def act(code: str | None) -> tuple[ModelVersionSnapshot, list[Event]]:
            run = service.runs.get(training)
            job = run.job
            if job.status is not TrainingStatus.COMPLETED or not job.artifact_hash:
                raise ValidationError(
                    f"training job {training!r} is {job.status.value}; only a Completed training job "
                    f"has an artifact to register"
                )
            if predict is None and run.meta.step is not None:
                raise ValidationError(
                    f"training job {training!r} ran step {run.meta.step}; name its serving entry point with "
                    f"--predict MODULE:FUNC (predict(state, record) -> JSON value)"
                )
            model = self.load().register(group, job.artifact_hash, {"metric": job.metric}, training)
            if run.meta.model_artifact is not None:
                store = self.workspace.store
                serving_repo.save_model(store, group, model.version, run.meta.model_artifact, predict, code)
                held = [run.meta.model_artifact, *([code] if code else [])]
                artifacts_repo.hold(store, "model", f"{group}:v{model.version}", held)
            return ModelVersionSnapshot.of(model), [ModelRegistered(group, model.version, model.artifact_hash)]

        service = self.training.service
        code = None
        if predict is not None:
            ref = predict  # the store is opened on this workspace's home, which `blocking` sets
            code = await self.workspace.blocking(lambda: package_predict(ref, workspace_artifacts(service.backend)))
        await self.workspace.blocking(service.refresh, training)  # fold an attempt that finished since the last look
        return await self.workspace.act(act, code)

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
