"""Removing job and lane working directories without making the caller wait for the file system."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

from kinetic_tui.core.paths import kinetic_home

_trash_lock = threading.Lock()
_emptying = False


def discard(path: Path) -> None:
    """Remove a directory tree off the caller's path: rename it into the workspace trash (one cheap
    metadata operation) and empty the trash in a background thread. Whatever an exiting process leaves
    in the trash is emptied by the next one. A runner's downloaded payload copy (a runner killed before it
    read and deleted it) is deleted first: it holds secret values in clear and never sits in the trash."""
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
    global _emptying
    with _trash_lock:
        if _emptying:
            return
        _emptying = True
    threading.Thread(target=_empty_trash, args=(trash,), name="kinetic-trash", daemon=True).start()


def _empty_trash(trash: Path) -> None:
    global _emptying
    try:
        while True:
            entries = list(trash.iterdir())
            if not entries:
                return
            for entry in entries:
                shutil.rmtree(entry, ignore_errors=True)
    finally:
        with _trash_lock:
            _emptying = False
