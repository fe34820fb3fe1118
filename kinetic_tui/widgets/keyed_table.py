"""Widgets shared by the console's views: the keyed table every list view draws with.

`KeyedTable.sync` is the Dolphie rule in one place: each refresh adds new rows, updates only the cells
that changed (by row key) and removes rows that went away, so a refresh costs a dictionary diff instead of
a full rebuild, and the cursor stays on the same object while rows move. It suits the views' tables of
tens to hundreds of rows; the jobs list, which can hold tens of thousands, uses `VirtualTable`
(virtual_table.py), which renders only the visible page, and so does view 1, whose lighter tables keep the
console's first frame cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from kinetic_tui.render.formatting import styled_cell

Row = tuple[str, ...]
REBUILD_SHARE = 0.25  # removing more than this share row by row (O(n) each in DataTable) costs more than a refill
REBUILD_MIN = 64


class KeyedTable(DataTable[Text]):
    """A row-cursor DataTable whose rows are render-layer tuples keyed by their first cell.

    Give columns whose text grows (ages, statuses) a fixed width: an updated cell never re-measures its
    column, because DataTable re-measures every cell of the column for each one (seconds at 10,000 rows).
    j/k/g/G move the cursor as the arrows and Home/End do."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="table.vim_down"),
        Binding("k", "cursor_up", "Up", show=False, id="table.vim_up"),
        Binding("g", "scroll_top", "First", show=False, id="table.vim_first"),
        Binding("G", "scroll_bottom", "Last", show=False, id="table.vim_last"),
    ]

    def __init__(self, columns: Sequence[tuple[str, int | None]], *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self._spec = tuple(columns)
        self._cells: dict[str, Row] = {}  # key -> the row as drawn, in table order

    def on_mount(self) -> None:
        for index, (label, width) in enumerate(self._spec):
            self.add_column(label, width=width, key=f"c{index}")

    @property
    def selected_key(self) -> str | None:
        """The key of the row under the cursor (None on an empty table)."""
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    @property
    def keys(self) -> list[str]:
        return list(self._cells)

    def select_key(self, key: str) -> bool:
        if key not in self._cells:
            return False
        self.move_cursor(row=self.get_row_index(key))
        return True

    def sync(self, rows: Sequence[Row]) -> None:
        """Make the table show exactly `rows`, in their order, touching only what changed."""
        wanted = {row[0]: row for row in rows}
        selected = self.selected_key
        gone = [key for key in self._cells if key not in wanted]
        if len(gone) > max(REBUILD_MIN, len(self._cells) * REBUILD_SHARE):
            self.clear()
            self._cells.clear()
        else:
            for key in gone:
                self.remove_row(key)
                del self._cells[key]
        for key, row in wanted.items():
            old = self._cells.get(key)
            if old is None:
                self.add_row(*(styled_cell(cell) for cell in row), key=key)
            elif old != row:
                for index, (before, after) in enumerate(zip(old, row)):
                    if before != after:
                        self.update_cell(key, f"c{index}", styled_cell(after))
            self._cells[key] = row
        order = list(wanted)
        if list(self._cells) != order:
            position = {key: index for index, key in enumerate(order)}
            self.sort("c0", key=lambda cell: position[str(cell)])
            self._cells = {key: self._cells[key] for key in order}
        if selected in self._cells and self.get_row_index(selected) != self.cursor_row:
            self.select_key(selected)
