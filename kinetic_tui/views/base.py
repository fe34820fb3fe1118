"""The contract between the app shell and its views.

A view is a container the app mounts once on its screen and then shows or hides. The app owns the
Console, the clock and the refresh cadence: it calls `reload()` on the visible view after every poll and
after every action, and routes errors to notifications. Views stay thin: they turn Console snapshots into
widgets through the pure functions in `kinetic_tui.render`, and they start actions by building
command-language lines and handing them to `self.host.run_command(line)`, so a key binding and the `:` bar
share one code path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from textual.binding import Binding
from textual.widget import Widget
from textual.worker import Worker

from kinetic_tui.core.commands.verbs import VERBS
from kinetic_tui.host import ConsoleHost, console_host
from kinetic_tui.screens.dialogs import ConfirmScreen, Field, FormScreen

if TYPE_CHECKING:
    from kinetic_tui.core.console import Console

PRELOAD_WAIT = 0.1  # seconds a view waits for its first rows on its first visit, then mounts without them


class View(Widget, can_focus=False):
    """One numbered view. Subclasses set `key` ("1".."6"), `title`, BINDINGS (with descriptions: `?` lists
    them) and `ACTION_VERBS`: each action that runs a command, mapped to its verb. `--readonly` hides the
    actions whose verb the verb table says mutates.

    A view is a frame for its children, not a surface: it is `visibility: hidden` (its children visible),
    so Textual does not draw a screenful of blank lines under them, which cost the first frame ~6%."""

    DEFAULT_CSS = """
    View {
        width: 1fr;
        height: 1fr;
        layout: vertical;
        overflow: hidden hidden;
        visibility: hidden;
        & > * { visibility: visible; }
    }
    """

    key: ClassVar[str] = ""
    title: ClassVar[str] = ""
    ACTION_VERBS: ClassVar[Mapping[str, str]] = {}
    LISTS_JOBS: ClassVar[bool] = False  # its reload lists every job, which is a poll: the app skips its own
    PRELOADS: ClassVar[bool] = False  # it has a `preload`: on its first visit it mounts once that returned

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown = sorted(set(cls.ACTION_VERBS.values()) - VERBS.keys())
        if unknown:
            raise TypeError(f"{cls.__name__}.ACTION_VERBS names verbs the table lacks: {', '.join(unknown)}")

    async def prepare(self) -> None:
        """Before the first mount: the preload, if the view has one. Mounted empty and filled by the next
        refresh, its rows came one or two frames after the view (Textual draws at most one per 1/60 s),
        and their listing thread held the GIL while the empty view was drawn. It waits at most
        PRELOAD_WAIT: a slow store (or a reconcile that starts jobs) must not hold the view back. One that
        fails or runs out of time changes nothing: the next refresh lists again, and reports what failed."""
        if self.PRELOADS:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.preload(), PRELOAD_WAIT)

    async def preload(self) -> None:
        """Fetch what the view's first frame shows, before it mounts (it shows that when it mounts). Most
        views have nothing worth the wait: their first refresh fills them."""
        raise NotImplementedError(f"{type(self).__name__} sets PRELOADS without a preload")

    @classmethod
    def mutating_actions(cls) -> frozenset[str]:
        """The actions `--readonly` hides: those whose verb changes state."""
        return frozenset(action for action, verb in cls.ACTION_VERBS.items() if VERBS[verb].mutates)

    @property
    def host(self) -> ConsoleHost:
        return console_host(self.app)

    @property
    def console(self) -> Console:
        return self.host.service

    @property
    def readonly(self) -> bool:
        return self.host.readonly

    def run_after_form(self, title: str, fields: Sequence[Field], to_line: Callable[[dict[str, str]], str]) -> None:
        """Ask for `fields`, then run the command line `to_line(values)`; a cancelled form runs nothing."""

        def submitted(values: dict[str, str] | None) -> None:
            if values is not None:
                self.host.run_command(to_line(values))

        self.app.push_screen(FormScreen(title, fields), submitted)

    def run_if_confirmed(self, question: str, line: str) -> None:
        """Ask `question`; run the command `line` only on yes."""

        def answered(yes: bool | None) -> None:
            if yes:
                self.host.run_command(line)

        self.app.push_screen(ConfirmScreen(question), answered)

    async def reload(self) -> None:
        """Fetch fresh snapshots from the console and update widgets in place (keyed, never clear-and-refill)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A view's worker that raised becomes the app's notification (StateChanged does not bubble)."""
        self.host.report_failure(event.worker)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
        """`--readonly` hides mutating actions (False), rather than greying them out (None): a key that
        can never work in this session is noise in the footer, and the key does nothing."""
        return not (self.readonly and action in self.mutating_actions())

    def why_not(self, action: str) -> str | None:
        """Why `action` cannot act on what is selected now, or None when it can. The footer dims such a
        key, `?` gives the reason, and pressing it says the reason instead of acting."""
        return None

    def visible_bindings(self) -> list[Binding]:
        """This view's own bindings that `check_action` allows now: what `?` and the palette list."""
        return [binding for binding in Binding.make_bindings(self.BINDINGS) if self.check_action(binding.action, ())]

    def filter(self, query: str) -> None:
        """Apply the `/` filter to this view's main table (views without a table ignore it)."""

    def reveal(self, name: str) -> None:
        """Select the object called `name` (a job id, training, group, endpoint, pipeline): where the
        command palette's jump-to-object lands after switching to this view. Views without one ignore it."""
