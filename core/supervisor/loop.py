"""The supervisor's loop: hold the lease and drive every duty, each in a thread of its own, until no duty has
been due for `linger` seconds or the supervisor is told to stop (SIGTERM, from `down`). A duty's thread does
a round while the duty is due, then sleeps the loop's poll, or less when the duty asks for its next round
sooner (a pipeline step job is running: its end starts the next step).

Duties have threads of their own because one duty's round can be slow: under load a pipeline driver's round
of sixty runs spends seconds waiting for the store's write lock. Done one after another, an endpoint whose
router died waited behind it, and while supervisors were being killed faster than such a round took, its
router was not restarted for minutes. The threads share nothing but the store, which gives each thread its
own connection, so they are as safe together as the separate processes that already drive the same work.

It lingers because starting a supervisor costs ~0.1 s of imports and of opening the store and backend, which
the next pipeline run, queued job or study would pay again if it had just exited: an operator's commands
come in bursts. Lingering costs a few indexed reads per poll; `KINETIC_SUPERVISOR_LINGER` (seconds, 0 for
none) sets it.

A duty that raises is logged and tried again later, while the others go on: one broken study must not stall
the job queue. A duty that keeps failing (its cluster unreachable) backs off and is logged with its
traceback once, then in one line per try: it neither spins nor fills the supervisor's log. A round slower
than `SLOW_TICK` is logged with its time. After releasing the lease the loop looks once more, so work queued
while it was exiting is never stranded.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from kinetic_tui.core.supervisor import duties
from kinetic_tui.core.supervisor.lease import Lease

log = logging.getLogger(__name__)

POLL = 0.1
LINGER = 30.0  # seconds the supervisor stays after its last duty, ready for the next one
LINGER_ENV = "KINETIC_SUPERVISOR_LINGER"
SLOW_TICK = 2.0  # seconds: a duty's round that took longer is logged with its time
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


def linger_from_env() -> float:
    """The linger `KINETIC_SUPERVISOR_LINGER` asks for (seconds), else LINGER; a bad value is logged, not fatal."""
    text = os.environ.get(LINGER_ENV, "")
    try:
        return max(float(text), 0.0) if text else LINGER
    except ValueError:
        log.warning("%s=%r is not a number of seconds; lingering %g s", LINGER_ENV, text, LINGER)
        return LINGER


def serve(home: duties.Supervised, poll: float = POLL, lease: Lease | None = None, linger: float = 0.0) -> None:
    """Serve while duties are due, and `linger` seconds after the last was; `lease` is one the starter
    handed over, else the loop takes its own."""
    stopping = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    while not stopping.is_set():
        lease = lease or Lease.acquire(home.home)
        if lease is None:
            return  # another supervisor serves this home
        try:
            _drive(home, poll, stopping, linger)
        finally:
            lease.release()
            lease = None
        if stopping.is_set() or not _due(home):
            return


def _drive(home: duties.Supervised, poll: float, stopping: threading.Event, linger: float = 0.0) -> None:
    """Every duty in its own thread until none has been due for `linger` seconds or `stopping` is set;
    returns once each has finished the round it was in."""
    done = threading.Event()
    last_due = [time.monotonic()]  # when a duty was last found due, here or by its own thread
    threads = [
        threading.Thread(target=_keep, args=(home, duty, poll, done, last_due), name=duty.name, daemon=True)
        for duty in duties.DUTIES
    ]
    for thread in threads:
        thread.start()
    try:
        while not stopping.is_set():
            if _due(home):
                last_due[0] = time.monotonic()
            elif time.monotonic() - last_due[0] >= linger:
                break
            stopping.wait(poll)
    finally:
        done.set()
        for thread in threads:
            thread.join()


def _keep(
    home: duties.Supervised, duty: duties.Duty, poll: float, done: threading.Event, last_due: list[float]
) -> None:
    """Rounds of `duty` until `done`; a round that found it due restarts the linger (a short duty can come
    and go between two of the loop's own looks)."""
    failing = Failing()
    while not done.is_set():
        if _turn(home, duty, failing):
            last_due[0] = time.monotonic()
        done.wait(poll if duty.pause is None else min(poll, duty.pause))


def _due(home: duties.Supervised) -> list[duties.Duty]:
    return [duty for duty in duties.DUTIES if _is_due(home, duty)]


def _is_due(home: duties.Supervised, duty: duties.Duty) -> bool:
    try:
        return duty.due(home)
    except Exception:
        log.exception("checking %s failed", duty.name)
        return False


def _turn(home: duties.Supervised, duty: duties.Duty, failing: Failing) -> bool:
    """One round of `duty` if it is due and not backing off; whether it was due."""
    if not _is_due(home, duty):
        return False
    if failing.waiting(duty.name):
        return True
    started = time.monotonic()
    try:
        duty.tick(home)
    except Exception as error:
        failing.failed(duty.name, error)
    else:
        failing.succeeded(duty.name)
    took = time.monotonic() - started
    if took > SLOW_TICK:
        log.info("%s took %.1f s this round", duty.name, took)
    return True
