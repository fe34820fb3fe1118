"""The steps of a pipeline: `Step` (a pure function of its inputs) and `ConditionStep` (a gate)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.validation import MAX_STEP_RETRIES, require_int

PARAMS = "params"


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
    for where in ("accelerator", "pool"):
        value = getattr(step, where)
        if value is not None and (not isinstance(value, str) or not value):
            raise ValidationError(f"step {name!r}: {where} must be a non-empty string or None, got {value!r}")
    if step.accelerator is not None and step.pool is not None:
        raise ValidationError(f"step {name!r}: give accelerator= or pool=, not both")
    require_int(f"step {name!r}: retries", step.retries, 0, MAX_STEP_RETRIES)
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
    # where it runs as a job: an accelerator, or a pool (its accelerator); None: the pipeline's default
    accelerator: str | None = None
    pool: str | None = None
    retries: int = 0  # further attempts after a failure, each a new job
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
    # where it runs as a job: an accelerator, or a pool (its accelerator); None: the pipeline's default
    accelerator: str | None = None
    pool: str | None = None
    retries: int = 0  # further attempts after a failure, each a new job
    _param_refs: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)  # (input, param)
    # (input, step, output)
    _step_refs: tuple[tuple[str, str, str], ...] = field(init=False, repr=False, compare=False)
    _sources: tuple[str, ...] = field(init=False, repr=False, compare=False)  # the steps read, once each

    def __post_init__(self) -> None:
        _normalise_step(self, "predicate", self.predicate)
