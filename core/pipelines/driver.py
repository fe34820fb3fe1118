"""The driver of runs whose steps are jobs: one round per supervisor tick, each step change its own commit.

A round walks a Running run in topological order: a Running step whose job finished is settled from the
job's result (also when it finished while no driver was alive); a Pending step whose producers are all
settled is NotRun, Skipped, Cached or Failed by the pure engine's rules, or is submitted as a job. Every
ready step is submitted in the same round, so independent steps run in parallel up to the pools' capacity
(the backend queues the rest). The run's recorded order is its topological order, whichever job finished
first, so a run's record does not depend on timing.

A step's job is reserved (Running, with its job id) before it is submitted: a driver killed in between
leaves a job id the backend does not know, which the next round puts back to Pending.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kinetic_tui.core.artifacts import PREFIX, ArtifactStore
from kinetic_tui.core.backends.base import Backend, JobRecord
from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.pipelines.runs import cancel_job, step_accelerator, unpack_code
from kinetic_tui.core.pipelines.step_job import digests_in, run_step
from kinetic_tui.core.platform.pipelines import ConditionStep, Pipeline, RunStatus, Step, StepResult, StepStatus
from kinetic_tui.core.platform.pipelines.execution import Ready, StepError, blocked_status, prepare, settled_status
from kinetic_tui.core.platform.pipelines.planner import Node
from kinetic_tui.core.store import Store, artifacts_repo, pipeline_steps_repo
from kinetic_tui.core.store.pipeline_steps_repo import StepRow
from kinetic_tui.core.submission.context import JobContext


class Home(Protocol):
    """What the duty needs of the home the supervisor serves."""

    @property
    def home(self) -> Path: ...

    @property
    def store(self) -> Store: ...

    @property
    def backend(self) -> Backend: ...


log = logging.getLogger(__name__)


@dataclass
class LoadedRun:
    """A Running run's record with its packaged steps compiled (once per driver process)."""

    name: str
    number: int
    record: dict[str, Any]
    pipeline: Pipeline
    nodes: list[Node]
    frames: list[tuple[str, str]]
    order: list[int]

    @property
    def holder(self) -> str:
        return f"{self.name}/{self.number}"


class RunDriver:
    def __init__(self, store: Store, backend: Backend) -> None:
        self.store = store
        self.backend = backend
        self._loaded: dict[tuple[str, int], LoadedRun] = {}
        self._artifacts: ArtifactStore | None = None

    @property
    def artifacts(self) -> ArtifactStore:
        if self._artifacts is None:
            from kinetic_tui.core.artifacts import workspace_artifacts

            self._artifacts = workspace_artifacts(self.backend)
        return self._artifacts

    def tick(self) -> None:
        running = pipeline_steps_repo.running(self.store)
        for key in set(self._loaded) - set(running):
            del self._loaded[key]
        for name, number in running:
            try:
                self.advance(name, number)
            except Exception:
                log.exception("pipeline %s run %s: this round failed", name, number)

    def _load(self, name: str, number: int, record: dict[str, Any]) -> LoadedRun:
        loaded = self._loaded.get((name, number))
        if loaded is None:
            steps = unpack_code(self.artifacts.get_value(record["code"]))
            pipeline = Pipeline(name, steps, cache=self.store.pipelines.cache, accelerator=record["accelerator"])
            nodes, layers, frames = pipeline.compiled()
            order = [i for layer in layers for i in layer]
            loaded = self._loaded[(name, number)] = LoadedRun(name, number, record, pipeline, nodes, frames, order)
        return loaded

    def advance(self, name: str, number: int) -> None:
        """One round of one run."""
        found = pipeline_steps_repo.header(self.store, name, number)
        if found is None or found[0] is not RunStatus.RUNNING:
            return
        run = self._load(name, number, found[1])
        timeout = run.record.get("timeout")
        if timeout is not None and time.time() - run.record["started_at"] > timeout:
            for job_id in pipeline_steps_repo.cancel(self.store, name, number) or []:
                cancel_job(self.backend, job_id)
            return
        rows = pipeline_steps_repo.steps(self.store, name, number)
        statuses: dict[int, StepStatus] = {}
        outputs: dict[str, dict[str, Any]] = {}
        branch: dict[int, bool] = {}
        for i in run.order:
            node = run.nodes[i]
            row = rows[node.name]
            if row.status is StepStatus.RUNNING:
                row = rows[node.name] = self._poll(run, i, row)
            elif row.status is StepStatus.PENDING and all(p in statuses for p in node.producers):
                row = rows[node.name] = self._start(run, i, row, statuses, outputs, branch)
            if not row.status.settled:
                continue
            statuses[i] = row.status
            if row.status in (StepStatus.EXECUTED, StepStatus.CACHED):
                outputs[node.name] = row.result.outputs
                if node.is_condition:
                    branch[i] = row.result.outputs["branch"]
        if len(statuses) == len(run.nodes):
            final = pipeline_steps_repo.compose(run.record, rows, settled_status(r.result for r in rows.values()))
            pipeline_steps_repo.finish(self.store, name, number, final, run.record)

    # -- one step ------------------------------------------------------------------------------------

    def _set(self, run: LoadedRun, i: int, result: StepResult, job_id: str | None, attempts: int) -> StepRow:
        pipeline_steps_repo.set_step(self.store, run.name, run.number, run.nodes[i].name, result, job_id, attempts)
        return StepRow(result.status, job_id, attempts, result)

    def _start(
        self,
        run: LoadedRun,
        i: int,
        row: StepRow,
        statuses: dict[int, StepStatus],
        outputs: dict[str, dict[str, Any]],
        branch: dict[int, bool],
    ) -> StepRow:
        node = run.nodes[i]
        blocked = blocked_status(node, statuses.__getitem__, branch) if node.producers else None
        if blocked is not None:
            return self._set(run, i, StepResult(blocked, {}, None, 0.0), None, row.attempts)
        prepared = prepare(node, run.frames[i], outputs, run.record["params"], self.store.pipelines.cache)
        if isinstance(prepared, StepResult):
            artifacts_repo.hold(self.store, "run", run.holder, digests_in(prepared.outputs))
            return self._set(run, i, prepared, None, row.attempts)
        return self._submit(run, i, prepared, row.attempts + 1)

    def _submit(self, run: LoadedRun, i: int, prepared: Ready, attempts: int) -> StepRow:
        node = run.nodes[i]
        step: Step | ConditionStep = run.pipeline.steps[i]
        root = run.record.get("root")
        try:
            ctx = JobContext.from_params(
                run_step,
                step_accelerator(self.backend, run.pipeline, step),
                display_name=f"{run.name}#{run.number} {node.name}",
                container_image=run.record.get("container_image"),
                package_root=Path(root) if root and Path(root).is_dir() else None,
            )
        except Exception as exc:
            error = f"step {node.name!r} could not be submitted: {exc}"
            return self._set(run, i, StepResult(StepStatus.FAILED, {}, prepared.key, 0.0, error), None, attempts)
        reserved = StepResult(StepStatus.RUNNING, {}, prepared.key, 0.0)
        if not pipeline_steps_repo.set_step(
            self.store, run.name, run.number, node.name, reserved, ctx.job_id, attempts
        ):
            return StepRow(StepStatus.CANCELLED, ctx.job_id, attempts, reserved)
        uri = self.backend.bucket_uri(ctx.bucket, PREFIX)
        args = (node.name, node.fn, node.is_condition, prepared.resolved, ctx.bucket, uri)
        try:
            self.backend.submit_call(ctx, args, {})
        except Exception as exc:
            error = f"step {node.name!r} could not be submitted: {exc}"
            return self._set(run, i, StepResult(StepStatus.FAILED, {}, prepared.key, 0.0, error), ctx.job_id, attempts)
        found = pipeline_steps_repo.header(self.store, run.name, run.number)
        if found is None or found[0] is not RunStatus.RUNNING:  # cancelled while we submitted
            cancel_job(self.backend, ctx.job_id)
        return StepRow(StepStatus.RUNNING, ctx.job_id, attempts, reserved)

    def _poll(self, run: LoadedRun, i: int, row: StepRow) -> StepRow:
        """Settle a Running step whose job finished; retry it while it has retries left."""
        assert row.job_id is not None
        key = row.result.cache_key
        try:
            record = self.backend.refresh(row.job_id)
        except NotFoundError:  # reserved by a driver that died before submitting it
            return self._set(run, i, StepResult(StepStatus.PENDING, {}, None, 0.0), None, row.attempts - 1)
        if not record.status.finished:
            return row
        duration = _duration(record)
        try:
            produced = JobHandle.from_record(record.handle).value_from(record, cleanup=True)
            if not isinstance(produced, dict):
                raise StepError(f"step {run.nodes[i].name!r} job returned {type(produced).__name__}, not a dict")
        except Exception as exc:
            error = str(exc) if isinstance(exc, StepError) else f"step {run.nodes[i].name!r}: {exc}"
            if row.attempts <= run.pipeline.steps[i].retries:
                log.info("pipeline %s: retrying after %s", run.holder, error)
                return self._set(run, i, StepResult(StepStatus.PENDING, {}, None, 0.0, error), None, row.attempts)
            return self._set(run, i, StepResult(StepStatus.FAILED, {}, key, duration, error), row.job_id, row.attempts)
        digests = digests_in(produced)
        if key is not None:
            artifacts_repo.hold(self.store, "cache", key, digests)
            self.store.pipelines.cache[key] = produced
        artifacts_repo.hold(self.store, "run", run.holder, digests)
        return self._set(run, i, StepResult(StepStatus.EXECUTED, produced, key, duration), row.job_id, row.attempts)


def _duration(record: JobRecord) -> float:
    if record.started_at is None or record.finished_at is None:
        return 0.0
    return max(record.finished_at - record.started_at, 0.0)


class PipelineRuns:
    """Every Running pipeline run advances while the supervisor lives, whoever started it."""

    name = "pipeline runs"

    def __init__(self) -> None:
        self._drivers: dict[Path, RunDriver] = {}

    def due(self, home: Home) -> bool:
        return pipeline_steps_repo.any_running(home.store)

    def tick(self, home: Home) -> None:
        driver = self._drivers.get(home.home)
        if driver is None:
            driver = self._drivers[home.home] = RunDriver(home.store, home.backend)
        driver.tick()
