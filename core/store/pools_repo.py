"""Local pools in state.db, and what their jobs and lanes hold of them.

Functions that take `conn` run inside the caller's transaction (a claim, an add or a remove checks and
writes under one write lock); functions that take `db` stand alone.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from kinetic_tui.core.store.db import Database

_INITIALISED = "pools_initialised"  # settings key: the default pool was created once (removing it is final)


def create_default_once(db: Database, name: str, accelerator: str, nodes: int, now: float) -> None:
    """Create the default pool unless one was ever created in this home (checked again under the lock)."""
    if db.query("SELECT 1 FROM settings WHERE key = ?", (_INITIALISED,)):
        return
    with db.transaction() as conn:
        if conn.execute("SELECT 1 FROM settings WHERE key = ?", (_INITIALISED,)).fetchone():
            return
        conn.execute("INSERT INTO pools VALUES (?, ?, ?, 0, ?)", (name, accelerator, nodes, now))
        conn.execute("INSERT INTO settings VALUES (?, '1')", (_INITIALISED,))


def with_usage(db: Database) -> list[tuple[Any, ...]]:
    """(name, accelerator, nodes, spot, nodes in use, jobs queued) per pool, by name."""
    return db.query(
        "SELECT p.name, p.accelerator, p.nodes, p.spot, "
        "COALESCE((SELECT SUM(nodes) FROM jobs j WHERE j.pool = p.name AND j.status = 'RUNNING' "
        "AND j.lane IS NULL), 0) + (SELECT COUNT(*) FROM lanes l WHERE l.pool = p.name AND l.ended_at IS NULL), "
        "(SELECT COUNT(*) FROM jobs j WHERE j.pool = p.name AND j.status = 'PENDING') "
        "FROM pools p ORDER BY p.name"
    )


def exists(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM pools WHERE name = ?", (name,)).fetchone() is not None


def insert(conn: sqlite3.Connection, name: str, accelerator: str, nodes: int, spot: bool, now: float) -> None:
    conn.execute("INSERT INTO pools VALUES (?, ?, ?, ?, ?)", (name, accelerator, nodes, int(spot), now))


def delete(conn: sqlite3.Connection, name: str) -> None:
    conn.execute("DELETE FROM pools WHERE name = ?", (name,))


def capacities(conn: sqlite3.Connection, name: str | None = None) -> list[tuple[str, int]]:
    """(name, nodes) of every pool, or of the one named."""
    return conn.execute(
        "SELECT name, nodes FROM pools" + (" WHERE name = ?" if name else ""), (name,) if name else ()
    ).fetchall()


def capacity(conn: sqlite3.Connection, name: str) -> int:
    return int(conn.execute("SELECT nodes FROM pools WHERE name = ?", (name,)).fetchone()[0])


def nodes_in_use(conn: sqlite3.Connection, pool: str) -> int:
    """Nodes held on `pool`: running jobs outside lanes, plus one per open lane."""
    jobs: int = conn.execute(
        "SELECT COALESCE(SUM(nodes), 0) FROM jobs WHERE pool = ? AND status = 'RUNNING' AND lane IS NULL", (pool,)
    ).fetchone()[0]
    lanes: int = conn.execute("SELECT COUNT(*) FROM lanes WHERE pool = ? AND ended_at IS NULL", (pool,)).fetchone()[0]
    return jobs + lanes
