"""`jobs list` as a table that fits the terminal.

The columns are dropped by priority until the rest fit the width (the id, the status and the result
stay); the result column takes the width left and is cut at its end (`jobs result JOB` prints it whole),
a name longer than its share is cut in the middle, so both its start and its distinguishing end stay.
`--wide` keeps every column and cuts nothing. The result column says what each job came to: the value a
SUCCEEDED job returned, the error of a FAILED one, `cancelled`, or `-` while it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kinetic_tui.core.commands.execute import inline_text, timestamp_text
from kinetic_tui.render.formatting import ELLIPSIS, NONE_CELL, humanize_age, humanize_duration

# (column, keep priority: lower stays longer); shown in this order
COLUMNS = (
    ("job_id", 0),
    ("name", 3),
    ("status", 1),
    ("result", 2),
    ("age", 4),
    ("duration", 6),
    ("pool", 5),
    ("accelerator", 7),
    ("phase", 8),
    ("func", 9),
    ("created_at", 10),
)
_GAP = 2
_MIN_RESULT = 24  # other columns go before the result gets narrower than this
_ALWAYS = 2  # the id, the status and the result stay at any width
_MAX_NAME = 24
# the newest rows whose values are read for the result column: each is a result read (a download on GKE)
VALUE_ROWS = 200


def result_cell(job: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    """What a job came to, on one line."""
    if job["job_id"] in values:
        return inline_text(values[job["job_id"]])
    if job["status"] == "SUCCEEDED":
        return "ok"
    if job["status"] in ("FAILED", "CANCELLED"):
        return str(job["detail"] or job["status"].lower())
    return NONE_CELL


def _cells(job: Mapping[str, Any], values: Mapping[str, Any], now: float) -> dict[str, str]:
    started, finished = job["started_at"], job["finished_at"]
    duration = humanize_duration(max(0.0, (finished or now) - started)) if started is not None else NONE_CELL
    known = {
        "result": result_cell(job, values),
        "age": humanize_age(job["created_at"], now),
        "duration": duration,
        "created_at": timestamp_text(job["created_at"]),
    }
    return {column: known.get(column, str(job.get(column) or NONE_CELL)) for column, _ in COLUMNS}


def _cut_end(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


def _cut_middle(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head) :]


def job_table(jobs: Sequence[Mapping[str, Any]], values: Mapping[str, Any], now: float, width: int | None) -> str:
    """The table's text; `width` None is `--wide`."""
    if not jobs:
        return "(none)"
    rows = [_cells(job, values, now) for job in jobs]
    natural = {column: max(len(column), *(len(row[column]) for row in rows)) for column, _ in COLUMNS}
    shown = [column for column, _ in COLUMNS]
    if width is not None:
        natural["name"] = min(natural["name"], max(_MAX_NAME, len("name")))
        budget = {**natural, "result": min(natural["result"], _MIN_RESULT)}
        for column, priority in sorted(COLUMNS, key=lambda item: -item[1]):
            if priority <= _ALWAYS or sum(budget[c] for c in shown) + _GAP * (len(shown) - 1) <= width:
                break
            shown.remove(column)
        fixed = sum(natural[c] for c in shown if c != "result") + _GAP * (len(shown) - 1)
        natural["result"] = min(natural["result"], max(8, width - fixed))
    cut = {"name": _cut_middle}
    lines = [
        "  ".join(column.ljust(natural[column]) for column in shown).rstrip(),
        *(
            "  ".join(cut.get(c, _cut_end)(row[c], natural[c]).ljust(natural[c]) for c in shown).rstrip()
            for row in rows
        ),
    ]
    return "\n".join(lines)
