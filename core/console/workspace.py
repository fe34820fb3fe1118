"""What every console service shares: the home, the store, the local backend, the event bus, the clock, and
the thread offload that runs blocking work.

An action is a plain function run in a worker thread inside ONE store transaction; it returns its result
and the events it caused. Events are published only after the commit, so a subscriber never hears about a
change that was rolled back. Every blocking call runs with `kinetic_home()` resolving to this workspace's
home, so job submission, handles and logs find this workspace and no other, without touching the
process environment.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from kinetic_tui.core.backends.local.backend import LocalBackend
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.errors import one_line
from kinetic_tui.core.events import DetachedWorkFailed, Event, EventBus
from kinetic_tui.core.paths import call_on_home, kinetic_home
from kinetic_tui.core.store import Store

T = TypeVar("T")
Action = Callable[..., tuple[T, list[Event]]]


class Workspace:
    def __init__(
        self,
        home: str | Path | None = None,
        clock: Callable[[], float] | None = None,
        default_wait: bool = True,
        offload: bool = True,
    ) -> None:
        """`home` is the workspace directory (default: `kinetic_home()` as the process resolves it now).
        `default_wait` is what starting verbs do without --wait/--detach (scripts wait, the bar detaches).
        `offload` runs blocking calls in worker threads so an event loop with a UI stays responsive; a
        headless caller that runs one command at a time may turn it off and save a thread hop per call
        (about 100 us, as much as a whole `observe`)."""
        self.home: Path = kinetic_home() if home is None else Path(home).expanduser()
        self.backend: LocalBackend = self.run(local_backend)
        self.store: Store = self.backend.store
        self.clock: Callable[[], float] = clock or time.time
        self.default_wait = default_wait
        self.offload = offload
        self.events = EventBus()
        self._background: set[asyncio.Task[Any]] = set()
        self._watchers: set[asyncio.Task[Any]] = set()

    def run(self, call: Callable[..., T], *args: Any) -> T:
        """Call on this workspace's home, in the caller's thread."""
        return call_on_home(self.home, call, *args)

    # -- actions ---------------------------------------------------------------------------------------

    def transact(self, action: Action[T], *args: Any) -> T:
        """Run `action` in one transaction; publish its events after the commit."""
        with self.store.transaction():
            result, events = action(*args)
        for event in events:
            self.events.publish(event)
        return result

    async def act(self, action: Action[T], *args: Any) -> T:
        return await self.blocking(self.transact, action, *args)

    def read(self, call: Callable[..., T], *args: Any) -> T:
        with self.store.transaction(write=False):  # one consistent snapshot across several tables
            return call(*args)

    async def query(self, call: Callable[..., T], *args: Any) -> T:
        return await self.blocking(self.read, call, *args)

    async def blocking(self, call: Callable[..., T], *args: Any) -> T:
        """Every blocking call goes through here: actions, queries, and calls that manage their own
        transactions (the backend's claims, job submission, training attempts)."""
        if self.offload:
            return await asyncio.to_thread(self.run, call, *args)
        return self.run(call, *args)

    def wants_wait(self, wait: bool | None) -> bool:
        return self.default_wait if wait is None else wait

    def spawn(self, label: str, work: Coroutine[Any, Any, Any], watch_only: bool = False) -> None:
        """Detached work keeps running after the action returns; `aclose` waits for it. Nobody awaits its
        result, so a failure is announced as an event instead of vanishing. `watch_only` work only follows
        something that lives on without this process (a pipeline run): `aclose` stops following it."""

        async def guarded() -> None:
            try:
                await work
            except Exception as exc:
                self.events.publish(DetachedWorkFailed(label, type(exc).__name__, one_line(exc)))

        task = asyncio.get_running_loop().create_task(guarded())
        tasks = self._watchers if watch_only else self._background
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def aclose(self) -> None:
        """Let detached in-process work settle (a detached job keeps running in its own process)."""
        if self._watchers:
            await asyncio.sleep(0)  # let each start, so cancelling it closes the work it follows
        for task in list(self._watchers):
            task.cancel()
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
