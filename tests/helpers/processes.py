"""Finding the processes of ours that serve one home: the supervisor, the fork server, job runners, lane
runners and any client a test started on it. Each carries the home in its environment (KINETIC_HOME) or
names it on its command line (the fork server's run directory, a cold runner's job directory)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def _reads(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone, or not ours to read
        return b""


def _started(stat: bytes) -> int:
    """A process's start time in clock ticks since boot (field 22 of /proc/PID/stat, the 20th after the name)."""
    return int(stat[stat.rfind(b")") + 2 :].split()[19])


# Nothing of ours that serves a test's home can be older than the test run itself, so the processes that were
# there before it (the machine's own, most of /proc) are passed over on the stat line alone: reading each one's
# environment after every test cost more than most tests.
_RUN_STARTED = _started(_reads("/proc/self/stat"))


def serving(home: Path) -> list[int]:
    """Live (not zombie) processes other than this one, started since the test run began, that belong to
    `home`."""
    marker = str(home).encode()
    env_entry = b"KINETIC_HOME=" + marker
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        stat = _reads(f"/proc/{entry.name}/stat")
        if not stat or stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z" or _started(stat) < _RUN_STARTED:
            continue
        environ = _reads(f"/proc/{entry.name}/environ").split(b"\0")
        if env_entry in environ or marker in _reads(f"/proc/{entry.name}/cmdline"):
            found.append(int(entry.name))
    return found


def describe(pid: int) -> str:
    return _reads(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def reap(home: Path, grace: float) -> dict[int, str]:
    """Wait up to `grace` seconds for the home's processes to exit; SIGKILL the rest and return them."""
    deadline = time.monotonic() + grace
    left = serving(home)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = serving(home)
    named = {pid: describe(pid) for pid in left}
    for pid in left:
        try:
            group = os.getpgid(pid)
            if group == os.getpgrp():  # started without a session of its own: its group is the test run's
                os.kill(pid, signal.SIGKILL)
            else:
                os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return named


def stop_infrastructure(home: Path) -> None:
    """Stop what serves the home (as `down` does, without cancelling jobs): its endpoints (their routers and
    instances), the supervisor, then the fork server, which exits once the jobs it forked are reaped."""
    from kinetic_tui.core.console.endpoint_processes import stop_all
    from kinetic_tui.core.paths import using_home
    from kinetic_tui.core.supervisor import process as supervisor

    with contextlib.suppress(Exception):  # a test may have left a store that cannot be opened on purpose
        stop_all(home)
    with using_home(home):
        supervisor.stop(home)
        if (home / "run" / "forkserver.sock").exists():
            from kinetic_tui.core.backends.local import launcher

            launcher.shutdown_server()
