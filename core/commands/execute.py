"""Command -> Console call -> JSON-serialisable result, and the text rendering of results (SPEC 4).

This is the one code path from a parsed line to an action: `--script`, the CLI's verbs and the TUI's
command bar all call `execute`. A command without --wait/--detach passes `wait=None`, so the Console's
`default_wait` decides (scripts wait, the command bar detaches).
"""
from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.commands.help import help_text
from kinetic_tui.core.commands.parser import Command
from kinetic_tui.core.console.snapshots import jsonable
from kinetic_tui.core.errors import ValidationError

if TYPE_CHECKING:
    from kinetic_tui.core.console import Console

Handler = Callable[["Console", Mapping[str, Any], "bool | None"], Awaitable[Any]]


async def _help(topic: str | None) -> str:
    return help_text(topic)


async def _show(console: Console, kind: str, name: str) -> Any:
    if kind == "model":
        group, sep, version = name.partition(":v")
        if not sep:
            return await console.registry.models(name)
        if not version.isdigit():
            raise ValidationError(f"model {name!r}: expected GROUP or GROUP:vN")
        return await console.registry.version(group, int(version))
    readers: dict[str, Callable[[str], Awaitable[Any]]] = {
        "job": console.jobs.get, "training": console.training.get, "study": console.training.study,
        "endpoint": console.endpoints.get, "pipeline": console.pipelines.get, "pool": console.pools.get,
    }
    return await readers[kind](name)


HANDLERS: Mapping[str, Handler] = MappingProxyType({
    "pools": lambda c, a, w: c.pools.list(),
    "pool add": lambda c, a, w: c.pools.add(a["name"], a["accelerator"], a["nodes"], a["spot"]),
    "pool remove": lambda c, a, w: c.pools.remove(a["name"]),
    "jobs": lambda c, a, w: c.jobs.list(a["status"]),
    "submit": lambda c, a, w: c.jobs.submit(a["ref"], a["accelerator"], a["args"], a["kwargs"], a["name"], w),
    "status": lambda c, a, w: c.jobs.get(a["job"]),
    "logs": lambda c, a, w: c.jobs.logs(a["job"], a["tail"], a["follow"]),
    "wait": lambda c, a, w: c.jobs.wait(a["job"], a["timeout"]),
    "result": lambda c, a, w: c.jobs.result(a["job"]),
    "cancel": lambda c, a, w: c.jobs.cancel(a["job"]),
    "train": lambda c, a, w: c.training.start(a["name"], a["hp"], a["epochs"], a["checkpoint_every"], a["pool"],
                                              a["interrupt_before_epoch"], w),
    "interrupt": lambda c, a, w: c.training.interrupt(a["training"]),
    "resume": lambda c, a, w: c.training.resume(a["training"], wait=w),
    "tune": lambda c, a, w: c.training.tune(a["name"], a["space"], a["strategy"], a["max_trials"], a["seed"],
                                            pool=a["pool"], wait=w),
    "register": lambda c, a, w: c.registry.register_from_training(a["group"], a["from_training"]),
    "promote": lambda c, a, w: c.registry.promote(a["group"], a["version"], a["stage"], not a["no_archive_existing"]),
    "models": lambda c, a, w: c.registry.models(a["group"]),
    "endpoint create": lambda c, a, w: c.endpoints.create(
        a["name"], a["model"], a["min"], a["max"], a["target"], a["scale_out_cooldown"], a["scale_in_cooldown"],
        a["max_loaded_models"]),
    "scale": lambda c, a, w: c.endpoints.scale(a["endpoint"], a["min"], a["max"], a["target"]),
    "observe": lambda c, a, w: c.endpoints.observe(a["endpoint"], a["concurrency"], a["tick"]),
    "load": lambda c, a, w: c.endpoints.load(a["endpoint"], a["concurrency"], a["ticks"], w),
    "invoke": lambda c, a, w: c.endpoints.invoke(a["endpoint"], a["model"], a["record"]),
    "pipeline register": lambda c, a, w: c.pipelines.register(a["ref"]),
    "pipeline run": lambda c, a, w: c.pipelines.run(a["name"], a["param"], w),
    "rerun": lambda c, a, w: c.pipelines.rerun(a["pipeline"], a["param"], w),
    "pipelines": lambda c, a, w: c.pipelines.list(),
    "show": lambda c, a, w: _show(c, a["kind"], a["name"]),
    "help": lambda c, a, w: _help(a["verb"]),
})


async def execute(console: Console, command: Command) -> Any:
    """Run one command; the result is plain JSON data (dicts, lists, strings, numbers)."""
    return jsonable(await HANDLERS[command.verb](console, command.args, command.wait))


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
        return text if len(text) <= _CELL else text[:_CELL - 3] + "..."
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
    if verb == "logs":
        return "\n".join(result["lines"])
    if isinstance(result, list):
        if all(isinstance(item, dict) for item in result):
            return "\n".join(_table(result))
        return _cell(result)
    if isinstance(result, dict):
        return "\n".join(_record(result))
    return _cell(result)
