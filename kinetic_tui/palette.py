"""ctrl+p: every action of every view, every verb of the command language and a jump to every object the
console knows, fuzzy-searchable.

Actions run through `App.run_action` with the view as namespace, so `check_action` (and with it
`--readonly`) applies exactly as it does to the key. Verbs come from the verb table: choosing one opens the
command bar with the verb typed, and a read-only console offers only the verbs that change nothing. Objects
are listed from fresh console snapshots each time the palette opens.

The palette knows the app only through `PaletteHost`, the few members it calls, so the app can import it
without the palette importing the app back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from functools import partial
from typing import Any, NamedTuple, Protocol, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from kinetic_tui.core.commands.verbs import VERBS
from kinetic_tui.views.base import View

PALETTE_JOBS = 500  # the newest jobs offered: fuzzy-matching 10,000 titles on every keystroke lags
# object kind -> (number of the view it lives in, what the palette calls it)
JUMPS = {
    "pool": ("1", "Pool"),
    "training": ("3", "Training"),
    "study": ("3", "Study"),
    "group": ("4", "Model group"),
    "endpoint": ("5", "Endpoint"),
    "pipeline": ("6", "Pipeline"),
}


class PaletteHost(Protocol):
    """What the palette needs of the app (read-only members, so `KineticApp`'s list of views fits)."""

    @property
    def views(self) -> Sequence[View]: ...
    @property
    def readonly(self) -> bool: ...

    async def action_show_view(self, key: str) -> None: ...
    async def act_in_view(self, view: View, action: str) -> None: ...
    async def action_command_bar(self, text: str = "") -> None: ...
    def action_help(self) -> None: ...
    async def action_filter(self) -> None: ...
    async def action_quit(self) -> None: ...
    def open_job(self, job_id: str) -> None: ...
    async def jump_to(self, key: str, name: str) -> None: ...
    async def object_names(self) -> dict[str, list[str]]: ...


class Entry(NamedTuple):
    text: str
    run: Callable[[], Awaitable[Any] | Any]
    help: str


def verb_entries(app: PaletteHost) -> list[Entry]:
    """One entry per verb the console may run now (a read-only one: the verbs that change nothing)."""
    return [
        Entry(
            f"Command: {verb.name}", partial(app.action_command_bar, f"{verb.name} "), f"{verb.help} · {verb.usage()}"
        )
        for verb in VERBS.values()
        if not (app.readonly and verb.mutates)
    ]


def entries(app: PaletteHost, names: dict[str, list[str]]) -> list[Entry]:
    """Views, their visible actions, the app's keys, the verbs, then objects (jobs open their screen)."""
    found: list[Entry] = []
    for view in app.views:
        found.append(Entry(f"Go to {view.title}", partial(app.action_show_view, view.key), f"key {view.key}"))
        found += [
            Entry(
                f"{view.title}: {binding.description}",
                partial(app.act_in_view, view, binding.action),
                f"key {binding.key} in {view.title}",
            )
            for binding in view.visible_bindings()
        ]
    found += [
        Entry("Command bar", app.action_command_bar, "key :"),
        Entry("Keys of this view", app.action_help, "key ?"),
        Entry("Filter this view", app.action_filter, "key /"),
        Entry("Quit", app.action_quit, "key q"),
    ]
    found += verb_entries(app)
    found += [
        Entry(f"Job {job_id}", partial(app.open_job, job_id), "open the job screen")
        for job_id in names.get("job", [])[:PALETTE_JOBS]
    ]
    for kind, (key, label) in JUMPS.items():
        found += [
            Entry(f"{label} {name}", partial(app.jump_to, key, name), f"show it in view {key}")
            for name in names.get(kind, ())
        ]
    return found


class KineticCommands(Provider):
    async def startup(self) -> None:
        app = cast(PaletteHost, self.app)
        self._entries = entries(app, await app.object_names())

    def _all(self) -> Iterator[Entry]:
        return iter(getattr(self, "_entries", ()))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for entry in self._all():
            score = matcher.match(entry.text)
            if score > 0:
                yield Hit(score, matcher.highlight(entry.text), entry.run, help=entry.help)

    async def discover(self) -> Hits:
        for entry in self._all():
            yield DiscoveryHit(entry.text, entry.run, help=entry.help)
