"""The planner: steps compiled against their pipeline, and Kahn's rounds over them (a cycle is an error)."""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.pipelines.cache_key import fingerprint_callable
from kinetic_tui.core.platform.pipelines.steps import ConditionStep, Step


class CycleError(ValidationError):
    """The steps' references form a cycle, so no execution order exists; `cycle` lists one such cycle."""

    def __init__(self, pipeline: str, cycle: list[str]) -> None:
        self.cycle = cycle
        path = " -> ".join([*cycle, cycle[0]])
        super().__init__(f"pipeline {pipeline!r} has a cycle: {path}")


class Node(NamedTuple):
    """A step compiled against its pipeline; `producers` and `gate` are node indices (the steps' given order)."""

    name: str
    fn: Callable[[dict[str, Any]], Any]
    is_condition: bool
    version: str
    param_refs: tuple[tuple[str, str], ...]
    step_refs: tuple[tuple[str, str, str], ...]
    producers: tuple[int, ...]
    gate: int | None
    branch: bool | None


def compile_steps(pipeline: str, steps: tuple[Step | ConditionStep, ...]) -> list[Node]:
    """Resolve every reference and fingerprint every function once. Nodes keep the steps' given order: walking
    100k steps in the order they were allocated is several times faster than in name order."""
    index = {step.name: i for i, step in enumerate(steps)}
    if len(index) < len(steps):
        names = sorted(step.name for step in steps)
        duplicate = next(a for a, b in itertools.pairwise(names) if a == b)
        raise ValidationError(f"pipeline {pipeline!r}: duplicate step name {duplicate!r}")
    fingerprints: dict[int, str] = {}  # by id(fn): the steps keep their functions alive while we compile
    code_memo: dict[types.CodeType, str] = {}
    nodes = []
    for step in steps:
        is_condition = isinstance(step, ConditionStep)
        fn = step.predicate if isinstance(step, ConditionStep) else step.fn
        version = step.version
        if version is None:
            version = fingerprints.get(id(fn))
            if version is None:
                version = fingerprints[id(fn)] = fingerprint_callable(step.name, fn, code_memo)
        try:
            producers = tuple(map(index.__getitem__, step._sources))
        except KeyError:
            key, src, out = next(ref for ref in step._step_refs if ref[1] not in index)
            raise ValidationError(
                f"pipeline {pipeline!r}: step {step.name!r} input {key!r} references unknown "
                f"step {src!r} in '{src}.{out}'"
            ) from None
        gate = branch = None
        if step.when is not None:
            gate_name, branch = step.when
            gate = index.get(gate_name)
            if gate is None or not isinstance(steps[gate], ConditionStep):
                raise ValidationError(
                    f"pipeline {pipeline!r}: step {step.name!r} is gated on {gate_name!r}, "
                    f"which is not a ConditionStep of this pipeline"
                )
            if gate not in producers:
                producers += (gate,)
        nodes.append(
            Node(step.name, fn, is_condition, version, step._param_refs, step._step_refs, producers, gate, branch)
        )
    return nodes


def names_sorted(nodes: list[Node]) -> list[int]:
    return sorted(range(len(nodes)), key=[node.name for node in nodes].__getitem__)


_UNSEEN, _ON_PATH = -1, -2


def kahn_layers(pipeline: str, nodes: list[Node], by_name: list[int]) -> list[list[int]]:
    """Kahn's rounds, computed without consumer lists: a node leaves in round 1 + the last round of its
    producers (round 0 without any), i.e. its longest-path depth. One pass finds every depth (steps usually
    come producers first, so it rarely has to descend); dropping nodes into their rounds in name order then
    leaves each round sorted by name."""
    depth = [_UNSEEN] * len(nodes)
    for i, node in enumerate(nodes):
        if depth[i] >= 0:
            continue
        level = 0
        for p in node.producers:
            if depth[p] < 0:
                _descend(pipeline, nodes, depth, i)
                break
            if depth[p] >= level:
                level = depth[p] + 1
        else:
            depth[i] = level
    layers: list[list[int]] = [[] for _ in range(max(depth, default=-1) + 1)]
    for i in by_name:
        layers[depth[i]].append(i)
    return layers


def _descend(pipeline: str, nodes: list[Node], depth: list[int], root: int) -> None:
    """Depth-first through producers whose depth is unknown; meeting a node on the current path means the
    path from it back to here is a real cycle, reported producer -> consumer."""
    path, pending = [root], [iter(nodes[root].producers)]
    depth[root] = _ON_PATH
    while path:
        for p in pending[-1]:
            if depth[p] == _UNSEEN:
                depth[p] = _ON_PATH
                path.append(p)
                pending.append(iter(nodes[p].producers))
                break
            if depth[p] == _ON_PATH:
                start = path.index(p)
                raise CycleError(pipeline, [nodes[i].name for i in [p, *reversed(path[start + 1 :])]])
        else:
            u = path.pop()
            pending.pop()
            depth[u] = 1 + max((depth[q] for q in nodes[u].producers), default=-1)
