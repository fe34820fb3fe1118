"""A detached process that keeps a local queue moving while no client is looking.

Scheduling normally happens in whichever process looks at the workspace. A job queued behind a full pool by
a client that then exits would wait until someone looks again; so whenever a submit leaves a job PENDING,
the submitter makes sure one watcher runs for the home. The watcher reconciles and schedules every
`POLL` seconds and exits as soon as nothing is pending. One per home, by an flock on
`run/queue-watcher.lock`; after releasing it the watcher checks the queue once more, so a job queued while
it was exiting is never stranded.

The watcher process runs `python -m kinetic_tui.core.supervisor`, whose `__main__` opens the home's
backend and hands it to `watch`: this module knows only what it is given, so the backend may import it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kinetic_tui.core.paths import kinetic_home

if TYPE_CHECKING:
    from kinetic_tui.core.store import Store

POLL = 0.1
# The submitter usually keeps looking for a while (waiting on a handle or a batch) and schedules as it
# looks; the watcher only matters once nobody does, so it starts its work (importing the store, ~0.1 s of
# CPU) after this pause rather than competing with the jobs it was started for.
START_DELAY = 0.5
LOCK_NAME = "queue-watcher.lock"


def _lock_path() -> Path:
    run = kinetic_home() / "run"
    run.mkdir(exist_ok=True)
    return run / LOCK_NAME


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def ensure_running() -> None:
    """Start a watcher for this home unless one holds the lock (cheap: one flock attempt)."""
    fd = _try_lock(_lock_path())
    if fd is None:
        return
    os.close(fd)  # free: hand the lock to the watcher we start
    home = kinetic_home()
    log = open(home / "run" / "queue-watcher.log", "ab")  # noqa: SIM115 - owned by the child
    with log:  # the home may be this process's console's rather than its environment's: pass it on
        subprocess.Popen(
            [sys.executable, "-m", "kinetic_tui.core.supervisor"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            cwd=str(_import_root()),
            env={**os.environ, "KINETIC_HOME": str(home)},
        )


def _import_root() -> Path:
    """The sys.path entry that holds `kinetic_tui` (site-packages, or a source checkout's root), so `-m`
    finds this very copy of the package whatever the caller's cwd."""
    return Path(sys.modules["kinetic_tui"].__file__ or ".").resolve().parent.parent


class Queue(Protocol):
    """What the watcher drives: the backend of this home."""

    store: Store

    def reconcile(self) -> list[str]: ...


def watch(backend: Queue) -> None:
    """Reconcile every POLL seconds while anything is pending and this process holds the lock."""
    from kinetic_tui.core.store import jobs_repo  # here: the watcher imports the store only after START_DELAY

    path = _lock_path()
    while True:
        fd = _try_lock(path)
        if fd is None:
            return  # another watcher has it
        try:
            while jobs_repo.any_pending(backend.store):
                backend.reconcile()
                time.sleep(POLL)
        finally:
            os.close(fd)
        if not jobs_repo.any_pending(backend.store):
            return
