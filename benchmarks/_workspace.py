"""Shared set-up for benchmarks that run real jobs: a throw-away KINETIC_HOME and a tiny user project."""

from __future__ import annotations

import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJECT_MODULE = """
import kinetic_tui as kinetic


def square(x):
    return x * x


remote_square = kinetic.run()(square)
"""


def fresh_workspace(prefix: str) -> Path:
    """Point KINETIC_HOME at a new temp dir and put a user project (module `bench_user`) on sys.path."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["KINETIC_HOME"] = str(root / "home")
    project = root / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'bench-user'\n")
    (project / "bench_user.py").write_text(PROJECT_MODULE)
    sys.path.insert(0, str(project))
    os.chdir(project)
    return project


def user_module() -> Any:
    return importlib.import_module("bench_user")


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def import_cloudpickle_floor() -> float:
    """The whole-process floor: a fresh interpreter that imports what the runner needs."""
    return timed(lambda: subprocess.run([sys.executable, "-c", "import cloudpickle"], check=True))


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def interleaved_ms(candidate: list[str], baseline: list[str], rounds: int) -> tuple[float, float]:
    """Median ms of fresh `baseline` and `candidate` processes (in that order), run in turns so that the
    machine's load weighs on both alike."""
    base, cand = [], []
    for _ in range(rounds):
        base.append(timed(lambda: subprocess.run(baseline, check=True, stdout=subprocess.DEVNULL)))
        cand.append(timed(lambda: subprocess.run(candidate, check=True, stdout=subprocess.DEVNULL)))
    return median_ms(base), median_ms(cand)
