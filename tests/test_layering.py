"""The core and the runner must stay importable headless: neither may pull in textual."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["core", "runner", "kinetic_tui.core.platform"])
def test_import_does_not_load_textual(module):
    code = (
        "import importlib, pkgutil, sys\n"
        f"pkg = importlib.import_module({module!r})\n"
        "for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        "loaded = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imported textual modules: {out.stdout.strip()}"


def test_runner_imports_nothing_of_ours():
    """The runner is shipped as a single file: it may import only the stdlib and cloudpickle."""
    import ast
    from pathlib import Path

    ours = {"core", "kinetic_tui", "infra", "runner"}
    for path in Path(__file__).resolve().parents[1].joinpath("runner").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                names = ["runner"]
            for name in names:
                assert name.split(".")[0] not in ours, f"{path.name} imports {name}"
