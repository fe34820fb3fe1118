"""What views 3-6 share: the modals a plain field form cannot express (choosing a promote target, illegal
ones shown disabled with the reason; a run's params as JSON values, checked before the form closes) and
`TableView`, the base of a view with one main table. (Scale and load use the plain
`kinetic_tui.screens.dialogs.FormScreen`.)

These forms only check the SHAPE of input (each param value is JSON, read as `--param` reads it); whether
a stage move or a param is legal is the core's call, made once when the view runs the resulting command
line, so a form can never disagree with `--script`. Each form dismisses with its values, or None when
cancelled (Esc).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical, VerticalScroll
from textual.widgets import Button, DataTable, Input, Label, Static

from kinetic_tui.core.commands.grammar import PARAM, dump_json
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.registry import ALLOWED_TRANSITIONS, Stage
from kinetic_tui.render.formatting import look
from kinetic_tui.render.stage_graph import promote_targets
from kinetic_tui.render.tables import filter_rows
from kinetic_tui.screens.dialog import Dialog
from kinetic_tui.views.base import View
from kinetic_tui.widgets.keyed_table import KeyedTable

T = TypeVar("T")
COMMANDS = "commands"  # the app's worker group for commands; a view's action that asks first joins it

# the frame itself is `Dialog`'s, shared with every other dialog
FORM_CSS = """
ModalForm .title { text-style: bold; }
ModalForm .error { color: $error; height: auto; }
ModalForm .hint { color: $text-muted; }
ModalForm .reason { color: $text-muted; padding: 0 0 0 2; }
ModalForm Button { width: 100%; margin: 0; text-align: left; content-align: left middle; }
ModalForm Button:focus { text-style: reverse bold; }  /* visible without colour (NO_COLOR) */
"""


class ModalForm(Dialog[T]):
    """The frame every form shares: a title, the body, an error line and a key hint; Esc cancels."""

    DEFAULT_CSS = FORM_CSS
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="form.cancel")]
    HINT = "Enter submit · Esc cancel"

    def __init__(self, title: str) -> None:
        super().__init__()
        self.form_title = title

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.form_title, classes="title")
            yield from self.body()
            yield Static("", id="error", classes="error")
            yield Label(self.HINT, classes="hint")

    def body(self) -> ComposeResult:
        yield from ()

    def show_error(self, message: str) -> None:
        self.query_one("#error", Static).update(message)

    def action_cancel(self) -> None:
        self.dismiss(None)


# -- promote: every stage, illegal ones disabled with the reason ---------------------------------------


class StagePicker(ModalForm[Stage]):
    """Illegal targets stay visible but disabled, with the reason, so the user learns the stage rules
    instead of wondering where an option went. Up/Down move between the legal targets; the first one
    along the graph (None → Staging → Production) has the focus, so Enter takes a version one step up.
    A target's consequence (`notes`: another version leaving Production) is written under it, so choosing
    it is the confirmation."""

    # In ANSI mode Textual draws every button with a tall border, compact and disabled ones too (with
    # `!important`): keep the targets one line high, and mark focus with reverse video (no ANSI tints)
    DEFAULT_CSS = """
    StagePicker Button.-textual-compact:ansi, StagePicker Button.-textual-compact:ansi:disabled {
        border: none !important;
    }
    StagePicker Button.-textual-compact:ansi:focus { text-style: bold reverse; }
    StagePicker .consequence { color: $warning; padding: 0 0 0 2; }
    """
    BINDINGS = [
        Binding("up", "app.focus_previous", show=False, id="stage_picker.previous"),
        Binding("down", "app.focus_next", show=False, id="stage_picker.next"),
    ]
    HINT = "↑↓ choose · Enter promote · Esc cancel"

    def __init__(self, subject: str, stage: Stage | str, notes: Mapping[Stage, str] | None = None) -> None:
        super().__init__(f"Promote {subject} (now {look(Stage, stage).cell}) to:")
        self.targets = promote_targets(stage)
        self.notes = dict(notes or {})
        self.first = ALLOWED_TRANSITIONS[Stage(stage)][0]

    def body(self) -> ComposeResult:
        for target in self.targets:
            yield Button(
                look(Stage, target.stage).cell,
                id=f"stage-{target.stage.value.lower()}",
                disabled=not target.allowed,
                compact=True,
            )
            if not target.allowed:
                yield Static(target.reason, classes="reason")
            elif target.stage in self.notes:
                yield Static(self.notes[target.stage], classes="consequence")

    def on_mount(self) -> None:
        self.query_one(f"#stage-{self.first.value.lower()}", Button).focus()

    @on(Button.Pressed)
    def chosen(self, event: Button.Pressed) -> None:
        event.stop()
        chosen = next(t for t in self.targets if f"stage-{t.stage.value.lower()}" == event.button.id)
        if chosen.allowed:  # a disabled button never fires; this guards programmatic presses too
            self.dismiss(chosen.stage)


# -- rerun: one field per param ----------------------------------------------------------------------


class ParamsForm(ModalForm[dict[str, Any]]):
    """One field per param of the last run, in the pipeline's own order, each holding its value as JSON.
    The first field has the focus (the screen's auto-focus) with its value selected, so typing replaces
    it: changing the first param and rerunning is the value and Enter. ↑↓ (or Tab) move between fields.

    Each field is read by the converter of `rerun --param K=JSON`, so the form accepts exactly what the
    CLI does and words a bad value the same way; the first bad one is named, focused and selected, and
    nothing runs.
    Dismisses with only the params whose value changed: a rerun merges them over the last run's."""

    DEFAULT_CSS = """
    ParamsForm .params { height: auto; max-height: 14; }
    ParamsForm .params Grid { grid-size: 2; grid-columns: auto 1fr; grid-rows: 1; grid-gutter: 0 2; height: auto; }
    """
    BINDINGS = [
        Binding("up", "app.focus_previous", show=False, id="params_form.previous"),
        Binding("down", "app.focus_next", show=False, id="params_form.next"),
        Binding("enter", "submit", show=False, id="params_form.rerun"),  # a field's own Enter comes first
    ]
    HINT = "each value is JSON · ↑↓ field · Enter rerun · Esc cancel"

    def __init__(self, title: str, params: Mapping[str, Any]) -> None:
        super().__init__(title)
        self.params = dict(params)

    def body(self) -> ComposeResult:
        with VerticalScroll(classes="params", can_focus=False), Grid():  # ↑↓ go from field to field
            for index, (key, value) in enumerate(self.params.items()):
                yield Label(key)
                field = Input(dump_json(value), id=f"param-{index}", compact=True)
                field.cursor_blink = False
                yield field

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    def action_submit(self) -> None:
        edited: dict[str, Any] = {}
        for index, (key, last) in enumerate(self.params.items()):
            field = self.query_one(f"#param-{index}", Input)
            try:
                _, value = PARAM.convert(f"{key}={field.value.strip()}")
            except ValidationError as exc:
                self.show_error(str(exc))
                field.focus()
                field.select_all()  # retyping replaces the bad value, as on first focus
                return
            if dump_json(value) != dump_json(last):  # JSON, not Python, equality: `true` is not `1`
                edited[key] = value
        self.dismiss(edited)


# -- the base of views 3-6 ----------------------------------------------------------------------------


class ViewBody(VerticalScroll, can_focus=False):
    """A view's scrolling body. Not focusable itself, so the app's first focus lands on the main table and
    Tab moves between the tables, scrolling each into view: no mouse needed at 80x24."""


class TableView(View):
    """A view with one main KeyedTable (id `MAIN`): the `/` filter narrows it, the palette's jump-to-object
    selects a row in it, actions act on its selected row, and `show_selected` redraws the details of
    that row whenever it may have changed."""

    MAIN: ClassVar[str] = ""
    WHAT: ClassVar[str] = ""  # what a row is, for "no ... selected"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("id", f"view-{self.title.lower()}")
        super().__init__(**kwargs)
        self.rows: list[tuple[str, ...]] = []
        self.filter_text = ""

    @property
    def main_table(self) -> KeyedTable:
        return self.query_one(f"#{self.MAIN}", KeyedTable)

    def show_rows(self, rows: list[tuple[str, ...]]) -> None:
        self.rows = rows
        self.filter(self.filter_text)
        self.refresh_bindings()  # a row's status may have changed what its keys can do

    def filter(self, query: str) -> None:
        self.filter_text = query
        self.main_table.sync(filter_rows(self.rows, query))
        self.show_selected()

    def show_selected(self) -> None:
        """Redraw what depends on the main table's selected row (the filter may have changed it)."""

    @on(DataTable.RowHighlighted)
    def _main_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table is self.main_table:
            self.show_selected()
            self.refresh_bindings()  # the footer dims the keys that cannot act on the new row

    def reveal(self, name: str) -> None:
        if self.main_table.select_key(name):
            self.main_table.focus()

    def chosen_key(self) -> str | None:
        """The selected row's key for an action; with none, says so instead of acting."""
        key = self.main_table.selected_key
        if key is None:
            self.notify(f"no {self.WHAT} selected", severity="warning")
        return key

    async def run_to_end(self, line: str) -> None:
        """Run `line` through the app and return once it finished, so the action's own worker (group
        COMMANDS) settles with the command it started: waiting on the group waits for the whole action."""
        await self.host.run_command(line).wait()
