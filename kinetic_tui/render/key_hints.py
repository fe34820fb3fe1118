"""The footer's one line of key hints (k9s style): what each key does now, the palette key at the right.

One line of segments instead of Textual's `Footer`, which builds a widget per key: every widget on screen
is paid for before the console's first frame, and a line of hints needs no widgets of its own. Segments
rather than a Rich Text for the same reason: the line is drawn on every frame that touches the footer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style

CORNER_BAR = "▏"
DISABLED = Style(dim=True)


class KeyHint(NamedTuple):
    key: str  # as shown, e.g. "^p"
    description: str
    enabled: bool = True  # a disabled key is drawn dim; a hidden one is not passed at all
    press: str = ""  # the key a click on the hint presses, e.g. "ctrl+p"


class HintLine(NamedTuple):
    segments: list[Segment]
    spans: list[tuple[int, int, KeyHint]]  # [start, end) of every hint drawn, the corner's included

    def hint_at(self, x: int) -> KeyHint | None:
        return next((hint for start, end, hint in self.spans if start <= x < end), None)


def _hint(hint: KeyHint, base: Style, key: Style, before: str = " ", after: str = "") -> list[Segment]:
    """`before + key + " description" + after`, dim when the key is disabled."""
    if not hint.enabled:
        base, key = base + DISABLED, key + DISABLED
    return [Segment(before, base), Segment(hint.key, key), Segment(f" {hint.description}{after}", base)]


def _width(segments: Sequence[Segment]) -> int:
    return sum(cell_len(segment.text) for segment in segments)


def key_hints(
    hints: Sequence[KeyHint],
    width: int,
    corner: KeyHint | None = None,
    base: Style | None = None,
    key: Style | None = None,
) -> HintLine:
    """`hints` left to right, a space apart, in exactly `width` cells, `corner` pinned to the right edge
    after a bar. A hint that does not fit whole is left out, with every hint after it, rather than cut
    mid-word. `base` styles the line, `key` (over `base`) the keys."""
    base = base or Style.null()
    key = base + (key or Style(bold=True))
    right = _hint(corner, base, key, before=CORNER_BAR, after=" ") if corner else []
    room = width - _width(right)
    line: list[Segment] = []
    spans: list[tuple[int, int, KeyHint]] = []
    used = 0
    for hint in hints:
        piece = _hint(hint, base, key, before="  " if line else " ")
        needed = _width(piece)
        if used + needed > room:
            break
        spans.append((used, used + needed, hint))
        line += piece
        used += needed
    if corner and room >= 0:
        spans.append((room, width, corner))
    line.append(Segment(" " * max(room - used, 0), base))
    return HintLine(list(Segment.adjust_line_length(line + right, width, base)), spans)
