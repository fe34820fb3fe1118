"""What the console makes of a line typed in the `:` bar before the command language reads it, and how a
key's command answers in a notification.

A bare view name switches views, as in k9s (`:jobs`, `:pools`); with arguments the same word is the
verb of the command language. A single word that is neither a view nor a verb is answered with the
list of views.
"""

from __future__ import annotations

from typing import Any

from kinetic_tui.core.commands.execute import render_text
from kinetic_tui.core.commands.verbs import FAMILIES, VERBS

NOTIFY_LINES = 8
VIEW_NAMES = {
    "clusters": "1",
    "pools": "1",
    "jobs": "2",
    "training": "3",
    "registry": "4",
    "models": "4",
    "endpoints": "5",
    "pipelines": "6",
}


def view_key(line: str) -> str | None:
    """The view a line that is one view name switches to, else None."""
    words = line.split()
    return VIEW_NAMES.get(words[0]) if len(words) == 1 else None


def unknown_word(line: str) -> str | None:
    """The answer to a line that is one word naming neither a view nor a verb, else None."""
    words = line.split()
    if len(words) != 1 or words[0] in VERBS or words[0] in FAMILIES:
        return None
    return f"no view or verb {words[0]!r}; views: {', '.join(VIEW_NAMES)} (help lists the verbs)"


def summarize(verb: str, result: Any) -> str:
    """A command's result as a notification: the text rendering, cut to a few lines."""
    lines = render_text(verb, result).splitlines() or ["done"]
    if len(lines) > NOTIFY_LINES:
        lines = [*lines[: NOTIFY_LINES - 1], f"… {len(lines) - NOTIFY_LINES + 1} more lines"]
    return "\n".join(lines)
