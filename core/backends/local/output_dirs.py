"""A map's output directories made ahead, on the core its submission leaves idle.

Why: each input of a lane runs with its own output directory (`KINETIC_OUTPUT_DIR`, `JOB/output/` in the
bucket), two `mkdir`s that cost 20 to 180 µs of kernel time each on the ext4 of the machines measured, so
a 500-input map spent 40 to 180 ms of its lanes' CPU on them. While the client encodes and queues the
batch, one core is idle: a `mkdir -p` process makes the directories there, last input first (lanes
start at the front of their chunks). A process, not a thread: a thread needs the interpreter lock
between its calls, which the submission beside it holds. A lane makes any directory it reaches first
itself, so nothing depends on this; it is owner-only (umask 077) as a lane's own would be.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
from collections.abc import Sequence

MKDIR = shutil.which("mkdir")
_running: list[subprocess.Popen[bytes]] = []  # reaped as the next ones start, and at exit


class OutputDirs:
    def __init__(self, paths: Sequence[str]) -> None:
        self._paths = [path.rstrip("/") for path in paths]
        self._process: subprocess.Popen[bytes] | None = None
        _running[:] = [process for process in _running if process.poll() is None]
        if MKDIR is None or not paths:
            return
        with contextlib.suppress(OSError):  # then the lanes make them all
            self._process = subprocess.Popen(
                [MKDIR, "-p", "--", *reversed(self._paths)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                umask=0o077,
            )
            _running.append(self._process)

    def undo(self) -> None:
        """Stop, and remove what was made: a submission whose rows never committed leaves nothing behind
        (nothing ran, so they are empty; one that is not stays)."""
        if self._process is not None:
            with contextlib.suppress(OSError):
                self._process.kill()
            self._process.wait()
        for path in self._paths:
            for directory in (path, os.path.dirname(path)):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)


@atexit.register
def _wait_for_running() -> None:
    for process in _running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
