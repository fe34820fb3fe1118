"""Where each held log line starts when a log is wrapped at a width: the row index a wrapped log scrolls by.

It is kept incrementally: a batch counts only its new lines and trimming drops entries from the front, so a
streaming log costs per new line rather than per held line. Row numbers count from the first held line.
"""

from __future__ import annotations

from bisect import bisect_right

from rich.cells import cell_len, chop_cells

from kinetic_tui.render.log_buffer import LogBuffer


def shown(buffer: LogBuffer, index: int) -> str:
    """Line `index` as a row shows it: tabs expanded, so every character is one or two cells."""
    return buffer.render(index).expandtabs()


def wrapped(text: str, width: int) -> list[str]:
    """`text` cut into rows of `width` cells; an empty line is one empty row."""
    return [text] if cell_len(text) <= width else chop_cells(text, width)


def row_count(text: str, width: int) -> int:
    return 1 if cell_len(text) <= width else len(chop_cells(text, width))


class WrappedRows:
    """Cumulative row counts of a `LogBuffer`'s lines as drawn (timestamps included when on) at one width."""

    def __init__(self) -> None:
        self._ends: list[int] = []  # rows up to and including each held line, counted from `_base`
        self._base = 0  # rows of the lines dropped since the counts began
        self._first = 0  # absolute number (trimmed lines included) of the first counted line
        self._drawn_as: tuple[int, bool] | None = None  # (width, timestamps) the counts hold for

    def update(self, buffer: LogBuffer, width: int) -> None:
        """Catch up with `buffer`: forget trimmed lines, count new ones; a new width or timestamp setting
        recounts everything."""
        first = buffer.trimmed
        if (width, buffer.show_timestamps) != self._drawn_as or first < self._first:
            self._ends, self._base, self._first = [], 0, first
            self._drawn_as = (width, buffer.show_timestamps)
        dropped = first - self._first
        if dropped >= len(self._ends):
            self._ends, self._base = [], 0
        elif dropped:
            self._base = self._ends[dropped - 1]
            del self._ends[:dropped]
        self._first = first
        total = self._ends[-1] if self._ends else self._base
        ends = self._ends
        for index in range(len(ends), len(buffer)):
            total += row_count(shown(buffer, index), width)
            ends.append(total)

    @property
    def total(self) -> int:
        return (self._ends[-1] if self._ends else self._base) - self._base

    def start(self, line: int) -> int:
        """The row where held line `line` begins."""
        return (self._ends[line - 1] if line else self._base) - self._base

    def locate(self, row: int) -> tuple[int, int] | None:
        """(line, row within that line) for `row`, or None past the last row."""
        line = bisect_right(self._ends, row + self._base)
        if line >= len(self._ends):
            return None
        return line, row - self.start(line)
