"""payload.pkl: the function, its arguments, captured env and volumes, cloudpickled with the project by value."""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import os
import pickle
import platform
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import cloudpickle

from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.submission.packaging.by_value import (
    dumps_keeping_filenames,
    filename_keeping_dumps,
    project_by_value,
)


class PayloadError(KineticError):
    """The function or one of its arguments cannot be pickled; the message names which."""


@functools.lru_cache(maxsize=1)
def client_fingerprint() -> dict[str, str]:
    """Versions the runner compares against its own to explain unpickling failures."""
    try:
        kinetic = importlib.metadata.version("kinetic-tui")
    except importlib.metadata.PackageNotFoundError:
        kinetic = "unknown"
    return {"python": platform.python_version(), "cloudpickle": cloudpickle.__version__, "kinetic": kinetic}


def build_payload(
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    env_vars: Mapping[str, str],
    volumes: Mapping[str, Any],
    package_root: str | os.PathLike[str],
) -> bytes:
    """Cloudpickle the payload with every module under `package_root` pickled by value.

    `args`, `kwargs` and `volumes` must already have their `Data` replaced by refs
    (kinetic_tui.core.data.replace_data_refs).
    """
    call_args, call_kwargs = tuple(args), dict(kwargs)
    payload = {
        "func": func,
        "args": call_args,
        "kwargs": call_kwargs,
        "env_vars": dict(env_vars),
        "volumes": dict(volumes),
        "client_fingerprint": client_fingerprint(),
    }
    root = Path(package_root).resolve()
    with project_by_value(root):
        try:
            return dumps_keeping_filenames(payload, root)
        except Exception as exc:
            raise PayloadError(_explain_pickle_failure(func, call_args, call_kwargs, exc)) from exc


def build_batch(
    func: Callable[..., Any],
    calls: Sequence[tuple[Sequence[Any], Mapping[str, Any]]],
    env_vars: Mapping[str, str],
    package_root: str | os.PathLike[str],
) -> bytes:
    """The one artifact of a map's lanes: the function's payload once, and each input's (args, kwargs)
    pickled on its own, the same way (by value, Data already replaced by refs).

    A lane unpickles the function once and each input as it reaches it, so one bad input fails only its
    own job. PayloadError names the input that cannot be pickled (`input 3: argument 'x' ...`).
    """
    root = Path(package_root).resolve()
    payload = build_payload(func, (), {}, env_vars, {}, root)
    inputs = []
    dumps = filename_keeping_dumps(root)
    with project_by_value(root):
        for index, (args, kwargs) in enumerate(calls):
            try:
                inputs.append(dumps((tuple(args), dict(kwargs))))
            except Exception as exc:
                raise PayloadError(
                    f"input {index}: {_explain_pickle_failure(func, tuple(args), dict(kwargs), exc)}"
                ) from exc
    return pickle.dumps({"payload": payload, "inputs": inputs}, protocol=pickle.HIGHEST_PROTOCOL)


def _explain_pickle_failure(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], exc: Exception
) -> str:
    """Pickle the parts one by one so the message names the culprit instead of the whole payload."""
    names = _positional_names(func)
    parts: list[tuple[str, Any]] = [(f"function {getattr(func, '__qualname__', func)!r}", func)]
    parts += [
        (f"argument {names[i]!r} (args[{i}])" if i < len(names) else f"argument args[{i}]", value)
        for i, value in enumerate(args)
    ]
    parts += [(f"argument {key!r} (kwargs[{key!r}])", value) for key, value in kwargs.items()]
    for label, value in parts:
        try:
            cloudpickle.dumps(value)
        except Exception as part_exc:
            return f"{label} cannot be pickled: {type(part_exc).__name__}: {part_exc}"
    return f"the payload cannot be pickled: {type(exc).__name__}: {exc}"


def _positional_names(func: Callable[..., Any]) -> list[str]:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
