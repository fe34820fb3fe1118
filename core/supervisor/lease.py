"""The supervisor's lease: an exclusive flock on `run/supervisor.lock`, held for the process's whole life.

A lock rather than a pid file: the kernel drops it when the holder dies, however it dies, so a stale pid
can never keep a second supervisor from starting, and two starters racing can never both win. The holder
writes its pid into the locked file so `down` and `doctor` can find it; the pid is read only while the lock
is held by someone, so it is never a guess.

A starter takes the lease itself and hands it to the process it starts (the locked file descriptor is
inherited; HANDOVER_ENV names it), writing the child's pid: from the instant a supervisor is started the
lease says so, so a `stop` in the child's first second can never miss it and let it start afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = "supervisor.lock"
HANDOVER_ENV = "KINETIC_SUPERVISOR_LEASE_FD"
# Set for a supervisor whose first duty is work nobody else does (a pipeline run's steps): it skips the
# start delay that lets a submitter's own scheduling go first.
AT_ONCE_ENV = "KINETIC_SUPERVISOR_AT_ONCE"


def lock_path(home: Path) -> Path:
    run = home / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    return run / LOCK_NAME


class Lease:
    """Held while this object lives and `release` was not called."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def acquire(cls, home: Path, *, pid: bool = True) -> Lease | None:
        """The lease, or None when another process holds it (one non-blocking flock attempt). Without
        `pid`, the file stays empty (a holder still starting) until `hand_to` names the process."""
        fd = os.open(lock_path(home), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        if pid:
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd)

    @classmethod
    def inherited(cls) -> Lease | None:
        """The lease the process that started this one handed over, if it did."""
        text = os.environ.pop(HANDOVER_ENV, "")
        if not text.isdigit():
            return None
        fd = int(text)
        os.set_inheritable(fd, False)  # this process's own children must never hold the home's lease
        return cls(fd)

    @property
    def fd(self) -> int:
        return self._fd

    def hand_to(self, pid: int) -> None:
        """Name `pid` (a child that inherited the descriptor) as the holder and let go of this copy; the
        lock stays held through the child's."""
        os.pwrite(self._fd, f"{pid}\n".encode(), 0)
        os.close(self._fd)
        self._fd = -1

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = -1


def holder(home: Path) -> int | None:
    """The pid of the process holding the home's lease, or None when nobody holds it."""
    path = home / "run" / LOCK_NAME
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            # the holder writes its pid right after locking: an empty file is a holder still starting
            return int(text) if text.isdigit() else 0
        return None
    finally:
        os.close(fd)
