"""What views 3-6 share: the modals a plain field form cannot express (choosing a promote target, illegal
ones shown disabled with the reason; editing a run's params as `K=JSON` lines) and `TableView`, the base
of a view with one main table. (Scale and load use the plain `kinetic_tui.screens.dialogs.FormScreen`.)

These forms only check the SHAPE of input (each line is `K=JSON`); whether a stage move or a param is
legal is the core's call, made once when the view runs the resulting command line, so a form can never
disagree with `--script`. Each form dismisses with its values, or None when cancelled (Esc).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Button, DataTable, Label, Static, TextArea

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.registry import ALLOWED_TRANSITIONS, Stage
from kinetic_tui.render import filter_rows, look, promote_targets
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
ModalForm TextArea { height: 10; }
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


# -- rerun: K=JSON param edits ------------------------------------------------------------------------


def param_lines(params: Mapping[str, Any]) -> str:
    """`K=JSON` per line, sorted, compact JSON: the editable text of a run's params."""
    return "\n".join(f"{key}={json.dumps(value, separators=(',', ':'))}" for key, value in sorted(params.items()))


def parse_param_lines(text: str) -> dict[str, Any]:
    """`K=JSON` lines (blank lines ignored) to a mapping; the first bad line is named with its number."""
    params: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, raw = line.partition("=")
        if not sep or not key.strip():
            raise ValidationError(f"line {number}: expected K=JSON, got {line.strip()!r}")
        try:
            params[key.strip()] = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"line {number}: {key.strip()}: not JSON ({exc.msg}), got {raw.strip()!r}") from None
    return params


class ParamsForm(ModalForm[dict[str, Any]]):
    """Edits of the last run's params; dismisses with only the params whose value changed (a rerun merges
    them over the last run's params, so an unchanged or deleted line means 'keep')."""

    BINDINGS = [Binding("ctrl+s", "submit", "Rerun", id="params_form.rerun")]
    HINT = "one K=JSON per line · ctrl+s rerun · Esc cancel"

    def __init__(self, title: str, params: Mapping[str, Any]) -> None:
        super().__init__(title)
        self.params = dict(params)

    def body(self) -> ComposeResult:
        yield TextArea(param_lines(self.params), id="params", soft_wrap=False)

    def action_submit(self) -> None:
        try:
            edited = parse_param_lines(self.query_one("#params", TextArea).text)
        except ValidationError as exc:
            self.show_error(str(exc))
            return
        self.dismiss(
            {key: value for key, value in edited.items() if key not in self.params or self.params[key] != value}
        )


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
