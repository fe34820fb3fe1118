"""What a run produced: per-step results, the run record, and its JSON form for the store."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.pipelines.cache_key import NOT_JSON, canonical


class StepStatus(enum.StrEnum):
    """Skipped: a gate took the other branch (or a producer was Skipped). NotRun: a producer finally
    failed (or was NotRun), so the step could not have its inputs. Pending, Running and Cancelled exist
    only for steps that run as jobs."""

    EXECUTED = "Executed"
    CACHED = "Cached"
    SKIPPED = "Skipped"
    FAILED = "Failed"
    NOT_RUN = "NotRun"
    PENDING = "Pending"
    RUNNING = "Running"
    CANCELLED = "Cancelled"

    @property
    def settled(self) -> bool:
        return self not in (StepStatus.PENDING, StepStatus.RUNNING)


class RunStatus(enum.StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    RUNNING = "Running"
    CANCELLED = "Cancelled"


class StepResult(NamedTuple):
    """`duration` in seconds; `cache_key` is None when the step was Skipped or failed before it could be keyed;
    `error` is set only for Failed steps."""

    status: StepStatus
    outputs: dict[str, Any]
    cache_key: str | None
    duration: float
    error: str | None = None


def _field(record: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = record.get(name) if isinstance(record, Mapping) else None
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        allowed = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise ValidationError(f"{where}: field {name!r} must be {allowed}, got {value!r:.80}")
    return value


def _enum_field(record: Any, name: str, kind: type[enum.StrEnum], where: str) -> Any:
    value = _field(record, name, str, where)
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise ValidationError(f"{where}: field {name!r} is {value!r}; allowed: {allowed}") from None


def _json_copy(what: str, value: Any) -> Any:
    try:
        return json.loads(canonical(value))
    except NOT_JSON as exc:
        raise ValidationError(f"{what} is not JSON-serialisable ({exc})") from None


@dataclass(frozen=True)
class PipelineRun:
    """One run: per-step results in topological order, the branches taken, and what actually executed."""

    pipeline: str
    status: RunStatus
    params: dict[str, Any]
    steps: dict[str, StepResult]
    branch_taken: dict[str, bool]
    execution_order: tuple[str, ...]

    def executed(self) -> list[str]:
        """Steps whose function ran to completion this run (not Cached, Skipped or Failed), in order."""
        return list(self.execution_order)

    def to_record(self) -> dict[str, Any]:
        """A JSON-serialisable dict for the store; raises ValueError naming a step whose outputs are not JSON."""
        steps = {
            name: {
                "status": r.status.value,
                "outputs": _json_copy(f"outputs of step {name!r}", r.outputs),
                "cache_key": r.cache_key,
                "duration": r.duration,
                "error": r.error,
            }
            for name, r in self.steps.items()
        }
        return {
            "pipeline": self.pipeline,
            "status": self.status.value,
            "params": _json_copy("run params", self.params),
            "branch_taken": dict(self.branch_taken),
            "executed": list(self.execution_order),
            "steps": steps,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PipelineRun:
        """Rebuild a run the store saved; a malformed record is a ValueError naming the field."""
        where = "pipeline run record"
        steps = {}
        for name, step in _field(record, "steps", dict, where).items():
            at = f"{where}, step {name!r}"
            steps[name] = StepResult(
                _enum_field(step, "status", StepStatus, at),
                dict(_field(step, "outputs", dict, at)),
                _field(step, "cache_key", (str, type(None)), at),
                float(_field(step, "duration", (int, float), at)),
                _field(step, "error", (str, type(None)), at),
            )
        return cls(
            pipeline=_field(record, "pipeline", str, where),
            status=_enum_field(record, "status", RunStatus, where),
            params=dict(_field(record, "params", dict, where)),
            steps=steps,
            branch_taken=dict(_field(record, "branch_taken", dict, where)),
            execution_order=tuple(_field(record, "executed", list, where)),
        )
