"""`console.pipelines`: definitions by reference, runs whose step cache and history live in the store, so a
rerun in another process with the same params executes nothing. Steps run in-process, inside the run's
transaction: a run whose params are refused records nothing and caches nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from kinetic_tui.core.platform.pipelines.results import RunStatus, StepStatus

if TYPE_CHECKING:
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
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.store = workspace.store

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
            runs = self.store.pipelines.runs(name)
            if not runs:
                raise ValidationError(f"pipeline {name!r} has no runs yet; run it with: pipeline run {name}")
            chosen = runs[-1] if number is None else next((r for r in runs if r.number == number), None)
            if chosen is None:
                raise ValidationError(f"pipeline {name!r} has no run {number}; runs are 1..{len(runs)}")
            return PipelineRunSnapshot.of(chosen.number, chosen.run)

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
        if self.workspace.wants_wait(wait):
            return await self.workspace.act(self._run_and_record, name, params, rerun)
        number = await self.workspace.blocking(self._next_run_number, name)  # expected: another run may land first
        self.workspace.spawn(f"{'rerun' if rerun else 'pipeline run'} {name}", self._run_detached(name, params, rerun))
        return PipelineRunSnapshot(name, number, "Running", dict(params), {}, (), ())

    async def _run_detached(self, name: str, params: dict[str, Any], rerun: bool) -> None:
        check_run(await self.workspace.act(self._run_and_record, name, params, rerun))  # failed: announced

    def _next_run_number(self, name: str) -> int:
        return len(self.store.pipelines.runs(name)) + 1

    def _run_and_record(
        self, name: str, params: dict[str, Any], rerun: bool
    ) -> tuple[PipelineRunSnapshot, list[Event]]:
        importable_cwd()
        pipeline = self.store.pipelines.load(name)
        if rerun:
            runs = self.store.pipelines.runs(name)
            if not runs:
                raise ValidationError(f"pipeline {name!r} has no runs to rerun; start one with: pipeline run {name}")
            params = {**runs[-1].run.params, **params}
        run = pipeline.run(params)
        number = self.store.pipelines.record_run(run)
        events: list[Event] = [
            StepStatusChanged(name, number, step, result.status.value) for step, result in run.steps.items()
        ]
        events.append(PipelineRunFinished(name, number, run.status.value, tuple(run.executed())))
        return PipelineRunSnapshot.of(number, run), events

    # kept last: a signature below it would read `list[...]` as this method, not the builtin
    async def list(self) -> tuple[PipelineSnapshot, ...]:
        return await self.workspace.query(lambda: tuple(self._snapshot(n) for n in self.store.pipelines.names()))
