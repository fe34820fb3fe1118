"""Endpoints in state.db: autoscaling config and clocks, the scaling history, multi-model state, and the
registry group each endpoint serves.

The group is kept in the `settings` table (key `endpoint.NAME.model_group`) because neither endpoint table
has a column for it.

Histories grow with every observation and invocation, so a save appends only the events the table does
not hold yet (found by the highest stored sequence number, an index lookup) instead of rewriting them.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
from collections.abc import Sequence
from typing import Any

from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.platform.autoscaling import Endpoint, ScalingEvent
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.store.db import Database, dumps
from kinetic_tui.core.validation import known_names

_EVENT_COLUMNS = ScalingEvent._fields


def _group_key(name: str) -> str:
    return f"endpoint.{name}.model_group"


def _append_new(
    conn: sqlite3.Connection, table: str, key: dict[str, Any], columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    """Insert the rows past the ones already stored under `key`, numbering them by position."""
    where = " AND ".join(f"{column} = ?" for column in key)
    (stored,) = conn.execute(
        f"SELECT COALESCE(MAX(seq) + 1, 0) FROM {table} WHERE {where}", tuple(key.values())
    ).fetchone()
    names = (*key, "seq", *columns)
    conn.executemany(
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        [(*key.values(), seq, *row) for seq, row in enumerate(rows[stored:], start=stored)],
    )


def _pickled(endpoint: str, name: str, model: object) -> bytes:
    """Models are arbitrary objects with `predict`, so they are pickled (by reference to their class)."""
    try:
        return pickle.dumps(model)
    except Exception as exc:  # pickle raises several unrelated types for one meaning
        raise ValidationError(f"model {name!r} of endpoint {endpoint!r} cannot be pickled: {exc}") from None


class EndpointRepo:
    def __init__(self, db: Database) -> None:
        self._db = db

    # autoscaling

    def save(self, endpoint: Endpoint) -> None:
        """Upsert the config and clocks and append the new scaling events, in one transaction."""
        record = dumps(endpoint.to_record(), f"endpoint {endpoint.name!r}")
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO endpoints (name, record) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET record = excluded.record",
                (endpoint.name, record),
            )
            _append_new(conn, "scaling_events", {"endpoint": endpoint.name}, _EVENT_COLUMNS, endpoint.history)

    def names(self) -> list[str]:
        return [name for (name,) in self._db.query("SELECT name FROM endpoints ORDER BY name")]

    def get(self, name: str) -> Endpoint:
        with self._db.transaction(write=False):
            rows = self._db.query("SELECT record FROM endpoints WHERE name = ?", (name,))
            if not rows:
                raise NotFoundError(f"endpoint: unknown {name!r}; known: {known_names(self.names())}")
            history = self._db.query(
                f"SELECT {', '.join(_EVENT_COLUMNS)} FROM scaling_events WHERE endpoint = ? ORDER BY seq", (name,)
            )
        return Endpoint.from_record(json.loads(rows[0][0]), [ScalingEvent(*row) for row in history])

    def last_event(self, name: str) -> tuple[int, ScalingEvent] | None:
        """The newest scaling event with its sequence number (an index lookup): what a cached copy checks."""
        rows = self._db.query(
            f"SELECT seq, {', '.join(_EVENT_COLUMNS)} FROM scaling_events WHERE endpoint = ? ORDER BY seq DESC LIMIT 1",
            (name,),
        )
        return (rows[0][0], ScalingEvent(*rows[0][1:])) if rows else None

    # the served group

    def model_group(self, name: str) -> str | None:
        rows = self._db.query("SELECT value FROM settings WHERE key = ?", (_group_key(name),))
        return rows[0][0] if rows else None

    def add_model_group(self, name: str, group: str) -> None:
        self._db.write("INSERT INTO settings (key, value) VALUES (?, ?)", (_group_key(name), group))

    # multi-model serving

    def save_multimodel(self, name: str, endpoint: MultiModelEndpoint) -> None:
        """Upsert the LRU state and the models (rewriting only changed ones) and append the new events.
        `name` is the endpoint's name: an endpoint's autoscaling and its model cache share it."""
        models = {model: _pickled(name, model, obj) for model, obj in endpoint.models.items()}
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO multimodel_endpoints (name, max_loaded_models, loaded, hits, misses) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "max_loaded_models = excluded.max_loaded_models, loaded = excluded.loaded, "
                "hits = excluded.hits, misses = excluded.misses",
                (name, endpoint.max_loaded_models, dumps(endpoint.loaded, "loaded"), endpoint.hits, endpoint.misses),
            )
            conn.executemany(
                "INSERT INTO multimodel_models (endpoint, name, model) VALUES (?, ?, ?) "
                "ON CONFLICT (endpoint, name) DO UPDATE SET model = excluded.model "
                "WHERE model IS NOT excluded.model",
                [(name, model, blob) for model, blob in models.items()],
            )
            for kind, events in (("load", endpoint.load_events), ("evict", endpoint.evict_events)):
                _append_new(
                    conn,
                    "multimodel_events",
                    {"endpoint": name, "kind": kind},
                    ("model",),
                    [(model,) for model in events],
                )

    def get_multimodel(self, name: str) -> MultiModelEndpoint:
        with self._db.transaction(write=False):
            rows = self._db.query(
                "SELECT max_loaded_models, loaded, hits, misses FROM multimodel_endpoints WHERE name = ?", (name,)
            )
            if not rows:
                known = [n for (n,) in self._db.query("SELECT name FROM multimodel_endpoints")]
                raise NotFoundError(f"multi-model endpoint: unknown {name!r}; known: {known_names(known)}")
            models = self._db.query(
                "SELECT name, model FROM multimodel_models WHERE endpoint = ? ORDER BY rowid", (name,)
            )
            events = self._db.query(
                "SELECT kind, model FROM multimodel_events WHERE endpoint = ? ORDER BY kind, seq", (name,)
            )
        max_loaded, loaded, hits, misses = rows[0]
        return MultiModelEndpoint.restore(
            max_loaded,
            {model: pickle.loads(blob) for model, blob in models},
            json.loads(loaded),
            hits,
            misses,
            [model for kind, model in events if kind == "load"],
            [model for kind, model in events if kind == "evict"],
        )
