"""`console.pipelines`: definitions by reference, runs whose step cache and history live in the store, so a
rerun in another process with the same params executes nothing. Each executing step is a job, driven by
the workspace supervisor (`core/pipelines/`): a run outlives the client that started it, and a run whose
params or placement are refused records nothing."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.artifacts import prune, workspace_artifacts
from kinetic_tui.core.console.references import importable_cwd
from kinetic_tui.core.console.snapshots import (
    PipelineRunSnapshot,
    PipelineSnapshot,
    RunSummary,
)
from kinetic_tui.core.errors import KineticError, ValidationError
from kinetic_tui.core.events import (
    Event,
    PipelineRegistered,
    PipelineRunFinished,
    StepStatusChanged,
)
from kinetic_tui.core.pipelines import runs
from kinetic_tui.core.platform.pipelines.results import RunStatus, StepStatus

if TYPE_CHECKING:
    from kinetic_tui.core.backends.base import Backend
    from kinetic_tui.core.console.workspace import Workspace


class PipelineRunFailed(KineticError):
    """A run that ended Failed is a failed command: the run stays recorded, the caller learns it failed."""


def check_run(run: PipelineRunSnapshot) -> PipelineRunSnapshot:
    """The run, or PipelineRunFailed naming its first failed step and that step's error."""
    if run.status != RunStatus.FAILED:
        return run
    failed = next((step for step in run.steps if step.status == StepStatus.FAILED), None)
    why = (failed.error or f"step {failed.name!r} failed") if failed else "no step recorded an error"
    raise PipelineRunFailed(f"pipeline {run.pipeline!r} run {run.run} failed: {why}")


class Pipelines:
    def __init__(self, workspace: Workspace, backend: Backend) -> None:
        """`backend` is the profile's: a step's job runs on it (on a gke profile, as a GKE Job)."""
        self.workspace = workspace
        self.store = workspace.store
        self.backend = backend

    def _snapshot(self, name: str) -> PipelineSnapshot:
        importable_cwd()
        ref, _ = self.store.pipelines.definition(name)
        runs = tuple(
            RunSummary(stored.number, stored.run.status.value, tuple(stored.run.executed()))
            for stored in self.store.pipelines.runs(name)
        )
        return PipelineSnapshot.of(ref, self.store.pipelines.load(name), runs)

    async def get(self, name: str) -> PipelineSnapshot:
        return await self.workspace.query(self._snapshot, name)

    async def get_run(self, name: str, number: int | None = None) -> PipelineRunSnapshot:
        """A recorded run with its per-step results (the latest without `number`)."""

        def read() -> PipelineRunSnapshot:
            chosen = runs.chosen(self.store, name, number)
            return PipelineRunSnapshot.of(chosen)

        return await self.workspace.query(read)

    async def register(self, ref: str) -> PipelineSnapshot:
        def act() -> tuple[PipelineSnapshot, list[Event]]:
            importable_cwd()
            pipeline = self.store.pipelines.register(ref)
            return self._snapshot(pipeline.name), [PipelineRegistered(pipeline.name, ref)]

        return await self.workspace.act(act)

    async def run(
        self, name: str, params: dict[str, Any] | None = None, wait: bool | None = None
    ) -> PipelineRunSnapshot:
        """`params` are merged over the pipeline's defaults."""
        return await self._start_run(name, params, rerun=False, wait=wait)

    async def rerun(
        self, name: str, params: dict[str, Any] | None = None, wait: bool | None = None
    ) -> PipelineRunSnapshot:
        """Run again with the last run's params, `params` merged over them."""
        return await self._start_run(name, params, rerun=True, wait=wait)

    async def _start_run(
        self,
        name: str,
        params: dict[str, Any] | None,
        rerun: bool,
        wait: bool | None,
    ) -> PipelineRunSnapshot:
        params = {} if params is None else params
        if not isinstance(params, dict):
            raise ValidationError(f"params: expected a mapping of param name to JSON value, got {params!r}")

        def start() -> int:
            importable_cwd()
            return runs.start(self.store, self.backend, name, params, rerun)

        number = await self.workspace.blocking(start)
        return await self._follow(name, number, wait)

    async def _follow(self, name: str, number: int, wait: bool | None) -> PipelineRunSnapshot:
        """The run now (detached), or once it settled (waiting), announcing each step's final state. The
        looks are short reads between async sleeps, so a console that stops following leaves no thread."""
        if not self.workspace.wants_wait(wait):
            stored = await self.workspace.blocking(runs.chosen, self.store, name, number)
            self.workspace.spawn(f"pipeline run {name}", self._follow(name, number, True), watch_only=True)
            return PipelineRunSnapshot.of(stored)
        looks = 0
        while await self.workspace.blocking(runs.is_running, self.store, name, number, looks):
            looks += 1
            await asyncio.sleep(runs.POLL)
        stored = await self.workspace.blocking(runs.chosen, self.store, name, number)
        for step, result in stored.run.steps.items():
            self.workspace.events.publish(StepStatusChanged(name, number, step, result.status.value))
        self.workspace.events.publish(
            PipelineRunFinished(name, number, stored.run.status.value, tuple(stored.run.executed()))
        )
        return check_run(PipelineRunSnapshot.of(stored))

    async def resume(self, name: str, number: int | None = None, wait: bool | None = None) -> PipelineRunSnapshot:
        """Bring back the driver of a Running run (the latest without `number`) and follow it."""
        stored = await self.workspace.blocking(runs.resume, self.store, name, number)
        return await self._follow(name, stored.number, wait)

    async def cancel(self, name: str, number: int | None = None) -> PipelineRunSnapshot:
        """Cancel a Running run's step jobs and settle it Cancelled; a finished run is refused, unchanged."""
        stored = await self.workspace.blocking(runs.cancel, self.store, self.backend, name, number)
        self.workspace.events.publish(PipelineRunFinished(name, stored.number, stored.run.status.value, ()))
        return PipelineRunSnapshot.of(stored)

    async def prune_artifacts(self) -> dict[str, Any]:
        """Remove the artifacts nothing references; what was removed and kept."""
        return await self.workspace.blocking(lambda: prune(self.store, workspace_artifacts(self.backend)))

    # kept last: a signature below it would read `list[...]` as this method, not the builtin
    async def list(self) -> tuple[PipelineSnapshot, ...]:
        return await self.workspace.query(lambda: tuple(self._snapshot(n) for n in self.store.pipelines.names()))
