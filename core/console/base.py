"""The part of the Console every feature shares: the workspace, the action wrapper, the event bus.

An action is a plain function run in a worker thread inside ONE store transaction; it returns its result
and the events it caused. Events are published only after the commit, so a subscriber never hears about a
change that was rolled back.
"""
from __future__ import annotations

import asyncio
import importlib
import os
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from kinetic_tui.core.backends.local.backend import LocalBackend
from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.events import DetachedWorkFailed, Event, EventBus
from kinetic_tui.core.backends.local.workspace import local_backend

T = TypeVar("T")
Action = Callable[..., tuple[T, list[Event]]]


def importable_cwd() -> None:
    """MODULE:NAME references name modules relative to where the user runs the command, as `python -m`
    would; a console-script entry point does not put the cwd on sys.path by itself."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def one_line(exc: BaseException) -> str:
    """The first line of an error's message: what notifications, `--script` and events show."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def import_reference(ref: str, what: str) -> Any:
    """The object a MODULE:NAME reference names (NAME may be dotted); one-line errors say which part is wrong."""
    module_name, _, attr = ref.partition(":")
    importable_cwd()
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise NotFoundError(f"{what} {ref!r}: cannot import module {module_name!r} ({exc}); it must be "
                            f"importable from the current directory or sys.path") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise NotFoundError(f"{what} {ref!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    return target


class ConsoleBase:
    def __init__(self, home: str | Path | None = None, clock: Callable[[], float] | None = None,
                 default_wait: bool = True, offload: bool = True) -> None:
        """`home` switches KINETIC_HOME for this process: job submission, handles and `attach` resolve the
        workspace through it, so a Console on another home than theirs would split the state.
        `default_wait` is what starting verbs do without --wait/--detach (scripts wait, the bar detaches).
        `offload` runs blocking calls in worker threads so an event loop with a UI stays responsive; a
        headless caller that runs one command at a time may turn it off and save a thread hop per call
        (about 100 us, as much as a whole `observe`)."""
        if home is not None:
            os.environ["KINETIC_HOME"] = str(Path(home).expanduser())
        self.backend: LocalBackend = local_backend()
        self.store = self.backend.store
        self.clock: Callable[[], float] = clock or time.time
        self.default_wait = default_wait
        self.offload = offload
        self.events = EventBus()
        self._background: set[asyncio.Task[Any]] = set()

    # -- actions ---------------------------------------------------------------------------------------

    def _transact(self, action: Action[T], *args: Any) -> T:
        """Run `action` in one transaction; publish its events after the commit."""
        with self.store.transaction():
            result, events = action(*args)
        for event in events:
            self.events.publish(event)
        return result

    async def _act(self, action: Action[T], *args: Any) -> T:
        return await self._blocking(self._transact, action, *args)

    def _read(self, call: Callable[..., T], *args: Any) -> T:
        with self.store.transaction(write=False):  # one consistent snapshot across several tables
            return call(*args)

    async def _query(self, call: Callable[..., T], *args: Any) -> T:
        return await self._blocking(self._read, call, *args)

    async def _blocking(self, call: Callable[..., T], *args: Any) -> T:
        """Every blocking call goes through here: actions, queries, and calls that manage their own
        transactions (the backend's claims, job submission, training attempts)."""
        if self.offload:
            return await asyncio.to_thread(call, *args)
        return call(*args)

    def _wants_wait(self, wait: bool | None) -> bool:
        return self.default_wait if wait is None else wait

    def _spawn(self, label: str, work: Coroutine[Any, Any, Any]) -> None:
        """Detached work keeps running after the action returns; `aclose` waits for it. Nobody awaits its
        result, so a failure is announced as an event instead of vanishing."""
        async def guarded() -> None:
            try:
                await work
            except Exception as exc:
                self.events.publish(DetachedWorkFailed(label, type(exc).__name__, one_line(exc)))

        task = asyncio.get_running_loop().create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def aclose(self) -> None:
        """Let detached in-process work settle (a detached job keeps running in its own process)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
