"""The header's two lines: which workspace the console is on, and the view tabs with the current one marked.

A Rich Text built from parts, not markup: the workspace line carries a profile and cluster name that are
the user's own text, and markup would have to be parsed on every redraw.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

TAB_GAP = "  "


def header_text(workspace: str, tabs: Sequence[tuple[str, str]], current: str | None, readonly: bool) -> Text:
    """`kinetic · WORKSPACE [READ-ONLY]` over `1 Clusters  2 Jobs ...`; `tabs` are (key, title) pairs and
    the tab whose key is `current` is drawn in reverse video, padded by a space each side. The workspace
    is empty until it is known (it is read in a thread after the first frame)."""
    text = Text.assemble(("kinetic", "bold"))  # not Text(..., style): that would embolden the whole line
    if workspace:
        text.append(f" · {workspace}")
    if readonly:
        text.append("  ")
        text.append("READ-ONLY", "bold")
    text.append("\n")
    for index, (key, title) in enumerate(tabs):
        if index:
            text.append(TAB_GAP)
        if key == current:
            text.append(f" {key} {title} ", "reverse")
        else:
            text.append(f"{key} {title}")
    return text
