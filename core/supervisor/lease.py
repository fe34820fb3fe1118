"""The supervisor's lease: an exclusive flock on `run/supervisor.lock`, held for the process's whole life.

A lock rather than a pid file: the kernel drops it when the holder dies, however it dies, so a stale pid
can never keep a second supervisor from starting, and two starters racing can never both win. The holder
writes its pid into the locked file so `down` and `doctor` can find it; the pid is read only while the lock
is held by someone, so it is never a guess.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = "supervisor.lock"


def lock_path(home: Path) -> Path:
    run = home / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    return run / LOCK_NAME


class Lease:
    """Held while this object lives and `release` was not called."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def acquire(cls, home: Path) -> Lease | None:
        """The lease, or None when another process holds it (one non-blocking flock attempt)."""
        fd = os.open(lock_path(home), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd)

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
