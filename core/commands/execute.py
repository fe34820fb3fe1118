"""Command -> Console call -> JSON-serialisable result, and the text rendering of results.

This is the one code path from a parsed line to an action: `--script`, the CLI's verbs and the TUI's
command bar all call `execute`. A command without --wait/--detach passes `wait=None`, so the Console's
`default_wait` decides (scripts wait, the command bar detaches).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.commands.parser import Command
from kinetic_tui.core.commands.verbs import VERBS
from kinetic_tui.core.console.snapshots import PipelineRunSnapshot, jsonable

if TYPE_CHECKING:
    from kinetic_tui.core.console import Console


async def execute(console: Console, command: Command) -> Any:
    """Run one command through its verb's Console call; the result is plain JSON data (dicts, lists,
    strings, numbers). A pipeline run that ended Failed is a failed command (PipelineRunFailed)."""
    result = await VERBS[command.verb].run(console, command.args, command.wait)
    if isinstance(result, PipelineRunSnapshot):
        from kinetic_tui.core.console.pipelines import check_run  # only a pipeline verb pays for the module

        check_run(result)
    return jsonable(result)


# -- text rendering --------------------------------------------------------------------------------------

_TIMESTAMPS = ("at", "created_at", "started_at", "finished_at")
_INDENT = "  "


def float_text(value: float) -> str:
    """A float as people read it: the shortest repr that round-trips the value rounded to 15 significant
    digits. A double is exact to 15 digits; what lies past them is the noise of binary arithmetic
    (`0.1 + 0.2` reads `0.3`, not `0.30000000000000004`). `--output json` keeps the exact value."""
    if not math.isfinite(value):
        return repr(value)
    return repr(float(f"{value:.15g}"))


def timestamp_text(value: float) -> str:
    """Seconds since the epoch as local time, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))


def _scalar(value: Any, key: str = "") -> str:
    if value is None:
        return "-"
    if key in _TIMESTAMPS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return timestamp_text(value)
    if isinstance(value, float):
        return float_text(value)
    return str(value)


def inline_text(value: Any) -> str:
    """A value on one line, whole: nested values in a JSON-like form with the floats as `float_text`."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {inline_text(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(inline_text(item) for item in value) + "]"
    if isinstance(value, str) and value == "":
        return '""'
    return _scalar(value)


def _cell(value: Any, key: str) -> str:
    return inline_text(value) if isinstance(value, (dict, list)) else _scalar(value, key)


def _flat(value: Any) -> bool:
    """Fits one line: a scalar, or a list or mapping of scalars."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return not any(isinstance(item, (dict, list)) for item in items)


def _nested(value: Any) -> bool:
    """Shown as an indented block under its key: a non-empty mapping, or a list holding nested values."""
    return bool(value) and (isinstance(value, dict) or (isinstance(value, list) and not _flat(value)))


def _table(rows: list[dict[str, Any]], indent: str = "") -> list[str]:
    """Rows whose cells all fit a line, as aligned columns (the columns of the first row)."""
    columns = list(rows[0])
    cells = [[_cell(row.get(column), column) for column in columns] for row in rows]
    widths = [max(len(column), *(len(line[i]) for line in cells)) for i, column in enumerate(columns)]
    lines = [indent + "  ".join(column.ljust(widths[i]) for i, column in enumerate(columns)).rstrip()]
    lines += [indent + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in cells]
    return lines


def _items(items: list[Any], indent: str) -> list[str]:
    """A list: a table when its items are records of one-line cells, else one `- ` entry per item with
    its nested lines indented under it."""
    if not items:
        return [f"{indent}(none)"]
    if all(isinstance(item, dict) and item and all(_flat(v) for v in item.values()) for item in items):
        return _table(items, indent)
    lines = []
    for item in items:
        if not _nested(item):
            lines.append(f"{indent}- {inline_text(item)}")
            continue
        block = _record(item, indent + _INDENT) if isinstance(item, dict) else _items(item, indent + _INDENT)
        lines += [f"{indent}- {block[0].lstrip()}", *block[1:]]
    return lines


def _record(record: dict[str, Any], indent: str = "") -> list[str]:
    lines = []
    for key, value in record.items():
        if not _nested(value):
            lines.append(f"{indent}{key}: {_cell(value, key)}")
        elif isinstance(value, dict):
            lines += [f"{indent}{key}:", *_record(value, indent + _INDENT)]
        else:
            lines += [f"{indent}{key}:", *_items(value, indent + _INDENT)]
    return lines


def render_text(verb: str, result: Any) -> str:
    """A result from `execute` as people read it: records as `key: value` lines with nested values as
    indented blocks, lists as tables, nothing cut."""
    if isinstance(result, str):
        return result
    if verb in ("logs", "endpoint logs"):
        return "\n".join(result["lines"])
    if isinstance(result, list):
        return "\n".join(_items(result, ""))
    if isinstance(result, dict):
        return "\n".join(_record(result))
    return _scalar(result)
