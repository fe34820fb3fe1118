"""Removing a finished job's inputs after a blocking call has handed back its value.

`f(x)` returns as soon as the value is read. Removing the job's uploaded inputs and working directory is
a millisecond of file operations, a tenth of a warm call, and it need not delay the value: it is queued
here and done while this process would otherwise wait. A client waiting on its next job runs the queue
before it pauses (`run_pending`), while that job runs on another core; otherwise this process's cleanup
thread takes each cleanup DELAY seconds after it was queued (run at once, it would compete with the
caller's next steps for the interpreter lock). Whatever is still queued when the process exits is done
first (atexit, bounded by CLEANUP_TIMEOUT), so a script leaves nothing behind; a process killed before
that leaves what a killed waiter always left, for `jobs prune` and `doctor`. A cleanup that fails is
reported as a warning, as a slow one was when it ran in the call. `JobHandle.result(cleanup=True)` still
removes everything before it returns: only the decorator's blocking call defers (`deferred`).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from kinetic_tui.core.paths import home_path, using_home

DELAY = 0.2  # seconds a queued cleanup waits for a waiting client to take it
CLEANUP_TIMEOUT = 30.0  # seconds an exiting process waits for the cleanups it still has queued

_deferring: contextvars.ContextVar[bool] = contextvars.ContextVar("kinetic_cleanup_deferring", default=False)


class _Queue:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.items: deque[tuple[float, Callable[[], None]]] = deque()  # (due, cleanup), due in order
        self.running = 0
        self.worker: threading.Thread | None = None


_queue = _Queue()
os.register_at_fork(after_in_child=lambda: globals().update(_queue=_Queue()))  # threads do not survive fork


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within the block, a result's cleanup (`JobHandle.value_from`) is queued with `later`, not run."""
    token = _deferring.set(True)
    try:
        yield
    finally:
        _deferring.reset(token)


def deferring() -> bool:
    return _deferring.get()


def later(cleanup: Callable[[], None]) -> None:
    """Queue `cleanup` (see the module docstring), to run in the home it was queued in: whoever runs it
    (another call's wait, the cleanup thread) may be looking at another one. The thread starts on first use."""
    task = functools.partial(contextvars.copy_context().run, _in_home, home_path(), cleanup)
    queue = _queue
    with queue.lock:
        queue.items.append((time.monotonic() + DELAY, task))
        if queue.worker is None:
            queue.worker = threading.Thread(target=_work, args=(queue,), name="kinetic-cleanup", daemon=True)
            queue.worker.start()
        queue.changed.notify_all()


def _in_home(home: Path, cleanup: Callable[[], None]) -> None:
    with using_home(home):
        cleanup()


def run_pending() -> None:
    """Run every queued cleanup in this thread, now (a client about to wait on a job calls it)."""
    while (cleanup := _take(_queue, due_only=False)) is not None:
        _run(_queue, cleanup)


def drain(timeout: float = CLEANUP_TIMEOUT) -> bool:
    """Run what is queued and wait for what runs; False if some were still running after `timeout` s."""
    run_pending()
    queue = _queue
    deadline = time.monotonic() + timeout
    with queue.lock:
        while queue.running:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            queue.changed.wait(left)
    return True


def _take(queue: _Queue, due_only: bool) -> Callable[[], None] | None:
    with queue.lock:
        if not queue.items or (due_only and queue.items[0][0] > time.monotonic()):
            return None
        queue.running += 1
        return queue.items.popleft()[1]


def _run(queue: _Queue, cleanup: Callable[[], None]) -> None:
    try:
        cleanup()
    except Exception as exc:  # the value was handed back already: a leftover is reported, never raised
        warnings.warn(f"cleanup after a job's result: {type(exc).__name__}: {exc}", stacklevel=2)
    finally:
        with queue.lock:
            queue.running -= 1
            queue.changed.notify_all()


def _work(queue: _Queue) -> None:
    while True:
        with queue.lock:
            while not queue.items:
                queue.changed.wait()
            queue.changed.wait(max(queue.items[0][0] - time.monotonic(), 0.0))
        cleanup = _take(queue, due_only=True)
        if cleanup is not None:
            _run(queue, cleanup)


atexit.register(drain)
