"""Training steps for tests that interrupt a run: epochs after the first wait for a gate file the test opens,
so an interrupt lands mid-run without relying on a slow step. `gated_step` records, per epoch, whether the gate
was open when it ran, so a run restarted from scratch (epoch 1 again, gate open) ends in a different state, and
hash, than one resumed from its epoch-1 checkpoint. `home_gated_step` is the default step behind a gate in the
job's home, for studies: their hyperparameters come from the search space, and their metrics and hashes must be
the in-memory tuner's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.platform.training import compute_artifact_hash, default_train_step

GATED_STEP = "tests.helpers.gated_steps:gated_step"
HOME_GATED_STEP = "tests.helpers.gated_steps:home_gated_step"
HOME_GATE = "open-the-gate"  # the file in KINETIC_HOME that lets `home_gated_step`'s later epochs run

# A test that never opens the gate still ends: its epochs go on after this long.
GATE_TIMEOUT = 60.0


def _wait_for_gate(gate: Path, epoch: int) -> None:
    if epoch > 1:
        deadline = time.monotonic() + GATE_TIMEOUT
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)


def gated_step(hyperparameters: dict[str, Any], epoch: int, state: dict[str, Any]) -> dict[str, Any]:
    gate = Path(hyperparameters["gate"])
    _wait_for_gate(gate, epoch)
    return {"loss": 1.0 / (epoch + 1), "opened": [*state.get("opened", []), gate.exists()]}


def home_gated_step(hyperparameters: dict[str, Any], epoch: int, state: dict[str, Any]) -> dict[str, Any]:
    _wait_for_gate(kinetic_home() / HOME_GATE, epoch)
    return default_train_step(hyperparameters, epoch, state)


def resumed_hash(hyperparameters: dict[str, Any], epochs: int) -> str:
    """The artifact hash of a run stopped after epoch 1 with the gate shut and resumed once it opened."""
    final = {"loss": 1.0 / (epochs + 1), "opened": [False] + [True] * (epochs - 1)}
    return compute_artifact_hash(hyperparameters, final, epochs)
