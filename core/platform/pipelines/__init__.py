"""Pipelines: a DAG of pure steps whose outputs are cached across runs, with condition gates.

A step is a pure function of its input values and the params it reads, so a step whose name, code
fingerprint, input values and read params are unchanged reuses its previous outputs. The cache is any
`MutableMapping[str, dict]`: the default dict lives as long as the pipeline object, the store passes a
SQLite-backed mapping so a rerun in another process hits it too. That is why cache keys are canonical JSON
(stable across processes and Python hash seeds) and why code is fingerprinted rather than identified.

One module per concern: `steps` (Step, ConditionStep), `pipeline` (Pipeline), `planner` (compiled nodes and
Kahn's rounds), `cache_key` (keys and code fingerprints), `execution` (the run), `results` (what a run
produced and its record).

The names below are imported on first use: a step's job imports `step_call` and `cache_key` from this
package, and importing them must not load the planner and the run records with them (~4 ms per job).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinetic_tui.core.platform.pipelines.cache_key import code_fingerprint, compute_cache_key
    from kinetic_tui.core.platform.pipelines.pipeline import Pipeline
    from kinetic_tui.core.platform.pipelines.planner import CycleError
    from kinetic_tui.core.platform.pipelines.results import PipelineRun, RunStatus, StepResult, StepStatus
    from kinetic_tui.core.platform.pipelines.steps import PARAMS, ConditionStep, Step

_HOMES = {
    "code_fingerprint": "cache_key",
    "compute_cache_key": "cache_key",
    "Pipeline": "pipeline",
    "CycleError": "planner",
    "PipelineRun": "results",
    "RunStatus": "results",
    "StepResult": "results",
    "StepStatus": "results",
    "PARAMS": "steps",
    "ConditionStep": "steps",
    "Step": "steps",
}

__all__ = [
    "PARAMS",
    "ConditionStep",
    "CycleError",
    "Pipeline",
    "PipelineRun",
    "RunStatus",
    "Step",
    "StepResult",
    "StepStatus",
    "code_fingerprint",
    "compute_cache_key",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
