"""Command -> Console call -> JSON-serialisable result, and the text rendering of results.

This is the one code path from a parsed line to an action: `--script`, the CLI's verbs and the TUI's
command bar all call `execute`. A command without --wait/--detach passes `wait=None`, so the Console's
`default_wait` decides (scripts wait, the command bar detaches).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.commands.parser import Command
from kinetic_tui.core.commands.verbs import VERBS
from kinetic_tui.core.console.pipelines import check_run
from kinetic_tui.core.console.snapshots import PipelineRunSnapshot, jsonable

if TYPE_CHECKING:
    from kinetic_tui.core.console import Console


async def execute(console: Console, command: Command) -> Any:
    """Run one command through its verb's Console call; the result is plain JSON data (dicts, lists,
    strings, numbers). A pipeline run that ended Failed is a failed command (PipelineRunFailed)."""
    result = await VERBS[command.verb].run(console, command.args, command.wait)
    if isinstance(result, PipelineRunSnapshot):
        check_run(result)
    return jsonable(result)


# -- text rendering --------------------------------------------------------------------------------------

_CELL = 48
_TIMESTAMPS = ("at", "created_at", "started_at", "finished_at")


def _cell(value: Any, key: str = "") -> str:
    if value is None:
        return "-"
    if key in _TIMESTAMPS and isinstance(value, (int, float)):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, separators=(",", ":"))
        return text if len(text) <= _CELL else text[: _CELL - 3] + "..."
    return str(value)


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def _table(rows: list[dict[str, Any]], indent: str = "") -> list[str]:
    if not rows:
        return [f"{indent}(none)"]
    columns = [key for key, value in rows[0].items() if _is_scalar(value)]
    cells = [[_cell(row.get(column), column) for column in columns] for row in rows]
    widths = [max(len(column), *(len(line[i]) for line in cells)) for i, column in enumerate(columns)]
    lines = [indent + "  ".join(column.ljust(widths[i]) for i, column in enumerate(columns)).rstrip()]
    lines += [indent + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in cells]
    return lines


def _record(record: dict[str, Any]) -> list[str]:
    lines = []
    for key, value in record.items():
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            lines.append(f"{key}:")
            lines += _table(value, "  ")
        else:
            lines.append(f"{key}: {_cell(value, key)}")
    return lines


def render_text(verb: str, result: Any) -> str:
    """A result from `execute` as people read it: records as `key: value` lines, lists as tables."""
    if isinstance(result, str):
        return result
    if verb in ("logs", "endpoint logs"):
        return "\n".join(result["lines"])
    if isinstance(result, list):
        if all(isinstance(item, dict) for item in result):
            return "\n".join(_table(result))
        return _cell(result)
    if isinstance(result, dict):
        return "\n".join(_record(result))
    return _cell(result)
