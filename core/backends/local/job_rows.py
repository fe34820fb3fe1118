"""What the local backend hands out: a pool with its usage, a job's row, and where a job's files live."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from kinetic_tui.core.accelerators import category, parse_accelerator
from kinetic_tui.core.backends.local import lanes
from kinetic_tui.core.backends.local.launcher import HostProcess
from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.paths import kinetic_home


class SubmitError(KineticError):
    """The job cannot be placed at all (no matching pool, too few nodes, an unusable volume path)."""


@dataclass(frozen=True)
class Pool:
    name: str
    accelerator: str
    nodes: int
    spot: bool
    in_use: int
    queued: int

    @property
    def emulated(self) -> bool:
        """Every non-CPU local pool runs its jobs on this machine's CPU."""
        return category(parse_accelerator(self.accelerator)) != "cpu"


@dataclass(frozen=True)
class ChangesCursor:
    """Where a look at the jobs left off: the store's prune count then, the newest `seq` seen, the jobs
    that were active."""

    prunes: int
    seq: int
    active: tuple[str, ...]


@dataclass(frozen=True)
class JobRow:
    """A job's row. Its handle and launch JSON are decoded when first asked for: a map's client reads its
    hundreds of rows on every look, and most of them are never asked for either."""

    seq: int
    job_id: str
    pool: str | None
    nodes: int
    status: JobStatus
    phase: str | None
    detail: str | None
    group_id: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    cancel_requested: bool
    hosts: tuple[HostProcess, ...] | None
    handle_data: dict[str, Any] | str = field(compare=False, repr=False)  # decoded, or the JSON text
    launch_data: dict[str, Any] | str = field(compare=False, repr=False)
    lane: str | None = None  # a map input: the lane (see lanes.py) it is assigned to, and its byte ranges
    log_start: int | None = None
    log_end: int | None = None
    result_at: int | None = None
    result_size: int | None = None

    @classmethod
    def from_values(cls, values: tuple[Any, ...]) -> JobRow:
        """A row as `jobs_repo` returns it, in `jobs_repo.COLUMNS` order."""
        (
            seq,
            job_id,
            pool,
            nodes,
            status,
            phase,
            detail,
            group_id,
            created,
            started,
            finished,
            cancel,
            hosts,
            handle,
            launch,
            *lane_fields,
        ) = values
        return cls(
            seq,
            job_id,
            pool,
            nodes,
            JobStatus(status),
            phase,
            detail,
            group_id,
            created,
            started,
            finished,
            bool(cancel),
            None if hosts is None else tuple(HostProcess.from_dict(h) for h in json.loads(hosts)),
            handle,
            launch,
            *lane_fields,
        )

    @property
    def handle(self) -> dict[str, Any]:
        return self._decoded("handle_data")

    @property
    def launch(self) -> dict[str, Any]:
        return self._decoded("launch_data")

    def _decoded(self, name: str) -> dict[str, Any]:
        value = getattr(self, name)
        if isinstance(value, str):
            value = json.loads(value)
            object.__setattr__(self, name, value)  # a cache: the row's value does not change
        return cast(dict[str, Any], value)

    @property
    def job_dir(self) -> Path:
        return Path(self.launch["job_dir"])

    @property
    def in_lane(self) -> bool:
        return lanes.is_lane_input(self.launch)


def job_dir_for(job_id: str) -> Path:
    return kinetic_home() / "local" / "jobs" / job_id
