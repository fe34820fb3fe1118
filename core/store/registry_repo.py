"""Registry versions and their transition history in state.db.

The store listens to the registry instead of diffing it: each new version or transition is written as it
happens, inside the caller's transaction, so a promote that archives the incumbent is one atomic commit.
A version's stage is not stored on its row: it is the `to_stage` of its last transition (None without
one), so the two can never disagree and a transition costs one INSERT. If a write fails, the in-memory
registry is ahead of the file; rebuild it with `load_registry`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from kinetic_tui.core.platform.registry import ModelRegistry, ModelVersion, Stage, Transition
from kinetic_tui.core.store.db import Database, dumps


class RegistryRepo:
    def __init__(self, db: Database) -> None:
        self._db = db

    def record(self, group: str, event: ModelVersion | Transition) -> None:
        """The registry listener: one row per new version, one history row per transition."""
        if isinstance(event, ModelVersion):
            self._db.write(
                "INSERT INTO model_versions (group_name, version, artifact_hash, metrics, source) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    group,
                    event.version,
                    event.artifact_hash,
                    dumps(dict(event.metrics), f"metrics of {group} v{event.version}"),
                    event.source,
                ),
            )
        else:
            self._db.write(
                "INSERT INTO model_transitions (group_name, version, from_stage, to_stage, at) VALUES (?, ?, ?, ?, ?)",
                (group, event.version, event.from_stage.value, event.to_stage.value, event.at),
            )

    def attach(self, registry: ModelRegistry) -> ModelRegistry:
        """Persist every later change of `registry`."""
        registry.listener = self.record
        return registry

    def load_registry(self, clock: Callable[[], float] = time.time) -> ModelRegistry:
        """The registry as last committed, already attached to this store."""
        with self._db.transaction(write=False):
            versions = self._db.query("SELECT group_name, version, artifact_hash, metrics, source FROM model_versions")
            transitions = self._db.query(
                "SELECT group_name, version, from_stage, to_stage, at FROM model_transitions ORDER BY seq"
            )
        history = [
            (group, Transition(version, from_stage, to_stage, at))
            for group, version, from_stage, to_stage, at in transitions
        ]
        stages = {(group, event.version): event.to_stage for group, event in history}
        models = [
            ModelVersion(
                group, version, artifact_hash, json.loads(metrics), source, stages.get((group, version), Stage.NONE)
            )
            for group, version, artifact_hash, metrics, source in versions
        ]
        return self.attach(ModelRegistry.restore(models, history, clock))
