"""The supervisor's loop: hold the lease, do a round of every due duty, sleep, repeat; exit when no duty is
due or when told to stop (SIGTERM, from `down`).

A duty that raises is logged and tried again next round: one broken study must not stall the job queue.
After releasing the lease the loop looks once more, so work queued while it was exiting is never stranded.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from kinetic_tui.core.supervisor import duties
from kinetic_tui.core.supervisor.lease import Lease

log = logging.getLogger(__name__)

POLL = 0.1


def serve(home: duties.Supervised, poll: float = POLL, lease: Lease | None = None) -> None:
    """Serve while duties are due; `lease` is one the starter handed over, else the loop takes its own."""
    stopping = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    while not stopping.is_set():
        lease = lease or Lease.acquire(home.home)
        if lease is None:
            return  # another supervisor serves this home
        try:
            while not stopping.is_set() and _round(home):
                stopping.wait(poll)
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


def _round(home: duties.Supervised) -> bool:
    """One round of every due duty; False when none was due."""
    due = _due(home)
    for duty in due:
        try:
            duty.tick(home)
        except Exception:
            log.exception("%s failed this round", duty.name)
    return bool(due)
