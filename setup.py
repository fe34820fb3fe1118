"""Packages of the distribution: the repository's `core/`, `infra/` and `runner/` folders install under the
one import name `kinetic_tui` (as `kinetic_tui.core`, ...), so nothing but `kinetic_tui` lands at the top
of site-packages. pyproject.toml holds everything else."""

from setuptools import find_packages, setup

SUBPACKAGES = ("core", "infra", "runner")

setup(
    package_dir={"kinetic_tui": "kinetic_tui", **{f"kinetic_tui.{name}": name for name in SUBPACKAGES}},
    packages=[
        "kinetic_tui." + pkg if pkg.split(".")[0] in SUBPACKAGES else pkg
        for pkg in find_packages(
            include=["kinetic_tui", "kinetic_tui.*", *(f"{n}{s}" for n in SUBPACKAGES for s in ("", ".*"))]
        )
    ],
    package_data={"kinetic_tui": ["*.tcss", "py.typed"], "kinetic_tui.infra": ["*.template"]},
)
