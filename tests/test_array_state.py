"""A training state may hold numpy arrays: checkpoints are binary, the artifact hash extends canonically to
arrays (dtype, shape and bytes) so an interrupted and resumed run still ends with the straight run's hash,
and a JSON state hashes exactly as it always did."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.workspace import store
from kinetic_tui.core.backends.registry import workspace_backend
from kinetic_tui.core.platform.training import canonical, compute_artifact_hash
from kinetic_tui.core.training.service import TrainingService
from tests.helpers import projects

STEPS = """
import numpy as np


def array_step(hyperparameters, epoch, state):
    weights = state.get("weights", np.zeros((2, 3), dtype=np.float32))
    step = epoch + np.arange(6, dtype=np.float32).reshape(2, 3)
    weights = weights + np.float32(hyperparameters.get("lr", 0.5)) * step
    return {"weights": weights, "loss": float(1.0 / (1.0 + weights.sum()))}
"""


@pytest.fixture
def array_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = projects.user_project(tmp_path, monkeypatch, "array_user", "")
    (project / "arraysteps.py").write_text(STEPS)
    monkeypatch.delitem(__import__("sys").modules, "arraysteps", raising=False)
    yield project
    launcher.shutdown_server()


def test_a_json_state_hashes_as_it_always_did() -> None:
    hp, state = {"lr": 0.1}, {"loss": 0.5, "history": [1, 2.5, None, "x"], "nested": {"b": True}}
    old = hashlib.sha256(
        json.dumps({"hp": hp, "final_state": state, "epochs": 3}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    assert compute_artifact_hash(hp, state, 3) == old


def test_arrays_hash_by_dtype_shape_and_bytes() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert canonical({"w": a}) == canonical({"w": a.copy(order="F")})  # the layout in memory does not matter
    assert canonical({"w": a}) != canonical({"w": a.astype(np.float64)})
    assert canonical({"w": a}) != canonical({"w": a.reshape(3, 2)})
    assert canonical({"w": a}) != canonical({"w": a + 1})


@pytest.mark.usefixtures("array_project")
def test_resume_with_an_array_state_ends_with_the_straight_runs_hash() -> None:
    service = TrainingService(store(), workspace_backend())
    service.start("straight", {"lr": 0.5}, 4, 1, None, step="arraysteps:array_step")
    straight = service.wait("straight", timeout=120)
    service.start("broken", {"lr": 0.5}, 4, 1, None, step="arraysteps:array_step", interrupt_before_epoch=3)
    stopped = service.wait("broken", timeout=120)
    assert (stopped.status, stopped.checkpoint_epoch) == ("Stopped", 2)
    service.resume("broken")
    resumed = service.wait("broken", timeout=120)
    assert straight.status == resumed.status == "Completed", (straight.error, resumed.error)
    assert resumed.artifact_hash == straight.artifact_hash
    checkpoint = store().training.get("broken").checkpoint
    assert checkpoint is not None and checkpoint.state["weights"]["__array__"]["shape"] == [2, 3]
