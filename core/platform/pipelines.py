"""Pipelines (SPEC 3.6): a DAG of pure steps whose outputs are cached across runs, with condition gates.

A step is a pure function of its input values and the params it reads, so a step whose name, code
fingerprint, input values and read params are unchanged reuses its previous outputs. The cache is any
`MutableMapping[str, dict]`: the default dict lives as long as the pipeline object, the store passes a
SQLite-backed mapping so a rerun in another process hits it too. That is why cache keys are canonical JSON
(stable across processes and Python hash seeds) and why code is fingerprinted rather than identified.

Everything structural (edges, the Kahn plan, fingerprints) is computed once per pipeline, so a rerun costs
one hash and one cache lookup per step.
"""
from __future__ import annotations

import copy
import enum
import hashlib
import json
import json.encoder
import time
import types
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kinetic_tui.core.errors import ValidationError

PARAMS = "params"

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False, check_circular=False)
# JSONEncoder.encode builds a new C encoder per call, which costs about as much as encoding a small step's
# inputs; the C encoder object itself is reusable (same arguments as JSONEncoder.iterencode passes it).
_C_ENCODE = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, False
)
# What canonical JSON raises for values it cannot represent (a cycle surfaces as RecursionError).
_NOT_JSON = (TypeError, ValueError, RecursionError)


class CycleError(ValidationError):
    """The steps' references form a cycle, so no execution order exists; `cycle` lists one such cycle."""

    def __init__(self, pipeline: str, cycle: list[str]) -> None:
        self.cycle = cycle
        path = " -> ".join([*cycle, cycle[0]])
        super().__init__(f"pipeline {pipeline!r} has a cycle: {path}")


class StepStatus(enum.StrEnum):
    EXECUTED = "Executed"
    CACHED = "Cached"
    SKIPPED = "Skipped"
    FAILED = "Failed"


class RunStatus(enum.StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


def _normalise_step(step: Step | ConditionStep, fn_field: str, fn: Any) -> None:
    """Shared by Step and ConditionStep: reject malformed names, references and gates alike, then keep a
    private copy of inputs (so the caller's dict cannot rewire a built pipeline) and the parsed references
    (so building a pipeline of 100k steps does not parse them again)."""
    name = step.name
    if not isinstance(name, str) or not name or "." in name or name == PARAMS:
        raise ValidationError(f"step name must be a non-empty string without '.' and not {PARAMS!r}, got {name!r}")
    if not callable(fn):
        raise ValidationError(f"step {name!r}: {fn_field} must be callable, got {type(fn).__name__}")
    if not isinstance(step.inputs, Mapping):
        raise ValidationError(f"step {name!r}: inputs must be a dict of name -> reference, got {step.inputs!r}")
    param_refs, step_refs = [], []
    for key, ref in step.inputs.items():
        src, dot, out = ref.partition(".") if isinstance(ref, str) else ("", "", "")
        if not isinstance(key, str) or not (src and dot and out):
            raise ValidationError(
                f"step {name!r}: input {key!r} -> {ref!r} must map a string to 'params.NAME' or 'STEP.OUTPUT'"
            )
        if src == PARAMS:
            param_refs.append((key, out))
        else:
            step_refs.append((key, src, out))
    when = step.when
    if when is not None and not (
        isinstance(when, tuple) and len(when) == 2 and isinstance(when[0], str) and isinstance(when[1], bool)
    ):
        raise ValidationError(f"step {name!r}: when must be None or (GATE, True|False), got {when!r}")
    if step.version is not None and not isinstance(step.version, str):
        raise ValidationError(f"step {name!r}: version must be a string or None, got {step.version!r}")
    object.__setattr__(step, "inputs", dict(step.inputs))
    object.__setattr__(step, "_param_refs", tuple(param_refs))
    object.__setattr__(step, "_step_refs", tuple(step_refs))
    object.__setattr__(step, "_sources", tuple(dict.fromkeys(src for _, src, _ in step_refs)))


@dataclass(frozen=True, slots=True)
class Step:
    """`fn(resolved_inputs) -> dict of outputs`; `version=None` means "fingerprint fn's code"."""

    name: str
    fn: Callable[[dict[str, Any]], dict[str, Any]]
    inputs: Mapping[str, str] = field(default_factory=dict)
    when: tuple[str, bool] | None = None
    version: str | None = None
    _param_refs: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)  # (input, param)
    # (input, step, output)
    _step_refs: tuple[tuple[str, str, str], ...] = field(init=False, repr=False, compare=False)
    _sources: tuple[str, ...] = field(init=False, repr=False, compare=False)  # the steps read, once each

    def __post_init__(self) -> None:
        _normalise_step(self, "fn", self.fn)


@dataclass(frozen=True, slots=True)
class ConditionStep:
    """A gate: `bool(predicate(resolved_inputs))` is the branch taken, cached as `{"branch": bool}`."""

    name: str
    predicate: Callable[[dict[str, Any]], Any]
    inputs: Mapping[str, str] = field(default_factory=dict)
    when: tuple[str, bool] | None = None
    version: str | None = None
    _param_refs: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)  # (input, param)
    # (input, step, output)
    _step_refs: tuple[tuple[str, str, str], ...] = field(init=False, repr=False, compare=False)
    _sources: tuple[str, ...] = field(init=False, repr=False, compare=False)  # the steps read, once each

    def __post_init__(self) -> None:
        _normalise_step(self, "predicate", self.predicate)


class StepResult(NamedTuple):
    """`duration` in seconds; `cache_key` is None when the step was Skipped or failed before it could be keyed;
    `error` is set only for Failed steps."""

    status: StepStatus
    outputs: dict[str, Any]
    cache_key: str | None
    duration: float
    error: str | None = None


def _canonical(value: Any) -> str:
    """Sorted keys, no whitespace, no NaN: equal values give equal text in any process."""
    return "".join(_C_ENCODE(value, 0)) if _C_ENCODE else _ENCODER.encode(value)


def compute_cache_key(
    name: str, resolved_inputs: Mapping[str, Any], params: Mapping[str, Any], version: str = ""
) -> str:
    """The identity of a step's work: SHA-256 of the canonical JSON of {"inputs", "name", "params",
    "version"}. Raises TypeError, ValueError or RecursionError for values JSON cannot represent."""
    return _key(_key_frame(name, version), resolved_inputs, params)


def _key_frame(name: str, version: str) -> tuple[str, str]:
    """The canonical JSON around a step's inputs and params (sorted keys: inputs, name, params, version).
    It is constant per step, so a run encodes it once per pipeline instead of once per step and run."""
    return ',"name":' + _canonical(name) + ',"params":', ',"version":' + _canonical(version) + "}"


def _key(frame: tuple[str, str], resolved_inputs: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    middle, tail = frame
    text = f'{{"inputs":{_canonical(resolved_inputs)}{middle}{_canonical(params) if params else "{}"}{tail}'
    return hashlib.sha256(text.encode()).hexdigest()


def _const_token(value: Any, memo: dict[types.CodeType, str]) -> str:
    """Constants as text that is stable across processes (frozenset order depends on the hash seed)."""
    if isinstance(value, types.CodeType):
        return "code:" + code_fingerprint(value, memo)
    if isinstance(value, tuple):
        return "(" + ",".join(_const_token(v, memo) for v in value) + ")"
    if isinstance(value, frozenset):
        return "{" + ",".join(sorted(_const_token(v, memo) for v in value)) + "}"
    return f"{type(value).__name__}:{value!r}"


def code_fingerprint(code: types.CodeType, memo: dict[types.CodeType, str] | None = None) -> str:
    """SHA-256 over bytecode, constants (nested code objects recursively) and names: editing code changes it,
    moving it (line numbers) does not."""
    memo = {} if memo is None else memo
    if code not in memo:
        digest = hashlib.sha256(code.co_code)
        digest.update("\0".join(_const_token(c, memo) for c in code.co_consts).encode())
        digest.update(("\0" + "\0".join(code.co_names)).encode())
        memo[code] = digest.hexdigest()
    return memo[code]


def _fingerprint_callable(name: str, fn: Callable[..., Any], memo: dict[types.CodeType, str]) -> str:
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        raise ValidationError(f"step {name!r}: cannot fingerprint a callable without __code__ "
                              f"({type(fn).__name__}); pass version= explicitly")
    return code_fingerprint(code, memo)


class _Node(NamedTuple):
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


def _compile(pipeline: str, steps: tuple[Step | ConditionStep, ...]) -> list[_Node]:
    """Resolve every reference and fingerprint every function once. Nodes keep the steps' given order: walking
    100k steps in the order they were allocated is several times faster than in name order."""
    index = {step.name: i for i, step in enumerate(steps)}
    if len(index) < len(steps):
        names = sorted(step.name for step in steps)
        duplicate = next(a for a, b in zip(names, names[1:]) if a == b)
        raise ValidationError(f"pipeline {pipeline!r}: duplicate step name {duplicate!r}")
    fingerprints: dict[int, str] = {}  # by id(fn): the steps keep their functions alive while we compile
    code_memo: dict[types.CodeType, str] = {}
    nodes = []
    for step in steps:
        is_condition = isinstance(step, ConditionStep)
        fn = step.predicate if is_condition else step.fn
        version = step.version
        if version is None:
            version = fingerprints.get(id(fn))
            if version is None:
                version = fingerprints[id(fn)] = _fingerprint_callable(step.name, fn, code_memo)
        try:
            producers = tuple(map(index.__getitem__, step._sources))
        except KeyError:
            key, src, out = next(ref for ref in step._step_refs if ref[1] not in index)
            raise ValidationError(f"pipeline {pipeline!r}: step {step.name!r} input {key!r} references unknown "
                                  f"step {src!r} in '{src}.{out}'") from None
        gate = branch = None
        if step.when is not None:
            gate_name, branch = step.when
            gate = index.get(gate_name)
            if gate is None or not isinstance(steps[gate], ConditionStep):
                raise ValidationError(f"pipeline {pipeline!r}: step {step.name!r} is gated on {gate_name!r}, "
                                      f"which is not a ConditionStep of this pipeline")
            if gate not in producers:
                producers += (gate,)
        nodes.append(_Node(step.name, fn, is_condition, version, step._param_refs, step._step_refs, producers,
                           gate, branch))
    return nodes


def _names_sorted(nodes: list[_Node]) -> list[int]:
    return sorted(range(len(nodes)), key=[node.name for node in nodes].__getitem__)


_UNSEEN, _ON_PATH = -1, -2


def _kahn_layers(pipeline: str, nodes: list[_Node], by_name: list[int]) -> list[list[int]]:
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


def _descend(pipeline: str, nodes: list[_Node], depth: list[int], root: int) -> None:
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
                raise CycleError(pipeline, [nodes[i].name for i in [p, *reversed(path[start + 1:])]])
        else:
            u = path.pop()
            pending.pop()
            depth[u] = 1 + max((depth[q] for q in nodes[u].producers), default=-1)


def _check_params(field_name: str, params: Any) -> dict[str, Any]:
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise ValidationError(f"{field_name} must be a dict of name -> JSON value, got {params!r}")
    for key, value in params.items():
        try:
            _canonical(value)
        except _NOT_JSON as exc:
            raise ValidationError(f"{field_name}: param {key!r} must be JSON-serialisable ({exc})") from None
    return dict(params)


class Pipeline:
    """A named DAG of steps with default params and a cache that outlives its runs."""

    def __init__(
        self,
        name: str,
        steps: Iterable[Step | ConditionStep],
        params: Mapping[str, Any] | None = None,
        cache: MutableMapping[str, dict[str, Any]] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError(f"pipeline name must be a non-empty string, got {name!r}")
        steps = tuple(steps)
        for i, step in enumerate(steps):
            if not isinstance(step, (Step, ConditionStep)):
                raise ValidationError(f"pipeline {name!r}: steps[{i}] is {type(step).__name__}, expected Step or "
                                      f"ConditionStep")
        defaults = _check_params(f"pipeline {name!r} params", {} if params is None else params)
        if cache is not None and not isinstance(cache, MutableMapping):
            raise ValidationError(f"pipeline {name!r}: cache must be a MutableMapping, got {type(cache).__name__}")
        self._nodes = _compile(name, steps)
        self._by_name = _names_sorted(self._nodes)
        self._known_params = defaults.keys() | {p for node in self._nodes for _, p in node.param_refs}
        self._layers: list[list[int]] | None = None
        self._key_frames: list[tuple[str, str]] | None = None
        self.name = name
        self.steps = steps
        self.params = defaults  # the defaults that run(params) merges over
        self.cache: MutableMapping[str, dict[str, Any]] = {} if cache is None else cache

    def _plan(self) -> list[list[int]]:
        if self._layers is None:
            self._layers = _kahn_layers(self.name, self._nodes, self._by_name)
        return self._layers

    def layers(self) -> list[list[str]]:
        """The Kahn rounds, each sorted by name: what the console draws as the DAG's layers."""
        nodes = self._nodes
        return [[nodes[i].name for i in layer] for layer in self._plan()]

    def topological_order(self) -> list[str]:
        nodes = self._nodes
        return [nodes[i].name for layer in self._plan() for i in layer]

    def edges(self) -> list[tuple[str, str]]:
        """(producer, consumer) pairs, gate edges included, sorted."""
        nodes = self._nodes
        return sorted((nodes[p].name, node.name) for node in nodes for p in node.producers)

    def _merge_params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        given = _check_params(f"pipeline {self.name!r} run params", {} if params is None else params)
        known = sorted(self._known_params)
        unknown = sorted(given.keys() - self._known_params)
        if unknown:
            raise ValidationError(f"pipeline {self.name!r}: unknown param(s) {', '.join(unknown)}; known params: "
                                  f"{', '.join(known) or '(none)'}")
        merged = {**self.params, **given}
        missing = sorted(self._known_params - merged.keys())
        if missing:
            raise ValidationError(f"pipeline {self.name!r}: param(s) {', '.join(missing)} have no default; pass "
                                  f"them to run()")
        return merged

    def run(self, params: Mapping[str, Any] | None = None) -> PipelineRun:
        """Run every step in topological order; raises (changing nothing) only for bad params or a cycle."""
        layers = self._plan()
        merged = self._merge_params(params)
        nodes, cache = self._nodes, self.cache
        if self._key_frames is None:
            self._key_frames = [_key_frame(node.name, node.version) for node in nodes]
        frames = self._key_frames
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
                result = results[node.name] = _run_node(node, frames[i], outputs, merged, cache)
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
            pipeline=self.name,
            status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
            params=merged,
            steps=results,
            branch_taken={nodes[i].name: taken for i, taken in branch.items()},
            execution_order=tuple(executed),
        )


_NO_PARAMS: Mapping[str, Any] = types.MappingProxyType({})


class _StepError(Exception):
    """Internal: why a step failed, turned into its StepResult.error."""


def _resolve_inputs(node: _Node, outputs: dict[str, dict[str, Any]], params: dict[str, Any]
                    ) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """(input values, read params) of a step whose producers all ran."""
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


def _call(node: _Node, resolved: dict[str, Any]) -> dict[str, Any]:
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


def _run_node(node: _Node, frame: tuple[str, str], outputs: dict[str, dict[str, Any]], params: dict[str, Any],
              cache: MutableMapping[str, dict[str, Any]]) -> StepResult:
    start = time.perf_counter()
    key = None
    try:
        resolved, read = _resolve_inputs(node, outputs, params)
        try:
            key = _key(frame, resolved, read)
        except _NOT_JSON as exc:
            raise _StepError(f"step {node.name!r}: inputs are not JSON-serialisable, so they cannot be cached "
                             f"({exc})") from exc
        cached = cache.get(key)
        if cached is not None:
            return StepResult(StepStatus.CACHED, cached, key, time.perf_counter() - start)
        produced = _call(node, resolved)
    except _StepError as exc:
        return StepResult(StepStatus.FAILED, {}, key, time.perf_counter() - start, str(exc))
    cache[key] = produced
    return StepResult(StepStatus.EXECUTED, produced, key, time.perf_counter() - start)


def _field(record: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = record.get(name) if isinstance(record, Mapping) else None
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        allowed = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise ValidationError(f"{where}: field {name!r} must be {allowed}, got {value!r:.80}")
    return value


def _enum_field(record: Any, name: str, kind: type[enum.StrEnum], where: str) -> Any:
    value = _field(record, name, str, where)
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise ValidationError(f"{where}: field {name!r} is {value!r}; allowed: {allowed}") from None


def _json_copy(what: str, value: Any) -> Any:
    try:
        return json.loads(_canonical(value))
    except _NOT_JSON as exc:
        raise ValidationError(f"{what} is not JSON-serialisable ({exc})") from None


@dataclass(frozen=True)
class PipelineRun:
    """One run: per-step results in topological order, the branches taken, and what actually executed."""

    pipeline: str
    status: RunStatus
    params: dict[str, Any]
    steps: dict[str, StepResult]
    branch_taken: dict[str, bool]
    execution_order: tuple[str, ...]

    def executed(self) -> list[str]:
        """Steps whose function ran to completion this run (not Cached, Skipped or Failed), in order."""
        return list(self.execution_order)

    def to_record(self) -> dict[str, Any]:
        """A JSON-serialisable dict for the store; raises ValueError naming a step whose outputs are not JSON."""
        steps = {
            name: {
                "status": r.status.value,
                "outputs": _json_copy(f"outputs of step {name!r}", r.outputs),
                "cache_key": r.cache_key,
                "duration": r.duration,
                "error": r.error,
            }
            for name, r in self.steps.items()
        }
        return {
            "pipeline": self.pipeline,
            "status": self.status.value,
            "params": _json_copy("run params", self.params),
            "branch_taken": dict(self.branch_taken),
            "executed": list(self.execution_order),
            "steps": steps,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PipelineRun:
        """Rebuild a run the store saved; a malformed record is a ValueError naming the field."""
        where = "pipeline run record"
        steps = {}
        for name, step in _field(record, "steps", dict, where).items():
            at = f"{where}, step {name!r}"
            steps[name] = StepResult(
                _enum_field(step, "status", StepStatus, at),
                dict(_field(step, "outputs", dict, at)),
                _field(step, "cache_key", (str, type(None)), at),
                float(_field(step, "duration", (int, float), at)),
                _field(step, "error", (str, type(None)), at),
            )
        return cls(
            pipeline=_field(record, "pipeline", str, where),
            status=_enum_field(record, "status", RunStatus, where),
            params=dict(_field(record, "params", dict, where)),
            steps=steps,
            branch_taken=dict(_field(record, "branch_taken", dict, where)),
            execution_order=tuple(_field(record, "executed", list, where)),
        )
