"""Names of workspace objects read straight from state.db, for shell completion.

A Tab press must answer in a few milliseconds and must never change anything, so this opens the file
read-only, runs one query and closes it: no migration, no backend, no reconcile. A workspace without a
database, or one whose schema lacks a table, simply has no names to offer; it is never an error.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from kinetic_tui.core.paths import state_db_path

# object kind -> (table, column, ordering); ids and names come out in the order a person looks for them
_COLUMNS = {
    "job": ("jobs", "job_id", "seq DESC"),
    "pool": ("pools", "name", "name"),
    "training": ("training_jobs", "name", "name"),
    "study": ("tuning_studies", "name", "name"),
    "group": ("model_versions", "group_name", "group_name"),
    "endpoint": ("endpoints", "name", "name"),
    "pipeline": ("pipelines", "name", "name"),
}
# what `submit` runs: saved names first, then the functions submitted here, the latest first
_FUNCTIONS = (
    "SELECT name FROM (SELECT name, 0 AS k, 0 AS at FROM saved_functions UNION ALL "
    "SELECT ref, 1, -last_run FROM submitted_functions) WHERE substr(name, 1, ?) = ? ORDER BY k, at, name"
)
LIMIT = 200  # more candidates than any shell shows usefully
TIMEOUT = 0.5  # seconds to wait for a writer's lock before offering nothing


def object_names(kind: str, prefix: str = "", path: Path | None = None) -> list[str]:
    """Names of objects of `kind` (see `_COLUMNS`) that start with `prefix`, at most LIMIT of them."""
    if kind not in _COLUMNS and kind != "function":
        return []
    database = path or state_db_path()
    if not database.is_file():
        return []
    if kind == "function":
        query = f"{_FUNCTIONS} LIMIT {LIMIT}"
    else:
        table, column, order = _COLUMNS[kind]
        query = f"SELECT DISTINCT {column} FROM {table} WHERE substr({column}, 1, ?) = ? ORDER BY {order} LIMIT {LIMIT}"
    try:
        with closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True, timeout=TIMEOUT)) as db:
            return [row[0] for row in db.execute(query, (len(prefix), prefix))]
    except sqlite3.Error:
        return []
