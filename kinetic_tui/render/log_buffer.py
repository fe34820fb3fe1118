"""The model behind the job log view (Toolong-style), with no Textual in it.

The view follows the tail only while the reader sits at the bottom: scrolling up pauses follow and counts
"N new lines" instead of yanking the view, and scrolling back to the bottom resumes it. The buffer is
bounded (oldest lines trimmed, and counted) so a chatty job cannot grow the console's memory without limit.
Positions are line indices into what the buffer currently holds; trimming shifts a paused viewport with
the lines it shows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from itertools import chain
from pathlib import Path

from rich.cells import chop_cells

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.validation import require_int
from kinetic_tui.render.formatting import fit

TIMESTAMP_WIDTH = len("00:00:00.000 ")


def _stamp(timestamp: float | None) -> str:
    """UTC, so a saved log and a test read the same on every machine."""
    if timestamp is None:
        return " " * TIMESTAMP_WIDTH
    seconds, millis = divmod(round(timestamp * 1000), 1000)  # round once, so 1.9996 reads 00:00:02.000
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d} "


class LogBuffer:
    """Lines, a viewport (`top`, `height`) and the follow / new-lines state of one log view."""

    def __init__(self, max_lines: int = 10_000, height: int = 20) -> None:
        self.max_lines = require_int("max_lines", max_lines, 1)
        self._height = require_int("height", height, 1)
        # parallel lists rather than one tuple per line: appending a batch is then two C-level extends
        self._texts: list[str] = []
        self._stamps: list[float | None] = []
        self._top = 0
        self._follow = True
        self.trimmed = 0  # lines dropped from the front since the buffer was created
        self.new_lines = 0  # lines that arrived while the reader was scrolled up
        self.wrap = False
        self.show_timestamps = False

    def __len__(self) -> int:
        return len(self._texts)

    @property
    def lines(self) -> list[str]:
        return list(self._texts)

    @property
    def top(self) -> int:
        return self._top

    @property
    def height(self) -> int:
        return self._height

    @property
    def follow(self) -> bool:
        return self._follow

    @property
    def bottom(self) -> int:
        """The `top` at which the last line is the last row of the viewport."""
        return max(0, len(self._texts) - self._height)

    @property
    def new_lines_label(self) -> str:
        if not self.new_lines:
            return ""
        return f"{self.new_lines} new line{'s' if self.new_lines != 1 else ''}"

    # -- input -----------------------------------------------------------------------------------------

    def append(self, batch: Iterable[str], timestamps: Sequence[float | None] | None = None, skipped: int = 0) -> int:
        """Add one batch (with one timestamp per line, or none) and return how many lines it added. A text
        holding newlines becomes several lines sharing its timestamp, so one item never breaks the window
        geometry. `skipped`: lines that arrived before the batch and were dropped unseen (counted as
        trimmed, and as new while paused)."""
        texts = list(batch)
        if timestamps is not None and len(timestamps) != len(texts):
            raise ValidationError(f"timestamps: expected one per line ({len(texts)}), got {len(timestamps)}")
        try:
            multiline = "\n" in "".join(texts)  # one C pass checks the types and finds newlines
        except TypeError:
            bad = next(text for text in texts if not isinstance(text, str))
            raise ValidationError(f"batch: expected strings, got {bad!r}") from None
        stamps = [None] * len(texts) if timestamps is None else list(timestamps)
        if multiline:
            pairs = [
                (part, stamp) for text, stamp in zip(texts, stamps) for part in text.removesuffix("\n").split("\n")
            ]
            texts, stamps = [text for text, _ in pairs], [stamp for _, stamp in pairs]
        self._texts.extend(texts)
        self._stamps.extend(stamps)
        excess = len(self._texts) - self.max_lines
        if excess > 0:
            del self._texts[:excess]
            del self._stamps[:excess]
            self.trimmed += excess
        self.trimmed += skipped
        if self._follow:
            self._top = self.bottom
        else:
            self.new_lines += len(texts) + skipped
            self._top = min(max(0, self._top - max(excess, 0)), max(len(self._texts) - 1, 0))
        return len(texts)

    # -- viewport --------------------------------------------------------------------------------------

    def resize(self, height: int) -> None:
        self._height = require_int("height", height, 1)
        self.scroll_to(self.bottom if self._follow else self._top)

    def scroll_to(self, top: int) -> None:
        """Reaching the bottom resumes follow and clears the new-lines count; anywhere else pauses it."""
        if isinstance(top, bool) or not isinstance(top, int):
            raise ValidationError(f"top: expected an integer line index, got {top!r}")
        self._top = min(max(0, top), self.bottom)
        self._follow = self._top == self.bottom
        if self._follow:
            self.new_lines = 0

    def pause_at(self, top: int) -> None:
        """Hold line `top` at the top without following, even near the end: a wrapped view whose last lines
        fill more rows than it has is not at the bottom while its top line is past `bottom`."""
        self._top = min(max(0, top), max(len(self._texts) - 1, 0))
        self._follow = False

    def scroll_by(self, delta: int) -> None:
        self.scroll_to(self._top + delta)

    def scroll_end(self) -> None:
        self.scroll_to(self.bottom)

    def reveal(self, index: int) -> None:
        """Bring line `index` into view (centred) unless it already is: where a search match lands."""
        if not self._top <= index < self._top + self._height:
            self.scroll_to(index - self._height // 2)

    def render(self, index: int) -> str:
        """Line `index` as drawn: with its timestamp column when timestamps are on."""
        text = self._texts[index]
        return _stamp(self._stamps[index]) + text if self.show_timestamps else text

    def window(self, top: int | None = None, height: int | None = None, width: int | None = None) -> list[str]:
        """The rows to draw from line `top` (default: the viewport). With `width`, long lines are cut to it,
        or with `wrap` split into rows of it; while following, wrapped rows are filled from the end so the
        newest line is always the last row."""
        top = self._top if top is None else max(0, top)
        height = self._height if height is None else require_int("height", height, 1)
        count = len(self._texts)
        if width is None:
            return [self.render(i) for i in range(top, min(top + height, count))]
        width = require_int("width", width, 1)
        if not self.wrap:
            return [fit(self.render(i), width) for i in range(top, min(top + height, count))]
        rows: list[str] = []
        if self._follow and top == self._top:
            for i in range(count - 1, -1, -1):
                rows[:0] = chop_cells(self.render(i), width) or [""]
                if len(rows) >= height:
                    break
            return rows[-height:]
        for i in range(top, count):
            rows.extend(chop_cells(self.render(i), width) or [""])
            if len(rows) >= height:
                break
        return rows[:height]

    # -- search and save -------------------------------------------------------------------------------

    def next_match(self, query: str, after: int | None = None) -> int | None:
        """Index of the first line after `after` containing `query` (any case), wrapping past the end."""
        count = len(self._texts)
        start = -1 if after is None else min(after, count - 1)
        return self._first(query, chain(range(start + 1, count), range(0, start + 1)))

    def previous_match(self, query: str, before: int | None = None) -> int | None:
        """Index of the last line before `before` containing `query` (any case), wrapping past the start."""
        count = len(self._texts)
        start = count if before is None else max(0, min(before, count))
        return self._first(query, chain(range(start - 1, -1, -1), range(count - 1, start - 1, -1)))

    def matches(self, query: str) -> list[int]:
        """Indexes of every line containing `query` (any case), in order: the search's `3/17`."""
        needle = query.casefold()
        if not needle:
            return []
        return [index for index, text in enumerate(self._texts) if needle in text.casefold()]

    def _first(self, query: str, order: Iterable[int]) -> int | None:
        needle = query.casefold()
        if not needle:
            return None
        texts = self._texts
        return next((index for index in order if needle in texts[index].casefold()), None)

    def save(self, path: str | Path) -> int:
        """Write every line the buffer holds as shown (timestamps included when on); returns the count."""
        text = "".join(self.render(i) + "\n" for i in range(len(self._texts)))
        Path(path).write_text(text, encoding="utf-8")
        return len(self._texts)
