"""The `:` command's output: a scrollable panel above the footer that stays until Esc.

A toast would cut a long answer (`help`, `models`) to a few lines and vanish in seconds; the panel holds
the whole text the script's text output would print, and takes the focus so the arrows (and j/k, g/G,
PgUp/PgDn) scroll it. Mounted on first use, so it costs the first frame nothing.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

MAX_HEIGHT = 14  # rows of the panel at most, its border included: at 80x24 the view stays in sight


class OutputPanel(VerticalScroll, can_focus=True):
    DEFAULT_CSS = f"""
    OutputPanel {{
        dock: bottom;
        height: auto;
        max-height: {MAX_HEIGHT};
        margin-bottom: 1;
        border: round $accent;
        background: $surface;
        padding: 0 1;
    }}
    """
    BINDINGS = [
        Binding("escape", "close", "Close", id="output.close"),
        Binding("j", "scroll_down", "Down", show=False, id="output.down"),
        Binding("k", "scroll_up", "Up", show=False, id="output.up"),
        Binding("g", "scroll_home", "Top", show=False, id="output.top"),
        Binding("G", "scroll_end", "Bottom", show=False, id="output.bottom"),
    ]

    class Closed(Message):
        """Esc: the panel is gone; the app hands the focus back to the view."""

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._body = Static("", id="panel-body")
        self._shown = ""

    def compose(self) -> ComposeResult:
        yield self._body

    @property
    def text(self) -> str:
        """The text shown, plain."""
        return self._shown

    def show(self, title: str, text: str) -> None:
        """Show `text` (plain: no markup is read in it) under `title`, scrolled to its start, focused."""
        self._shown = text
        self.border_title = title
        self.border_subtitle = "Esc closes · ↑↓ PgUp PgDn scroll"
        self._body.update(Text(text))
        self.display = True
        self.scroll_home(animate=False)
        self.focus()

    def action_close(self) -> None:
        self.display = False
        self.post_message(self.Closed())
