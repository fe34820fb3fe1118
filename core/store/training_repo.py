"""Training jobs in state.db: the whole `to_record()` (checkpoint state included) as one JSON row."""

from __future__ import annotations

import json

from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.platform.training import (
    CapacityError,
    TrainingCluster,
    TrainingJob,
    TrainingStateError,
    TrainingStatus,
)
from kinetic_tui.core.store.db import Database, dumps
from kinetic_tui.core.validation import known_names

_HOLDING = (TrainingStatus.IN_PROGRESS, TrainingStatus.STOPPED)


class TrainingRepo:
    def __init__(self, db: Database) -> None:
        self._db = db

    def save(self, job: TrainingJob) -> None:
        """Upsert the job's current record; call after every runner action, inside that action's transaction."""
        record = dumps(job.to_record(), f"training job {job.name!r}")
        self._db.write(
            "INSERT INTO training_jobs (name, status, record) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET status = excluded.status, record = excluded.record",
            (job.name, job.status.value, record),
        )

    def get(self, name: str) -> TrainingJob:
        rows = self._db.query("SELECT record FROM training_jobs WHERE name = ?", (name,))
        if not rows:
            raise NotFoundError(f"training job: unknown {name!r}; known: {known_names(self.names())}")
        return TrainingJob.from_record(json.loads(rows[0][0]))

    def names(self) -> list[str]:
        return [name for (name,) in self._db.query("SELECT name FROM training_jobs ORDER BY name")]

    def load(self, cluster: TrainingCluster | None = None) -> dict[str, TrainingJob]:
        """Every stored job by name; with `cluster`, jobs that held an instance (InProgress or Stopped)
        are adopted into it, so a resume after a restart finds its instance (CapacityError if too small)."""
        jobs = {
            name: TrainingJob.from_record(json.loads(record))
            for name, record in self._db.query("SELECT name, record FROM training_jobs ORDER BY name")
        }
        if cluster is not None:
            holders = [job for job in jobs.values() if job.status in _HOLDING]
            # check everything first, so a failed load adopts nothing
            clash = sorted(cluster.holders & {job.name for job in holders})
            if clash:
                raise TrainingStateError(f"cluster already holds instances for {', '.join(clash)}")
            if len(holders) > cluster.available():
                raise CapacityError(
                    f"cluster has {cluster.instance_count} instances, {cluster.in_use} in use, too few for "
                    f"{len(holders)} restored training jobs holding one: {', '.join(job.name for job in holders)}"
                )
            for job in holders:
                cluster.adopt(job)
        return jobs
