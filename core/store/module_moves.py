"""Migration 6: stored references to the modules of the layout before the one `kinetic_tui` namespace.

Until then the distribution installed `core`, `infra` and `runner` as top-level packages, and a workspace
stores module paths in three places: pipeline definitions (`MODULE:ATTR`), training and tuning step
references (`MODULE:FUNC`), and endpoint models pickled by reference to their class. Each old module maps to
its new dotted name (most gain the `kinetic_tui.` prefix, some moved). Only modules that existed in that
layout are rewritten: a user's own package named `runner` or `infra` keeps its references.

The table is frozen with the migration: a later move needs a migration of its own.
"""

from __future__ import annotations

import io
import json
import pickle
import pickletools
import sqlite3
from typing import Any

MOVED: dict[str, str] = {
    "core": "kinetic_tui.core",
    "core.accelerators": "kinetic_tui.core.accelerators",
    "core.backends": "kinetic_tui.core.backends",
    "core.backends.forkserver": "kinetic_tui.core.backends.local.forkserver",
    "core.backends.gke": "kinetic_tui.core.backends.gke.backend",
    "core.backends.k8s_client": "kinetic_tui.core.backends.gke.k8s_client",
    "core.backends.lanes": "kinetic_tui.core.backends.local.lanes",
    "core.backends.launcher": "kinetic_tui.core.backends.local.launcher",
    "core.backends.local": "kinetic_tui.core.backends.local.backend",
    "core.backends.manifests": "kinetic_tui.core.backends.gke.manifests",
    "core.backends.pathways": "kinetic_tui.core.backends.gke.pathways",
    "core.backends.queue_watcher": "kinetic_tui.core.supervisor.process",
    "core.collections": "kinetic_tui.core.batches",
    "core.commands": "kinetic_tui.core.commands",
    "core.commands.execute": "kinetic_tui.core.commands.execute",
    "core.commands.grammar": "kinetic_tui.core.commands.grammar",
    "core.commands.help": "kinetic_tui.core.commands.help",
    "core.commands.parser": "kinetic_tui.core.commands.parser",
    "core.console": "kinetic_tui.core.console",
    "core.console.base": "kinetic_tui.core.console.workspace",
    "core.console.endpoint_ops": "kinetic_tui.core.console.endpoints",
    "core.console.jobs": "kinetic_tui.core.console.jobs",
    "core.console.pipeline_ops": "kinetic_tui.core.console.pipelines",
    "core.console.registry_ops": "kinetic_tui.core.console.registry",
    "core.console.served_model": "kinetic_tui.core.console.served_model",
    "core.console.snapshots": "kinetic_tui.core.console.snapshots",
    "core.console.training_ops": "kinetic_tui.core.console.training",
    "core.context": "kinetic_tui.core.submission.context",
    "core.data": "kinetic_tui.core.data",
    "core.decorator": "kinetic_tui.core.decorator",
    "core.demo": "kinetic_tui.core.demo",
    "core.demo.fill": "kinetic_tui.core.demo.fill",
    "core.demo.workload": "kinetic_tui.core.demo.workload",
    "core.dispatch": "kinetic_tui.core.submission.dispatch",
    "core.errors": "kinetic_tui.core.errors",
    "core.events": "kinetic_tui.core.events",
    "core.gke_batches": "kinetic_tui.core.backends.gke.batches",
    "core.gke_pools": "kinetic_tui.core.backends.gke.pools",
    "core.job_status": "kinetic_tui.core.job_status",
    "core.jobs": "kinetic_tui.core.jobs",
    "core.packaging": "kinetic_tui.core.submission.packaging",
    "core.paths": "kinetic_tui.core.paths",
    "core.platform": "kinetic_tui.core.platform",
    "core.platform.autoscaling": "kinetic_tui.core.platform.autoscaling",
    "core.platform.canonical": "kinetic_tui.core.demo.canonical",
    "core.platform.pipelines": "kinetic_tui.core.platform.pipelines",
    "core.platform.registry": "kinetic_tui.core.platform.registry",
    "core.platform.serving": "kinetic_tui.core.platform.serving",
    "core.platform.train_entry": "kinetic_tui.core.training.entry",
    "core.platform.training": "kinetic_tui.core.platform.training",
    "core.platform.tuning": "kinetic_tui.core.platform.tuning",
    "core.profiles": "kinetic_tui.core.profiles",
    "core.storage": "kinetic_tui.core.storage",
    "core.storage.base": "kinetic_tui.core.storage.base",
    "core.storage.gcs": "kinetic_tui.core.storage.gcs",
    "core.storage.local": "kinetic_tui.core.storage.local",
    "core.store": "kinetic_tui.core.store",
    "core.store.db": "kinetic_tui.core.store.db",
    "core.store.endpoints_repo": "kinetic_tui.core.store.endpoints_repo",
    "core.store.migrations": "kinetic_tui.core.store.migrations",
    "core.store.pipelines_repo": "kinetic_tui.core.store.pipelines_repo",
    "core.store.registry_repo": "kinetic_tui.core.store.registry_repo",
    "core.store.training_repo": "kinetic_tui.core.store.training_repo",
    "core.store.tuning_repo": "kinetic_tui.core.store.tuning_repo",
    "core.submit": "kinetic_tui.core.submission.pack",
    "core.training": "kinetic_tui.core.training",
    "core.training.pools": "kinetic_tui.core.training.pools",
    "core.training.progress": "kinetic_tui.core.training.progress",
    "core.training.records": "kinetic_tui.core.training.records",
    "core.training.studies": "kinetic_tui.core.training.studies",
    "core.training_runs": "kinetic_tui.core.training.service",
    "core.workspace": "kinetic_tui.core.backends.local.workspace",
    "infra": "kinetic_tui.infra",
    "infra.container_builder": "kinetic_tui.infra.container_builder",
    "infra.program": "kinetic_tui.infra.program",
    "infra.state": "kinetic_tui.infra.state",
    "runner": "kinetic_tui.runner",
    "runner.remote_runner": "kinetic_tui.runner.remote_runner",
}


def moved_reference(ref: Any) -> Any:
    """`MODULE:ATTR` with MODULE mapped when it is one of the old modules; anything else unchanged."""
    if not isinstance(ref, str):
        return ref
    module, sep, attr = ref.partition(":")
    return MOVED[module] + sep + attr if module in MOVED else ref


class _MovingUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED.get(module, module), name)


def _names_old_module(blob: bytes) -> bool:
    """Whether the stream mentions an old module, as a GLOBAL's module or as a string (STACK_GLOBAL's operand)."""
    for opcode, arg, _ in pickletools.genops(blob):
        if opcode.name == "GLOBAL" and isinstance(arg, str):
            arg = arg.partition(" ")[0]
        if isinstance(arg, str) and arg in MOVED:
            return True
    return False


def moved_pickle(blob: bytes) -> bytes:
    """The same object pickled again with its classes found at their new paths; the blob itself when it
    names no old module or cannot be loaded here (its class gone, or a user module not importable)."""
    try:
        if not _names_old_module(blob):
            return blob
        value = _MovingUnpickler(io.BytesIO(blob)).load()
        return pickle.dumps(value)
    except Exception:
        return blob


def rewrite_module_paths(conn: sqlite3.Connection) -> None:
    """Rewrite every stored reference to an old module path, inside the migration's transaction."""
    for name, ref in conn.execute("SELECT name, ref FROM pipelines").fetchall():
        if moved_reference(ref) != ref:
            conn.execute("UPDATE pipelines SET ref = ? WHERE name = ?", (moved_reference(ref), name))
    for name, step in conn.execute("SELECT name, step FROM tuning_runs").fetchall():
        if moved_reference(step) != step:
            conn.execute("UPDATE tuning_runs SET step = ? WHERE name = ?", (moved_reference(step), name))
    for name, meta in conn.execute("SELECT name, meta FROM training_runs").fetchall():
        record = json.loads(meta)
        step = record.get("step")
        if moved_reference(step) != step:
            record["step"] = moved_reference(step)
            conn.execute(
                "UPDATE training_runs SET meta = ? WHERE name = ?", (json.dumps(record, separators=(",", ":")), name)
            )
    for endpoint, name, blob in conn.execute("SELECT endpoint, name, model FROM multimodel_models").fetchall():
        moved = moved_pickle(blob)
        if moved != blob:
            conn.execute(
                "UPDATE multimodel_models SET model = ? WHERE endpoint = ? AND name = ?", (moved, endpoint, name)
            )
