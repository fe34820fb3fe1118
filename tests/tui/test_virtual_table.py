"""The windowed table: only visible rows are produced, the cursor keys move and scroll, the cursor follows
its key through refreshes, Enter and clicks select, space marks, columns size to their content and the
terminal, and a cut value loses its middle."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from textual.app import App, ComposeResult

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.render.columns import ELLIPSIS, column_widths, fit_middle
from kinetic_tui.views.jobs import COLUMNS
from kinetic_tui.widgets.virtual_table import MARK, Row, VirtualTable

SIZE = (80, 12)  # a header line and 11 rows on screen


class _App(App[None]):
    def __init__(self, columns: tuple[tuple[str, int], ...] = (("ID", 6), ("STATUS", 11))) -> None:
        super().__init__()
        self.columns = columns
        self.selected: list[str] = []

    def compose(self) -> ComposeResult:
        yield VirtualTable(self.columns)

    def on_virtual_table_selected(self, event: VirtualTable.Selected) -> None:
        self.selected.append(event.key)


class _Counting:
    """A row_of that records which keys were asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, key: str) -> Row:
        self.asked.append(key)
        return (key, "✓ SUCCEEDED")


def _keys(count: int) -> list[str]:
    return [f"k{n:05d}" for n in range(count)]


def _line(table: VirtualTable, y: int) -> str:
    return table.render_line(y).text


@given(st.text(max_size=30), st.integers(min_value=1, max_value=20))
def test_fit_fills_the_width_exactly_and_marks_a_cut(text: str, width: int) -> None:
    fitted = fit_middle(text, width)
    assert cell_len(fitted) == width
    if cell_len(text) <= width:
        assert fitted.startswith(text) and not fitted[len(text) :].strip()
    else:
        assert ELLIPSIS in fitted


def test_a_cut_keeps_the_end_that_tells_siblings_apart() -> None:
    names = ["train fraud-baseline", "train fraud-preemptible", "train fraud-sweep-t3"]
    cut = [fit_middle(name, 14) for name in names]
    assert len(set(cut)) == len(names) and all(c.startswith("trai") and ELLIPSIS in c for c in cut)
    assert cut[1].endswith("eemptible")


def test_columns_take_their_content_and_give_up_cells_down_to_their_minimum() -> None:
    assert column_widths([12, 6, 4], [12, 20, 4], 80) == [12, 20, 4]  # room: the content's width
    assert column_widths([12, 6, 4], [12, 20, 4], 30) == [12, 8, 4]  # narrow: the widest gives way
    assert column_widths([12, 6, 4], [12, 20, 9], 10) == [12, 6, 4]  # never below the minimums


def test_the_jobs_columns_fit_80_columns_and_widths_are_checked() -> None:
    assert sum(width + 2 for _, width in COLUMNS) <= 80
    with pytest.raises(ValidationError, match="columns: .*'STATUS'"):
        VirtualTable((("ID", 4), ("STATUS", 0)))


async def test_ten_thousand_rows_produce_only_the_visible_page() -> None:
    app = _App()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(VirtualTable)
        row_of = _Counting()
        table.set_rows(_keys(10_000), row_of)
        await pilot.pause()
        assert table.row_count == 10_000 and table.keys[:2] == ["k00000", "k00001"]
        assert 0 < len(set(row_of.asked)) <= SIZE[1] - 1
        assert _line(table, 0).split() == ["ID", "STATUS"]
        assert _line(table, 1).split() == ["k00000", "✓", "SUCCEEDED"]
        row_of.asked.clear()
        table.focus()
        await pilot.press("end")
        assert table.selected_key == "k09999" and table.cursor_row == 9_999
        assert _line(table, SIZE[1] - 1).split()[0] == "k09999"  # scrolled: the last row sits at the bottom
        assert len(set(row_of.asked)) <= SIZE[1] - 1


async def test_cursor_keys_move_and_scroll_to_keep_the_cursor_visible() -> None:
    app = _App()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(VirtualTable)
        table.set_rows(_keys(100), _Counting())
        table.focus()
        await pilot.press("down", "down")
        assert table.selected_key == "k00002" and table.scroll_y == 0
        await pilot.press("pagedown")
        page = SIZE[1] - 1
        assert table.cursor_row == 2 + page
        assert table.scroll_y == table.cursor_row - page + 1  # just enough to show it on the last line
        await pilot.press("up")
        assert table.cursor_row == 1 + page
        await pilot.press("home")
        assert table.cursor_row == 0 and table.scroll_y == 0
        await pilot.press("up")  # stays on the first row
        assert table.cursor_row == 0
        await pilot.press("end", "down", "pageup")
        assert table.cursor_row == 99 - page


async def test_a_refresh_keeps_the_cursor_on_its_key_or_its_place() -> None:
    app = _App()
    async with app.run_test(size=SIZE):
        table = app.query_one(VirtualTable)
        row_of = _Counting()
        table.set_rows(["a", "b", "c", "d"], row_of)
        assert table.select_key("c") and not table.select_key("zz")
        table.set_rows(["new", "a", "b", "c", "d"], row_of)  # a new row on top: the cursor follows "c"
        assert table.selected_key == "c" and table.cursor_row == 3
        table.set_rows(["new", "a"], row_of)  # "c" went away: the cursor stays in range
        assert table.selected_key == "a"
        assert table.select_key("new")
        table.set_rows(["newer", "new", "a"], row_of)  # on the first row it stays there, showing the newest
        assert table.selected_key == "newer" and table.cursor_row == 0 and table.scroll_y == 0
        table.set_rows([], row_of)
        assert table.selected_key is None and table.row_count == 0
        table.sync([("x", "· PENDING"), ("y", "▶ RUNNING")])
        assert table.keys == ["x", "y"] and table.get_row("y") == ("y", "▶ RUNNING")
        with pytest.raises(KeyError):
            table.get_row("a")


async def test_a_refresh_forgets_rows_produced_for_the_last_one() -> None:
    app = _App()
    async with app.run_test(size=SIZE):
        table = app.query_one(VirtualTable)
        table.set_rows(["a"], lambda key: (key, "· PENDING"))
        assert table.get_row("a") == ("a", "· PENDING")
        table.set_rows(["a"], lambda key: (key, "▶ RUNNING"))
        assert table.get_row("a") == ("a", "▶ RUNNING")


async def test_enter_and_a_click_on_the_cursor_row_post_the_selected_key() -> None:
    app = _App()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(VirtualTable)
        table.set_rows(_keys(5), _Counting())
        table.focus()
        await pilot.press("down", "enter")
        assert app.selected == ["k00001"]
        await pilot.click(VirtualTable, offset=(2, 4))  # line 4 is row 3: the click moves the cursor
        assert table.selected_key == "k00003" and app.selected == ["k00001"]
        await pilot.click(VirtualTable, offset=(2, 4))
        assert app.selected == ["k00001", "k00003"]
        await pilot.click(VirtualTable, offset=(2, 0))  # the header selects nothing
        await pilot.click(VirtualTable, offset=(2, 9))  # below the last row
        assert table.selected_key == "k00003" and app.selected == ["k00001", "k00003"]


async def test_long_cells_are_cut_in_the_middle_and_statuses_keep_their_colour() -> None:
    app = _App((("NAME", 8), ("STATUS", 11)))
    async with app.run_test(size=SIZE):
        table = app.query_one(VirtualTable)
        table.sync([("a-very-long-name", "✗ FAILED"), ("short", "-")])
        assert _line(table, 1).split() == ["a-…-name", "✗", "FAILED"]  # cut in the middle
        table.select_key("short")
        status = next(seg for seg in list(table.render_line(1)) if "FAILED" in seg.text)
        assert status.style is not None and status.style.color is not None
        assert status.style.color.name == "bright_red"
        assert len(table.render_line(1).text) == SIZE[0]  # the line spans the whole width


async def test_an_empty_table_of_auto_height_shows_its_header_line() -> None:
    """Created empty and filled by a later refresh (view 1's tables): the first frame shows the columns."""
    app = _App()
    app.CSS = "VirtualTable { height: auto; }"
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(VirtualTable)
        assert table.region.height == 1
        assert _line(table, 0).split() == ["ID", "STATUS"]
        table.sync([("a", "✓ SUCCEEDED"), ("b", "✗ FAILED")])
        await pilot.pause()
        assert table.region.height == 3


async def test_vim_keys_move_as_the_arrows_and_home_end() -> None:
    app = _App()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(VirtualTable)
        table.set_rows(_keys(50), _Counting())
        table.focus()
        await pilot.press("j", "j", "k")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == 49
        await pilot.press("g")
        assert table.cursor_row == 0


async def test_space_marks_rows_and_marks_go_with_their_rows() -> None:
    app = _App()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(VirtualTable)
        table.set_rows(_keys(5), _Counting())
        table.focus()
        await pilot.press("space", "space", "k", "space")  # marks k0 and k1 (moving down), then unmarks k1
        assert table.marked == {"k00000"} and table.cursor_row == 2
        await pilot.pause()
        assert _line(table, 1).startswith(MARK) and not _line(table, 2).startswith(MARK)
        table.set_rows(_keys(5)[1:], _Counting())  # the marked row went away: so did its mark
        assert table.marked == set()


async def test_columns_widen_to_their_content_when_the_terminal_has_room() -> None:
    lines = []
    for width in (80, 20):
        app = _App((("ID", 6), ("NAME", 8)))
        async with app.run_test(size=(width, 6)) as pilot:
            table = app.query_one(VirtualTable)
            table.sync([("a", "train fraud-preemptible")])
            await pilot.pause()
            lines.append(table.render_lines(table.region.reset_offset)[1].text)
    assert "train fraud-preemptible" in lines[0]
    assert ELLIPSIS in lines[1] and "ptible" in lines[1]
