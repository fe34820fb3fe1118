"""Runs whose steps are jobs: the run's status beside its record, and one row per step whose every change of
state is its own short transaction (so no transaction is open while a step runs, and a driver that dies
loses nothing that was committed).

A step row changes only while its run is Running: a cancelled run's late step news is dropped, so the last
word on a cancelled run is the cancel's.
"""

from __future__ import annotations

import json
import time
from typing import Any, NamedTuple

from kinetic_tui.core.platform.pipelines import PipelineRun, RunStatus, StepResult, StepStatus
from kinetic_tui.core.store.db import Database, dumps


class StepRow(NamedTuple):
    status: StepStatus
    job_id: str | None
    attempts: int
    result: StepResult


def _result_json(result: StepResult) -> str:
    return dumps(
        {"outputs": result.outputs, "cache_key": result.cache_key, "duration": result.duration, "error": result.error},
        "step result",
    )


def start(db: Database, pipeline: str, header: dict[str, Any], steps: list[str]) -> int:
    """Record a Running run with every step Pending; its number."""
    pending = _result_json(StepResult(StepStatus.PENDING, {}, None, 0.0))
    with db.transaction() as conn:
        (number,) = conn.execute(
            "SELECT COALESCE(MAX(number), 0) + 1 FROM pipeline_runs WHERE pipeline = ?", (pipeline,)
        ).fetchone()
        conn.execute(
            "INSERT INTO pipeline_runs (pipeline, number, record, status) VALUES (?, ?, ?, ?)",
            (pipeline, number, dumps({**header, "number": number}, "pipeline run"), RunStatus.RUNNING.value),
        )
        conn.executemany(
            "INSERT INTO pipeline_steps (pipeline, number, step, status, result) VALUES (?, ?, ?, ?, ?)",
            [(pipeline, number, step, StepStatus.PENDING.value, pending) for step in steps],
        )
    result: int = number
    return result


def header(db: Database, pipeline: str, number: int) -> tuple[RunStatus | None, dict[str, Any]] | None:
    """(status, record) of a run; status None for a run recorded whole; None when there is no such run."""
    rows = db.query("SELECT status, record FROM pipeline_runs WHERE pipeline = ? AND number = ?", (pipeline, number))
    if not rows:
        return None
    status, record = rows[0]
    return (None if status is None else RunStatus(status)), json.loads(record)


def steps(db: Database, pipeline: str, number: int) -> dict[str, StepRow]:
    rows = db.query(
        "SELECT step, status, job_id, attempts, result FROM pipeline_steps WHERE pipeline = ? AND number = ?",
        (pipeline, number),
    )
    found = {}
    for step, status, job_id, attempts, result in rows:
        data = json.loads(result)
        kind = StepStatus(status)
        found[step] = StepRow(
            kind,
            job_id,
            attempts,
            StepResult(kind, data["outputs"], data["cache_key"], data["duration"], data["error"]),
        )
    return found


def set_step(
    db: Database, pipeline: str, number: int, step: str, result: StepResult, job_id: str | None, attempts: int
) -> bool:
    """One step's new state, only while its run is Running (False: the run settled meanwhile)."""
    with db.transaction() as conn:
        if not _running(conn, pipeline, number):
            return False
        conn.execute(
            "UPDATE pipeline_steps SET status = ?, job_id = ?, attempts = ?, result = ? "
            "WHERE pipeline = ? AND number = ? AND step = ?",
            (result.status.value, job_id, attempts, _result_json(result), pipeline, number, step),
        )
    return True


def finish(db: Database, pipeline: str, number: int, run: PipelineRun, extra: dict[str, Any]) -> bool:
    """Settle a Running run with its whole record and the time it settled; False when it was settled
    already (cancelled)."""
    record = dumps({**extra, **run.to_record(), "finished_at": time.time()}, f"run of pipeline {pipeline!r}")
    with db.transaction() as conn:
        if not _running(conn, pipeline, number):
            return False
        conn.execute(
            "UPDATE pipeline_runs SET status = ?, record = ? WHERE pipeline = ? AND number = ?",
            (run.status.value, record, pipeline, number),
        )
    return True


def _running(conn: Any, pipeline: str, number: int) -> bool:
    row = conn.execute(
        "SELECT status FROM pipeline_runs WHERE pipeline = ? AND number = ?", (pipeline, number)
    ).fetchone()
    return row is not None and row[0] == RunStatus.RUNNING.value


def job_ids(db: Database, pipeline: str) -> dict[int, dict[str, str]]:
    """The job id of every step that ran as a job (or is running as one), by run number and step."""
    found: dict[int, dict[str, str]] = {}
    for number, step, job_id in db.query(
        "SELECT number, step, job_id FROM pipeline_steps WHERE pipeline = ? AND job_id IS NOT NULL", (pipeline,)
    ):
        found.setdefault(number, {})[step] = job_id
    return found


def running(db: Database) -> list[tuple[str, int]]:
    """Every Running run, oldest first."""
    return [
        (p, n)
        for p, n in db.query(
            "SELECT pipeline, number FROM pipeline_runs WHERE status = ? ORDER BY rowid", (RunStatus.RUNNING.value,)
        )
    ]


def running_step_jobs(db: Database) -> set[str]:
    """The jobs of the steps of Running runs: their drivers still read them (outputs, results)."""
    return {
        job_id
        for (job_id,) in db.query(
            "SELECT s.job_id FROM pipeline_runs r JOIN pipeline_steps s ON s.pipeline = r.pipeline "
            "AND s.number = r.number WHERE r.status = ? AND s.job_id IS NOT NULL",
            (RunStatus.RUNNING.value,),
        )
    }


def any_running(db: Database) -> bool:
    return bool(db.query("SELECT 1 FROM pipeline_runs WHERE status = ? LIMIT 1", (RunStatus.RUNNING.value,)))


def compose(record: dict[str, Any], rows: dict[str, StepRow], status: RunStatus) -> PipelineRun:
    """The run as its step rows say now: steps in the recorded topological order, the branches its settled
    conditions took, what executed (in that order, whichever finished first)."""
    order = record["order"]
    results = {name: rows[name].result for name in order}
    done = (StepStatus.EXECUTED, StepStatus.CACHED)
    return PipelineRun(
        pipeline=record["pipeline"],
        status=status,
        params=record["params"],
        steps=results,
        branch_taken={c: results[c].outputs["branch"] for c in record["conditions"] if results[c].status in done},
        execution_order=tuple(n for n in order if results[n].status is StepStatus.EXECUTED),
    )


def cancel(db: Database, pipeline: str, number: int) -> list[str] | None:
    """Settle a Running run Cancelled, its unsettled steps Cancelled; the job ids of the steps that were
    Running (for the caller to cancel after the commit), or None when the run was not Running."""
    with db.transaction():
        found = header(db, pipeline, number)
        if found is None or found[0] is not RunStatus.RUNNING:
            return None
        record = found[1]
        rows = steps(db, pipeline, number)
        jobs = [row.job_id for row in rows.values() if row.status is StepStatus.RUNNING and row.job_id]
        for name, row in rows.items():
            if not row.status.settled:
                cancelled = row.result._replace(status=StepStatus.CANCELLED, error="cancelled")
                rows[name] = row._replace(status=StepStatus.CANCELLED, result=cancelled)
                set_step(db, pipeline, number, name, cancelled, row.job_id, row.attempts)
        finish(db, pipeline, number, compose(record, rows, RunStatus.CANCELLED), record)
    return jobs
