"""The Textual console: six numbered views over one `Console`, a `:` command bar, a ctrl+p palette.

The app owns the Console, the clock and the refresh cadence. Every action, whether a key, a form, the
palette or the command bar, becomes a command-language line run by `run_command`, the one code path
`--script` uses too. Refreshing: a 0.2 s tick starts a refresh when the last one has finished and either
an event arrived or a poll is due (every `poll_interval` s: settle finished jobs, start queued ones, sample
pool usage); a refresh reloads only what is on screen. Errors become notifications, never a crash.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.geometry import Size
from textual.reactive import Reactive
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from kinetic_tui.bar_words import summarize, unknown_word, view_key
from kinetic_tui.config import UserConfig, binding_ids, load_config
from kinetic_tui.core.commands import parse_line
from kinetic_tui.core.commands.execute import execute, render_text
from kinetic_tui.core.commands.parser import ParseError
from kinetic_tui.core.commands.verbs import READ_ONLY_VERBS
from kinetic_tui.core.console import Console
from kinetic_tui.core.errors import KineticError, one_line
from kinetic_tui.core.events import LogBatch
from kinetic_tui.core.paths import using_home
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.host import ConsoleHost
from kinetic_tui.palette import KineticCommands, PaletteHost
from kinetic_tui.render.header import header_text
from kinetic_tui.screens.help import HelpScreen, KeyRow, key_rows
from kinetic_tui.screens.job_detail import JobScreen
from kinetic_tui.screens.main import MainScreen
from kinetic_tui.views.base import View
from kinetic_tui.views.clusters import ClustersView
from kinetic_tui.views.endpoints import EndpointsView
from kinetic_tui.views.jobs import JobsView
from kinetic_tui.views.pipelines import PipelinesView
from kinetic_tui.views.registry import RegistryView
from kinetic_tui.views.training import TrainingView
from kinetic_tui.widgets.command_bar import CommandBar
from kinetic_tui.widgets.key_footer import KeyFooter
from kinetic_tui.widgets.output_panel import OutputPanel
from kinetic_tui.widgets.too_small import TooSmall

MIN_WIDTH, MIN_HEIGHT = 80, 24
HISTORY_SAMPLES = 60  # utilisation samples kept per pool
TICK = 0.2
THEME = "ansi-dark"  # 16 colours only: every theme colour is an ANSI name the terminal maps itself
VIEW_CLASSES: tuple[type[View], ...] = (
    ClustersView,
    JobsView,
    TrainingView,
    RegistryView,
    EndpointsView,
    PipelinesView,
)
SCREEN_ACTIONS = frozenset({"show_view", "command_bar", "filter", "help"})
GLOBAL_KEYS: tuple[KeyRow, ...] = (
    ("1-6", "switch view"),
    (":", "command bar (Tab completes; a view name alone switches to it)"),
    ("/", "filter the table"),
    ("ctrl+p", "palette: actions and objects"),
    ("?", "these keys"),
    ("q", "quit"),
)


class KineticApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "kinetic"
    COMMANDS = App.COMMANDS | {KineticCommands}
    # The theme as the reactive's default, not assigned in __init__: assigning it re-parses every stylesheet
    # and restyles the whole DOM once the app runs (~5 ms before the first frame); as the default, the
    # stylesheet is built with its colours from the start
    theme: Reactive[str] = Reactive(THEME)
    BINDINGS = [
        *(Binding(str(n), f"show_view('{n}')", f"View {n}", show=False, id=f"app.view_{n}") for n in range(1, 7)),
        Binding("colon", "command_bar", "Command", id="app.command_bar"),
        Binding("slash", "filter", "Filter", id="app.filter"),
        Binding("question_mark", "help", "Keys", id="app.help"),
        Binding("q", "quit", "Quit", id="app.quit"),
    ]

    def __init__(
        self,
        console: Console,
        readonly: bool = False,
        clock: Callable[[], float] | None = None,
        poll_interval: float = 1.0,
        background: Callable[[Console], Awaitable[None]] | None = None,
        config: UserConfig | None = None,
    ) -> None:
        """`background` is work that fills the workspace while the UI is up (the demo); `config` the user's
        keymap and theme (`kinetic_tui.config`; None: the defaults)."""
        # ansi_color from the start: Textual picks its NO_COLOR filter here (NoColor strips colour, where
        # the default Monochrome would emit truecolour greys) and never converts ANSI colours to RGB
        super().__init__(ansi_color=True)
        for name in list(self.available_themes):  # the palette's theme picker offers 16-colour themes only
            if not self.available_themes[name].ansi:
                self.unregister_theme(name)
        self.config = config or UserConfig()
        if self.config.keymap:
            self.set_keymap(dict(self.config.keymap))
        if self.config.theme != THEME:  # only then: assigning the theme restyles everything once
            self.theme = self.config.theme
        self.background = background
        self.service = console  # `App.console` is Textual's rich console
        self.readonly = readonly
        self.now: Callable[[], float] = clock or time.time
        self.poll_interval = poll_interval
        self.pool_history: dict[str, deque[int]] = {}
        self.views: list[View] = [cls() for cls in VIEW_CLASSES]
        self._current: View | None = None  # the view on screen: the first one, once composed
        self._too_small: TooSmall | None = None  # mounted the first time the terminal is too small
        self._view_filters: dict[str, str] = {}
        self._busy = False
        self._dirty = True
        self._next_poll = 0.0
        self._last_error = ""
        self._workspace = ""

    # -- layout ----------------------------------------------------------------------------------------

    def get_default_screen(self) -> Screen[None]:
        return MainScreen(id="_default")

    def compose(self) -> ComposeResult:
        """The header (which names the first view) and the footer: the first frame is the console's frame.
        The first view mounts right after it (`on_ready`), the other views on their first visit
        (`action_show_view`), the hidden command bar on its first use (`_bar`) and the "too small" notice
        when the terminal first is (`_check_size`). Composing all of them up front (about fifty widgets)
        made the first paint ~10x a one-widget app's; the first view's two tables alone, still empty
        then, were a third of it."""
        self._current = self.views[0] if self.views else None
        yield Static(self._header(), id="header")
        yield KeyFooter(id="footer")

    async def on_ready(self) -> None:
        """Once the first frame is on screen (Textual posts `Ready` right after it), mount and focus the
        first view and start the app's work, whose threads, started in `on_mount`, held the GIL while the
        first frame was drawn (~20% of the first paint): the view appears in the next frame."""
        if self._current is not None:
            if self._current.parent is None:  # a view key handled before `Ready` may have mounted another
                await self._mount_view(self._current)
            self._focus_view(self._current)
        self.run_worker(self._workspace_label(), group="startup", exit_on_error=False)
        self.run_worker(self._listen(), group="events", exit_on_error=False)
        self.set_interval(TICK, self._tick)
        if self.background is not None:
            self.run_worker(self.background(self.service), group="background", exit_on_error=False)
        if self.config.problem:
            self.notify(self.config.problem, title="config", severity="error", timeout=20)
        self._tick()

    async def _mount_view(self, view: View) -> None:
        """A view's first visit: it mounts once prepared, in one frame with what its preload fetched."""
        await view.prepare()
        with self.batch_update():
            await self.mount(view, before=self.query_one("#footer"))

    def on_resize(self, event: events.Resize) -> None:
        self._check_size(event.size)  # `self.size` catches up only after this event

    def _check_size(self, size: Size) -> None:
        """Below MIN_WIDTH x MIN_HEIGHT a notice covers the main screen."""
        small = size.width < MIN_WIDTH or size.height < MIN_HEIGHT
        if self._too_small is not None:
            self._too_small.display = small
        elif small:
            self._too_small = TooSmall(MIN_WIDTH, MIN_HEIGHT)
            self.screen_stack[0].mount(self._too_small)

    async def _workspace_label(self) -> None:
        infra = await self.service.workspace.blocking(resolve_infra)
        self._workspace = f"profile {infra.profile or '-'} ({infra.backend}) · cluster {infra.cluster}"
        self._draw_header()

    def _header(self) -> Text:
        current = self.current_view
        return header_text(
            self._workspace,
            [(view.key, view.title) for view in self.views],
            current.key if current else None,
            self.readonly,
        )

    def _draw_header(self) -> None:
        self.query_one("#header", Static).update(self._header())

    @property
    def current_view(self) -> View | None:
        return self._current

    def _focus_view(self, view: View) -> None:
        focusable = next((widget for widget in view.query(Widget) if widget.focusable), None)
        if focusable is not None:
            focusable.focus()

    # -- refresh ---------------------------------------------------------------------------------------

    def _tick(self) -> None:
        due = time.monotonic() >= self._next_poll
        if self._busy or not (due or self._dirty):
            return  # a refresh starts only after the previous one finished
        self._busy, self._dirty = True, False
        if due:
            self._next_poll = time.monotonic() + self.poll_interval
        self._refresh(due)

    @work(exclusive=True, group="refresh", exit_on_error=False)
    async def _refresh(self, poll: bool) -> None:
        try:
            if poll and not getattr(self.current_view, "LISTS_JOBS", False):
                await self.service.jobs.poll()  # the jobs view's own listing polls (settles, announces) already
                for pool in await self.service.pools.list():
                    self.pool_history.setdefault(pool.name, deque(maxlen=HISTORY_SAMPLES)).append(pool.in_use)
            await self.reload_visible()
            self._last_error = ""  # recovered: the same error, if it comes back, is news again
        except KineticError as exc:
            self._report(one_line(exc))
        finally:
            self._busy = False

    async def reload_visible(self) -> None:
        """Reload what is on screen: the job screen when it is open, else the current view."""
        job_screen = next((screen for screen in reversed(self.screen_stack) if isinstance(screen, JobScreen)), None)
        target = job_screen or self.current_view
        if target is not None:
            await target.reload()

    async def _listen(self) -> None:
        subscription = self.service.events.subscribe()
        try:
            async for event in subscription:
                if not isinstance(event, LogBatch):
                    self._dirty = True
        finally:
            subscription.close()

    def _report(self, message: str) -> None:
        """Notify an error once: a poll that keeps failing must not repeat it every second."""
        if message != self._last_error:
            self._last_error = message
            self.notify(message, severity="error", timeout=8)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.report_failure(event.worker)

    def report_failure(self, worker: Worker[Any]) -> None:
        """A worker that raised becomes a notification (every worker runs with exit_on_error=False).
        Screens and views forward their workers here: StateChanged does not bubble."""
        if worker.state is WorkerState.ERROR and worker.error is not None:
            error = worker.error
            self._report(
                one_line(error) if isinstance(error, KineticError) else f"{type(error).__name__}: {one_line(error)}"
            )

    # -- commands --------------------------------------------------------------------------------------

    def run_command(self, line: str, panel: bool = False) -> Worker[Any]:
        """Run one command-language line in a worker. A key's command answers with a notification; a line
        typed in the `:` bar (`panel`) opens its whole output in the output panel, and its error goes back
        into the bar, inline."""
        return self._execute(line, panel)

    @work(group="commands", exit_on_error=False)
    async def _execute(self, line: str, panel: bool = False) -> Any:
        try:
            command = parse_line(line)
        except ParseError as exc:
            self.notify(str(exc), title="does not parse", severity="error", timeout=8)
            return None
        if command is None:
            return None
        if self.readonly and command.verb not in READ_ONLY_VERBS:
            await self._failed(
                line,
                f"read-only console: {command.verb!r} changes state; allowed: {', '.join(sorted(READ_ONLY_VERBS))}",
                command.verb,
                panel,
            )
            return None
        try:
            result = await execute(self.service, command)
        except KineticError as exc:
            await self._failed(line, one_line(exc), command.verb, panel)
            return None
        if panel:
            await self._show_output(line, render_text(command.verb, result) or "done")
        else:
            self.notify(summarize(command.verb, result), title=command.verb)
        try:
            await self.reload_visible()
        except KineticError as exc:
            self._report(one_line(exc))
        return result

    async def _failed(self, line: str, message: str, verb: str, panel: bool) -> None:
        """A refused command: back in the bar with the error under it (typed lines), else a notification."""
        if panel:
            (await self._bar()).open("command", line, error=f"✗ {message}")
        else:
            self.notify(message, title=verb, severity="error", timeout=8)

    async def _show_output(self, title: str, text: str) -> None:
        """The output panel (mounted above the bar on first use) with `text`, focused until Esc."""
        try:
            output = self.query_one(OutputPanel)
        except NoMatches:
            output = OutputPanel(id="output")
            await self.mount(output, before=self.query_one("#footer"))
        output.show(title, text)

    async def object_names(self) -> dict[str, list[str]]:
        """Names of every live object by kind, for completion and the palette."""
        console = self.service
        readers: dict[str, tuple[Callable[[], Any], str]] = {
            "job": (console.jobs.list, "job_id"),
            "pool": (console.pools.list, "name"),
            "training": (console.training.list, "name"),
            "study": (console.training.studies, "name"),
            "group": (console.registry.models, "group"),
            "endpoint": (console.endpoints.list, "name"),
            "pipeline": (console.pipelines.list, "name"),
            "function": (console.jobs.known_functions, "ref"),
        }
        names: dict[str, list[str]] = {}
        for kind, (read, attribute) in readers.items():
            try:
                names[kind] = [getattr(item, attribute) for item in await read()]
            except KineticError:
                continue
        return names

    # -- actions ---------------------------------------------------------------------------------------

    async def action_show_view(self, key: str) -> None:
        view = next((v for v in self.views if v.key == key), None)
        if view is None:
            self.notify(
                f"no view {key}; views: {', '.join(f'{v.key} {v.title}' for v in self.views)}", severity="warning"
            )
            return
        while isinstance(self.screen, JobScreen):
            self.pop_screen()
        if view.parent is None:  # its first visit: mount it hidden, then show it composed
            view.display = False
            await self._mount_view(view)
        if self._current is not None:
            self._current.display = False
        view.display, self._current = True, view
        self._draw_header()
        self._focus_view(view)
        self._dirty = True

    async def act_in_view(self, view: View, action: str) -> None:
        """A view's action from the palette: show the view, then run it as its key would."""
        await self.action_show_view(view.key)
        await self.run_action(action, view)

    async def jump_to(self, key: str, name: str) -> None:
        await self.action_show_view(key)
        view = self.current_view
        if view is not None and view.key == key:
            await view.reload()
            view.reveal(name)

    def open_job(self, job_id: str) -> None:
        self.push_screen(JobScreen(job_id))

    async def _bar(self) -> CommandBar:
        """The `:` bar and `/` prompt of the main screen, mounted above the footer on first use."""
        try:
            return self.query_one(CommandBar)
        except NoMatches:
            bar = CommandBar(id="bar")
            await self.mount(bar, before=self.query_one("#footer"))
            return bar

    async def action_command_bar(self, text: str = "") -> None:
        """Open the `:` bar, with `text` already typed (the palette's verbs start a line this way)."""
        for output in self.query(OutputPanel):
            output.display = False  # the bar takes the panel's place
        bar = await self._bar()
        bar.open("command", text)
        self.run_worker(self._load_names(bar), group="names", exclusive=True, exit_on_error=False)

    async def _load_names(self, bar: CommandBar) -> None:
        bar.names = await self.object_names()

    async def action_filter(self) -> None:
        view = self.current_view
        if view is not None:
            (await self._bar()).open("filter", self._view_filters.get(view.id or "", ""))

    def action_help(self) -> None:
        """The keys of what is on screen; a dimmed key says why it cannot act now."""
        screen = self.screen
        target: JobScreen | View | None
        if isinstance(screen, JobScreen):
            target, title, bindings = screen, f"job {screen.job_id}", screen.key_bindings()
        else:
            target = self.current_view
            title, bindings = (target.title, target.visible_bindings()) if target else ("console", [])
        why_not = target.why_not if target is not None else None
        self.push_screen(HelpScreen(title, key_rows(bindings, self.get_key_display, why_not), GLOBAL_KEYS))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Dialogs keep the keyboard: no view switching or bars behind a modal. The bar and the filter
        live on the main screen, so the job screen (whose `/` searches its log) goes without them."""
        if isinstance(self.screen, ModalScreen) and action in SCREEN_ACTIONS:
            return False
        return not (isinstance(self.screen, JobScreen) and action in ("command_bar", "filter"))

    @on(CommandBar.Submitted)
    async def _bar_submitted(self, event: CommandBar.Submitted) -> None:
        """A view name alone switches views; anything else must parse (the error shows inline, under the
        column it blames) and then runs, its output in the panel."""
        bar = self.query_one(CommandBar)
        if event.mode == "filter":
            bar.hide()
            return
        key = view_key(event.value)
        if key is not None:
            bar.hide()
            await self.action_show_view(key)
            return
        try:
            parse_line(event.value)
        except ParseError as exc:
            unknown = unknown_word(event.value)
            if unknown is not None:
                bar.hint(f"✗ {unknown}")
            else:
                bar.show_error(exc.column, exc.message)
            return
        bar.hide()
        self.run_command(event.value, panel=True)

    @on(CommandBar.FilterChanged)
    def _filter_changed(self, event: CommandBar.FilterChanged) -> None:
        view = self.current_view
        if view is not None:
            self._view_filters[view.id or ""] = event.value
            view.filter(event.value)

    @on(CommandBar.Closed)
    def _bar_closed(self) -> None:
        """The bar gave up the focus: to the output panel if a command's answer is showing, else the view."""
        shown = [output for output in self.query(OutputPanel) if output.display]
        if shown:
            shown[0].focus()
        else:
            self._panel_closed()

    @on(OutputPanel.Closed)
    def _panel_closed(self) -> None:
        view = self.current_view
        if view is not None:
            self._focus_view(view)


if TYPE_CHECKING:

    def _hosts(app: KineticApp) -> tuple[ConsoleHost, PaletteHost]:
        """Never called: mypy checks here that the app is what its views, screens and palette cast it to."""
        return app, app


def run_app(demo: bool = False, readonly: bool = False, mouse: bool = True, home: str | Path | None = None) -> int:
    """Open the console (the command bar detaches by default); returns the process exit code."""
    background = None
    if demo:
        from kinetic_tui.core.demo import demo_home, fill

        home, background = demo_home(), fill
    try:
        console = Console(home=home, default_wait=False)
    except KineticError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    app = KineticApp(console, readonly=readonly, background=background, config=load_config(binding_ids()))
    with using_home(console.workspace.home):  # what the views read beside the console (profiles) is there too
        app.run(mouse=mouse)
    return app.return_code or 0
