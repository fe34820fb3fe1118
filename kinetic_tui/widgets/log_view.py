"""A job's live log: a bounded `LogBuffer` drawn line by line through Textual's Line API, fed in batches.

Producers (a reader thread, LogBatch events) only `feed` lines into a queue; a 100 ms timer moves what
arrived into the buffer in one append, so a chatty job costs one layout per tick rather than one per line.
Only visible rows are drawn, each once: strips are cached by the line's absolute number, and the cache is
dropped whenever what a row looks like changes (width, wrap, timestamps, the search highlight, the style).
The scroll position (keys, wheel, scrollbar) is the reader's; the buffer keeps what it means: at the last
row the view follows, anywhere else it pauses and counts "N new lines".
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kinetic_tui.render.formatting import fit
from kinetic_tui.render.log_buffer import LogBuffer
from kinetic_tui.render.log_rows import WrappedRows, shown, wrapped

FLUSH_INTERVAL = 0.1  # seconds between batches: a log never lags its job by more than this
STRIP_CACHE = 1024  # strips kept: a few screens' worth, so scrolling back and forth redraws nothing


class LogView(ScrollView, can_focus=True):
    BINDINGS = [
        Binding("up", "scroll(-1)", "Up", show=False, id="log.up"),
        Binding("down", "scroll(1)", "Down", show=False, id="log.down"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="log.page_up"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="log.page_down"),
        Binding("home", "top", "Top", show=False, id="log.top"),
        Binding("end", "bottom", "Follow", id="log.follow"),
        Binding("w", "toggle_wrap", "Wrap", id="log.wrap"),
        Binding("t", "toggle_timestamps", "Timestamps", id="log.timestamps"),
    ]
    DEFAULT_CSS = """
    LogView { overflow-x: hidden; overflow-y: scroll; }
    """

    class StatusChanged(Message):
        """The status line's text changed; `alert` while new lines wait below a paused view."""

        def __init__(self, log_view: LogView, status: str, alert: bool) -> None:
            super().__init__()
            self.log_view = log_view
            self.status = status
            self.alert = alert

        @property
        def control(self) -> LogView:
            return self.log_view

    class Ended(Message):
        """The producer has handed over its last line: flush now rather than at the next tick."""

    def __init__(self, max_lines: int = 10_000, clock: Callable[[], float] = time.time, id: str | None = None) -> None:
        super().__init__(id=id)
        self.buffer = LogBuffer(max_lines=max_lines)
        self.clock = clock
        self._highlight = ""
        self._pending: deque[str] = deque(maxlen=max_lines)
        self._dropped = 0  # lines pushed out of the full queue since the last flush
        self._feeding = threading.Lock()
        self._rows = WrappedRows()  # the row index while wrapped
        self._row_offset = 0  # rows of the top line above the view (wrapped, paused)
        self._strips: LRUCache[tuple[int, int], Strip] = LRUCache(STRIP_CACHE)
        self._drawn_as: tuple[object, ...] = ()  # what the cached strips were drawn with
        self._base_style = Style.null()  # the widget's style and width, read once per frame by `render_lines`
        self._frame_width = 1
        self._chopped: tuple[tuple[int, int, bool], list[str]] = ((-1, 0, False), [])  # the line last wrapped
        self._shown_status = ""

    def on_mount(self) -> None:
        self.set_interval(FLUSH_INTERVAL, self.flush)

    # -- input -----------------------------------------------------------------------------------------

    def feed(self, lines: Iterable[str], skipped: int = 0) -> None:
        """Queue lines from any thread; they appear at the next flush. The queue holds at most what the
        buffer keeps: lines that would be trimmed at once are dropped here (and counted as trimmed), so a
        reader faster than the flush never piles a whole log up in memory. `skipped`: lines before these
        that the reader passed over unread, counted as trimmed too."""
        batch = lines if isinstance(lines, list) else list(lines)
        keep = self._pending.maxlen or len(batch)
        with self._feeding:
            if skipped:  # older than anything queued: what is queued is older still
                self._dropped += skipped + len(self._pending)
                self._pending.clear()
            if len(batch) > keep:  # a batch longer than the queue: its head would be pushed out line by line
                self._dropped += len(batch) - keep + len(self._pending)
                self._pending.clear()
                batch = batch[-keep:]
            before = len(self._pending)
            self._pending.extend(batch)
            self._dropped += before + len(batch) - len(self._pending)

    def end(self) -> None:
        """From any thread: nothing more will be fed, so what is queued shows at once. A finished log's
        end then appears as soon as it is read instead of up to a tick later."""
        self.post_message(self.Ended())

    def on_log_view_ended(self, message: Ended) -> None:
        message.stop()
        self.flush()

    def flush(self) -> int:
        """Move every queued line into the buffer as one batch; returns how many arrived (dropped included)."""
        with self._feeding:
            batch, dropped = list(self._pending), self._dropped
            self._pending.clear()
            self._dropped = 0
        if not batch:
            return 0
        self.buffer.append(batch, [self.clock()] * len(batch), skipped=dropped)
        self._show_buffer()
        return len(batch) + dropped

    @property
    def highlight(self) -> str:
        """The search query, marked in every visible row."""
        return self._highlight

    @highlight.setter
    def highlight(self, query: str) -> None:
        self._highlight = query
        self.refresh()

    @property
    def status(self) -> str:
        buffer = self.buffer
        parts = [f"{len(buffer)} lines"]
        if buffer.trimmed:
            parts.append(f"{buffer.trimmed} trimmed")
        parts.append(
            f"▼ {buffer.new_lines_label} (End follows)"
            if buffer.new_lines
            else ("following" if buffer.follow else "paused")
        )
        parts += [word for word, on in (("wrap", buffer.wrap), ("timestamps", buffer.show_timestamps)) if on]
        return " · ".join(parts)

    # -- the row model ---------------------------------------------------------------------------------

    @property
    def _viewport(self) -> Region:
        return self.scrollable_content_region

    def _row_total(self) -> int:
        return self._rows.total if self.buffer.wrap else len(self.buffer)

    def _locate(self, row: int) -> tuple[int, int] | None:
        """(line, row within it) drawn at `row`, or None past the end."""
        if self.buffer.wrap:
            return self._rows.locate(row)
        return (row, 0) if 0 <= row < len(self.buffer) else None

    def _show_buffer(self) -> None:
        """Scroll to where the buffer says the view is (the bottom while following), after the buffer changed."""
        buffer, viewport = self.buffer, self._viewport
        if not viewport.height:
            return
        if buffer.wrap:
            self._rows.update(buffer, viewport.width)
        total = self._row_total()
        self.virtual_size = Size(viewport.width, total)
        if buffer.follow:
            row = max(0, total - viewport.height)
        else:
            row = (self._rows.start(buffer.top) if buffer.wrap else buffer.top) + self._row_offset
        self.scroll_to(y=row, animate=False, immediate=True)
        self._take_position(self.scroll_offset.y)
        self.refresh()

    def _take_position(self, row: int) -> None:
        """Tell the buffer where the reader scrolled: the last row follows, any other pauses."""
        buffer = self.buffer
        if row >= self.max_scroll_y:
            buffer.scroll_end()
            self._row_offset = 0
        else:
            line, self._row_offset = self._locate(row) or (len(buffer) - 1, 0)
            buffer.pause_at(line)
        self._announce()

    def _announce(self) -> None:
        status = self.status
        if status != self._shown_status:
            self._shown_status = status
            self.post_message(self.StatusChanged(self, status, bool(self.buffer.new_lines)))

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._viewport.height:
            self._take_position(round(new_value))

    def on_resize(self) -> None:
        self.buffer.resize(max(self._viewport.height, 1))
        self._show_buffer()

    # -- keys ------------------------------------------------------------------------------------------

    def _scroll_rows(self, row: int) -> None:
        self.scroll_to(y=max(0, row), animate=False, immediate=True)
        self._take_position(self.scroll_offset.y)

    def action_scroll(self, delta: int) -> None:
        self._scroll_rows(self.scroll_offset.y + delta)

    def action_page(self, direction: int) -> None:
        self._scroll_rows(self.scroll_offset.y + direction * max(self._viewport.height, 1))

    def action_top(self) -> None:
        self._scroll_rows(0)

    def action_bottom(self) -> None:
        self.buffer.scroll_end()
        self._show_buffer()

    def action_toggle_wrap(self) -> None:
        self.buffer.wrap = not self.buffer.wrap
        self._row_offset = 0
        self._show_buffer()

    def action_toggle_timestamps(self) -> None:
        self.buffer.show_timestamps = not self.buffer.show_timestamps
        self._row_offset = 0
        self._show_buffer()

    def reveal(self, index: int) -> None:
        """Bring line `index` into view (a search match)."""
        self.buffer.reveal(index)
        self._row_offset = 0
        self._show_buffer()

    # -- drawing ---------------------------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._base_style = self.rich_style  # once per frame, not per line: it walks every ancestor's styles
        self._frame_width = self._viewport.width
        buffer = self.buffer
        drawn_as = (self._frame_width, buffer.wrap, buffer.show_timestamps, self._highlight, self._base_style)
        if drawn_as != self._drawn_as:
            self._strips.clear()
            self._drawn_as = drawn_as
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width, style = self._frame_width, self._base_style
        found = self._locate(self.scroll_offset.y + y)
        if found is None:
            return Strip.blank(width, style)
        key = (self.buffer.trimmed + found[0], found[1])
        strip = self._strips.get(key)
        if strip is None:
            strip = self._strips[key] = self._draw(*found, width, style)
        return strip

    def _draw(self, line: int, part: int, width: int, style: Style) -> Strip:
        plain = shown(self.buffer, line)
        if self.buffer.wrap:
            drawn_as = (self.buffer.trimmed + line, width, self.buffer.show_timestamps)
            if self._chopped[0] != drawn_as:  # the rows of one long line are drawn one after another
                self._chopped = (drawn_as, wrapped(plain, width))
            rows = self._chopped[1]
            plain = rows[part] if part < len(rows) else ""
        else:
            plain = fit(plain, width)
        text = Text(plain, style=style, no_wrap=True, end="")
        if self._highlight:
            text.highlight_words([self._highlight], "reverse", case_sensitive=False)
        return Strip(text.render(self.app.console), cell_len(plain)).extend_cell_length(width, style)
