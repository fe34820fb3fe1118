"""The run: each ready step in plan order reuses its cached outputs or calls its function.

A step whose gate took the other branch, or whose producer was Skipped, is Skipped; a step whose producer
Failed (or was NotRun) is NotRun; a step that raises or returns something other than a dict of outputs is
Failed, and the run goes on with the rest.

The rules for one step (`blocked_status`, `prepare`, `call_step`) are shared with the driver that runs each
step as a job, so both apply them identically; `run_layers` is the in-process run.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, MutableMapping
from time import perf_counter
from typing import Any, NamedTuple

from kinetic_tui.core.platform.pipelines.cache_key import NOT_JSON, framed_key
from kinetic_tui.core.platform.pipelines.planner import Node
from kinetic_tui.core.platform.pipelines.results import PipelineRun, RunStatus, StepResult, StepStatus
from kinetic_tui.core.platform.pipelines.step_call import StepError, call_step

# a producer in one of these leaves its consumers NotRun rather than Skipped
_FAILURE = frozenset((StepStatus.FAILED, StepStatus.NOT_RUN, StepStatus.CANCELLED))


class Ready(NamedTuple):
    """A step that must execute: its cache key and its resolved inputs."""

    key: str
    resolved: dict[str, Any]


def blocked_status(node: Node, status: Callable[[int], StepStatus], branch: Mapping[int, bool]) -> StepStatus | None:
    """NotRun or Skipped for a step that must not execute given its settled producers, else None."""
    producers = list(map(status, node.producers))
    if not _FAILURE.isdisjoint(producers):
        return StepStatus.NOT_RUN
    if StepStatus.SKIPPED in producers or (node.gate is not None and branch[node.gate] != node.branch):
        return StepStatus.SKIPPED
    return None


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
    statuses: dict[int, StepStatus] = {}
    branch: dict[int, bool] = {}
    results: dict[str, StepResult] = {}
    executed: list[str] = []
    held: set[int] = set()  # steps that produced nothing (Skipped, NotRun, Failed)
    for layer in layers:
        for i in layer:
            node = nodes[i]
            # only a gate, or a producer that produced nothing, can block a step
            if node.gate is not None or not held.isdisjoint(node.producers):
                blocked = blocked_status(node, statuses.__getitem__, branch)
                if blocked is not None:
                    statuses[i] = blocked
                    held.add(i)
                    results[node.name] = StepResult(blocked, {}, None, 0.0)
                    continue
            prepared = prepare(node, frames[i], outputs, params, cache)
            result = results[node.name] = (
                prepared if isinstance(prepared, StepResult) else _execute(node, prepared, cache)
            )
            statuses[i] = result.status
            if result.status is StepStatus.FAILED:
                held.add(i)
                continue
            outputs[node.name] = result.outputs
            if node.is_condition:
                branch[i] = result.outputs["branch"]
            if result.status is StepStatus.EXECUTED:
                executed.append(node.name)
    return PipelineRun(
        pipeline=pipeline,
        status=settled_status(results.values()),
        params=params,
        steps=results,
        branch_taken={nodes[i].name: taken for i, taken in branch.items()},
        execution_order=tuple(executed),
    )


def settled_status(results: Any) -> RunStatus:
    return RunStatus.FAILED if any(r.status is StepStatus.FAILED for r in results) else RunStatus.SUCCEEDED


_NO_PARAMS: Mapping[str, Any] = types.MappingProxyType({})


def _resolve_inputs(
    node: Node, outputs: Mapping[str, dict[str, Any]], params: dict[str, Any]
) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """(input values, read params) of a step whose producers all ran."""
    try:
        produced_inputs = {key: outputs[src][out] for key, src, out in node.step_refs}
    except KeyError:  # the producers all ran: one of them lacks the output named
        key, src, out = next(ref for ref in node.step_refs if ref[2] not in outputs[ref[1]])
        produced = outputs[src]
        raise StepError(
            f"step {node.name!r}: input {key!r} references '{src}.{out}', but step {src!r} produced no output "
            f"{out!r} (it produced: {', '.join(sorted(produced)) or 'nothing'})"
        ) from None
    if not node.param_refs:
        return produced_inputs, _NO_PARAMS
    resolved = {key: params[name] for key, name in node.param_refs}  # params first, as the step always saw them
    resolved.update(produced_inputs)
    return resolved, {name: params[name] for _, name in node.param_refs}


def prepare(
    node: Node,
    frame: tuple[str, str],
    outputs: Mapping[str, dict[str, Any]],
    params: dict[str, Any],
    cache: Mapping[str, dict[str, Any]],
) -> StepResult | Ready:
    """A Cached or Failed result decided without executing, or what executing needs."""
    start = perf_counter()
    key = None
    try:
        resolved, read = _resolve_inputs(node, outputs, params)
        try:
            key = framed_key(frame, resolved, read)
        except NOT_JSON as exc:
            raise StepError(
                f"step {node.name!r}: inputs are not JSON-serialisable, so they cannot be cached ({exc})"
            ) from exc
    except StepError as exc:
        return StepResult(StepStatus.FAILED, {}, key, perf_counter() - start, str(exc))
    cached = cache.get(key)
    if cached is not None:
        return StepResult(StepStatus.CACHED, cached, key, perf_counter() - start)
    return Ready(key, resolved)


def _execute(node: Node, prepared: Ready, cache: MutableMapping[str, dict[str, Any]]) -> StepResult:
    start = perf_counter()  # an executed step's duration is its call's: keying it took microseconds
    try:
        produced = call_step(node.name, node.fn, node.is_condition, prepared.resolved)
    except StepError as exc:
        return StepResult(StepStatus.FAILED, {}, prepared.key, perf_counter() - start, str(exc))
    cache[prepared.key] = produced
    return StepResult(StepStatus.EXECUTED, produced, prepared.key, perf_counter() - start)
