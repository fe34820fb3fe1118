"""The built wheel installs one top-level import name, `kinetic_tui`, and carries the files the product needs.

A user's own `core`, `infra` or `runner` package must never meet ours in site-packages, so the repository's
folders of those names ship inside `kinetic_tui/`. The wheel is built from a copy of the working tree:
setuptools never prunes its `build/` directory, so a wheel built in place can carry modules deleted since.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_SHIPPED = shutil.ignore_patterns(
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".hypothesis",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    "tests",
    "benchmarks",
    "examples",
)
REQUIRED = [
    "kinetic_tui/core/__init__.py",
    "kinetic_tui/runner/remote_runner.py",
    "kinetic_tui/infra/Dockerfile.template",
    "kinetic_tui/app.tcss",
    "kinetic_tui/py.typed",
]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    shutil.copytree(ROOT, source, ignore=NOT_SHIPPED)
    # without build isolation (the test extra brings setuptools): installing it in a fresh env costs ~8 s
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "out"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (built,) = (tmp / "out").glob("kinetic_tui-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def _dist_info(archive: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in archive.namelist() if n.endswith(f".dist-info/{name}") and n.count("/") == 1]
    return archive.read(path).decode()


def test_the_only_top_level_import_name_is_kinetic_tui(wheel: zipfile.ZipFile) -> None:
    assert _dist_info(wheel, "top_level.txt").split() == ["kinetic_tui"]
    recorded = [line.rsplit(",", 2)[0] for line in _dist_info(wheel, "RECORD").splitlines() if line]
    tops = {path.split("/")[0] for path in recorded}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"kinetic_tui"}
    assert recorded and all(path in wheel.namelist() for path in recorded)


def test_the_wheel_carries_the_subpackages_and_data_files(wheel: zipfile.ZipFile) -> None:
    recorded = {line.rsplit(",", 2)[0] for line in _dist_info(wheel, "RECORD").splitlines() if line}
    missing = [path for path in REQUIRED if path not in recorded]
    assert not missing, f"missing from the wheel: {missing}"
    assert any(path.startswith("kinetic_tui/core/") and path.endswith(".py") for path in recorded)
    assert not any("__pycache__" in path or path.startswith("kinetic_tui/tests/") for path in recorded)
