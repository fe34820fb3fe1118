"""Column layout for tables that size to the terminal and to their content, and cuts that keep a name
telling: rows named "train fraud-baseline" and "train fraud-preemptible" must not both read "train fr…".
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len, set_cell_size

ELLIPSIS = "…"
GAP = 2  # the cells around each column: one space either side


def fit_middle(text: str, width: int) -> str:
    """`text` in exactly `width` cells: padded, or cut in the middle (a third of the room kept at the head,
    the rest at the tail) so both the start of a name and the part that tells it from its siblings stay."""
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    if width < 4:
        return set_cell_size(text, width - 1) + ELLIPSIS if width > 0 else ""
    room = width - 1
    head = room // 3
    tail_text, used = "", 0
    for char in reversed(text):
        if used + cell_len(char) > room - head:
            break
        tail_text, used = char + tail_text, used + cell_len(char)
    return set_cell_size(set_cell_size(text, room - used) + ELLIPSIS + tail_text, width)


def column_widths(minimums: Sequence[int], natural: Sequence[int], available: int) -> list[int]:
    """Each column as wide as its label and content (`natural`), never narrower than its minimum; when
    the line would pass `available` cells, the column with the most cells above its minimum gives one up,
    until the line fits or every column is at its minimum."""
    widths = [max(low, want) for low, want in zip(minimums, natural)]
    excess = sum(width + GAP for width in widths) - available
    while excess > 0:
        index = max(range(len(widths)), key=lambda i: widths[i] - minimums[i], default=None)
        if index is None or widths[index] <= minimums[index]:
            break
        widths[index] -= 1
        excess -= 1
    return widths
