"""The frame every dialog shares: a bordered box centred over the console, a bold title, a muted hint.

Its CSS lives here rather than in app.tcss, which the console parses before its first frame: a dialog's
rules are parsed the first time a dialog opens.
"""

from __future__ import annotations

from typing import TypeVar

from textual.screen import ModalScreen

T = TypeVar("T")


class Dialog(ModalScreen[T]):
    """A modal whose content sits in a `.dialog` container (`.dialog-title`, `.buttons`, `.hint` inside)."""

    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog .dialog {
        width: 70;
        height: auto;
        max-height: 22;
        border: round $accent;
        background: $surface;
        padding: 0 1;
    }
    Dialog .dialog-title { text-style: bold; margin-bottom: 1; }
    Dialog .buttons { height: auto; align: right middle; margin-top: 1; }
    Dialog .dialog Button { margin-left: 1; min-width: 10; }
    Dialog .hint { color: $text-muted; margin-top: 1; }
    """
