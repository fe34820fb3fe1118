"""Modal dialogs: a yes/no confirmation for destructive actions and a small keyboard form.

Both only collect an answer; the caller turns it into a command-language line, so a form never has its own
validation rules: a bad value comes back from the parser as a one-line error naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, Switch

from kinetic_tui.screens.dialog import Dialog


class ConfirmScreen(Dialog[bool]):
    """Dismisses with True only on an explicit yes: Escape, `n` and the No button all cancel."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n", "answer(False)", "No", id="confirm.no"),
        Binding("escape", "answer(False)", "Cancel", id="confirm.cancel"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, id="question")
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # Enter on a fresh dialog must not destroy anything

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


@dataclass(frozen=True)
class Field:
    """One form field; `switch` fields answer "true"/"false"; `suggestions` complete what is typed (ghost
    text, accepted with the right arrow)."""

    name: str
    label: str
    default: str = ""
    placeholder: str = ""
    switch: bool = False
    suggestions: tuple[str, ...] = ()


class FormScreen(Dialog[dict[str, str] | None]):
    """Dismisses with {field name: text} on Enter or Submit, None on Escape or Cancel."""

    DEFAULT_CSS = """
    FormScreen .form { grid-size: 2; grid-columns: 18 1fr; grid-rows: 3; height: auto; }
    FormScreen .form Label { padding: 1 0 0 0; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="form_screen.cancel")]

    def __init__(self, title: str, fields: Sequence[Field]) -> None:
        super().__init__()
        self.title_text = title
        self.fields = tuple(fields)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            with Grid(classes="form"):
                for field in self.fields:
                    yield Label(field.label)
                    if field.switch:
                        yield Switch(field.default == "true", id=f"field-{field.name}")
                    else:
                        suggester = SuggestFromList(field.suggestions) if field.suggestions else None
                        field_input = Input(
                            field.default, placeholder=field.placeholder, id=f"field-{field.name}", suggester=suggester
                        )
                        field_input.cursor_blink = False
                        yield field_input
            with Horizontal(classes="buttons"):
                yield Button("Submit", id="submit", variant="primary")
                yield Button("Cancel", id="cancel")

    def values(self) -> Mapping[str, str]:
        out: dict[str, str] = {}
        for field in self.fields:
            selector = f"#field-{field.name}"
            if field.switch:
                out[field.name] = "true" if self.query_one(selector, Switch).value else "false"
            else:
                out[field.name] = self.query_one(selector, Input).value.strip()
        return out

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(dict(self.values()))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(dict(self.values()) if event.button.id == "submit" else None)

    def action_cancel(self) -> None:
        self.dismiss(None)
