"""Durable state: one SQLite file, one transaction per console action, a repository per mechanism.

store = Store()                        # $KINETIC_HOME/state.db, checked and migrated
registry = store.registry.load_registry()
with store.transaction():              # the action: all of it or none of it
    registry.transition("fraud", 2, "Production")
"""

from __future__ import annotations

from pathlib import Path

from kinetic_tui.core.store.db import Database, StoreError
from kinetic_tui.core.store.endpoints_repo import EndpointRepo
from kinetic_tui.core.store.pipelines_repo import PipelineRepo, StepCache, StoredRun
from kinetic_tui.core.store.registry_repo import RegistryRepo
from kinetic_tui.core.store.training_repo import TrainingRepo
from kinetic_tui.core.store.tuning_repo import StoredStudy, TuningRepo

__all__ = ["StepCache", "Store", "StoreError", "StoredRun", "StoredStudy"]


class Store(Database):
    """state.db with a repository per platform mechanism, all sharing its connections and transactions."""

    def __init__(
        self, path: Path | str | None = None, *, timeout: float | None = None, rebuilding: bool = False
    ) -> None:
        super().__init__(path, timeout=timeout, rebuilding=rebuilding)
        self.training = TrainingRepo(self)
        self.tuning = TuningRepo(self)
        self.registry = RegistryRepo(self)
        self.endpoints = EndpointRepo(self)
        self.pipelines = PipelineRepo(self)
