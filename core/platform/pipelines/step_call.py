"""Calling one step: the rule a step's job runs under (its own copy of the inputs, a dict of outputs back).

Kept apart from `execution`, with nothing of ours imported, because every step job imports it: a job that
runs one trivial step should not pay for importing the planner and the run records.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any


class StepError(Exception):
    """Why a step failed, turned into its StepResult.error."""


def call_step(
    name: str, fn: Callable[[dict[str, Any]], Any], is_condition: bool, resolved: dict[str, Any]
) -> dict[str, Any]:
    """The step's outputs (a condition's as {"branch": bool}); StepError when it raises or returns a non-dict."""
    # The step gets its own copy, so mutating an input cannot reach a producer's (cached) outputs.
    try:
        value = fn(copy.deepcopy(resolved))
        if is_condition:
            return {"branch": bool(value)}
    except Exception as exc:
        raise StepError(f"step {name!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise StepError(
            f"step {name!r} must return a dict of output name -> value, got {value!r:.80} ({type(value).__name__})"
        )
    return value
