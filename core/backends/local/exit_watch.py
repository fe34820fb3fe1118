"""Waking a client that waits on its job the moment the job's processes are reaped.

The fork server keeps a spawn's connection open until it has reaped every host that spawn started, and
closes it right after writing their exit files. A client waiting on the job pauses on that socket instead
of sleeping, so it looks again at once instead of at its next poll. The socket is only a hint: the exit
files stay the record, and a client without one (another process, the cold path, a full table) sleeps.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import OrderedDict
from pathlib import Path

MAX_WATCHED = 64  # sockets this process keeps; the oldest is closed first (its waiter then sleeps)

_lock = threading.Lock()
_watched: OrderedDict[str, socket.socket] = OrderedDict()


def watch(job_dir: Path, sock: socket.socket) -> None:
    """Keep the spawn connection of the job in `job_dir` for `pause`."""
    with _lock:
        _watched[str(job_dir)] = sock
        while len(_watched) > MAX_WATCHED:
            _watched.popitem(last=False)[1].close()


def watching(job_dir: Path) -> bool:
    """Whether this process holds the job's spawn connection (so `pause` wakes at its end)."""
    with _lock:
        return str(job_dir) in _watched


def pause(job_dir: Path, seconds: float) -> None:
    """Sleep up to `seconds`, ending early when the job's processes have all been reaped (or their reaper
    ended). One thread at a time uses a job's socket; any other waiter on that job sleeps."""
    pause_any([job_dir], seconds, seconds)


def pause_any(job_dirs: list[Path], seconds: float, unwatched: float) -> None:
    """Sleep up to `seconds`, ending early when every process of one of `job_dirs` has been reaped; when
    some of them have no socket here (launched by another process), wake after `unwatched` seconds at
    most, so that the caller can look at their exit files."""
    keys = [str(job_dir) for job_dir in job_dirs]
    with _lock:
        socks = {key: sock for key in keys if (sock := _watched.pop(key, None)) is not None}
    if len(socks) < len(keys):
        seconds = min(seconds, unwatched)
    if not socks:
        time.sleep(seconds)
        return
    poller = select.poll()  # not select(): this process may hold more than 1024 descriptors
    by_fd = {}
    for key, sock in socks.items():
        poller.register(sock, select.POLLIN)
        by_fd[sock.fileno()] = key
    for fd, _event in poller.poll(seconds * 1000):
        socks.pop(by_fd[fd]).close()  # the server closed its end: every host is reaped, or the server is gone
    with _lock:
        for key, sock in socks.items():
            if key in _watched:  # another spawn of the same directory (a retry) took the slot
                sock.close()
            else:
                _watched[key] = sock
