"""The core and the runner must stay importable headless (neither may pull in textual), the runner imports
nothing of ours, and `kinetic_tui` is the only top-level import name we own.

The subprocesses run with a temp dir as their working directory, so they import what is installed, not
whatever folder of the checkout happens to sit in the current directory."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import kinetic_tui.runner

ROOT = Path(__file__).resolve().parents[1]
OUR_TOP_LEVEL_NAMES = {"kinetic_tui", "core", "infra", "runner"}  # the last three: the checkout's old names


def _in_checkout(path: Path) -> bool:
    """A path of this checkout's own code (a virtualenv kept inside the checkout holds other people's)."""
    path = path.resolve()
    return path.is_relative_to(ROOT) and "site-packages" not in path.parts


def _python(code: str, cwd: Path) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.parametrize("module", ["kinetic_tui.core", "kinetic_tui.runner", "kinetic_tui.core.platform"])
def test_import_does_not_load_textual(module: str, tmp_path: Path) -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        f"pkg = importlib.import_module({module!r})\n"
        "for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        "loaded = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(','.join(loaded))\n"
    )
    out = _python(code, tmp_path)
    assert out == "", f"{module} imported textual modules: {out}"


def test_only_kinetic_tui_is_a_top_level_name_of_ours(tmp_path: Path) -> None:
    """`core`, `infra` and `runner` are our subpackages' folder names but must not be importable as top-level
    packages (a user's own `core` would collide), before or after everything of ours has been imported."""
    code = (
        "import importlib, importlib.util, json, pkgutil, sys\n"
        "def where(name):\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    return None if spec is None else [spec.origin, *(spec.submodule_search_locations or [])]\n"
        "before = {name: where(name) for name in ('core', 'infra', 'runner')}\n"
        "for sub in ('core', 'infra', 'runner'):\n"
        "    pkg = importlib.import_module('kinetic_tui.' + sub)\n"
        "    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "after = {name: where(name) for name in ('core', 'infra', 'runner')}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('core', 'infra', 'runner'))\n"
        "print(json.dumps({'kinetic_tui': where('kinetic_tui'), 'before': before, 'after': after, "
        "'loaded': loaded}))\n"
    )
    found = json.loads(_python(code, tmp_path))
    assert found["kinetic_tui"] is not None and found["kinetic_tui"][0].endswith("__init__.py")
    assert found["loaded"] == [], f"top-level modules of ours were imported: {found['loaded']}"
    for phase in ("before", "after"):
        for name, places in found[phase].items():
            ours = [place for place in places or [] if place and _in_checkout(Path(place))]
            assert not ours, f"`import {name}` resolves to {ours} ({phase} importing kinetic_tui)"


def test_runner_imports_nothing_of_ours() -> None:
    """The runner is shipped as a single file: it may import only the stdlib and cloudpickle."""
    runner_dirs = [Path(path) for path in kinetic_tui.runner.__path__]
    sources = [path for directory in runner_dirs for path in directory.glob("*.py")]
    assert any(path.name == "remote_runner.py" for path in sources), runner_dirs
    for path in sources:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                names = ["kinetic_tui.runner"]  # a relative import reaches a sibling of ours
            for name in names:
                assert name.split(".")[0] not in OUR_TOP_LEVEL_NAMES, f"{path.name} imports {name}"
