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


def pause(job_dir: Path, seconds: float) -> None:
    """Sleep up to `seconds`, ending early when the job's processes have all been reaped (or their reaper
    ended). One thread at a time uses a job's socket; any other waiter on that job sleeps."""
    with _lock:
        sock = _watched.pop(str(job_dir), None)
    if sock is None:
        time.sleep(seconds)
        return
    poller = select.poll()  # not select(): this process may hold more than 1024 descriptors
    poller.register(sock, select.POLLIN)
    if poller.poll(seconds * 1000):
        sock.close()  # the server closed its end: every host is reaped, or the server is gone
        return
    with _lock:
        if str(job_dir) in _watched:  # another spawn of the same directory (a retry) took the slot
            sock.close()
        else:
            _watched[str(job_dir)] = sock
