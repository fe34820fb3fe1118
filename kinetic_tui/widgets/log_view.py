"""A job's live log: a bounded `LogBuffer` drawn one window at a time, fed in batches.

Producers (a reader thread, LogBatch events) only `feed` lines into a queue; a 100 ms timer moves what
arrived into the buffer in one append and redraws once, so a chatty job costs one render per tick rather
than one per line (ARCHITECTURE: never one write per log line). Follow, the "N new lines" marker, wrap,
timestamps and search all live in the pure `LogBuffer`; this widget maps keys to it and draws it.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widget import Widget

from kinetic_tui.render.log_buffer import LogBuffer

FLUSH_INTERVAL = 0.1  # seconds between batches: the spec's "every <= 100 ms"
WHEEL_LINES = 3


class LogView(Widget, can_focus=True):
    BINDINGS = [
        Binding("up", "scroll(-1)", "Up", show=False), Binding("down", "scroll(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False), Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "top", "Top", show=False), Binding("end", "bottom", "Follow"),
        Binding("w", "toggle_wrap", "Wrap"), Binding("t", "toggle_timestamps", "Timestamps"),
    ]

    def __init__(self, max_lines: int = 10_000, clock: Callable[[], float] = time.time, id: str | None = None) -> None:
        super().__init__(id=id)
        self.buffer = LogBuffer(max_lines=max_lines)
        self.clock = clock
        self.highlight = ""  # the search query, marked in every visible row
        self._pending: deque[str] = deque()

    def on_mount(self) -> None:
        self.set_interval(FLUSH_INTERVAL, self.flush)

    def feed(self, lines: Iterable[str]) -> None:
        """Queue lines from any thread; they appear at the next flush."""
        self._pending.extend(lines)

    def flush(self) -> int:
        """Move every queued line into the buffer as one batch; returns how many moved."""
        count = len(self._pending)
        if not count:
            return 0
        batch = [self._pending.popleft() for _ in range(count)]
        self.buffer.append(batch, [self.clock()] * count)
        self.refresh()
        return count

    @property
    def status(self) -> str:
        buffer = self.buffer
        parts = [f"{len(buffer)} lines"]
        if buffer.trimmed:
            parts.append(f"{buffer.trimmed} trimmed")
        parts.append(f"▼ {buffer.new_lines_label} (End follows)" if buffer.new_lines
                     else ("following" if buffer.follow else "paused"))
        parts += [word for word, on in (("wrap", buffer.wrap), ("timestamps", buffer.show_timestamps)) if on]
        return " · ".join(parts)

    def render(self) -> Text:
        width, rows = max(self.content_size.width, 1), max(self.content_size.height - 1, 1)
        if rows != self.buffer.height:  # the last row is the status line
            self.buffer.resize(rows)
        text = Text("\n".join(self.buffer.window(width=width)), no_wrap=True, overflow="crop")
        if self.highlight:
            text.highlight_words([self.highlight], "reverse", case_sensitive=False)
        lines = text.split("\n", include_separator=False) if text.plain else []
        out = Text("\n").join([*lines, *[Text("")] * (self.buffer.height - len(lines))])
        out.append("\n")
        out.append(self.status, style="reverse" if self.buffer.new_lines else "dim")
        return out

    def action_scroll(self, delta: int) -> None:
        self.buffer.scroll_by(delta)
        self.refresh()

    def action_page(self, direction: int) -> None:
        self.buffer.scroll_by(direction * self.buffer.height)
        self.refresh()

    def action_top(self) -> None:
        self.buffer.scroll_to(0)
        self.refresh()

    def action_bottom(self) -> None:
        self.buffer.scroll_end()
        self.refresh()

    def action_toggle_wrap(self) -> None:
        self.buffer.wrap = not self.buffer.wrap
        self.refresh()

    def action_toggle_timestamps(self) -> None:
        self.buffer.show_timestamps = not self.buffer.show_timestamps
        self.refresh()

    def reveal(self, index: int) -> None:
        self.buffer.reveal(index)
        self.refresh()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.action_scroll(-WHEEL_LINES)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.action_scroll(WHEEL_LINES)
