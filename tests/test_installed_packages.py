"""Functions from installed packages travel by reference and never ship site-packages as their root."""

import importlib
import sys

from kinetic_tui.core.submission.pack import package_root_for
from kinetic_tui.core.submission.packaging import root as package_root


def test_a_function_from_an_installed_package_ships_an_empty_root(tmp_path, monkeypatch, kinetic_home):
    site = tmp_path / "site-packages"
    (site / "installed_pkg").mkdir(parents=True)
    (site / "installed_pkg" / "__init__.py").write_text("def f():\n    return 1\n")
    (site / "pyproject.toml").write_text("")  # a marker must not make site-packages look like a project
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(package_root, "interpreter_dirs", lambda: (str(site.resolve()) + "/",))
    module = importlib.import_module("installed_pkg")
    try:
        root = package_root_for(module.f)
        assert root == kinetic_home / "cache" / "empty-root" and list(root.iterdir()) == []
        monkeypatch.setenv("KINETIC_PACKAGE_ROOT", str(tmp_path))
        assert package_root_for(module.f) == tmp_path  # the override still wins
    finally:
        sys.modules.pop("installed_pkg", None)


def test_a_project_module_still_ships_its_project(tmp_path, monkeypatch):
    (tmp_path / "proj" / "pkg").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("")
    (tmp_path / "proj" / "pkg" / "__init__.py").write_text("def g():\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path / "proj"))
    module = importlib.import_module("pkg")
    try:
        assert package_root_for(module.g) == (tmp_path / "proj").resolve()
    finally:
        sys.modules.pop("pkg", None)
