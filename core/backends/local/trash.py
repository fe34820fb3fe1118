"""Removing job and lane working directories without making the caller wait for the file system."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

from kinetic_tui.core.paths import kinetic_home


def discard(path: Path) -> None:
    """Remove a directory tree off the caller's path: rename it into the workspace trash (one cheap
    metadata operation) and let this process's emptying thread remove it. Whatever an exiting process
    leaves in the trash is emptied by the next one. A runner's downloaded payload copy (a runner killed
    before it read and deleted it) is deleted first: it holds secret values in clear and never sits in the
    trash."""
    for payload in path.glob("host-*/download/*.pkl"):
        payload.unlink(missing_ok=True)
    trash = kinetic_home() / "local" / "trash"
    trash.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(path, trash / f"{path.parent.name}-{path.name}-{os.getpid()}-{time.monotonic_ns()}")
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    _empty_later(trash)


class _Emptier:
    """One thread per process empties the trash directories handed to it, started on first use: a thread
    started per removal would cost every job's cleanup its start-up."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.pending: set[Path] = set()
        self.running = False


_emptier = _Emptier()
os.register_at_fork(after_in_child=lambda: globals().update(_emptier=_Emptier()))  # threads do not survive fork


def _empty_later(trash: Path) -> None:
    emptier = _emptier
    with emptier.lock:
        emptier.pending.add(trash)
        start, emptier.running = not emptier.running, True
    if start:
        threading.Thread(target=_empty_forever, args=(emptier,), name="kinetic-trash", daemon=True).start()
    emptier.wake.set()


def _empty_forever(emptier: _Emptier) -> None:
    while True:
        emptier.wake.wait()
        emptier.wake.clear()  # before taking the work: a trash handed over from now on wakes us again
        with emptier.lock:
            trashes, emptier.pending = emptier.pending, set()
        for trash in trashes:
            try:
                entries = list(trash.iterdir())
            except FileNotFoundError:  # the home itself was removed
                continue
            for entry in entries:
                shutil.rmtree(entry, ignore_errors=True)
