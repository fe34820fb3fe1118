"""What a step's job runs: resolve artifact references to values, call the step, store its outputs.

Small JSON outputs go back inline in the job's result; large or non-JSON ones are put in the artifact store
here, in the job, and only their reference travels (the job's result and the store stay small whatever a
step returns).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kinetic_tui.core.artifacts import ArtifactStore, reference, referenced_digest
from kinetic_tui.core.platform.pipelines.cache_key import NOT_JSON, canonical
from kinetic_tui.core.platform.pipelines.step_call import call_step

INLINE_LIMIT = 64 * 1024  # bytes of canonical JSON an output may take inline


def run_step(
    name: str,
    fn: Callable[[dict[str, Any]], Any],
    is_condition: bool,
    resolved: dict[str, Any],
    bucket: str,
    artifacts_uri: str,
) -> dict[str, Any]:
    """The step's outputs with large or non-JSON values replaced by artifact references; raises StepError
    (the job fails with it) when the step raises or returns something other than a dict."""
    artifacts = ArtifactStore.at(bucket, artifacts_uri)
    values = {}
    for key, value in resolved.items():
        digest = referenced_digest(value)
        values[key] = value if digest is None else artifacts.get_value(digest)
    outputs = call_step(name, fn, is_condition, values)
    return {key: stored(artifacts, value) for key, value in outputs.items()}


def run_step_in(
    table: tuple[Callable[[dict[str, Any]], Any], ...],
    name: str,
    at: int,
    is_condition: bool,
    resolved: dict[str, Any],
    bucket: str,
    artifacts_uri: str,
) -> dict[str, Any]:
    """`run_step` of `table[at]`: a fan-out's batch carries its steps' functions once, in its function's
    table, instead of once per input (200 steps of one function pickled it 200 times)."""
    return run_step(name, table[at], is_condition, resolved, bucket, artifacts_uri)


def stored(artifacts: ArtifactStore, value: Any) -> Any:
    """`value` inline as JSON when it is JSON and small, else a reference to it in the artifact store."""
    if referenced_digest(value) is not None:
        return value
    try:
        text = canonical(value)
    except NOT_JSON:
        return reference(artifacts.put_value(value))
    if len(text) <= INLINE_LIMIT:
        return json.loads(text)
    return reference(artifacts.put_value(value))


def digests_in(outputs: dict[str, Any]) -> list[str]:
    """The artifacts a step's outputs reference."""
    return [d for d in map(referenced_digest, outputs.values()) if d is not None]
