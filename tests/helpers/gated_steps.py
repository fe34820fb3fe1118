"""A training step for tests that interrupt a run: epochs after the first wait for a gate file the test opens,
so an interrupt lands mid-run without relying on a slow step. Each epoch records whether the gate was open when
it ran, so a run restarted from scratch (epoch 1 again, gate open) ends in a different state, and hash, than
one resumed from its epoch-1 checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kinetic_tui.core.platform.training import compute_artifact_hash

GATED_STEP = "tests.helpers.gated_steps:gated_step"

# A test that never opens the gate still ends: its epochs go on after this long.
GATE_TIMEOUT = 60.0


def gated_step(hyperparameters: dict[str, Any], epoch: int, state: dict[str, Any]) -> dict[str, Any]:
    gate = Path(hyperparameters["gate"])
    if epoch > 1:
        deadline = time.monotonic() + GATE_TIMEOUT
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return {"loss": 1.0 / (epoch + 1), "opened": [*state.get("opened", []), gate.exists()]}


def resumed_hash(hyperparameters: dict[str, Any], epochs: int) -> str:
    """The artifact hash of a run stopped after epoch 1 with the gate shut and resumed once it opened."""
    final = {"loss": 1.0 / (epochs + 1), "opened": [False] + [True] * (epochs - 1)}
    return compute_artifact_hash(hyperparameters, final, epochs)
