"""The supervisor's loop: hold the lease, do a round of every due duty, sleep, repeat; exit when no duty is
due or when told to stop (SIGTERM, from `down`). The sleep is the loop's poll, or shorter when a due duty
asks for its next round sooner (a pipeline step job is running: its end starts the next step).

A duty that raises is logged and tried again later, while the others go on every round: one broken study
must not stall the job queue. A duty that keeps failing (its cluster unreachable) backs off and is logged
with its traceback once, then in one line per try: it neither spins nor fills the supervisor's log.
After releasing the lease the loop looks once more, so work queued while it was exiting is never stranded.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from kinetic_tui.core.supervisor import duties
from kinetic_tui.core.supervisor.lease import Lease

log = logging.getLogger(__name__)

POLL = 0.1
MAX_BACKOFF = 30.0  # seconds between tries of a duty that keeps failing


class Failing:
    """The duties whose last round raised, each with its count of failures in a row and its next try: the
    pause doubles from POLL per failure up to MAX_BACKOFF, and a success clears it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._duties: dict[str, tuple[int, float]] = {}

    def waiting(self, name: str) -> bool:
        """True while the duty's backoff has not run out."""
        return name in self._duties and self._clock() < self._duties[name][1]

    def failed(self, name: str, error: Exception) -> None:
        """Called inside the `except` that caught `error`: the first failure in a row logs its traceback."""
        count = self._duties.get(name, (0, 0.0))[0] + 1
        delay = min(POLL * 2**count, MAX_BACKOFF)
        self._duties[name] = (count, self._clock() + delay)
        if count == 1:
            log.exception("%s failed this round; next try in %.1f s", name, delay)
        else:
            log.warning("%s failed again (%d in a row; next try in %.1f s): %s", name, count, delay, error)

    def succeeded(self, name: str) -> None:
        self._duties.pop(name, None)


def serve(home: duties.Supervised, poll: float = POLL, lease: Lease | None = None) -> None:
    """Serve while duties are due; `lease` is one the starter handed over, else the loop takes its own."""
    stopping = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    failing = Failing()
    while not stopping.is_set():
        lease = lease or Lease.acquire(home.home)
        if lease is None:
            return  # another supervisor serves this home
        try:
            while not stopping.is_set():
                due = _round(home, failing)
                if not due:
                    break
                stopping.wait(min([poll, *(duty.pause for duty in due if duty.pause is not None)]))
        finally:
            lease.release()
            lease = None
        if stopping.is_set() or not _due(home):
            return


def _due(home: duties.Supervised) -> list[duties.Duty]:
    found: list[duties.Duty] = []
    for duty in duties.DUTIES:
        try:
            if duty.due(home):
                found.append(duty)
        except Exception:
            log.exception("checking %s failed", duty.name)
    return found


def _round(home: duties.Supervised, failing: Failing) -> list[duties.Duty]:
    """One round of every due duty not backing off; the duties that were due (none: nothing left to do)."""
    due = _due(home)
    for duty in due:
        if failing.waiting(duty.name):
            continue
        try:
            duty.tick(home)
        except Exception as error:
            failing.failed(duty.name, error)
        else:
            failing.succeeded(duty.name)
    return due
