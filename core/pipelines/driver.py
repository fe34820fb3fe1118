"""The driver of runs whose steps are jobs: one round per supervisor tick, each step change its own commit.

A round walks a Running run in topological order: a Running step whose job finished is settled from the
job's result (also when it finished while no driver was alive); a Pending step whose producers are all
settled is NotRun, Skipped, Cached or Failed by the pure engine's rules, or is submitted as a job. Every
ready step is submitted in the same round, so independent steps run in parallel up to the pools' capacity
(the backend queues the rest). The run's recorded order is its topological order, whichever job finished
first, so a run's record does not depend on timing.

A step's job is reserved (Running, with its job id) before it is submitted: a driver killed in between
leaves a job id the backend does not know, which the next round puts back to Pending.

Steps that become ready in one round on the same accelerator, more of them than its pool has nodes (a
fan-out), are submitted as one batch, as `map` submits its inputs: each is still its own job (its id, row,
log and result), but the local backend runs them in lanes (one process per node works through several, so
a fan-out of trivial steps does not pay a process each; steps of one lane share its process, as map inputs
do). Fewer ready steps than nodes each get their own process at once.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.artifacts import PREFIX, ArtifactStore
from kinetic_tui.core.backends.base import Backend, BatchDriver, Call, JobRecord
from kinetic_tui.core.batches import batch_manifest, new_group_id
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.pipelines.runs import cancel_job, step_accelerator, unpack_code
from kinetic_tui.core.pipelines.step_job import digests_in, run_step, run_step_in
from kinetic_tui.core.platform.pipelines import Pipeline, RunStatus, StepResult, StepStatus
from kinetic_tui.core.platform.pipelines.execution import Ready, blocked_status, prepare, settled_status
from kinetic_tui.core.platform.pipelines.planner import Node
from kinetic_tui.core.platform.pipelines.step_call import StepError
from kinetic_tui.core.store import Store, artifacts_repo, pipeline_steps_repo
from kinetic_tui.core.store.pipeline_steps_repo import StepRow
from kinetic_tui.core.submission import context
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
    # The step jobs whose end is the only news the next round could act on: no step is ready to start and
    # only this driver writes a Running run's steps, so until one of them ends a round would change nothing.
    watching: list[str] = field(default_factory=list)
    batches: dict[str, BatchDriver] = field(default_factory=dict)  # the fan-outs this driver submitted
    spent: list[JobRecord] = field(default_factory=list)  # step jobs settled this round, to clean up after it
    spent_in_batches: dict[str, list[str]] = field(default_factory=dict)  # fan-out step jobs, cleaned at the end
    # lanes' results files read this round (one read per lane, not per step): only jobs seen finished before
    # the read are settled from it, so it is dropped at the start of each round
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def holder(self) -> str:
        return f"{self.name}/{self.number}"


class RunDriver:
    def __init__(self, store: Store, backend: Backend) -> None:
        self.store = store
        self.backend = backend
        self._loaded: dict[tuple[str, int], LoadedRun] = {}
        self._artifacts: ArtifactStore | None = None
        self.submitted = 0  # step jobs submitted in the last round
        self.running = 0  # step jobs running after the last round

    @property
    def artifacts(self) -> ArtifactStore:
        if self._artifacts is None:
            from kinetic_tui.core.artifacts import workspace_artifacts

            self._artifacts = workspace_artifacts(self.backend)
        return self._artifacts

    def tick(self) -> bool:
        """One round of every Running run; True when a step job is still running (its end is news soon)."""
        running = pipeline_steps_repo.running(self.store)
        for key in set(self._loaded) - set(running):
            del self._loaded[key]
        self.submitted = self.running = 0
        busy = False
        for name, number in running:
            try:
                busy = self.advance(name, number) or busy
            except Exception:
                log.exception("pipeline %s run %s: this round failed", name, number)
        return busy

    def _load(self, name: str, number: int, record: dict[str, Any]) -> LoadedRun:
        loaded = self._loaded.get((name, number))
        if loaded is None:
            steps = unpack_code(self.artifacts.get_value(record["code"]))
            pipeline = Pipeline(name, steps, cache=self.store.pipelines.cache, accelerator=record["accelerator"])
            nodes, layers, frames = pipeline.compiled()
            order = [i for layer in layers for i in layer]
            loaded = self._loaded[(name, number)] = LoadedRun(name, number, record, pipeline, nodes, frames, order)
        return loaded

    def advance(self, name: str, number: int) -> bool:
        """One round of one run; True when one of its steps is still running as a job."""
        found = pipeline_steps_repo.header(self.store, name, number)
        if found is None or found[0] is not RunStatus.RUNNING:
            return False
        run = self._load(name, number, found[1])
        timeout = run.record.get("timeout")
        if timeout is not None and time.time() - run.record["started_at"] > timeout:
            for job_id in pipeline_steps_repo.cancel(self.store, name, number) or []:
                cancel_job(self.backend, job_id)
            return False
        if run.watching and not self.backend.finished_among(run.watching):
            self.running += len(run.watching)
            return True  # a quiet round: one look at the jobs, no read of the steps
        run.watching, run.files = [], {}
        rows = pipeline_steps_repo.steps(self.store, name, number)
        statuses: dict[int, StepStatus] = {}
        outputs: dict[str, dict[str, Any]] = {}
        branch: dict[int, bool] = {}
        ready: list[tuple[int, Ready, int]] = []
        jobs = self._look(rows.values())
        for i in run.order:
            node = run.nodes[i]
            row = rows[node.name]
            if row.status is StepStatus.RUNNING and (row.job_id or "") in jobs:
                row = rows[node.name] = self._poll(run, i, row, jobs[row.job_id or ""])
            elif row.status is StepStatus.PENDING and all(p in statuses for p in node.producers):
                row = rows[node.name] = self._start(run, i, row, statuses, outputs, branch, ready)
            if not row.status.settled:
                continue
            statuses[i] = row.status
            if row.status in (StepStatus.EXECUTED, StepStatus.CACHED):
                outputs[node.name] = row.result.outputs
                if node.is_condition:
                    branch[i] = row.result.outputs["branch"]
        rows.update(self._submit_ready(run, ready))
        self._clean(run)
        if len(statuses) == len(run.nodes):
            final = pipeline_steps_repo.compose(run.record, rows, settled_status(r.result for r in rows.values()))
            pipeline_steps_repo.finish(self.store, name, number, final, run.record)
            self._clean_batches(run)  # after the run is settled: its follower need not wait for it
            return False
        running = [row.job_id for row in rows.values() if row.status is StepStatus.RUNNING and row.job_id]
        self.running += len(running)
        if not self._any_ready(run, rows):
            run.watching = running
        return bool(running)

    @staticmethod
    def _any_ready(run: LoadedRun, rows: Mapping[str, StepRow]) -> bool:
        """A Pending step whose producers are all settled (to start, skip or retry in the next round)."""
        settled = {i for i, node in enumerate(run.nodes) if rows[node.name].status.settled}
        return any(
            rows[node.name].status is StepStatus.PENDING and all(p in settled for p in node.producers)
            for node in run.nodes
        )

    def _look(self, rows: Iterable[StepRow]) -> Mapping[str, JobRecord | None]:
        """The finished jobs of the Running steps (None: unknown), in one look at the backend."""
        job_ids = [row.job_id for row in rows if row.status is StepStatus.RUNNING and row.job_id is not None]
        return self.backend.finished_among(job_ids) if job_ids else {}

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
        ready: list[tuple[int, Ready, int]],
    ) -> StepRow:
        """The step settled (blocked, cached), or left Pending in `ready` to be submitted after the round."""
        node = run.nodes[i]
        blocked = blocked_status(node, statuses.__getitem__, branch) if node.producers else None
        if blocked is not None:
            return self._set(run, i, StepResult(blocked, {}, None, 0.0), None, row.attempts)
        prepared = prepare(node, run.frames[i], outputs, run.record["params"], self.store.pipelines.cache)
        if isinstance(prepared, StepResult):
            artifacts_repo.hold(self.store, "run", run.holder, digests_in(prepared.outputs))
            return self._set(run, i, prepared, None, row.attempts)
        ready.append((i, prepared, row.attempts + 1))
        return row

    def _submit_ready(self, run: LoadedRun, ready: list[tuple[int, Ready, int]]) -> dict[str, StepRow]:
        """Submit the round's ready steps, one batch per accelerator; their new rows by name."""
        rows: dict[str, StepRow] = {}
        placed: dict[str, list[tuple[int, Ready, int]]] = {}
        for i, prepared, attempts in ready:
            try:
                where = step_accelerator(self.backend, run.pipeline, run.pipeline.steps[i])
            except Exception as exc:
                rows[run.nodes[i].name] = self._failed(run, i, prepared, attempts, exc, None)
                continue
            placed.setdefault(where, []).append((i, prepared, attempts))
        for where, steps in placed.items():
            if len(steps) > self._capacity(where):  # a fan-out: one batch, in lanes as a map's inputs
                rows.update(self._submit(run, where, steps))
            else:  # each its own process at once: a lane would run two long steps one after the other
                for step in steps:
                    rows.update(self._submit(run, where, [step]))
        return rows

    def _capacity(self, where: str) -> int:
        """Nodes of the pool that runs `where` now."""
        placed = self.backend.placement(where, parse_accelerator(where).num_nodes)
        return 0 if placed is None else self.backend.pool(placed).nodes

    def _submit(self, run: LoadedRun, where: str, steps: list[tuple[int, Ready, int]]) -> dict[str, StepRow]:
        """Reserve each step's job (Running with its id), then submit them: one call, or one batch."""
        root = run.record.get("root")
        names = [run.nodes[i].name for i, _, _ in steps]
        rows: dict[str, StepRow] = {}
        table: dict[int, tuple[int, Callable[[dict[str, Any]], Any]]] = {}  # by id: a step's fn may not hash
        for i, _, _ in steps:
            table.setdefault(id(run.nodes[i].fn), (len(table), run.nodes[i].fn))
        fns = tuple(fn for _, fn in table.values())
        try:
            first = JobContext.from_params(
                run_step if len(steps) == 1 else functools.partial(run_step_in, fns),
                where,
                display_name=f"{run.name}#{run.number} {names[0]}",
                container_image=run.record.get("container_image"),
                package_root=Path(root) if root and Path(root).is_dir() else None,
                group_id=new_group_id() if len(steps) > 1 else None,
                group_index=0 if len(steps) > 1 else None,
            )
        except Exception as exc:
            return {name: self._failed(run, i, p, a, exc, None) for name, (i, p, a) in zip(names, steps)}
        contexts = [first] + [
            replace(first, job_id=context.new_job_id(), group_index=k, display_name=f"{run.name}#{run.number} {name}")
            for k, name in enumerate(names[1:], start=1)
        ]
        for ctx, name, (_, prepared, attempts) in zip(contexts, names, steps):
            reserved = StepResult(StepStatus.RUNNING, {}, prepared.key, 0.0)
            if not pipeline_steps_repo.set_step(self.store, run.name, run.number, name, reserved, ctx.job_id, attempts):
                return {}  # cancelled meanwhile: nothing of this round is submitted
            rows[name] = StepRow(StepStatus.RUNNING, ctx.job_id, attempts, reserved)
        uri = self.backend.bucket_uri(first.bucket, PREFIX)
        fn_at = {i: run.nodes[i].fn if len(steps) == 1 else table[id(run.nodes[i].fn)][0] for i, _, _ in steps}
        calls: list[Call] = [
            ((run.nodes[i].name, fn_at[i], run.nodes[i].is_condition, prepared.resolved, first.bucket, uri), {})
            for i, prepared, _ in steps
        ]
        try:
            self.submitted += len(steps)
            if len(steps) == 1:
                self.backend.submit_call(first, *calls[0])
            else:
                submitted = self.backend.submit_map(contexts, calls, batch_manifest(contexts, name=run.holder))
                run.batches[submitted.manifest["group_id"]] = submitted.driver
        except Exception as exc:
            return {
                name: self._failed(run, i, p, a, exc, ctx.job_id)
                for ctx, name, (i, p, a) in zip(contexts, names, steps)
            }
        found = pipeline_steps_repo.header(self.store, run.name, run.number)
        if found is None or found[0] is not RunStatus.RUNNING:  # cancelled while we submitted
            for ctx in contexts:
                cancel_job(self.backend, ctx.job_id)
        return rows

    def _failed(
        self, run: LoadedRun, i: int, prepared: Ready, attempts: int, exc: Exception, job_id: str | None
    ) -> StepRow:
        error = f"step {run.nodes[i].name!r} could not be submitted: {exc}"
        return self._set(run, i, StepResult(StepStatus.FAILED, {}, prepared.key, 0.0, error), job_id, attempts)

    def _poll(self, run: LoadedRun, i: int, row: StepRow, record: JobRecord | None) -> StepRow:
        """Settle a Running step whose job finished (`record`; None: the backend does not know it); retry it
        while it has retries left."""
        assert row.job_id is not None
        key = row.result.cache_key
        if record is None:  # reserved by a driver that died before submitting it
            return self._set(run, i, StepResult(StepStatus.PENDING, {}, None, 0.0), None, row.attempts - 1)
        duration = _duration(record)
        run.spent.append(record)
        batch = run.batches.get(record.handle.get("group_id") or "")
        try:
            data = self.backend.result_bytes(record) if batch is None else batch.result_bytes(record, run.files)
            produced = JobHandle.from_record(record.handle).value_from(record, data)
            if not isinstance(produced, dict):
                raise StepError(f"step {run.nodes[i].name!r} job returned {type(produced).__name__}, not a dict")
        except Exception as exc:
            error = str(exc) if isinstance(exc, StepError) else f"step {run.nodes[i].name!r}: {exc}"
            if row.attempts <= run.pipeline.steps[i].retries:
                log.info("pipeline %s: retrying after %s", run.holder, error)
                return self._set(run, i, StepResult(StepStatus.PENDING, {}, None, 0.0, error), None, row.attempts)
            return self._set(run, i, StepResult(StepStatus.FAILED, {}, key, duration, error), row.job_id, row.attempts)
        digests = digests_in(produced)
        with self.store.transaction():  # the step's state, its cache entry and what they hold: one commit
            if key is not None:
                artifacts_repo.hold(self.store, "cache", key, digests)
                self.store.pipelines.cache[key] = produced
            artifacts_repo.hold(self.store, "run", run.holder, digests)
            executed = StepResult(StepStatus.EXECUTED, produced, key, duration)
            return self._set(run, i, executed, row.job_id, row.attempts)

    def _clean(self, run: LoadedRun) -> None:
        """Remove the inputs and working directories of the step jobs settled this round (results and logs
        stay), after their steps were committed. A fan-out's are left for `_clean_batches`. A failure here is
        logged, never the round's: the steps are settled, and `jobs prune` removes what is left."""
        spent, run.spent = run.spent, []
        for record in spent:
            group = record.handle.get("group_id")
            if group:
                run.spent_in_batches.setdefault(group, []).append(record.job_id)
                continue
            try:
                JobHandle.from_record(record.handle).cleanup()
            except Exception as exc:
                log.warning("pipeline %s: cleaning up step job %s: %s", run.holder, record.job_id, exc)

    def _clean_batches(self, run: LoadedRun) -> None:
        """Once the run has settled, each fan-out's step jobs in one call to its batch, as `map` cleans up
        after its last result (a batch's cleanup lists the whole group, too dear for every round)."""
        spent, run.spent_in_batches = run.spent_in_batches, {}
        for group, job_ids in spent.items():
            try:
                driver = run.batches.get(group)
                if driver is None:  # submitted by a driver that died since
                    attached = self.backend.attach_batch(group)
                    if attached is None:
                        continue
                    driver = attached.driver
                driver.cleanup(job_ids, True, True)
            except Exception as exc:
                log.warning("pipeline %s: cleaning up step jobs of batch %s: %s", run.holder, group, exc)


def _duration(record: JobRecord) -> float:
    if record.started_at is None or record.finished_at is None:
        return 0.0
    return max(record.finished_at - record.started_at, 0.0)


# Seconds between rounds while a step job runs: a step's end is looked for about as often as a client
# waiting on a job looks (a round with nothing new costs a few indexed reads per running step). After a
# round that submitted jobs the pause starts at FIRST_LOOK and doubles up to BUSY_PAUSE, as a client's
# wait backs off: a short step is seen ending within a millisecond or two, a long one costs few rounds.
BUSY_PAUSE = 0.01
FIRST_LOOK = 0.001
# With at most FEW step jobs running a round costs well under a millisecond, so the back-off stops at
# FEW_PAUSE: a short step (a chain of them) is seen ending a few milliseconds after it did.
FEW, FEW_PAUSE = 4, 0.004
# Seconds between looks while no step job runs, for QUICK_FOR seconds after the last run was seen: the next
# `pipeline run` of a burst is picked up within this (a look with no run is one indexed read, ~2% of a core
# at this pace). After that the duty looks at the loop's own pace, as the other duties do.
PICK_UP = 0.01
QUICK_FOR = 30.0


class PipelineRuns:
    """Every Running pipeline run advances while the supervisor lives, whoever started it."""

    name = "pipeline runs"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._drivers: dict[Path, RunDriver] = {}
        self._clock = clock
        self._last_run = clock()  # a supervisor is usually started for a run
        self.pause: float | None = PICK_UP

    def due(self, home: Home) -> bool:
        running = pipeline_steps_repo.any_running(home.store)
        if not running and self._clock() - self._last_run > QUICK_FOR:
            self.pause = None
        return running

    def tick(self, home: Home) -> None:
        driver = self._drivers.get(home.home)
        if driver is None:
            driver = self._drivers[home.home] = RunDriver(home.store, home.backend)
        self._last_run = self._clock()
        if not driver.tick():
            self.pause = PICK_UP
        elif driver.submitted:
            self.pause = FIRST_LOOK
        else:
            cap = FEW_PAUSE if driver.running <= FEW else BUSY_PAUSE
            self.pause = min(2 * (self.pause or BUSY_PAUSE), cap)
