"""The functions `submit` offers, in state.db: every MODULE:FUNC submitted by reference in this workspace,
and the submissions the user saved under a name (`submit ... --save NAME`).

Functions that take `conn` run inside the caller's transaction; functions that take `db` stand alone.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, NamedTuple

from kinetic_tui.core.store.db import Database


class SavedFunction(NamedTuple):
    name: str
    ref: str
    accelerator: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    saved_at: float


def note_run(conn: sqlite3.Connection, ref: str, now: float) -> None:
    conn.execute(
        "INSERT INTO submitted_functions VALUES (?, ?) ON CONFLICT (ref) DO UPDATE SET last_run = excluded.last_run",
        (ref, now),
    )


def save(conn: sqlite3.Connection, saved: SavedFunction) -> None:
    """Save (or replace) the submission called `saved.name`."""
    conn.execute(
        "INSERT OR REPLACE INTO saved_functions VALUES (?, ?, ?, ?, ?, ?)",
        (saved.name, saved.ref, saved.accelerator, json.dumps(saved.args), json.dumps(saved.kwargs), saved.saved_at),
    )


def saved(db: Database, name: str | None = None) -> list[SavedFunction]:
    """Every saved submission by name, or the one named."""
    rows = db.query(
        "SELECT name, ref, accelerator, args, kwargs, saved_at FROM saved_functions"
        + (" WHERE name = ?" if name is not None else "")
        + " ORDER BY name",
        (name,) if name is not None else (),
    )
    return [
        SavedFunction(n, ref, acc, json.loads(args), json.loads(kwargs), at) for n, ref, acc, args, kwargs, at in rows
    ]


def submitted(db: Database) -> list[tuple[str, float]]:
    """(MODULE:FUNC, last run) of every function submitted by reference, the latest first."""
    return [(ref, at) for ref, at in db.query("SELECT ref, last_run FROM submitted_functions ORDER BY last_run DESC")]
