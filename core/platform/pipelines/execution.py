"""The run: each ready step in plan order reuses its cached outputs or calls its function.

A step whose producer was Skipped or Failed, or whose gate took the other branch, is Skipped; a step that
raises or returns something other than a dict of outputs is Failed, and the run goes on with the rest.
"""

from __future__ import annotations

import copy
import time
import types
from collections.abc import Mapping, MutableMapping
from typing import Any

from kinetic_tui.core.platform.pipelines.cache_key import NOT_JSON, framed_key
from kinetic_tui.core.platform.pipelines.planner import Node
from kinetic_tui.core.platform.pipelines.results import PipelineRun, RunStatus, StepResult, StepStatus


def run_layers(
    pipeline: str,
    nodes: list[Node],
    layers: list[list[int]],
    frames: list[tuple[str, str]],
    params: dict[str, Any],
    cache: MutableMapping[str, dict[str, Any]],
) -> PipelineRun:
    """Run every node layer by layer with the merged `params`, reading and filling `cache`."""
    outputs: dict[str, dict[str, Any]] = {}
    blocked: set[int] = set()  # Skipped or Failed: every consumer is Skipped
    branch: dict[int, bool] = {}
    results: dict[str, StepResult] = {}
    executed: list[str] = []
    for layer in layers:
        for i in layer:
            node = nodes[i]
            if (blocked and not blocked.isdisjoint(node.producers)) or (
                node.gate is not None and branch[node.gate] != node.branch
            ):
                blocked.add(i)
                results[node.name] = StepResult(StepStatus.SKIPPED, {}, None, 0.0)
                continue
            result = results[node.name] = _run_node(node, frames[i], outputs, params, cache)
            if result.status is StepStatus.FAILED:
                blocked.add(i)
                continue
            outputs[node.name] = result.outputs
            if node.is_condition:
                branch[i] = result.outputs["branch"]
            if result.status is StepStatus.EXECUTED:
                executed.append(node.name)
    failed = any(r.status is StepStatus.FAILED for r in results.values())
    return PipelineRun(
        pipeline=pipeline,
        status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
        params=params,
        steps=results,
        branch_taken={nodes[i].name: taken for i, taken in branch.items()},
        execution_order=tuple(executed),
    )


_NO_PARAMS: Mapping[str, Any] = types.MappingProxyType({})


class _StepError(Exception):
    """Internal: why a step failed, turned into its StepResult.error."""


def _resolve_inputs(
    node: Node, outputs: dict[str, dict[str, Any]], params: dict[str, Any]
) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """(input values, read params) of a step whose producers all ran."""
    read: Mapping[str, Any]
    if node.param_refs:
        read = {name: params[name] for _, name in node.param_refs}
        resolved = {key: params[name] for key, name in node.param_refs}
    else:
        read, resolved = _NO_PARAMS, {}
    for key, src, out in node.step_refs:
        produced = outputs[src]
        if out not in produced:
            raise _StepError(
                f"step {node.name!r}: input {key!r} references '{src}.{out}', but step {src!r} produced no output "
                f"{out!r} (it produced: {', '.join(sorted(produced)) or 'nothing'})"
            )
        resolved[key] = produced[out]
    return resolved, read


def _call(node: Node, resolved: dict[str, Any]) -> dict[str, Any]:
    # The step gets its own copy, so mutating an input cannot reach a producer's (cached) outputs.
    try:
        value = node.fn(copy.deepcopy(resolved))
        if node.is_condition:
            return {"branch": bool(value)}
    except Exception as exc:
        raise _StepError(f"step {node.name!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _StepError(f"step {node.name!r} must return a dict of output name -> value, got {value!r:.80}")
    return value


def _run_node(
    node: Node,
    frame: tuple[str, str],
    outputs: dict[str, dict[str, Any]],
    params: dict[str, Any],
    cache: MutableMapping[str, dict[str, Any]],
) -> StepResult:
    start = time.perf_counter()
    key = None
    try:
        resolved, read = _resolve_inputs(node, outputs, params)
        try:
            key = framed_key(frame, resolved, read)
        except NOT_JSON as exc:
            raise _StepError(
                f"step {node.name!r}: inputs are not JSON-serialisable, so they cannot be cached ({exc})"
            ) from exc
        cached = cache.get(key)
        if cached is not None:
            return StepResult(StepStatus.CACHED, cached, key, time.perf_counter() - start)
        produced = _call(node, resolved)
    except _StepError as exc:
        return StepResult(StepStatus.FAILED, {}, key, time.perf_counter() - start, str(exc))
    cache[key] = produced
    return StepResult(StepStatus.EXECUTED, produced, key, time.perf_counter() - start)
