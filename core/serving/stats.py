"""What a router measures: requests in flight (per instance and in total, integrated over time so a tick
reads their average), counters, requests per second and latency percentiles over recent requests."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

LATENCY_WINDOW = 2000  # recent requests the percentiles cover
RATE_WINDOW = 5.0  # seconds requests/s is averaged over


class Stats:
    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.in_flight = 0
        self.per_instance: dict[str, int] = {}
        self.requests = 0
        self.errors = 0
        self.rejected = 0  # 503 at once: every instance saturated and the queue full
        self._latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._finished: deque[float] = deque(maxlen=100_000)
        self._area = 0.0  # integral of in_flight over time since the last tick
        self._since = self._changed = clock()

    def _account(self) -> None:
        now = self.clock()
        self._area += self.in_flight * (now - self._changed)
        self._changed = now

    def enter(self) -> None:
        self._account()
        self.in_flight += 1

    def leave(self, started: float, status: int) -> None:
        self._account()
        self.in_flight -= 1
        now = self.clock()
        self.requests += 1
        if status >= 400:
            self.errors += 1
        self._latencies.append(now - started)
        self._finished.append(now)

    def tick(self) -> float:
        """The average number of requests in flight since the previous tick (time-weighted)."""
        self._account()
        span = self._changed - self._since
        average = self._area / span if span > 0 else float(self.in_flight)
        self._area, self._since = 0.0, self._changed
        return average

    def rate(self) -> float:
        cutoff = self.clock() - RATE_WINDOW
        while self._finished and self._finished[0] < cutoff:
            self._finished.popleft()
        return len(self._finished) / RATE_WINDOW

    def percentile(self, fraction: float) -> float | None:
        if not self._latencies:
            return None
        ordered = sorted(self._latencies)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    def to_dict(self) -> dict[str, Any]:
        p50, p99 = self.percentile(0.5), self.percentile(0.99)
        return {
            "in_flight": self.in_flight,
            "in_flight_by_instance": dict(self.per_instance),
            "requests": self.requests,
            "errors": self.errors,
            "rejected": self.rejected,
            "requests_per_second": round(self.rate(), 3),
            "p50_ms": None if p50 is None else round(p50 * 1000, 3),
            "p99_ms": None if p99 is None else round(p99 * 1000, 3),
        }
