"""Artifact references: what keeps each content-addressed artifact alive (a cache entry, a run, a model
version). An artifact is recorded when something first references it; prune removes the unreferenced."""

from __future__ import annotations

import time
from collections.abc import Iterable

from kinetic_tui.core.store.db import Database

KINDS = ("cache", "run", "model")


def hold(db: Database, kind: str, holder: str, digests: Iterable[str]) -> None:
    """`holder` (of `kind`) references `digests`; joins the caller's transaction."""
    now = time.time()
    with db.transaction() as conn:
        for digest in digests:
            conn.execute("INSERT OR IGNORE INTO artifacts (digest, created_at) VALUES (?, ?)", (digest, now))
            conn.execute(
                "INSERT OR IGNORE INTO artifact_refs (digest, kind, holder) VALUES (?, ?, ?)", (digest, kind, holder)
            )


def release(db: Database, kind: str, holder: str) -> None:
    """`holder` references nothing any more."""
    db.write("DELETE FROM artifact_refs WHERE kind = ? AND holder = ?", (kind, holder))


def referenced(db: Database) -> set[str]:
    return {digest for (digest,) in db.query("SELECT DISTINCT digest FROM artifact_refs")}


def holders(db: Database, digest: str) -> list[tuple[str, str]]:
    return [(k, h) for k, h in db.query("SELECT kind, holder FROM artifact_refs WHERE digest = ?", (digest,))]


def forget(db: Database, digest: str) -> bool:
    """Drop the row of an artifact nothing references (False, nothing changed, if something does now)."""
    with db.transaction() as conn:
        if conn.execute("SELECT 1 FROM artifact_refs WHERE digest = ? LIMIT 1", (digest,)).fetchone():
            return False
        conn.execute("DELETE FROM artifacts WHERE digest = ?", (digest,))
        return True
