"""Serving in state.db: what each model version serves (`model_serving`), each endpoint's serving
configuration and wanted state with its live router (`endpoint_serving`), its instances
(`serving_instances`) and what serving did beside scaling (`serving_events`: holds, instances started and
replaced, model loads with their load time)."""

from __future__ import annotations

import json
import time
from typing import Any

from kinetic_tui.core.store.db import Database, dumps

# -- model versions ------------------------------------------------------------------------------------


def save_model(db: Database, group: str, version: int, artifact: str, predict: str | None, code: str | None) -> None:
    db.write(
        "INSERT INTO model_serving (model_group, version, artifact, predict, code) VALUES (?, ?, ?, ?, ?)",
        (group, version, artifact, predict, code),
    )


def model(db: Database, group: str, version: int) -> tuple[str, str | None, str | None] | None:
    """(artifact, predict, code) of a version, None for a version registered without its model."""
    rows = db.query(
        "SELECT artifact, predict, code FROM model_serving WHERE model_group = ? AND version = ?", (group, version)
    )
    return rows[0] if rows else None


# -- endpoints -----------------------------------------------------------------------------------------


def add_endpoint(db: Database, name: str, config: dict[str, Any]) -> None:
    db.write(
        "INSERT INTO endpoint_serving (name, config, wanted) VALUES (?, ?, 'running')",
        (name, dumps(config, f"endpoint {name!r}")),
    )


def save_config(db: Database, name: str, config: dict[str, Any]) -> None:
    db.write("UPDATE endpoint_serving SET config = ? WHERE name = ?", (dumps(config, f"endpoint {name!r}"), name))


def endpoint(db: Database, name: str) -> tuple[dict[str, Any], str, dict[str, Any] | None] | None:
    """(config, wanted, router) of a serving endpoint, None for one created before endpoints served."""
    rows = db.query("SELECT config, wanted, router FROM endpoint_serving WHERE name = ?", (name,))
    if not rows:
        return None
    config, wanted, router = rows[0]
    return json.loads(config), wanted, None if router is None else json.loads(router)


# a cluster that serves an endpoint itself runs and scales it: the workspace's controllers leave it alone
_WORKSPACE_RUN = "wanted = 'running' AND json_extract(config, '$.cluster') IS NULL"


def wanted_running(db: Database) -> list[str]:
    """The endpoints this workspace runs that should be running (not those a cluster serves)."""
    return [n for (n,) in db.query(f"SELECT name FROM endpoint_serving WHERE {_WORKSPACE_RUN} ORDER BY name")]


def any_wanted_running(db: Database) -> bool:
    return bool(db.query(f"SELECT 1 FROM endpoint_serving WHERE {_WORKSPACE_RUN} LIMIT 1"))


def set_wanted(db: Database, name: str, wanted: str) -> None:
    db.write("UPDATE endpoint_serving SET wanted = ? WHERE name = ?", (wanted, name))


def set_router(db: Database, name: str, router: dict[str, Any] | None) -> None:
    db.write(
        "UPDATE endpoint_serving SET router = ? WHERE name = ?",
        (None if router is None else dumps(router, "router"), name),
    )


def endpoints_with_processes(db: Database) -> list[str]:
    """Endpoints with a router or an instance recorded, whatever they want (what a stop must reach)."""
    return [
        n
        for (n,) in db.query(
            "SELECT name FROM endpoint_serving WHERE router IS NOT NULL "
            "UNION SELECT endpoint FROM serving_instances ORDER BY 1"
        )
    ]


# -- instances -----------------------------------------------------------------------------------------

Instance = tuple[str, str, str | None, int | None, float]  # instance (job id), state, url, pid, started_at


def instances(db: Database, name: str) -> list[Instance]:
    return db.query(
        "SELECT instance, state, url, pid, started_at FROM serving_instances WHERE endpoint = ? "
        "ORDER BY started_at, instance",
        (name,),
    )


def add_instance(db: Database, name: str, instance: str) -> None:
    db.write(
        "INSERT INTO serving_instances (endpoint, instance, state, started_at) VALUES (?, ?, 'starting', ?)",
        (name, instance, time.time()),
    )


def instance_ready(db: Database, name: str, instance: str, url: str, pid: int | None) -> None:
    db.write(
        "UPDATE serving_instances SET state = 'ready', url = ?, pid = ? WHERE endpoint = ? AND instance = ? "
        "AND state = 'starting'",
        (url, pid, name, instance),
    )


def drain_instance(db: Database, name: str, instance: str) -> None:
    db.write("UPDATE serving_instances SET state = 'draining' WHERE endpoint = ? AND instance = ?", (name, instance))


def remove_instance(db: Database, name: str, instance: str) -> None:
    db.write("DELETE FROM serving_instances WHERE endpoint = ? AND instance = ?", (name, instance))


# -- events --------------------------------------------------------------------------------------------


def add_events(db: Database, name: str, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Append (kind, detail) events in order; joins the caller's transaction."""
    if not events:
        return
    now = time.time()
    with db.transaction() as conn:
        (start,) = conn.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM serving_events WHERE endpoint = ?", (name,)
        ).fetchone()
        conn.executemany(
            "INSERT INTO serving_events (endpoint, seq, at, kind, detail) VALUES (?, ?, ?, ?, ?)",
            [(name, start + i, now, kind, dumps(detail, kind)) for i, (kind, detail) in enumerate(events)],
        )


def events(db: Database, name: str, kinds: tuple[str, ...] | None = None, limit: int = 200) -> list[tuple[Any, ...]]:
    """(seq, at, kind, detail) of the newest `limit` events, oldest first."""
    where = f" AND kind IN ({', '.join('?' * len(kinds))})" if kinds else ""
    rows = db.query(
        f"SELECT seq, at, kind, detail FROM serving_events WHERE endpoint = ?{where} ORDER BY seq DESC LIMIT ?",
        (name, *(kinds or ()), limit),
    )
    return [(seq, at, kind, json.loads(detail)) for seq, at, kind, detail in reversed(rows)]
