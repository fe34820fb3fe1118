"""Tests of the pure rendering layer; `widest` is the width guarantee every renderer is held to."""

from rich.cells import cell_len
from rich.text import Text


def widest(text: Text) -> int:
    """Width in terminal cells of the longest line."""
    return max((cell_len(line) for line in text.plain.split("\n")), default=0)
