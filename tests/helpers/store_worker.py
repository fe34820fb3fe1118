"""One step of a restart scenario, run as its own process: `store_worker.py SCENARIO STEP`.

Each invocation opens the store at $KINETIC_HOME/state.db, rebuilds what it needs from it, acts, saves, and
prints a JSON summary; the tests compare what a second process sees with what the first one left.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from kinetic_tui.core.platform.autoscaling import Endpoint
from kinetic_tui.core.platform.registry import ModelRegistry
from kinetic_tui.core.platform.training import ManagedTrainingRunner, TrainingCluster, TrainingJob
from kinetic_tui.core.store import Store

PIPELINE_REF = "tests.helpers.store_pipeline:build"


def pipeline(store: Store, step: str) -> dict:
    built = store.pipelines.register(PIPELINE_REF) if step == "first" else store.pipelines.load("demo")
    with store.transaction():
        run = built.run()
        number = store.pipelines.record_run(run)
    return {"number": number, "steps": {name: r.status.value for name, r in run.steps.items()}}


def training(store: Store, step: str) -> dict:
    cluster = TrainingCluster(1)
    if step == "first":
        job = TrainingJob("bert", {"learning_rate": 0.2}, max_epochs=6, checkpoint_every=2)
        with store.transaction():
            ManagedTrainingRunner(cluster).start(job, interrupt_before_epoch=4)
            store.training.save(job)
    else:
        job = store.training.load(cluster)["bert"]
        with store.transaction():
            ManagedTrainingRunner(cluster).resume(job)
            store.training.save(job)
    return job.to_record()


def endpoint(store: Store, step: str) -> dict:
    if step == "first":
        ep = Endpoint(
            "api", min_instances=1, max_instances=5, target_per_instance=10, scale_out_cooldown=3, scale_in_cooldown=5
        )
    else:
        ep = store.endpoints.get("api")
    with store.transaction():
        ep.observe(45, 0) if step == "first" else ep.observe(5, 1)
        store.endpoints.save(ep)
    return {"instance_count": ep.instance_count, "history": [list(e) for e in ep.history]}


def drive_registry(reg: ModelRegistry, transaction: Callable[[], AbstractContextManager[Any]]) -> None:
    """The registry actions of the restart test; the test replays them in memory for the expected state."""
    with transaction():
        for n in range(1, 4):
            reg.register("fraud", f"hash-{n}", {"auc": 0.9 + n / 100}, source=f"job-{n}")
    with transaction():
        reg.transition("fraud", 1, "Staging")
        reg.transition("fraud", 1, "Production")
    with transaction():
        reg.transition("fraud", 2, "Staging")
        reg.transition("fraud", 2, "Production")  # archives v1 automatically
    with transaction():
        reg.register("churn", "hash-c")
        reg.transition("fraud", 3, "Archived")


def registry(store: Store, step: str) -> dict:
    drive_registry(store.registry.attach(ModelRegistry(clock=itertools.count(1000).__next__)), store.transaction)
    return {}


if __name__ == "__main__":
    scenario, step = sys.argv[1], sys.argv[2]
    with Store() as opened:
        print(json.dumps(globals()[scenario](opened, step)))
