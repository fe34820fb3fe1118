"""`kinetic-tui --script FILE|-`: run command lines headless, for SSH sessions and CI.

Exit codes are an API: 0 every command succeeded; 1 a command failed (the script stops there unless
`keep_going`, and what earlier lines did stays done); 2 a line did not parse, reported with its line and
column before anything runs. Errors are one line each (a failed job's remote traceback follows its line);
our own traceback is printed only with `debug`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from kinetic_tui.core.commands import Command, ParseError, parse_script
from kinetic_tui.core.commands.execute import execute, render_text
from kinetic_tui.core.console import Console, RemoteJobFailed
from kinetic_tui.core.errors import ValidationError, one_line
from kinetic_tui.core.events import DetachedWorkFailed

OUTPUTS = ("text", "json")
EXIT_OK, EXIT_FAILED, EXIT_PARSE = 0, 1, 2


def read_script(source: str, stdin: TextIO | None = None) -> str:
    """The script text of a FILE argument; `-` reads standard input. Either must be UTF-8 text (a leading
    byte-order mark is dropped): binary or otherwise-encoded bytes are refused on one line naming the source."""
    label = "standard input" if source == "-" else repr(source)
    data: bytes | str
    if source == "-":
        stream = stdin or sys.stdin
        raw = getattr(stream, "buffer", None)  # the bytes, so a bad encoding is ours to report, not a traceback
        data = raw.read() if raw is not None else stream.read()
    else:
        try:
            with open(source, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise ValidationError(f"--script {label}: cannot read it ({exc.strerror or exc})") from None
    return _script_text(data, label)


def _script_text(data: bytes | str, label: str) -> str:
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as text mode reads it
        except UnicodeDecodeError as exc:
            raise ValidationError(
                f"--script {label}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})"
            ) from None
    nul = data.find("\0")
    if nul >= 0:
        raise ValidationError(f"--script {label}: binary data (a NUL byte at offset {nul}), not text")
    return data.removeprefix("\ufeff")


class _Reporter:
    """Writes one result or error per command in the chosen format. Text results are separated by a blank
    line. `numbered` errors name their line and command (`line 3: promote ...: Type: message`), as a
    script's must; a CLI command's (`numbered=False`) are `error: message`, as every CLI error is. A failed
    job's remote traceback follows its error line (JSON: `phase` and `traceback` in the error)."""

    def __init__(self, output: str, stdout: TextIO, stderr: TextIO, debug: bool, numbered: bool = True) -> None:
        self.output, self.stdout, self.stderr, self.debug = output, stdout, stderr, debug
        self.numbered = numbered
        self.printed = False

    def _json(self, record: dict[str, Any]) -> None:
        self.stdout.write(json.dumps(record, separators=(",", ":"), default=repr) + "\n")

    def ok(self, line: int, command: Command, result: Any) -> None:
        if self.output == "json":
            self._json({"line": line, "command": command.text, "ok": True, "result": result})
        else:
            text = render_text(command.verb, result)
            if text:
                self.stdout.write(("\n" if self.printed else "") + text + "\n")
                self.printed = True
        self.stdout.flush()

    def error(self, line: int, text: str, exc: BaseException) -> None:
        remote = exc if isinstance(exc, RemoteJobFailed) else None
        extra = {} if remote is None else {"phase": remote.phase, "traceback": remote.traceback}
        # a CLI command is one line the user did not write as such: its column would point into our join
        message = exc.message if isinstance(exc, ParseError) and not self.numbered else one_line(exc)
        self.failure(line, text, type(exc).__name__, message, extra)
        if self.debug:  # our own stack first: the job's traceback, when there is one, stays the last word
            traceback.print_exception(exc, file=self.stderr)
        if remote is not None and remote.traceback and self.output == "text":
            self.stderr.write(remote.traceback.rstrip("\n") + "\n")
        self.stderr.flush()

    def failure(self, line: int, text: str, error_type: str, message: str, extra: dict[str, Any] | None = None) -> None:
        if self.output == "json":
            error = {"type": error_type, "message": message, **(extra or {})}
            self._json({"line": line, "command": text, "ok": False, "error": error})
            self.stdout.flush()
        elif self.numbered:
            self.stderr.write(f"line {line}: {text}: {error_type}: {message}\n")
        else:
            self.stderr.write(f"error: {message}\n" if line else f"error: {text}: {error_type}: {message}\n")
        self.stderr.flush()


async def _run(
    commands: list[tuple[int, Command]], reporter: _Reporter, keep_going: bool, console_factory: Callable[[], Console]
) -> int:
    try:
        console = console_factory()
    except Exception as exc:  # an unusable workspace (corrupt or locked state.db): nothing ran
        reporter.error(0, "open workspace", exc)
        return EXIT_FAILED
    status = EXIT_OK
    detached = console.events.subscribe()
    try:
        for line, command in commands:
            try:
                result = await execute(console, command)
            except Exception as exc:  # every failure is reported on one line; bugs too (traceback with debug)
                reporter.error(line, command.text, exc)
                status = EXIT_FAILED
                if not keep_going:
                    break
            else:
                reporter.ok(line, command, result)
    finally:
        await console.aclose()
    # work started with --detach settles before the script ends; its failures count (as line 0)
    while detached.pending():
        event = await detached.__anext__()
        if isinstance(event, DetachedWorkFailed):
            reporter.failure(0, event.work, event.error_type, event.message)
            status = EXIT_FAILED
    return status


def run_script(
    text: str,
    output: str = "text",
    keep_going: bool = False,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    debug: bool = False,
    console_factory: Callable[[], Console] | None = None,
    numbered: bool = True,
) -> int:
    """Parse every line, then run them in order against the active workspace; returns the exit code.

    Starting verbs wait by default here (`default_wait=True`), and commands run one at a time with no UI
    to keep responsive, so blocking calls run inline (`offload=False`). `console_factory` lets a caller
    supply its own Console (a test's clock, another workspace). `numbered=False` is a CLI command's one
    line: its errors do not name a script line.
    """
    out, err = stdout or sys.stdout, stderr or sys.stderr
    if output not in OUTPUTS:
        raise ValidationError(f"--output {output!r} is not one of: {', '.join(OUTPUTS)}")
    reporter = _Reporter(output, out, err, debug, numbered)
    try:
        commands = parse_script(text)
    except ParseError as exc:
        source = text.split("\n")[exc.line - 1] if 0 < exc.line <= text.count("\n") + 1 else ""
        reporter.error(exc.line, source.strip(), exc)
        return EXIT_PARSE
    factory = console_factory or (lambda: Console(default_wait=True, offload=False))
    return asyncio.run(_run(commands, reporter, keep_going, factory))
