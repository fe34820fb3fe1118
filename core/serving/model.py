"""What a version serves with: the user's `predict(state, record) -> JSON value` (checked and shipped by
value as its project's archive at `register`, imported from that archive where it serves) or the built-in
predict of the built-in training step."""

from __future__ import annotations

import importlib
import io
import json
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kinetic_tui.core.artifacts import ArtifactStore
from kinetic_tui.core.errors import KineticError, ValidationError
from kinetic_tui.core.submission.packaging.archive import build_context_zip
from kinetic_tui.core.submission.packaging.plan import PLAN_ARCNAME, make_plan
from kinetic_tui.core.submission.packaging.root import module_root
from kinetic_tui.core.training.entry import check_step_ref

Predict = Callable[[Any, Any], Any]


class NotServable(KineticError):
    """The version carries no model (registered before versions kept their trained state): HTTP 409."""


def builtin_predict(state: Any, record: Any) -> dict[str, Any]:
    """The built-in step's model is one learned factor, its final loss: the score scales the record's
    numbers by it, so versions trained differently answer differently."""
    factor = state.get("loss") if isinstance(state, dict) else None
    if not isinstance(factor, int | float):
        raise ValidationError("the built-in predict needs a state with a numeric 'loss' (the built-in step's)")
    return {"score": factor * _numeric_sum(record), "loss": factor}


def _numeric_sum(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return sum(_numeric_sum(v) for v in value.values())
    if isinstance(value, list):
        return sum(_numeric_sum(v) for v in value)
    return 0.0


def unservable(group: str, version: int, source: str | None) -> str:
    return (
        f"model {group}:v{version} was registered without its model (before versions carried one); register "
        f"it again from its training: register {group} --from-training {source or 'TRAINING'}"
    )


def import_predict(store: ArtifactStore, ref: str, code: str | None) -> Predict:
    """Import MODULE:FUNC from the version's own code archive (extracted once per process), so two
    versions whose projects define the same module each get their own."""
    module_name = ref.partition(":")[0]
    if code is None:
        return resolve(ref)
    root = _extracted(store, code)
    plan = json.loads((root / PLAN_ARCNAME).read_text())
    paths = [str(root / rel) for rel in plan.get("sys_path_rel") or []] or [str(root)]
    top = module_name.split(".")[0]
    stale = {n: m for n, m in sys.modules.items() if n == top or n.startswith(top + ".")}
    for n in stale:
        del sys.modules[n]
    sys.path[:0] = paths
    try:
        return resolve(ref)
    finally:
        del sys.path[: len(paths)]
        for n in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[n]  # kept alive by the function's globals; the next version imports its own
        sys.modules.update(stale)


def _extracted(store: ArtifactStore, code: str) -> Path:
    """The code archive's directory, shared by every instance on this machine. It is extracted beside it and
    renamed into place, so it is whole whenever it exists: an instance loading it at the same time as
    another, or killed while extracting, never leaves or sees half of it."""
    root = Path(tempfile.gettempdir()) / f"kinetic-predict-{code[:16]}"
    if root.is_dir():
        return root
    partial = Path(tempfile.mkdtemp(prefix=f"{root.name}.", dir=root.parent))
    try:
        with zipfile.ZipFile(io.BytesIO(store.get_bytes(code))) as archive:
            archive.extractall(partial)
        partial.rename(root)
    except OSError:
        if not root.is_dir():  # not another loader's rename winning: a real failure
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return root


def resolve(ref: str) -> Predict:
    """The callable MODULE:FUNC names; ValidationError naming what is wrong."""
    check_step_ref(ref)
    module_name, _, attr = ref.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except ImportError as exc:
        raise ValidationError(f"predict {ref!r}: module {module_name!r} does not import ({exc})") from None
    except AttributeError:
        raise ValidationError(f"predict {ref!r}: module {module_name!r} has no {attr!r}") from None
    if not callable(target):
        raise ValidationError(f"predict {ref!r} is not callable (a {type(target).__name__})")
    return target  # type: ignore[no-any-return]


def package_predict(ref: str, store: ArtifactStore) -> str | None:
    """Check that MODULE:FUNC imports here and is callable, then keep its project's archive in the artifact
    store; its digest (None for a predict installed in the environment, or one of this product's own
    modules, which every instance and serving pod imports: both travel by name)."""
    resolve(ref)
    module = ref.partition(":")[0]
    root = None if module.partition(".")[0] == "kinetic_tui" else module_root(module)
    if root is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        archive, _ = build_context_zip(root, Path(tmp) / "predict.zip", plan=make_plan(root, None))
        return store.put_bytes(archive.read_bytes())
