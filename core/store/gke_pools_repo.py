"""The desired node pools of GKE clusters in state.db, keyed by (project, cluster).

Rows only: the rules (one pool per accelerator and pricing, canonical accelerator names) live in
`core/backends/gke/pools.py`, which calls these inside its own transactions.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from kinetic_tui.core.store.db import Database

_COLUMNS = "name, accelerator, spot, min_nodes, max_nodes, reservation"
PoolRow = tuple[str, str, int, int, int, str | None]  # name, accelerator, spot, min_nodes, max_nodes, reservation


class GkePoolsRepo:
    def __init__(self, db: Database, project: str, cluster: str) -> None:
        self._db = db
        self.project = project
        self.cluster = cluster

    def all(self) -> list[PoolRow]:
        """Every pool of the cluster, by name."""
        rows = self._db.query(
            f"SELECT {_COLUMNS} FROM gke_pools WHERE project = ? AND cluster = ? ORDER BY name",
            (self.project, self.cluster),
        )
        return [tuple(row) for row in rows]

    def get(self, name: str) -> PoolRow | None:
        rows = self._db.query(
            f"SELECT {_COLUMNS} FROM gke_pools WHERE project = ? AND cluster = ? AND name = ?",
            (self.project, self.cluster, name),
        )
        return tuple(rows[0]) if rows else None

    def clash(self, conn: sqlite3.Connection, name: str, accelerator: str, spot: bool) -> tuple[Any, ...] | None:
        """(name, accelerator, spot) of a pool that has this name, or this accelerator and pricing."""
        row: tuple[Any, ...] | None = conn.execute(
            "SELECT name, accelerator, spot FROM gke_pools WHERE project = ? AND cluster = ? "
            "AND (name = ? OR (accelerator = ? AND spot = ?))",
            (self.project, self.cluster, name, accelerator, int(spot)),
        ).fetchone()
        return row

    def insert(self, conn: sqlite3.Connection, row: PoolRow) -> None:
        """sqlite3.IntegrityError when another process inserted the same pool first."""
        conn.execute(
            f"INSERT INTO gke_pools (project, cluster, {_COLUMNS}, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (self.project, self.cluster, *row, time.time()),
        )

    def delete(self, name: str) -> None:
        self._db.write(
            "DELETE FROM gke_pools WHERE project = ? AND cluster = ? AND name = ?", (self.project, self.cluster, name)
        )
