"""Tuning studies in state.db: the study's configuration, one row per trial, and the best trial's id."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.platform.tuning import HyperparameterTuner, TuningResult
from kinetic_tui.core.store.db import Database, dumps
from kinetic_tui.core.validation import known_names, require_name

_RESULT_KEYS = ("trials", "best")


class StoredStudy(NamedTuple):
    """A study as persisted: the tuner's configuration (`to_record()` minus the result) and its result.
    The train step is kept only as a name, so the console re-creates a tuner from `config` to rerun."""

    name: str
    config: dict[str, Any]
    result: TuningResult


class TuningRepo:
    def __init__(self, db: Database) -> None:
        self._db = db

    def save(self, name: str, tuner: HyperparameterTuner) -> None:
        """Replace the study `name` with the tuner's configuration and its current trials."""
        require_name("study name", name)
        record = tuner.to_record()
        config = dumps({k: v for k, v in record.items() if k not in _RESULT_KEYS}, f"study {name!r}")
        trials = [
            (name, trial["trial_id"], dumps(trial, f"study {name!r} trial {trial['trial_id']}"))
            for trial in record["trials"]
        ]
        with self._db.transaction() as conn:
            conn.execute("DELETE FROM tuning_studies WHERE name = ?", (name,))  # cascades to its trials
            conn.execute(
                "INSERT INTO tuning_studies (name, config, best) VALUES (?, ?, ?)", (name, config, record["best"])
            )
            conn.executemany("INSERT INTO tuning_trials (study, trial_id, record) VALUES (?, ?, ?)", trials)

    def any_may_move(self) -> bool:
        """Some study could still submit or settle a trial by itself: one runs, or the budget is not spent
        and none is stopped (a stopped trial holds the study until someone resumes it). Read from the
        trials' trainings, which a resume or a settle changes without the study's own rows. Cheap and
        conservative: the study driver decides exactly."""
        trials = "FROM training_runs r JOIN training_jobs j ON j.name = r.name WHERE r.study = s.name"
        return bool(
            self._db.query(
                f"SELECT 1 FROM tuning_studies s WHERE EXISTS (SELECT 1 {trials} AND j.status = 'InProgress')"
                f" OR (NOT EXISTS (SELECT 1 {trials} AND j.status = 'Stopped')"
                " AND (SELECT COUNT(*) FROM training_runs r WHERE r.study = s.name)"
                " < json_extract(s.config, '$.budget')) LIMIT 1"
            )
        )

    def names(self) -> list[str]:
        return [name for (name,) in self._db.query("SELECT name FROM tuning_studies ORDER BY name")]

    def get(self, name: str) -> StoredStudy:
        with self._db.transaction(write=False):
            rows = self._db.query("SELECT config, best FROM tuning_studies WHERE name = ?", (name,))
            if not rows:
                raise NotFoundError(f"study: unknown {name!r}; known: {known_names(self.names())}")
            trials = [
                json.loads(record)
                for (record,) in self._db.query(
                    "SELECT record FROM tuning_trials WHERE study = ? ORDER BY trial_id", (name,)
                )
            ]
        config, best = rows[0]
        return StoredStudy(name, json.loads(config), TuningResult.from_record({"trials": trials, "best": best}))
