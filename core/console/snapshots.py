"""Immutable snapshots the Console returns: views render them and `--script` prints them as JSON.

Snapshots are copies taken inside the action's transaction, so a view never holds a live object that a
worker thread is mutating, and the JSON a script prints is exactly what the action saw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from kinetic_tui.core.backends.base import JobRecord, PoolInfo
from kinetic_tui.core.platform.autoscaling import Endpoint, ScalingEvent
from kinetic_tui.core.platform.pipelines import Pipeline, PipelineRun
from kinetic_tui.core.platform.registry import ModelVersion, Transition
from kinetic_tui.core.platform.serving import MultiModelEndpoint


def jsonable(value: Any) -> Any:
    """Snapshots, tuples and mappings as plain JSON values; anything else that JSON cannot hold as its repr."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def json_safe(value: Any) -> Any:
    """A job's return value as JSON can carry it, else its repr (results are arbitrary Python objects)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value  # the common cases (a listing has no results) cost no encoding
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


class Snapshot:
    """Mixin: `to_dict()` over the dataclass fields, nested snapshots included."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class PoolSnapshot(Snapshot):
    name: str
    accelerator: str
    nodes: int
    spot: bool
    in_use: int
    queued: int
    emulated: bool

    @classmethod
    def of(cls, pool: PoolInfo) -> PoolSnapshot:
        return cls(pool.name, pool.accelerator, pool.nodes, pool.spot, pool.in_use, pool.queued, pool.emulated)


@dataclass(frozen=True)
class JobSnapshot(Snapshot):
    job_id: str
    name: str
    func: str
    accelerator: str
    pool: str | None
    status: str
    phase: str | None
    detail: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    result: Any = None  # filled only when the caller waited for a SUCCEEDED job

    @classmethod
    def of(cls, row: JobRecord, result: Any = None) -> JobSnapshot:
        handle = row.handle
        return cls(
            row.job_id,
            handle.get("display_name", ""),
            handle.get("func_name", ""),
            handle.get("accelerator", ""),
            row.pool,
            row.status.value,
            row.phase,
            row.detail,
            row.created_at,
            row.started_at,
            row.finished_at,
            json_safe(result),
        )


@dataclass(frozen=True)
class JobResultSnapshot(Snapshot):
    job_id: str
    status: str
    value: Any  # the returned value when JSON can hold it, else its repr
    value_repr: str

    @classmethod
    def of(cls, job_id: str, status: str, value: Any) -> JobResultSnapshot:
        return cls(job_id, status, json_safe(value), repr(value))


@dataclass(frozen=True)
class KnownFunctionSnapshot(Snapshot):
    """A function `submit` offers: `ref` is what to type (MODULE:FUNC, or a saved submission's NAME)."""

    ref: str
    target: str  # the MODULE:FUNC it runs
    saved: bool
    accelerator: str | None  # a saved submission's own; None: the function's
    args: list[Any]
    kwargs: dict[str, Any]
    at: float  # saved at, or last submitted at


@dataclass(frozen=True)
class LogsSnapshot(Snapshot):
    job_id: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class ModelVersionSnapshot(Snapshot):
    group: str
    version: int
    artifact_hash: str
    metrics: dict[str, Any]
    source: str | None
    stage: str

    @classmethod
    def of(cls, model: ModelVersion) -> ModelVersionSnapshot:
        return cls(
            model.group, model.version, model.artifact_hash, dict(model.metrics), model.source, model.stage.value
        )


@dataclass(frozen=True)
class TransitionSnapshot(Snapshot):
    version: int
    from_stage: str
    to_stage: str
    at: float

    @classmethod
    def of(cls, event: Transition) -> TransitionSnapshot:
        return cls(event.version, event.from_stage.value, event.to_stage.value, event.at)


@dataclass(frozen=True)
class GroupSnapshot(Snapshot):
    group: str
    production: int | None
    versions: tuple[ModelVersionSnapshot, ...]
    history: tuple[TransitionSnapshot, ...]


@dataclass(frozen=True)
class ScalingEventSnapshot(Snapshot):
    endpoint: str
    tick: float | None
    concurrency: float
    desired: int
    instance_count: int
    action: str

    @classmethod
    def of(cls, endpoint: str, event: ScalingEvent) -> ScalingEventSnapshot:
        return cls(endpoint, *event)


@dataclass(frozen=True)
class EndpointSnapshot(Snapshot):
    name: str
    model_group: str
    min_instances: int
    max_instances: int
    target_per_instance: float
    scale_out_cooldown: float
    scale_in_cooldown: float
    instance_count: int
    last_tick: float | None
    max_loaded_models: int
    loaded: tuple[str, ...]  # least-recently used first
    hits: int
    misses: int
    hit_ratio: float
    load_events: tuple[str, ...]
    evict_events: tuple[str, ...]
    history: tuple[ScalingEventSnapshot, ...]

    @classmethod
    def of(cls, group: str, endpoint: Endpoint, models: MultiModelEndpoint) -> EndpointSnapshot:
        config = endpoint.config
        return cls(
            endpoint.name,
            group,
            config.min_instances,
            config.max_instances,
            config.target_per_instance,
            config.scale_out_cooldown,
            config.scale_in_cooldown,
            endpoint.instance_count,
            endpoint.last_tick,
            models.max_loaded_models,
            tuple(models.loaded),
            models.hits,
            models.misses,
            models.hit_ratio,
            tuple(models.load_events),
            tuple(models.evict_events),
            tuple(ScalingEventSnapshot.of(endpoint.name, event) for event in endpoint.history),
        )


@dataclass(frozen=True)
class InvocationSnapshot(Snapshot):
    endpoint: str
    route: str  # what the caller asked for: GROUP or GROUP:vN
    model: str  # the version that answered: GROUP:vN
    prediction: Any
    loaded: tuple[str, ...]
    hits: int
    misses: int


@dataclass(frozen=True)
class LoadSnapshot(Snapshot):
    endpoint: str
    route: str  # the model group: load serves its Production version
    concurrency: int
    ticks: int
    status: str  # "completed" | "started" (detached)
    requests: int
    events: tuple[ScalingEventSnapshot, ...]


@dataclass(frozen=True)
class StepSnapshot(Snapshot):
    name: str
    status: str
    cache_key: str | None
    duration: float
    error: str | None
    outputs: dict[str, Any]


@dataclass(frozen=True)
class PipelineRunSnapshot(Snapshot):
    pipeline: str
    run: int
    status: str
    params: dict[str, Any]
    branch_taken: dict[str, bool]
    executed: tuple[str, ...]
    steps: tuple[StepSnapshot, ...]  # topological order

    @classmethod
    def of(cls, number: int, run: PipelineRun) -> PipelineRunSnapshot:
        steps = tuple(
            StepSnapshot(
                name, result.status.value, result.cache_key, result.duration, result.error, dict(result.outputs)
            )
            for name, result in run.steps.items()
        )
        return cls(
            run.pipeline,
            number,
            run.status.value,
            dict(run.params),
            dict(run.branch_taken),
            tuple(run.executed()),
            steps,
        )


@dataclass(frozen=True)
class RunSummary(Snapshot):
    run: int
    status: str
    executed: tuple[str, ...]


@dataclass(frozen=True)
class PipelineSnapshot(Snapshot):
    name: str
    ref: str
    params: dict[str, Any]
    layers: tuple[tuple[str, ...], ...]  # Kahn rounds, what the DAG view draws
    edges: tuple[tuple[str, str], ...]
    runs: tuple[RunSummary, ...]

    @classmethod
    def of(cls, ref: str, pipeline: Pipeline, runs: tuple[RunSummary, ...]) -> PipelineSnapshot:
        return cls(
            pipeline.name,
            ref,
            dict(pipeline.params),
            tuple(tuple(layer) for layer in pipeline.layers()),
            tuple(pipeline.edges()),
            runs,
        )
