"""By-value module registration: every module under the package root is pickled by value, not by name.

By-value pickling lets the job run even where the project is not importable (only context.zip is there, and
it may not be on sys.path at unpickling time). Modules inside the interpreter's prefixes (a venv inside the
root) stay by reference.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle

from kinetic_tui.core.submission.packaging.root import interpreter_dirs

_BY_VALUE_LOCK = threading.Lock()
# our own package always travels by name: every job's environment has it (this interpreter locally, the image
# on a cluster), and by value its module state (C encoders, locks) would not even pickle
OURS = "kinetic_tui"


@contextlib.contextmanager
def project_by_value(root: Path) -> Iterator[None]:
    """Pickle every module under the package root by value while the block runs."""
    with _BY_VALUE_LOCK:
        registered = _register_by_value(root)
        try:
            yield
        finally:
            for module in registered:
                cloudpickle.unregister_pickle_by_value(module)


def dumps_keeping_filenames(payload: Any, root: Path) -> bytes:
    """cloudpickle.dumps, except that by-value code keeps its file name relative to the package root.

    cloudpickle replaces every co_filename with "<dynamic-code>", which leaves remote tracebacks without
    file names or source lines. A root-relative name resolves against the extracted archive on the job's
    sys.path, so `linecache` finds the source and the traceback reads like a local one.
    """
    return filename_keeping_dumps(root)(payload)


def filename_keeping_dumps(root: Path) -> Callable[[Any], bytes]:
    """`dumps_keeping_filenames` for one root, its pickler class made once: a map pickles every input."""
    import io
    import types

    from cloudpickle import cloudpickle as impl

    inside = os.path.join(str(root), "")

    def reduce_code(code: types.CodeType) -> Any:
        rebuild, args = impl._code_reduce(code)
        name = code.co_filename
        if name.startswith(inside):
            name = name[len(inside) :]
        return rebuild, tuple(name if arg == "<dynamic-code>" else arg for arg in args)

    # the C pickler reads dispatch_table once, at construction (cloudpickle ships no type hints: its class is Any)
    class Pickler(cloudpickle.Pickler):  # type: ignore[misc]
        dispatch_table = collections.ChainMap({types.CodeType: reduce_code}, cloudpickle.Pickler.dispatch_table)

    def dumps(payload: Any) -> bytes:
        buffer = io.BytesIO()
        Pickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(payload)
        return buffer.getvalue()

    return dumps


# the realpath of each module file's directory, kept for the process: resolving them is most of a
# payload's cost on a slow filesystem, and a module's directory does not move while it is imported
_REAL_DIRS: dict[str, str] = {}


# per package root: the names of the modules under it, with the sys.modules they were found in (its size
# and newest name); a submission checks every loaded module otherwise, and most add none
_UNDER_ROOT: dict[str, tuple[tuple[int, str], list[str]]] = {}


def _register_by_value(root: Path) -> list[Any]:
    already = set(cloudpickle.list_registry_pickle_by_value())
    inside = os.path.join(str(root), "")
    seen = (len(sys.modules), next(reversed(sys.modules), ""))
    cached = _UNDER_ROOT.get(inside)
    names = cached[1] if cached is not None and cached[0] == seen else _modules_under(inside, seen)
    registered = []
    for name in names:
        module = sys.modules.get(name)
        if module is not None and name not in already:
            cloudpickle.register_pickle_by_value(module)
            registered.append(module)
    return registered


def _modules_under(inside: str, seen: tuple[int, str]) -> list[str]:
    interpreter = interpreter_dirs()
    real_dirs = _REAL_DIRS
    names, relative = [], False
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name == "__main__" or name.partition(".")[0] == OURS:
            continue
        real = real_dirs.get(file)
        if real is None:
            real = os.path.realpath(os.path.dirname(os.path.abspath(file))) + os.sep
            if os.path.isabs(file):
                real_dirs[file] = real
            else:
                relative = True  # depends on the cwd of the moment: not kept
        if real.startswith(inside) and not real.startswith(interpreter):
            names.append(name)
    if not relative:
        _UNDER_ROOT[inside] = (seen, names)
    return names
