"""Type checkers see the public API's real signatures: a `@run` function keeps its parameters and return type
(`__call__` returns the function's type, `run_async` takes the same arguments and returns a JobHandle), and
`import kinetic_tui as kinetic` exposes the real objects, not `Any` from its lazy `__getattr__`."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import kinetic_tui

ROOT = Path(__file__).resolve().parents[1]

SNIPPET = textwrap.dedent(
    """
    import kinetic_tui as kinetic
    from kinetic_tui.core.decorator import run


    @kinetic.run(accelerator="cpu")
    def scale(x: int, factor: float = 2.0) -> float:
        return x * factor


    @run()
    def greet(name: str) -> str:
        return "hello " + name


    reveal_type(scale)
    reveal_type(scale(3))
    reveal_type(scale(3, factor=0.5))
    reveal_type(scale.run_async(3, 0.5))
    reveal_type(greet("ada"))
    scale("three")
    scale.run_async(3, factor=0.5, extra=1)
    greet()
    total: int = greet("ada")
    """
)


def mypy_lines(tmp_path: Path, source: str) -> list[str]:
    """mypy's output on `source`, checked against the package laid out as it installs (the repository's
    core/, infra/ and runner/ beside kinetic_tui/ are symlinked into it, as .ci/typecheck does)."""
    package = tmp_path / "kinetic_tui"
    package.mkdir()
    for entry in (ROOT / "kinetic_tui").iterdir():
        (package / entry.name).symlink_to(entry)
    for folder in ("core", "infra", "runner"):
        (package / folder).symlink_to(ROOT / folder)
    (tmp_path / "snippet.py").write_text(source)
    (tmp_path / "mypy.ini").write_text("[mypy]\nignore_missing_imports = True\nfollow_imports = silent\n")
    mypy = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-incremental", "--no-error-summary"]
    done = subprocess.run(
        [*mypy, "snippet.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: the snippet's intended errors
    return done.stdout.splitlines()


def by_line(lines: list[str], source: str) -> dict[str, list[str]]:
    """Each message, keyed by the snippet's source line it is about."""
    text = source.splitlines()
    found: dict[str, list[str]] = {}
    for line in lines:
        match = re.match(r"snippet\.py:(\d+): (?:note|error): (.*)", line)
        if match:
            found.setdefault(text[int(match.group(1)) - 1], []).append(match.group(2))
    return found


def test_a_run_function_keeps_its_signature_for_type_checkers(tmp_path: Path) -> None:
    found = by_line(mypy_lines(tmp_path, SNIPPET), SNIPPET)

    assert found["reveal_type(scale)"] == [
        'Revealed type is "kinetic_tui.core.decorator.RemoteCallable[[x: int, factor: float =], float]"'
    ]
    assert found["reveal_type(scale(3))"] == ['Revealed type is "float"']
    assert found["reveal_type(scale(3, factor=0.5))"] == ['Revealed type is "float"']
    assert found["reveal_type(scale.run_async(3, 0.5))"] == ['Revealed type is "kinetic_tui.core.jobs.JobHandle"']
    assert found['reveal_type(greet("ada"))'] == ['Revealed type is "str"']
    # the wrong calls fail the check, naming the parameter
    assert any('incompatible type "str"; expected "int"' in m for m in found['scale("three")'])
    assert any('Unexpected keyword argument "extra"' in m for m in found["scale.run_async(3, factor=0.5, extra=1)"])
    assert any('Missing positional argument "name"' in m for m in found["greet()"])
    assert any(
        'incompatible types in assignment (expression has type "str"' in m.lower()
        for m in found['total: int = greet("ada")']
    )
    # and nothing else: the right calls type-check
    assert len(found) == 9, found


def test_every_lazy_public_name_is_visible_to_type_checkers() -> None:
    """`__getattr__` resolves `_EXPORTS` at run time; the TYPE_CHECKING imports must name the same objects."""
    tree = ast.parse((ROOT / "kinetic_tui" / "__init__.py").read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {
        (node.module, alias.name, alias.asname)
        for node in ast.walk(guarded)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == {(module, name, name) for name, module in kinetic_tui._EXPORTS.items()}
