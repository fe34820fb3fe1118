"""Pipelines in state.db: definitions by reference, numbered runs, and the step cache shared by all runs.

A definition is stored as a "MODULE:ATTR" reference plus its default params, not pickled: steps are code,
and re-importing picks up edited steps, whose new fingerprints then miss the cache as they should.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator, MutableMapping
from typing import Any, NamedTuple

from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.platform.pipelines import Pipeline, PipelineRun, RunStatus
from kinetic_tui.core.store.db import Database, dumps
from kinetic_tui.core.store.pipeline_steps_repo import compose, steps
from kinetic_tui.core.validation import known_names


class StoredRun(NamedTuple):
    number: int  # 1, 2, ... per pipeline, in the order the runs were recorded
    run: PipelineRun


class StepCache(MutableMapping[str, dict[str, Any]]):
    """The step cache as a table, so a rerun in another process (or after a restart) hits it.
    Writes join the caller's transaction; values round-trip through JSON (tuples come back as lists)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __getitem__(self, key: str) -> dict[str, Any]:
        rows = self._db.query("SELECT outputs FROM step_cache WHERE key = ?", (key,))
        if not rows:
            raise KeyError(key)
        outputs: dict[str, Any] = json.loads(rows[0][0])  # __setitem__ stores dicts only
        return outputs

    def __setitem__(self, key: str, outputs: dict[str, Any]) -> None:
        if not isinstance(key, str) or not isinstance(outputs, dict):
            raise ValidationError(
                f"step cache: expected a str key and dict outputs, got {key!r}: {type(outputs).__name__}"
            )
        blob = dumps(outputs, f"step outputs cached under {key[:12]}")
        self._db.write(
            "INSERT INTO step_cache (key, outputs) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET outputs = excluded.outputs",
            (key, blob),
        )

    def __delitem__(self, key: str) -> None:
        with self._db.transaction() as conn:
            if not conn.execute("DELETE FROM step_cache WHERE key = ?", (key,)).rowcount:
                raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter([key for (key,) in self._db.query("SELECT key FROM step_cache ORDER BY key")])

    def __len__(self) -> int:
        count: int = self._db.query("SELECT COUNT(*) FROM step_cache")[0][0]
        return count


def resolve_pipeline(ref: str) -> Pipeline:
    """Import "MODULE:ATTR" (ATTR may be dotted): a Pipeline, or a zero-argument factory returning one."""
    module_name, sep, attr = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not sep or not module_name or not attr:
        raise ValidationError(f"pipeline reference: expected MODULE:ATTR, got {ref!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise NotFoundError(f"pipeline reference {ref!r}: cannot import {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise NotFoundError(f"pipeline reference {ref!r}: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    pipeline = target if isinstance(target, Pipeline) or not callable(target) else target()
    if not isinstance(pipeline, Pipeline):
        raise ValidationError(
            f"pipeline reference {ref!r}: expected a Pipeline or a factory returning one, got {type(pipeline).__name__}"
        )
    return pipeline


class PipelineRepo:
    def __init__(self, db: Database) -> None:
        self._db = db
        self.cache = StepCache(db)

    def register(self, ref: str) -> Pipeline:
        """Record (or re-point) the pipeline `ref` names; returns it bound to the persistent cache."""
        pipeline = resolve_pipeline(ref)
        params = dumps(pipeline.params, f"default params of pipeline {pipeline.name!r}")
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO pipelines (name, ref, default_params) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET ref = excluded.ref, "
                "default_params = excluded.default_params",
                (pipeline.name, ref, params),
            )
        return Pipeline(pipeline.name, pipeline.steps, pipeline.params, cache=self.cache)

    def names(self) -> list[str]:
        return [name for (name,) in self._db.query("SELECT name FROM pipelines ORDER BY name")]

    def definition(self, name: str) -> tuple[str, dict[str, Any]]:
        """(reference, default params) of a registered pipeline."""
        rows = self._db.query("SELECT ref, default_params FROM pipelines WHERE name = ?", (name,))
        if not rows:
            raise NotFoundError(f"pipeline: unknown {name!r}; registered: {known_names(self.names())}")
        return rows[0][0], json.loads(rows[0][1])

    def load(self, name: str) -> Pipeline:
        """Re-import a registered pipeline with its stored default params and the persistent cache; where its
        steps run (default accelerator, image) and its timeout are the definition's own."""
        ref, params = self.definition(name)
        pipeline = resolve_pipeline(ref)
        return Pipeline(
            name,
            pipeline.steps,
            params,
            cache=self.cache,
            accelerator=pipeline.accelerator,
            timeout=pipeline.timeout,
            container_image=pipeline.container_image,
        )

    def record_run(self, run: PipelineRun) -> int:
        """Append a run of a registered pipeline; returns its number (1 for the first run)."""
        record = dumps(run.to_record(), f"run of pipeline {run.pipeline!r}")
        with self._db.transaction() as conn:
            self.definition(run.pipeline)
            number: int
            (number,) = conn.execute(
                "SELECT COALESCE(MAX(number), 0) + 1 FROM pipeline_runs WHERE pipeline = ?", (run.pipeline,)
            ).fetchone()
            conn.execute(
                "INSERT INTO pipeline_runs (pipeline, number, record) VALUES (?, ?, ?)", (run.pipeline, number, record)
            )
        return number

    def runs(self, name: str) -> list[StoredRun]:
        """Every recorded run of `name`, oldest first."""
        with self._db.transaction(write=False):
            self.definition(name)
            rows = self._db.query(
                "SELECT number, record, status FROM pipeline_runs WHERE pipeline = ? ORDER BY number", (name,)
            )
            return [
                StoredRun(number, self._run(name, number, json.loads(record), status))
                for number, record, status in rows
            ]

    def _run(self, name: str, number: int, record: dict[str, Any], status: str | None) -> PipelineRun:
        """A settled run from its record; a Running one from its step rows."""
        if status != RunStatus.RUNNING.value:
            return PipelineRun.from_record(record)
        return compose(record, steps(self._db, name, number), RunStatus.RUNNING)
