"""Random store actions until killed: `store_crash_worker.py SEED`.

Each action runs in one transaction together with a row in `crash_markers` describing what it did, and
its marker id is printed only after the commit returned, so the parent knows exactly which actions were
acknowledged when it SIGKILLs this process.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
from typing import Any

from kinetic_tui.core.platform.autoscaling import Endpoint
from kinetic_tui.core.platform.registry import ALLOWED_TRANSITIONS, ModelRegistry, ModelVersion
from kinetic_tui.core.platform.training import ManagedTrainingRunner, TrainingCluster, TrainingJob
from kinetic_tui.core.store import Store

MARKERS = "CREATE TABLE IF NOT EXISTS crash_markers (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, detail TEXT NOT NULL)"
GROUPS = ("fraud", "churn")


class Actions:
    def __init__(self, store: Store, seed: int) -> None:
        self.store = store
        self.rng = random.Random(seed)
        self.seed = seed
        self.count = 0
        self.registry: ModelRegistry = store.registry.load_registry()
        self.endpoint = store.endpoints.get("api") if "api" in store.endpoints.names() else Endpoint("api")
        self.runner = ManagedTrainingRunner(TrainingCluster(1))

    def register(self) -> dict[str, Any]:
        model = self.registry.register(self.rng.choice(GROUPS), f"hash-{self.seed}-{self.count}")
        return {"group": model.group, "version": model.version}

    def transition(self) -> dict[str, Any]:
        candidates = [m for g in self.registry.groups() for m in self.registry.versions(g)]
        if not candidates:
            return self.register() | {"fallback": True}
        model: ModelVersion = self.rng.choice(candidates)
        target = self.rng.choice(ALLOWED_TRANSITIONS[model.stage])
        before = len(self.registry.history(model.group))
        self.registry.transition(model.group, model.version, target)
        return {
            "group": model.group,
            "version": model.version,
            "to": target.value,
            "rows": len(self.registry.history(model.group)) - before,
        }

    def observe(self) -> dict[str, Any]:
        tick = (self.endpoint.last_tick or 0) + self.rng.randint(0, 3)
        self.endpoint.observe(self.rng.randint(0, 80), tick)
        self.store.endpoints.save(self.endpoint)
        return {"seq": len(self.endpoint.history) - 1}

    def train(self) -> dict[str, Any]:
        job = TrainingJob(f"job-{self.seed}-{self.count}", {"learning_rate": 0.3}, 3, 1)
        self.runner.start(job)
        self.store.training.save(job)
        return {"name": job.name, "hash": job.artifact_hash}

    def cache(self) -> dict[str, Any]:
        key = f"key-{self.seed}-{self.count}"
        self.store.pipelines.cache[key] = {"n": self.count}
        return {"key": key}

    def one(self, conn: sqlite3.Connection) -> int:
        kind = self.rng.choice(("register", "transition", "transition", "observe", "train", "cache"))
        self.count += 1
        detail = getattr(self, kind)()
        kind = "register" if detail.pop("fallback", False) else kind
        return conn.execute(
            "INSERT INTO crash_markers (kind, detail) VALUES (?, ?)", (kind, json.dumps(detail))
        ).lastrowid


def main(seed: int) -> None:
    store = Store()
    with store.transaction() as conn:
        conn.execute(MARKERS)
    actions = Actions(store, seed)
    print("ready", flush=True)
    while True:
        with store.transaction() as conn:
            marker = actions.one(conn)
        print(marker, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
