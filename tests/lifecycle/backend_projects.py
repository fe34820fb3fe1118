"""Temp user projects and client processes for the local-backend lifecycle tests.

The tests use the API the way a user does: a project directory with a pyproject.toml and a package that
is installed nowhere, client code run with `sys.executable` from that directory (or imported in-process),
and real job processes started by the local backend. `reap_jobs` (autouse in the test files that import
it) kills whatever job a test left running and stops the home's fork server, so no test leaks processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.launcher import HostProcess
from kinetic_tui.core.paths import kinetic_home as home_dir
from kinetic_tui.core.paths import state_db_path
from kinetic_tui.core.store import Store
from kinetic_tui.core.supervisor import process as supervisor

CLIENT_TIMEOUT = 60.0
T = TypeVar("T")

# The functions the tests ship. Each records what a test needs to see from outside: timestamps, markers,
# the host it ran on. Plain `print` (no flush) on purpose: that is what users write.
JOBS_MODULE = '''
import os
import signal
import sys
import time
from pathlib import Path


def add(a, b):
    return a + b


def boom(message):
    raise ValueError(message)


def whoami():
    return {"pid": os.getpid(), "worker": os.environ.get("TPU_WORKER_ID"), "job": os.environ.get("KINETIC_JOB_ID")}


def two_lines(first, second, pause):
    print(first)
    time.sleep(pause)
    print(second)
    return "done"


def hold(seconds, marker_dir=None):
    """Sleep; claim a marker named by the job id so a second run of the same job would fail loudly."""
    start = time.time()
    if marker_dir is not None:
        os.close(os.open(Path(marker_dir) / os.environ["KINETIC_JOB_ID"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    time.sleep(seconds)
    return {"start": start, "end": time.time(), "job": os.environ["KINETIC_JOB_ID"]}


def paired(marker_dir):
    """`hold` with a partner instead of a duration: claim the job's marker, then run until another job has
    claimed one too, so jobs on a two-node pool overlap by construction (the markers come in pairs: a job
    that finds an odd count waits for the next), never by being slow (at most a minute)."""
    start, deadline = time.time(), time.monotonic() + 60
    markers = Path(marker_dir)
    os.close(os.open(markers / os.environ["KINETIC_JOB_ID"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    count = len(list(markers.iterdir()))
    while len(list(markers.iterdir())) < count + count % 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"start": start, "end": time.time(), "job": os.environ["KINETIC_JOB_ID"]}


def gated(release):
    """Run until the test writes `release` (at most a minute, so a failed test leaves nothing running)."""
    start, deadline = time.time(), time.monotonic() + 60
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"start": start, "end": time.time(), "job": os.environ["KINETIC_JOB_ID"]}


def gated_boom(release, message):
    """`gated`, then fail."""
    gated(release)
    raise ValueError(message)


def on_sigterm(seconds, marker, ignore):
    """Either ignore SIGTERM or note it in `marker` and exit; writes `marker`.ready once armed."""
    def noted(signum, frame):
        Path(marker).write_text("SIGTERM")
        sys.exit(143)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else noted)
    Path(marker + ".ready").write_text(str(os.getpid()))
    time.sleep(seconds)
    return "slept"


def count_lines(n):
    for i in range(n):
        print(f"line {i}")
    return n


def fail_on_worker(bad):
    worker = os.environ.get("TPU_WORKER_ID")
    print(f"worker {worker} pid {os.getpid()}")
    if worker == bad:
        raise RuntimeError(f"worker {worker} broke")
    return {"worker": worker, "pid": os.getpid()}


def read_tree(path, release=None):
    """Read every file under `path`, then (with `release`) run on as `gated` does."""
    start = time.time()
    root = Path(path)
    files = {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}
    if release is not None:
        gated(release)
    return {"files": files, "start": start, "end": time.time()}
'''


def make_project(root: Path, package: str | None = None) -> tuple[Path, str]:
    """A user project under `root` with a uniquely named package (so in-process imports never collide)."""
    package = package or f"userpkg_{secrets.token_hex(3)}"
    project = root / "project"
    (project / package).mkdir(parents=True)
    (project / "pyproject.toml").write_text(f'[project]\nname = "{package}"\nversion = "0.1"\n')
    (project / package / "__init__.py").write_text("")
    (project / package / "jobs.py").write_text(JOBS_MODULE)
    return project, package


def import_jobs(project: Path, package: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(project))
    return importlib.import_module(f"{package}.jobs")


def start_client(project: Path, code: str) -> subprocess.Popen[str]:
    """Start `code` as a client program run from the project directory (so its package imports, as for a
    user's `python -c`); it inherits KINETIC_HOME from the test."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_client(proc: subprocess.Popen[str], timeout: float = CLIENT_TIMEOUT) -> Any:
    """The JSON the client printed on its last line; a failing client fails the test with its stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, f"client failed ({proc.returncode}):\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def client_json(project: Path, code: str, timeout: float = CLIENT_TIMEOUT) -> Any:
    return finish_client(start_client(project, code), timeout)


def wait_for(probe: Callable[[], T], timeout: float, what: str, interval: float = 0.02) -> T:
    """Poll `probe` until it returns something truthy; fail the test naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def _home_store() -> Store:
    return Store(state_db_path())


def recorded_hosts() -> list[HostProcess]:
    """Every host process the store of this home ever recorded (read directly, no reconcile)."""
    store = _home_store()
    try:
        rows = store.query("SELECT hosts FROM jobs WHERE hosts IS NOT NULL")
    finally:
        store.close()
    return [HostProcess.from_dict(h) for (hosts,) in rows for h in json.loads(hosts)]


def _quiet() -> bool:
    """Nothing can start any more: no launch in flight and no supervisor (it holds its lease while alive)."""
    store = _home_store()
    try:
        launching = store.query("SELECT 1 FROM jobs WHERE status = 'RUNNING' AND hosts IS NULL LIMIT 1")
    finally:
        store.close()
    return not launching and supervisor.running(home_dir()) is None


def stop_everything(timeout: float = 15.0) -> None:
    """Cancel the queue, SIGKILL every live job group until nothing can start again, stop the fork server."""
    store = _home_store()
    try:
        store.write("UPDATE jobs SET status = 'CANCELLED', detail = 'test teardown' WHERE status = 'PENDING'")
    finally:
        store.close()
    deadline = time.monotonic() + timeout
    while True:
        for host in recorded_hosts():
            if host.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(host.pgid, signal.SIGKILL)
        if _quiet() or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    launcher.shutdown_server()


@pytest.fixture
def user_project(tmp_path: Path) -> tuple[Path, str]:
    return make_project(tmp_path)


@pytest.fixture
def jobs(user_project: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The user's `jobs` module, imported in-process from the temp project."""
    return import_jobs(*user_project, monkeypatch)


@pytest.fixture(autouse=True)
def reap_jobs(kinetic_home: Path) -> Iterator[None]:
    """After the test, leave no job, supervisor or fork server of this home running."""
    yield
    if state_db_path().exists():
        stop_everything()
    else:
        launcher.shutdown_server()
