"""A seeded fault injector: SIGKILL, or SIGSTOP then SIGCONT, to the processes of one home.

Every pause ends: the injector sends SIGCONT when a pause is due and, when it stops, to every process it
still holds stopped. Kinds are chosen so that every kind is hit early: 70% of the picks go to the live
kind hit least so far, the rest are uniform over the live kinds. A kind rests `len(KINDS) * every`
seconds after each fault, so it is hit no more often than when every kind is live: a home where little
runs (a supervisor alone with a queue to drain) is not hammered until its supervisor cannot finish
starting. Clients are killed at most `client_kills`
times (a killed client submits nothing more, and the run must still reach its job count).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.processes import KINDS, Target, discover

PAUSE = (0.2, 1.5)  # seconds a stopped process stays stopped: well under the store's 5 s busy timeout


@dataclass
class Injector:
    home: Path
    rng: random.Random
    clients: Callable[[], list[int]]
    every: float
    client_kills: int
    faults: list[dict[str, Any]] = field(default_factory=list)
    _stopped: dict[Target, float] = field(default_factory=dict)
    _halt: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)
    cut_clients: int = 0  # clients the test killed after the faults because they did not finish in time

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-injector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(30)
        self._resume(everything=True)

    def by_kind(self) -> Counter[str]:
        return Counter(f"{f['kind']}:{f['signal']}" for f in self.faults)

    def kinds_hit(self) -> set[str]:
        return {f["kind"] for f in self.faults}

    def _run(self) -> None:
        """Never dies of one bad round (a process vanishing mid-read): a dead injector would leave its paused
        processes stopped, and a stopped process holding the store's write lock stalls the whole home."""
        next_fault = time.monotonic() + self.rng.expovariate(1 / self.every)
        while not self._halt.is_set():
            try:
                self._resume()
                if time.monotonic() >= next_fault:
                    next_fault = time.monotonic() + min(self.rng.expovariate(1 / self.every), 4 * self.every)
                    self._inject()
            except Exception as exc:  # counted and reported by the test
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._halt.wait(0.01)

    def _resume(self, everything: bool = False) -> None:
        now = time.monotonic()
        for target, until in list(self._stopped.items()):
            if everything or now >= until:
                if target.same_process():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(target.pid, signal.SIGCONT)
                del self._stopped[target]

    def _inject(self) -> None:
        live = {kind: targets for kind, targets in discover(self.home, self.clients()).items() if targets}
        live = {kind: [t for t in ts if t not in self._stopped] for kind, ts in live.items()}
        rested = time.time() - len(KINDS) * self.every
        recent = {f["kind"] for f in self.faults if f["t"] > rested}
        live = {kind: ts for kind, ts in live.items() if ts and kind not in recent}
        if not live:
            return
        hits = Counter(f["kind"] for f in self.faults)
        if self.rng.random() < 0.7:
            kind = min(sorted(live), key=lambda k: (hits[k], KINDS.index(k)))
        else:
            kind = self.rng.choice(sorted(live))
        target = self.rng.choice(live[kind])
        kill = self.rng.random() < 0.5
        if kind == "client" and kill:
            kill = sum(f["kind"] == "client" and f["signal"] == "KILL" for f in self.faults) < self.client_kills
        seconds = round(self.rng.uniform(*PAUSE), 3)
        if not target.same_process():
            return
        try:
            os.kill(target.pid, signal.SIGKILL if kill else signal.SIGSTOP)
        except ProcessLookupError:
            return
        if not kill:
            self._stopped[target] = time.monotonic() + seconds
        self.faults.append(
            {
                "t": time.time(),
                "kind": kind,
                "signal": "KILL" if kill else "STOP",
                "pid": target.pid,
                "jobs": list(target.jobs),
                "endpoint": target.endpoint,
                "seconds": None if kill else seconds,
            }
        )
