"""What every command group of the CLI shares: exit codes, one-line errors, tables or JSON, and the one
path from a command to the command language (`run_line`).

Exit codes are an API: 0 success, 1 a command failed, 2 bad usage or a line that did not parse.
Heavy imports (rich, the script runner and with it the core's backends) happen inside the helpers, so
`kinetic-tui --help` costs little more than importing click.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

OK, FAILED, USAGE = 0, 1, 2
T = TypeVar("T")


class CliError(click.ClickException):
    exit_code = FAILED

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


class UsageLineError(CliError):
    """The user's own words are wrong (a malformed id, an unreadable script): exit 2, one line."""

    exit_code = USAGE


def guard(action: Callable[[], T], error: type[CliError] = CliError) -> T:
    """Turn deliberate core errors into one-line messages (the traceback only with --debug); `error` is
    UsageLineError where the error can only be the user's words."""
    from kinetic_tui.core.errors import KineticError

    try:
        return action()
    except KineticError as exc:
        if click.get_current_context().find_root().params.get("debug"):
            raise
        raise error(str(exc)) from None


class GuardedGroup(click.Group):
    """The root command: a deliberate core error (a locked or unusable store, an unusable home) or a refusal
    of the file system that no command turned into a message is one line and exit 1, never a traceback
    (`--debug` keeps it)."""

    def invoke(self, ctx: click.Context) -> Any:
        from kinetic_tui.core.errors import KineticError

        try:
            return super().invoke(ctx)
        except (KineticError, OSError) as exc:
            if ctx.params.get("debug") or (isinstance(exc, OSError) and exc.errno == errno.EPIPE):
                raise
            raise CliError(_described(exc)) from None


def _described(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    from kinetic_tui.core.errors import one_line

    return one_line(exc)


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str], as_json: bool, title: str | None = None) -> None:
    if as_json:
        click.echo(json.dumps(list(rows), indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in columns))
    Console().print(table)


def run_line(line: str, as_json: bool = False) -> None:
    """Run one command-language line through the console service, as `--script` would."""
    from kinetic_tui.script import run_script

    ctx = click.get_current_context()
    code = run_script(
        line,
        output="json" if as_json else "text",
        keep_going=False,
        debug=bool(ctx.find_root().params.get("debug")),
        numbered=False,
    )
    if code:
        ctx.exit(code)


JSON_HELP = "print JSON for programs"


def json_flag(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help=JSON_HELP)(func)
