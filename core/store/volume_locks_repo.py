"""Host paths that running local jobs hold as volumes: one row per (path, job), so two jobs never share one.

Functions that take `conn` run inside the caller's transaction (a claim takes its locks while it claims
the job; settling releases them while it settles).
"""

from __future__ import annotations

import sqlite3

from kinetic_tui.core.store.db import Database


def held_paths(db: Database) -> set[str]:
    return {path for (path,) in db.query("SELECT path FROM volume_locks")}


def holder(conn: sqlite3.Connection, path: str) -> str | None:
    row = conn.execute("SELECT job_id FROM volume_locks WHERE path = ?", (path,)).fetchone()
    return None if row is None else row[0]


def lock(conn: sqlite3.Connection, path: str, job_id: str) -> None:
    conn.execute("INSERT OR IGNORE INTO volume_locks VALUES (?, ?)", (path, job_id))


def holds_any(conn: sqlite3.Connection, job_id: str) -> bool:
    return conn.execute("SELECT 1 FROM volume_locks WHERE job_id = ?", (job_id,)).fetchone() is not None


def release(conn: sqlite3.Connection, job_id: str) -> None:
    conn.execute("DELETE FROM volume_locks WHERE job_id = ?", (job_id,))
