"""Typed change events and the in-process pub/sub that carries them from the Console to its views.

Producers are console actions running in worker threads; consumers are async views. A slow consumer must
never stall an action, so each subscription has a bounded buffer: when it is full the new event is
dropped and counted (`Subscription.dropped`), and the view can re-read a snapshot to catch up.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from kinetic_tui.core.errors import ValidationError

DEFAULT_BUFFER = 1000


@dataclass(frozen=True)
class Event:
    """Base of every event; `kind` is the class name so JSON consumers can dispatch on it."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": type(self).__name__, **asdict(self)}


@dataclass(frozen=True)
class JobStatusChanged(Event):
    job_id: str
    status: str
    previous: str | None = None


@dataclass(frozen=True)
class LogBatch(Event):
    job_id: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class PoolChanged(Event):
    pool: str
    action: str  # "added" | "removed"


@dataclass(frozen=True)
class TrainingChanged(Event):
    training: str
    status: str
    current_epoch: int
    checkpoint_epoch: int | None


@dataclass(frozen=True)
class EpochCompleted(Event):
    training: str
    epoch: int


@dataclass(frozen=True)
class CheckpointSaved(Event):
    training: str
    epoch: int


@dataclass(frozen=True)
class StudyChanged(Event):
    study: str
    status: str
    trials: int


@dataclass(frozen=True)
class ModelRegistered(Event):
    group: str
    version: int
    artifact_hash: str


@dataclass(frozen=True)
class TransitionMade(Event):
    group: str
    version: int
    from_stage: str
    to_stage: str


@dataclass(frozen=True)
class EndpointChanged(Event):
    endpoint: str
    action: str  # "created" | "scaled"
    instance_count: int


@dataclass(frozen=True)
class ScalingDecided(Event):
    endpoint: str
    tick: float | None
    concurrency: float
    desired: int
    instance_count: int
    action: str


@dataclass(frozen=True)
class ModelInvoked(Event):
    endpoint: str
    model: str
    loaded: tuple[str, ...]
    hits: int
    misses: int


@dataclass(frozen=True)
class PipelineRegistered(Event):
    pipeline: str
    ref: str


@dataclass(frozen=True)
class StepStatusChanged(Event):
    pipeline: str
    run: int
    step: str
    status: str


@dataclass(frozen=True)
class PipelineRunFinished(Event):
    pipeline: str
    run: int
    status: str
    executed: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class DetachedWorkFailed(Event):
    """Detached work (a `--detach`ed load or pipeline run) raised after its command had returned."""

    work: str
    error_type: str
    message: str


class Subscription:
    """An async iterator over the events published after it was created."""

    def __init__(self, bus: EventBus, maxsize: int, loop: asyncio.AbstractEventLoop) -> None:
        self._bus = bus
        self._maxsize = maxsize
        self._loop = loop
        self._items: deque[Event] = deque()
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._closed = False
        self.dropped = 0

    def offer(self, event: Event) -> None:
        """Called by the producer from any thread; never blocks beyond a short lock."""
        with self._lock:
            if self._closed:
                return
            if len(self._items) >= self._maxsize:
                self.dropped += 1
                return
            self._items.append(event)
        self._notify()

    def _notify(self) -> None:
        with contextlib.suppress(RuntimeError):  # the consumer's loop is closed: nobody is listening any more
            self._loop.call_soon_threadsafe(self._wake.set)

    def pending(self) -> int:
        with self._lock:
            return len(self._items)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._bus.unsubscribe(self)
        self._notify()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        while True:
            with self._lock:
                if self._items:
                    return self._items.popleft()
                if self._closed:
                    raise StopAsyncIteration
            # the producer's wake-up is scheduled on this loop, so it cannot be lost between clear and wait
            self._wake.clear()
            await self._wake.wait()


class EventBus:
    """Fan-out of every published event to every live subscription."""

    def __init__(self) -> None:
        self._subscriptions: list[Subscription] = []
        self._lock = threading.Lock()
        self.published = 0

    def subscribe(self, maxsize: int = DEFAULT_BUFFER) -> Subscription:
        """Must be called from the consumer's event loop (the wake-ups are scheduled on it)."""
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValidationError(f"maxsize: expected an integer >= 1, got {maxsize!r}")
        subscription = Subscription(self, maxsize, asyncio.get_running_loop())
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)

    def publish(self, event: Event) -> None:
        with self._lock:
            self.published += 1
            targets = list(self._subscriptions)
        for subscription in targets:
            subscription.offer(event)
