"""Temp user projects and real client processes for the `@run` lifecycle tests.

A "user project" is a directory with a pyproject.toml and a package that is installed nowhere: clients
import it only because they run with the project as their working directory (subprocess) or because a
test put it on `sys.path` for its own duration (in-process). Every job these tests start is a real
runner process of the local backend; `stop_jobs` kills whatever a test left behind.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PYPROJECT = '[project]\nname = "userproj"\nversion = "0.1"\n'
RESULT_PREFIX = "RESULT "
CLIENT_TIMEOUT = 90.0


# The head of a task module the map tests ship: its imports and a `wait_for(path)` a task blocks on until
# the test writes a release marker.
TASKS_PRELUDE = """
import json
import os
import time
from pathlib import Path

import kinetic_tui as kinetic


def wait_for(path, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.02)
"""


def flaky_task(run_options: str = "") -> str:
    """Source of a `@kinetic.run(run_options)` task `flaky(x, marker_dir)` whose first attempt per input
    fails (a marker file remembers it) and whose retry returns x * 10: what the retry tests run. The
    module it goes in imports `kinetic_tui as kinetic` and `Path`."""
    return f"""

@kinetic.run({run_options})
def flaky(x, marker_dir):
    marker = Path(marker_dir) / str(x)
    if not marker.exists():
        marker.write_text("first attempt")
        raise RuntimeError(f"first attempt of {{x}} fails")
    return x * 10
"""


def make_project(root: Path, files: Mapping[str, str], *, pyproject: bool = True) -> Path:
    """Write `files` (relpath -> dedented text) under `root`, plus a pyproject.toml marking the root."""
    root.mkdir(parents=True, exist_ok=True)
    if pyproject:
        (root / "pyproject.toml").write_text(PYPROJECT)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def run_client(
    cwd: Path, *argv: str, env: Mapping[str, str] | None = None, timeout: float = CLIENT_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run `python argv...` as a user would: cwd is the project, KINETIC_HOME is the test's home.

    PYTHONPATH is dropped unless `env` sets it, so the user package is importable only through the cwd.
    """
    full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    full.update(env or {})
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)


def client_result(done: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a client printed on its `RESULT ` line; fails the test with the client's stderr otherwise."""
    assert done.returncode == 0, f"client exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert lines, f"client printed no {RESULT_PREFIX!r} line\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return json.loads(lines[-1][len(RESULT_PREFIX) :])


def load_module(monkeypatch: pytest.MonkeyPatch, project: Path, name: str) -> ModuleType:
    """Import `name` from `project` for this test only (earlier tests' same-named packages are dropped)."""
    top = name.split(".")[0]
    for loaded in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.syspath_prepend(str(project))
    importlib.invalidate_caches()
    return importlib.import_module(name)


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.02)


def flip_byte(path: Path, offset: int | None = None) -> None:
    """Corrupt a stored artifact in place (the middle byte by default)."""
    data = bytearray(path.read_bytes())
    index = len(data) // 2 if offset is None else offset
    data[index] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(autouse=True)
def stop_jobs(kinetic_home: Path) -> Iterator[None]:
    """After each test: cancel what is queued or running (so no watcher starts more), kill every job's
    process group that is still alive, stop the home's fork server."""
    yield
    from kinetic_tui.core.backends.local import lanes, launcher
    from kinetic_tui.core.backends.local.workspace import local_backend

    if (kinetic_home / "state.db").exists():
        backend = local_backend()
        for row in backend.jobs():
            if not row.status.finished:
                backend.cancel(row.job_id, grace=0.2)
        launcher.terminate([host for row in backend.jobs() if row.hosts for host in row.hosts], grace=0.2)
        launcher.terminate([host for lane in lanes.active(backend.store) for host in lane.hosts or ()], grace=0.2)
    launcher.shutdown_server()
