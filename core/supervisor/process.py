"""Starting and stopping the workspace supervisor: one detached process per home that drives the work no
client is watching (its duties: `duties.py`; its loop: `loop.py`).

Whoever may leave work behind brings a missing supervisor back: the local backend when a submit leaves a
job PENDING, a client waiting on a job that is still queued, the CLI and the console when the store holds
due work. Bringing it back is one flock attempt when it runs; exactly one wins the lease (`lease.py`).

This module knows only the home: the local backend imports it, so it must not import the backend.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.store import Store, jobs_repo, lanes_repo, pipeline_steps_repo, serving_repo
from kinetic_tui.core.supervisor.lease import AT_ONCE_ENV, HANDOVER_ENV, Lease, holder

LOG_NAME = "supervisor.log"
# Set in the supervisor's own process: it serves the home, so opening the home there must not start another.
SERVING = False
STOP_TIMEOUT = 5.0  # how long a stopped supervisor may take to finish its round before it is killed


def ensure_running(home: Path | None = None, at_once: bool = False) -> bool:
    """Start a supervisor for the home unless one holds the lease; True when this call started one. The
    lease passes to the started process, so it is held from this call on. `at_once`: the caller waits on
    the supervisor itself (a pipeline run), so it starts its rounds without the start delay."""
    home = kinetic_home() if home is None else home
    lease = Lease.acquire(home, pid=False)
    if lease is None:
        return False
    log = open(home / "run" / LOG_NAME, "ab")  # noqa: SIM115 - owned by the child
    try:
        with log:  # the home may be this process's console's rather than its environment's: pass it on
            child = subprocess.Popen(
                [sys.executable, "-m", "kinetic_tui.core.supervisor"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
                pass_fds=(lease.fd,),
                cwd=str(_import_root()),
                env={
                    **os.environ,
                    "KINETIC_HOME": str(home),
                    HANDOVER_ENV: str(lease.fd),
                    AT_ONCE_ENV: "1" if at_once else "",
                },
            )
    except BaseException:
        lease.release()
        raise
    lease.hand_to(child.pid)
    return True


def revive(store: Store, home: Path | None = None) -> bool:
    """Bring the supervisor back when the store holds work only a supervisor moves (a queued job, a map lane
    to close when it ends, a study with trials to submit, a pipeline run to drive, an endpoint that should
    be running or whose processes must be stopped); True when this call started one. A few indexed reads
    when nothing is due."""
    if SERVING or not (
        jobs_repo.any_queued(store)
        or lanes_repo.any_open(store)
        or store.tuning.any_may_move()
        or pipeline_steps_repo.any_running(store)
        or serving_repo.any_wanted_running(store)
        or serving_repo.endpoints_with_processes(store)
    ):
        return False
    return ensure_running(home)


def _import_root() -> Path:
    """The sys.path entry that holds `kinetic_tui` (site-packages, or a source checkout's root), so `-m`
    finds this very copy of the package whatever the caller's cwd."""
    return Path(sys.modules["kinetic_tui"].__file__ or ".").resolve().parent.parent


def running(home: Path | None = None) -> int | None:
    """The supervisor's pid (0 while it is still starting), or None when none runs."""
    return holder(kinetic_home() if home is None else home)


def stop(home: Path | None = None, timeout: float = STOP_TIMEOUT) -> int | None:
    """Stop the home's supervisor: SIGTERM lets it finish its round; after `timeout` it is killed. Returns
    its pid, or None when none ran. The lease is free when this returns."""
    home = kinetic_home() if home is None else home
    deadline = time.monotonic() + timeout
    pid = holder(home)
    while pid == 0 and time.monotonic() < deadline:  # starting: its pid is written right after the lock
        time.sleep(0.01)
        pid = holder(home)
    if not pid:
        return None
    sig = signal.SIGTERM
    while holder(home) is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if time.monotonic() >= deadline:
            sig = signal.SIGKILL
        time.sleep(0.02)
    return pid
