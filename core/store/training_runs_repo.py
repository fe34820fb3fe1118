"""What the console adds to a training or a tuning study in state.db: `training_runs` (a run's pool,
study and metadata beside its store.training record) and `tuning_runs` (a study's pool, step and the
snapshot of the step's project)."""

from __future__ import annotations

from typing import Any

from kinetic_tui.core.store.db import Database, dumps


def training_exists(db: Database, name: str) -> bool:
    return bool(db.query("SELECT 1 FROM training_jobs WHERE name = ?", (name,)))


def run_meta(db: Database, name: str) -> tuple[str, str | None, str] | None:
    """(pool, study, meta JSON) of a run, None if the console did not start it."""
    rows = db.query("SELECT pool, study, meta FROM training_runs WHERE name = ?", (name,))
    return rows[0] if rows else None


def runs(db: Database, pool: str | None = None, study: str | None = None) -> list[tuple[str, str, str | None, str]]:
    """(training record JSON, pool, study, meta JSON) of every run, or of a pool's or a study's, by name."""
    where, params = [], []
    if pool is not None:
        where.append("r.pool = ?")
        params.append(pool)
    if study is not None:
        where.append("r.study = ?")
        params.append(study)
    condition = f"WHERE {' AND '.join(where)} " if where else ""
    return db.query(
        "SELECT j.record, r.pool, r.study, r.meta FROM training_runs r "
        f"JOIN training_jobs j ON j.name = r.name {condition}ORDER BY r.name",
        tuple(params),
    )


def save_run(db: Database, name: str, pool: str, study: str | None, meta: dict[str, Any]) -> None:
    """Insert the run, or update its meta (pool and study never change); joins the caller's transaction."""
    db.write(
        "INSERT INTO training_runs (name, pool, study, meta) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET meta = excluded.meta",
        (name, pool, study, dumps(meta, f"run {name!r}")),
    )


def delete_training(db: Database, name: str) -> None:
    """Remove the training record (its training_runs row goes with it by cascade)."""
    db.write("DELETE FROM training_jobs WHERE name = ?", (name,))


def study_exists(db: Database, name: str) -> bool:
    return bool(db.query("SELECT 1 FROM tuning_studies WHERE name = ?", (name,)))


def save_study_run(db: Database, name: str, pool: str, step: str | None, code: str | None) -> None:
    db.write("INSERT INTO tuning_runs (name, pool, step, code) VALUES (?, ?, ?, ?)", (name, pool, step, code))


def study_run(db: Database, name: str) -> tuple[str, str | None, str | None] | None:
    """(pool, step, code snapshot digest) of a study, None if the console did not start it."""
    rows = db.query("SELECT pool, step, code FROM tuning_runs WHERE name = ?", (name,))
    return rows[0] if rows else None
