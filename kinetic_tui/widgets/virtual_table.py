"""A windowed table for lists of thousands of rows (the Jobs view).

DataTable keeps a widget-side copy of every cell and re-measures columns as rows arrive, so 10,000 rows
cost seconds to show and every poll touches all of them. This table holds only the row keys in order and
a function that produces a row for a key: a refresh is one list assignment, and drawing (Textual's Line
API) asks only for the rows on screen. Column widths are measured on the rows on screen only, once per
frame: each column as wide as its content, down to its minimum when the terminal is narrow
(`render.columns`), and a cut value loses its middle, not the end that tells it apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.render.columns import GAP, column_widths, fit_middle
from kinetic_tui.render.formatting import styled_cell

Row = tuple[str, ...]
HEADER_LINES = 1
MARK = "●"  # drawn in the gutter before a marked row's first cell


@lru_cache(maxsize=1024)
def cell_style(cell: str) -> Style:
    """The status colour of a cell, parsed once per distinct text (drawing asks for it every frame)."""
    style = styled_cell(cell).style
    return style if isinstance(style, Style) else Style.parse(style)


class _TableMessage(Message):
    """What a `VirtualTable` says about one of its rows (`key`)."""

    def __init__(self, table: VirtualTable, key: str) -> None:
        super().__init__()
        self.table = table
        self.key = key

    @property
    def control(self) -> VirtualTable:
        return self.table


class VirtualTable(ScrollView, can_focus=True):
    """Rows are `row_of(key)` tuples of plain strings; only visible rows are ever produced, and each
    refresh forgets the rows produced for the previous one (they may have changed)."""

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False, id="table.up"),
        Binding("down,j", "cursor(1)", "Down", show=False, id="table.down"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="table.page_up"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="table.page_down"),
        Binding("home,g", "edge(0)", "First", show=False, id="table.first"),
        Binding("end,G", "edge(1)", "Last", show=False, id="table.last"),
        Binding("enter", "select", "Open", show=False, id="table.open"),
        Binding("space", "mark", "Mark", show=False, id="table.mark"),
    ]
    COMPONENT_CLASSES = {"virtual-table--header", "virtual-table--cursor"}
    DEFAULT_CSS = """
    VirtualTable {
        background: $surface;
        color: $foreground;
        height: 1fr;
        & > .virtual-table--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .virtual-table--header { background: ansi_bright_blue; color: ansi_default; }
        & > .virtual-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus {
            background-tint: $foreground 5%;
            & > .virtual-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
        }
    }
    """

    class Selected(_TableMessage):
        """Enter (or a click on the cursor row) on a row: `key` is that row's key."""

    class Highlighted(_TableMessage):
        """The cursor moved onto the row of `key`."""

    class MarksChanged(_TableMessage):
        """A row was marked or unmarked (`key`)."""

    def __init__(self, columns: Sequence[tuple[str, int]], *, id: str | None = None) -> None:
        bad = [(label, width) for label, width in columns if not isinstance(width, int) or width < 1]
        if bad:
            raise ValidationError(f"columns: every width must be an int >= 1, got {bad[0]!r}")
        super().__init__(id=id)
        self.columns = tuple(columns)
        self._keys: list[str] = []
        self._row_of: Callable[[str], Row] = lambda key: (key,)
        self._made: dict[str, Row] = {}  # rows produced since the last refresh
        self.marked: set[str] = set()  # keys marked with space, for actions on several rows at once
        self.cursor_row = 0
        self._style = Style.null()  # the table's own style, read once per frame by `render_lines`
        self._line_width = sum(width + GAP for _, width in self.columns)
        self._widths = [width for _, width in self.columns]  # as drawn in the current frame
        # an empty table of `height: auto` still shows its header line
        self.set_reactive(ScrollView.virtual_size, Size(self._line_width, HEADER_LINES))

    # -- data ------------------------------------------------------------------------------------------

    @property
    def keys(self) -> list[str]:
        return list(self._keys)

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def selected_key(self) -> str | None:
        """The key of the row under the cursor (None on an empty table)."""
        return self._keys[self.cursor_row] if self._keys else None

    def get_row(self, key: str) -> Row:
        """The row for `key` as drawn (plain strings); a key that is not listed raises KeyError."""
        if key not in self._made and key not in self._keys:
            raise KeyError(key)
        return self._row(key)

    def set_rows(self, keys: Sequence[str], row_of: Callable[[str], Row]) -> None:
        """Show `keys` in this order, each drawn from `row_of(key)` when (and only when) it is on screen.
        The cursor stays on its key when that key is still listed, else on the same position; but a cursor
        on the first row stays there when new rows arrive above its key, as `tail -f` stays at the end: in
        a newest-first list the newest jobs keep showing up under it, where following its key would scroll
        them out of view (a new sort order still keeps the cursor on its key)."""
        selected, previous = self.selected_key, self._keys
        self._keys = list(keys)
        self._row_of = row_of
        self._made = {}
        if self.marked:
            self.marked &= set(self._keys)
        position = self._position(selected) if selected is not None else None
        if position and self.cursor_row == 0 and set(previous).isdisjoint(self._keys[:position]):
            position = 0  # only new rows came above the first row's key
        self.cursor_row = position if position is not None else min(self.cursor_row, max(len(self._keys) - 1, 0))
        self.virtual_size = Size(self._line_width, len(self._keys) + HEADER_LINES)
        self._scroll_to_cursor()
        self.refresh()
        self.refresh_bindings()  # what the keys can act on may have changed with the rows

    def sync(self, rows: Sequence[Row]) -> None:
        """Show whole rows keyed by their first cell (small tables whose rows are already computed)."""
        by_key = {row[0]: row for row in rows}
        self.set_rows(list(by_key), by_key.__getitem__)

    def _row(self, key: str) -> Row:
        row = self._made.get(key)
        if row is None:
            row = self._made[key] = self._row_of(key)
        return row

    def _position(self, key: str) -> int | None:
        try:
            return self._keys.index(key)
        except ValueError:
            return None

    # -- cursor ----------------------------------------------------------------------------------------

    def select_key(self, key: str) -> bool:
        position = self._position(key)
        if position is None:
            return False
        self._move_to(position)
        return True

    @property
    def _page(self) -> int:
        return max(self.scrollable_content_region.height - HEADER_LINES, 1)

    def _move_to(self, row: int) -> None:
        row = max(0, min(row, len(self._keys) - 1))
        if row == self.cursor_row:
            return
        before, self.cursor_row = self.cursor_row, row
        if not self._scroll_to_cursor():
            self._refresh_row(before)
            self._refresh_row(row)
        self.refresh_bindings()  # the footer dims the keys that cannot act on the new row
        self.post_message(self.Highlighted(self, self._keys[row]))

    def _refresh_row(self, row: int) -> None:
        self.refresh(Region(0, row - int(self.scroll_y) + HEADER_LINES, self.size.width, 1))

    def _scroll_to_cursor(self) -> bool:
        """Scroll just enough to show the cursor row; True when the view moved (so it repaints whole)."""
        top = int(self.scroll_y)
        wanted = min(top, self.cursor_row)
        wanted = max(wanted, self.cursor_row - self._page + 1)
        if wanted == top:
            return False
        self.scroll_to(y=wanted, animate=False, immediate=True)
        return True

    def action_cursor(self, step: int) -> None:
        self._move_to(self.cursor_row + step)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor_row + direction * self._page)

    def action_edge(self, end: int) -> None:
        self._move_to(len(self._keys) - 1 if end else 0)

    def action_mark(self) -> None:
        """Space toggles the mark of the cursor row and moves down, so a run of rows is marked key by key."""
        key = self.selected_key
        if key is None:
            return
        self.marked.symmetric_difference_update({key})
        self._refresh_row(self.cursor_row)
        self.post_message(self.MarksChanged(self, key))
        self._move_to(self.cursor_row + 1)

    def action_select(self) -> None:
        key = self.selected_key
        if key is not None:
            self.post_message(self.Selected(self, key))

    def on_click(self, event: events.Click) -> None:
        row = event.y - HEADER_LINES + int(self.scroll_y)
        if event.y < HEADER_LINES or not 0 <= row < len(self._keys):
            return
        if row == self.cursor_row:
            self.action_select()
        else:
            self._move_to(row)

    # -- drawing ---------------------------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._style = self.rich_style  # once per frame, not per line: it walks every ancestor's styles
        self._widths = self._measure()
        return super().render_lines(crop)

    def _measure(self) -> list[int]:
        """The columns' widths for the rows on screen: what the header and those rows need, fitted to the
        width of the table (the minimums given for each column hold even if the line then overflows)."""
        natural = [cell_len(label) for label, _ in self.columns]
        top = int(self.scroll_y)
        for key in self._keys[top : top + self._page]:
            natural = [max(width, cell_len(cell)) for width, cell in zip(natural, self._row(key))]
        minimums = [width for _, width in self.columns]
        return column_widths(minimums, natural, self.scrollable_content_region.width)

    def render_line(self, y: int) -> Strip:
        if y < HEADER_LINES:
            cells: Row = tuple(label for label, _ in self.columns)
            style, cursor = self.get_component_rich_style("virtual-table--header"), Style.null()
            marked = False
        else:
            row = y - HEADER_LINES + int(self.scroll_y)
            if row >= len(self._keys):
                return Strip.blank(self.size.width, self._style)
            cells = self._row(self._keys[row])
            marked = self._keys[row] in self.marked
            style = self._style
            # drawn over the status colour, as DataTable does
            cursor = self.get_component_rich_style("virtual-table--cursor") if row == self.cursor_row else Style.null()
        segments = [
            Segment(f" {fit_middle(cell, width)} ", style + cell_style(cell) + cursor)
            for cell, width in zip(cells, self._widths)
        ]
        if marked and segments:
            first = segments[0]
            segments[0] = Segment(MARK + first.text[1:], (first.style or Style.null()) + Style(bold=True))
        scroll_x = int(self.scroll_x)
        line_width = sum(width + GAP for width in self._widths)
        return Strip(segments, line_width).crop_extend(scroll_x, scroll_x + self.size.width, style + cursor)
