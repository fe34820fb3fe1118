"""Glyphs, styles and humanised numbers shared by every renderer.

Every status is drawn as a glyph plus a word plus a colour, so a view reads the same under `NO_COLOR` as
in 16 colours; keeping all of them in one table is what keeps the glyphs distinct within each kind and the
colours consistent between the Jobs, Training, Registry and Pipelines views. Only the 16 ANSI colour names
are used, because the console must work on any terminal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import NamedTuple

from rich.cells import cell_len
from rich.text import Text

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.platform.pipelines import RunStatus, StepStatus
from kinetic_tui.core.platform.registry import Stage
from kinetic_tui.core.platform.training import TrainingStatus

SPARK = "▁▂▃▄▅▆▇█"
ELLIPSIS = "…"
NONE_CELL = "-"  # what a table shows for a value that does not exist (yet)


class Look(NamedTuple):
    glyph: str
    word: str
    style: str

    @property
    def cell(self) -> str:
        """`"✓ Executed"`: the text a table cell or a box shows for this status."""
        return f"{self.glyph} {self.word}"


# the step a DAG draws before any run recorded it
STEP_PENDING = StepStatus.PENDING.value

LOOKS: Mapping[type, Mapping[str, Look]] = {
    JobStatus: {
        JobStatus.PENDING: Look("·", "PENDING", "yellow"),
        JobStatus.RUNNING: Look("▶", "RUNNING", "cyan"),
        JobStatus.SUCCEEDED: Look("✓", "SUCCEEDED", "green"),
        JobStatus.FAILED: Look("✗", "FAILED", "bright_red"),
        JobStatus.CANCELLED: Look("⊘", "CANCELLED", "magenta"),
        JobStatus.NOT_FOUND: Look("?", "NOT_FOUND", "dim"),
    },
    TrainingStatus: {
        TrainingStatus.PENDING: Look("·", "Pending", "yellow"),
        TrainingStatus.IN_PROGRESS: Look("▶", "InProgress", "cyan"),
        TrainingStatus.COMPLETED: Look("✓", "Completed", "green"),
        TrainingStatus.FAILED: Look("✗", "Failed", "bright_red"),
        TrainingStatus.STOPPED: Look("‖", "Stopped", "magenta"),
    },
    Stage: {
        Stage.NONE: Look("○", "None", "dim"),
        Stage.STAGING: Look("◇", "Staging", "yellow"),
        Stage.PRODUCTION: Look("★", "Production", "bold green"),
        Stage.ARCHIVED: Look("▪", "Archived", "bright_black"),
    },
    StepStatus: {
        StepStatus.EXECUTED: Look("✓", "Executed", "green"),
        StepStatus.CACHED: Look("≡", "Cached", "cyan"),
        StepStatus.SKIPPED: Look("⊘", "Skipped", "bright_black"),
        StepStatus.FAILED: Look("✗", "Failed", "bright_red"),
        StepStatus.NOT_RUN: Look("∅", "NotRun", "magenta"),
        StepStatus.RUNNING: Look("▶", "Running", "yellow"),
        StepStatus.PENDING: Look("·", "Pending", "dim"),
        StepStatus.CANCELLED: Look("■", "Cancelled", "magenta"),
    },
    RunStatus: {
        RunStatus.SUCCEEDED: Look("✓", "Succeeded", "green"),
        RunStatus.FAILED: Look("✗", "Failed", "bright_red"),
        RunStatus.RUNNING: Look("▶", "Running", "yellow"),
        RunStatus.CANCELLED: Look("■", "Cancelled", "magenta"),
    },
}


def look(kind: type, status: Enum | str) -> Look:
    """The look of `status` among `kind`'s statuses. `kind` is explicit because the enums share words
    ("Failed" is a training, a step and a run status), so the value alone cannot pick the table.
    Words match case-insensitively since statuses arrive from JSON records and snapshots as text."""
    table = LOOKS.get(kind)
    if table is None:
        raise ValidationError(
            f"kind: {getattr(kind, '__name__', kind)!r} has no looks; valid: {', '.join(k.__name__ for k in LOOKS)}"
        )
    wanted = str(status.value if isinstance(status, Enum) else status).casefold()
    for word, found in table.items():
        if word.casefold() == wanted:
            return found
    raise ValidationError(f"{kind.__name__}: unknown status {status!r}; valid: {', '.join(table)}")


def status_cell(kind: type, status: Enum | str) -> str:
    return look(kind, status).cell


_STYLE_BY_CELL = {found.cell: found.style for table in LOOKS.values() for found in table.values()}


def styled_cell(cell: str) -> Text:
    """Colour a plain table cell back: rows stay strings (so `/` filtering and sorting are plain text)
    and only the drawing step adds the status colour."""
    return Text(cell, style=_STYLE_BY_CELL.get(cell, ""))


def _finite(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f"{field}: expected a finite number of seconds, got {value!r}")
    return value


def humanize_duration(seconds: float) -> str:
    """Two units at most ("2m05s", "1h02m"): enough to compare rows at a glance in a narrow column.
    Sub-second durations (pipeline steps) keep milliseconds so fast steps do not all read "0s"."""
    if _finite("seconds", seconds) < 0:
        raise ValidationError(f"seconds: must be >= 0, got {seconds}")
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def humanize_age(then: float, now: float) -> str:
    """Whole seconds since `then`; a `then` slightly after `now` (clocks of two processes) reads "0s"."""
    elapsed = math.floor(_finite("now", now) - _finite("then", then))
    return humanize_duration(elapsed) if elapsed >= 1 else "0s"


_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?")


def parse_humanized(text: str) -> float | None:
    """Seconds for a `humanize_duration` string, None for anything else: lets tables sort "10s" after
    "3s" and before "2m05s"."""
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        return None
    days, hours, minutes, secs, millis = (int(part or 0) for part in match.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + secs + millis / 1000


def short_hash(value: str | None, length: int = 8) -> str:
    """A prefix long enough to tell artifacts and cache keys apart on screen."""
    if value is None:
        return NONE_CELL
    if not isinstance(value, str):
        raise ValidationError(f"hash: expected a string or None, got {value!r}")
    return value[:length]


def percent(part: float, whole: float, digits: int = 0, empty: str = NONE_CELL) -> str:
    """`part / whole` as a percentage, or `empty` when there is no whole yet (no requests, no nodes)."""
    return f"{part / whole:.{digits}%}" if whole else empty


def fit(text: str, width: int) -> str:
    """Cut `text` to `width` cells with an ellipsis, so one long name cannot break an 80-column layout."""
    if cell_len(text) <= width:
        return text
    out, used = [], 0
    for char in text:
        size = cell_len(char)
        if used + size > width - 1:
            break
        out.append(char)
        used += size
    return "".join(out) + ELLIPSIS


def sparkline(values: Iterable[float], top: float) -> str:
    """One block per sample, scaled to `top`; a zero sample is the lowest block so the line stays visible."""
    if top <= 0:
        raise ValidationError(f"top: must be > 0, got {top}")
    blocks = []
    for value in values:
        share = min(max(value / top, 0.0), 1.0)
        blocks.append(SPARK[round(share * (len(SPARK) - 1))])
    return "".join(blocks)


def wrap_pieces(pieces: list[Text], width: int, indent: int = 0, sep: str = "  ") -> list[Text]:
    """Lay pieces left to right and start a new line (indented by `indent`) when the next would pass
    `width`; a piece wider than a line is cut. Shared by the DAG layers and the chart legend."""
    lines: list[Text] = []
    line = Text()
    for piece in pieces:
        if line.plain.strip() and line.cell_len + len(sep) + piece.cell_len > width:
            lines.append(line)
            line = Text(" " * indent)
        if line.plain.strip():
            line.append(sep)
        room = width - line.cell_len
        if piece.cell_len > room:
            piece = piece.copy()
            piece.truncate(room, overflow="ellipsis")
        line.append_text(piece)
    if line.plain.strip():
        lines.append(line)
    return lines
