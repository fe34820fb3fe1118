"""The notice that covers the console while the terminal is smaller than the console needs."""

from __future__ import annotations

from textual.widgets import Static


class TooSmall(Static):
    """Covers every widget of its screen, the footer included. The app mounts it the first time the
    terminal is too small (in most sessions, never: its stylesheet is not parsed at all) and then shows
    and hides it as the terminal is resized."""

    DEFAULT_CSS = """
    TooSmall {
        overlay: screen;
        position: absolute;
        width: 100vw;
        height: 100vh;
        content-align: center middle;
        text-style: bold;
        background: $background;
    }
    """

    def __init__(self, width: int, height: int) -> None:
        super().__init__(f"Terminal too small: the console needs {width}x{height}.", id="too-small")
