from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import chop_cells

from kinetic_tui.render.log_buffer import LogBuffer
from kinetic_tui.render.log_rows import WrappedRows, wrapped


def brute_rows(buffer: LogBuffer, width: int) -> list[tuple[int, int]]:
    """(line, part) of every row, counted the slow way."""
    return [
        (line, part)
        for line in range(len(buffer))
        for part in range(len(chop_cells(buffer.render(line), width) or [""]))
    ]


def test_rows_of_a_wrapped_log_and_where_each_line_starts():
    buffer = LogBuffer()
    buffer.append(["short", "x" * 25, "", "日本語" * 4])
    index = WrappedRows()
    index.update(buffer, 10)
    assert index.total == 1 + 3 + 1 + 3  # 24 cells of wide characters: 5 per 10-cell row
    assert [index.start(line) for line in range(4)] == [0, 1, 4, 5]
    assert index.locate(0) == (0, 0) and index.locate(3) == (1, 2) and index.locate(7) == (3, 2)
    assert index.locate(8) is None
    assert wrapped("日本語" * 4, 10)[-1] == "本語"


def test_trimming_drops_rows_from_the_front_and_timestamps_recount():
    buffer = LogBuffer(max_lines=3)
    buffer.append(["a" * 30, "b", "c"])
    index = WrappedRows()
    index.update(buffer, 10)
    assert index.total == 5
    buffer.append(["d" * 11])  # drops the three-row line
    index.update(buffer, 10)
    assert index.total == 4 and index.start(2) == 2 and index.locate(3) == (2, 1)
    buffer.show_timestamps = True  # 13 more cells on every line
    index.update(buffer, 10)
    assert index.total == 2 + 2 + 3


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.text(alphabet="ab日 ", max_size=30), max_size=8), max_size=6),
    st.integers(2, 12),
    st.integers(2, 20),
)  # 2 cells: the narrowest row that holds a wide character
def test_the_index_agrees_with_wrapping_every_line(batches, width, max_lines):
    buffer, index = LogBuffer(max_lines=max_lines), WrappedRows()
    for batch in batches:
        buffer.append(batch)
        index.update(buffer, width)
        expected = brute_rows(buffer, width)
        assert index.total == len(expected)
        assert [index.locate(row) for row in range(len(expected))] == expected
