"""`?`: the keys of what is on screen now (k9s-style help), as a modal the user closes with Esc or `?`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Label, Static

from kinetic_tui.screens.dialog import Dialog

KeyRow = tuple[str, str]  # (key as shown, what it does)


def key_rows(
    bindings: Iterable[Binding],
    display: Callable[[Binding], str],
    why_not: Callable[[str], str | None] | None = None,
) -> list[KeyRow]:
    """(key as shown, what it does) per binding; a key that cannot act now says why (`why_not`)."""
    rows = []
    for binding in bindings:
        reason = why_not(binding.action) if why_not is not None else None
        described = binding.description if reason is None else f"{binding.description} (not now: {reason})"
        rows.append((display(binding), described))
    return rows


def keys_table(rows: Sequence[KeyRow]) -> Table:
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, description in rows:
        table.add_row(key, description)
    return table


class HelpScreen(Dialog[None]):
    DEFAULT_CSS = """
    HelpScreen #help { width: 60; }
    HelpScreen #help VerticalScroll { height: auto; max-height: 16; }
    """
    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="help.close"),
        Binding("question_mark", "dismiss", "Close", id="help.close_help_key"),
        Binding("q", "dismiss", "Close", show=False, id="help.close_q"),
    ]

    def __init__(self, title: str, view_keys: Sequence[KeyRow], global_keys: Sequence[KeyRow]) -> None:
        super().__init__()
        self.title_text = title
        self.view_keys = tuple(view_keys)
        self.global_keys = tuple(global_keys)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="help"):
            yield Label(f"Keys: {self.title_text}", classes="dialog-title")
            with VerticalScroll():
                yield Static(keys_table(self.view_keys) if self.view_keys else "(no keys of its own)", id="view-keys")
                yield Label("Everywhere", classes="section")
                yield Static(keys_table(self.global_keys), id="global-keys")
            yield Label("Esc or ? closes", classes="hint")
