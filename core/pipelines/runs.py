"""Starting, following, resuming and cancelling runs whose steps are jobs (what a client does).

Starting checks everything before recording anything: the definition imports and plans (no cycle, no
dangling reference), the params merge, and every step's accelerator or pool exists. It then packages the
steps' code once, by value, as an artifact: the run's driver (and a resumed one) runs that code, not
whatever the module holds later. The run is recorded Running with every step Pending and the supervisor is
brought up to drive it; nothing here waits on a step while a transaction is open.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import cloudpickle

from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.artifacts import workspace_artifacts
from kinetic_tui.core.backends.base import Backend
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.platform.pipelines import ConditionStep, Pipeline, RunStatus, Step
from kinetic_tui.core.store import Store, StoredRun, artifacts_repo, pipeline_steps_repo
from kinetic_tui.core.submission.packaging import module_root
from kinetic_tui.core.submission.packaging.by_value import dumps_keeping_filenames, project_by_value
from kinetic_tui.core.supervisor import process as supervisor
from kinetic_tui.core.training.pools import accelerator as pool_accelerator

POLL = 0.01  # seconds between looks at a run a client follows (a look is one indexed read)
REVIVE_EVERY = 100  # looks between checks that a driver is alive: about once a second


def step_accelerator(backend: Backend, pipeline: Pipeline, step: Step | ConditionStep) -> str:
    """Where the step's job runs: its pool's accelerator, its own, or the pipeline's default; a one-line
    error naming the pools when none provides it."""
    if step.pool is not None:
        try:
            return pool_accelerator(backend.pool(step.pool))
        except NotFoundError:
            raise ValidationError(
                f"pipeline {pipeline.name!r}: step {step.name!r} names pool {step.pool!r}, which does not exist; "
                f"pools: {_pools(backend)}"
            ) from None
    text = step.accelerator or pipeline.accelerator
    try:
        placed = backend.placement(text, parse_accelerator(text).num_nodes)
    except Exception as exc:  # the backend's own one-line refusal (it names the pools)
        raise ValidationError(f"pipeline {pipeline.name!r}: step {step.name!r}: {exc}") from None
    if placed is None:
        raise ValidationError(
            f"pipeline {pipeline.name!r}: step {step.name!r} needs {text}, which no pool provides; "
            f"pools: {_pools(backend)}"
        )
    return text


def _pools(backend: Backend) -> str:
    return ", ".join(f"{p.name} ({p.accelerator}, {p.nodes} nodes)" for p in backend.pools()) or "none"


_FIELDS = ("name", "inputs", "when", "version", "accelerator", "pool", "retries")


def package_code(steps: tuple[Step | ConditionStep, ...], root: Path | None) -> bytes:
    """The steps as plain records with their functions by value (every module under the package root), as a
    job's payload is packed. Records, not Step objects: a checkout that holds this package would otherwise
    ship our own classes by value, and the driver could not recognise them."""
    records = [
        {
            "condition": isinstance(step, ConditionStep),
            "fn": step.predicate if isinstance(step, ConditionStep) else step.fn,
            **{field: getattr(step, field) for field in _FIELDS},
        }
        for step in steps
    ]
    if root is None:
        return bytes(cloudpickle.dumps(records))
    with project_by_value(root):
        return dumps_keeping_filenames(records, root)


def unpack_code(records: list[dict[str, Any]]) -> list[Step | ConditionStep]:
    """The steps `package_code` packed."""
    steps: list[Step | ConditionStep] = []
    for record in records:
        fields = {field: record[field] for field in _FIELDS}
        steps.append(
            ConditionStep(predicate=record["fn"], **fields) if record["condition"] else Step(fn=record["fn"], **fields)
        )
    return steps


def start(store: Store, backend: Backend, name: str, params: dict[str, Any], rerun: bool) -> int:
    """Check, package and record a run; its number. Bad input raises before anything is recorded."""
    ref, _ = store.pipelines.definition(name)
    pipeline = store.pipelines.load(name)
    if rerun:
        runs = store.pipelines.runs(name)
        if not runs:
            raise ValidationError(f"pipeline {name!r} has no runs to rerun; start one with: pipeline run {name}")
        params = {**runs[-1].run.params, **params}
    merged = pipeline.merged_params(params)
    nodes, _, _ = pipeline.compiled()
    for step in pipeline.steps:
        step_accelerator(backend, pipeline, step)
    module = ref.partition(":")[0]
    root = None if module.partition(".")[0] == "kinetic_tui" else module_root(module)  # ours travels by name
    code = workspace_artifacts(backend).put_bytes(package_code(pipeline.steps, root))
    order = pipeline.topological_order()
    header: dict[str, Any] = {
        "pipeline": name,
        "params": merged,
        "order": order,
        "conditions": [node.name for node in nodes if node.is_condition],
        "code": code,
        "root": None if root is None else str(root),
        "accelerator": pipeline.accelerator,
        "container_image": pipeline.container_image,
        "timeout": pipeline.timeout,
        "started_at": time.time(),
    }
    number = pipeline_steps_repo.start(store, name, header, order)
    artifacts_repo.hold(store, "run", f"{name}/{number}", [code])
    supervisor.ensure_running(store.path.parent, at_once=True)  # its driver submits the first steps
    return number


def chosen(store: Store, name: str, number: int | None) -> StoredRun:
    """Run `number` of `name` (the latest without one); one-line errors for none."""
    runs = store.pipelines.runs(name)
    if not runs:
        raise ValidationError(f"pipeline {name!r} has no runs yet; run it with: pipeline run {name}")
    found = runs[-1] if number is None else next((r for r in runs if r.number == number), None)
    if found is None:
        raise ValidationError(f"pipeline {name!r} has no run {number}; runs are 1..{runs[-1].number}")
    return found


def is_running(store: Store, name: str, number: int, looks: int = 0) -> bool:
    """Whether the run is still Running; about once a second of looks (`looks`, counted by the follower), a
    driver that was killed is brought back: whoever follows a run keeps it driven."""
    found = pipeline_steps_repo.header(store, name, number)
    running = found is not None and found[0] is RunStatus.RUNNING
    if running and looks and looks % REVIVE_EVERY == 0:
        supervisor.ensure_running(store.path.parent, at_once=True)
    return running


def resume(store: Store, name: str, number: int | None) -> StoredRun:
    """Bring the driver of a Running run back; a settled run is returned as it is (nothing runs again)."""
    run = chosen(store, name, number)
    if run.run.status is RunStatus.RUNNING:
        supervisor.ensure_running(store.path.parent)
    return run


def cancel(store: Store, backend: Backend, name: str, number: int | None) -> StoredRun:
    """Settle a Running run Cancelled and cancel its running step jobs; a finished run is refused, unchanged."""
    run = chosen(store, name, number)
    jobs = pipeline_steps_repo.cancel(store, name, run.number)
    if jobs is None:
        raise ValidationError(
            f"pipeline {name!r} run {run.number} already finished ({run.run.status.value}); nothing to cancel"
        )
    for job_id in jobs:
        cancel_job(backend, job_id)
    return chosen(store, name, run.number)


def cancel_job(backend: Backend, job_id: str) -> None:
    """Cancel a step's job; one reserved but never submitted has nothing to cancel."""
    with contextlib.suppress(NotFoundError):
        backend.cancel(job_id)
