"""A throw-away user project on disk, importable by name, as the console's `submit MODULE:FUNC` needs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def user_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str) -> Path:
    """`tmp_path/project` with a pyproject.toml and `module`.py holding `source`: the cwd and on sys.path,
    and re-imported fresh by whichever test imports it next."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f"[project]\nname = '{module.replace('_', '-')}'\n")
    (project / f"{module}.py").write_text(source)
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    sys.modules.pop(module, None)
    return project
