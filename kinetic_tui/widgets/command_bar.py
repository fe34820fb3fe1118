"""The `:` command bar (k9s command mode) and the `/` filter prompt, one docked widget with two modes.

Completion is the core's (`kinetic_tui.core.commands.complete`: verbs, subcommands, flags, choice values) plus the
names of live objects for the argument slot being typed (job ids after `cancel`, pools after
`pool remove`, ...), which only the console knows. Messages go up: the app executes and filters.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.suggester import Suggester
from textual.widgets import Input, Static

from kinetic_tui.core.commands import complete
from kinetic_tui.core.commands.parser import ParseError, tokenize
from kinetic_tui.core.commands.verbs import FAMILIES, VERBS, positional_kind

Mode = Literal["command", "filter"]
Names = Mapping[str, Sequence[str]]  # object kind -> names, e.g. {"job": ["job-1a2b3c4d", ...]}


def _slot(done: Sequence[str]) -> tuple[str, int, list[str]] | None:
    """(verb, index of the positional being typed, positionals so far) for the completed words `done`."""
    if not done:
        return None
    words = 2 if done[0] in FAMILIES and len(done) > 1 else 1
    verb = " ".join(done[:words])
    if verb not in VERBS:
        return None
    flags, positionals, skip = VERBS[verb].flag_table, [], False
    for word in done[words:]:
        if skip:
            skip = False
        elif word.startswith("--"):
            flag = flags.get(word.partition("=")[0])
            skip = flag is not None and flag.type is not None and "=" not in word
        else:
            positionals.append(word)
    return verb, len(positionals), positionals


def complete_line(line: str, names: Names) -> list[str]:
    """Every word that could replace the last (partial) word of `line`: the grammar's candidates first,
    then the names of objects of the kind the current argument takes."""
    words = complete(line)
    try:
        tokens, end = tokenize(line)
    except ParseError:
        return words
    typing = bool(tokens) and tokens[-1][2] == len(line) == end
    partial = tokens[-1][0] if typing else ""
    slot = _slot([token[0] for token in (tokens[:-1] if typing else tokens)])
    if slot is None or partial.startswith("-"):
        return words
    verb, index, positionals = slot
    kind = positional_kind(VERBS[verb], index, positionals)
    found = [name for name in names.get(kind, ()) if name.startswith(partial) and name not in words]
    return words + sorted(found)


def apply_completion(line: str, candidates: Sequence[str]) -> str:
    """`line` with its last word replaced by the only candidate (plus a space), or extended to the
    candidates' common prefix."""
    if not candidates:
        return line
    tokens, _ = tokenize(line)
    typing = bool(tokens) and tokens[-1][2] == len(line)
    head = line[: tokens[-1][1]] if typing else line
    if len(candidates) == 1:
        return head + candidates[0] + " "
    prefix = os.path.commonprefix(list(candidates))  # noqa: RUF071 (a character prefix of words, not of paths)
    current = tokens[-1][0] if typing else ""
    return head + prefix if len(prefix) > len(current) else line


class _Completer(Suggester):
    """Ghost text of the first candidate (accepted with the right arrow, as in a shell)."""

    def __init__(self, bar: CommandBar) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.bar = bar

    async def get_suggestion(self, value: str) -> str | None:
        if self.bar.mode != "command" or not value.strip():
            return None
        candidates = self.bar.candidates(value)
        return apply_completion(value, candidates[:1]).rstrip() if candidates else None


class _Prompt(Input):
    """The bar's input line; Tab and Esc go to the bar that owns it."""

    BINDINGS = [
        Binding("tab", "complete", "Complete", show=False, id="bar.complete"),
        Binding("escape", "close", "Close", show=False, id="bar.close"),
    ]

    def __init__(self, bar: CommandBar, *, id: str) -> None:
        super().__init__(id=id, suggester=_Completer(bar), select_on_focus=False)
        self.bar = bar

    def action_complete(self) -> None:
        self.bar.complete()

    def action_close(self) -> None:
        self.bar.close()


class CommandBar(Vertical):
    """Hidden until opened; `mode` decides what Enter means. Docked above the footer."""

    DEFAULT_CSS = """
    CommandBar { height: auto; dock: bottom; margin-bottom: 1; }
    CommandBar #bar-hint { color: $warning; padding: 0 1; }
    CommandBar #bar-input { border: none; height: 1; padding: 0 1; }
    CommandBar.filter #bar-input { background: $boost; }
    """

    class Submitted(Message):
        def __init__(self, mode: Mode, value: str) -> None:
            super().__init__()
            self.mode, self.value = mode, value

    class Closed(Message):
        """The bar gave up the focus; the app hands it back to the view."""

    class FilterChanged(Message):
        def __init__(self, value: str) -> None:
            super().__init__()
            self.value = value

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.mode: Mode = "command"
        self.names: Names = {}

    def compose(self) -> ComposeResult:
        yield Static("", id="bar-hint")
        prompt = _Prompt(self, id="bar-input")
        prompt.cursor_blink = False
        yield prompt

    @property
    def prompt(self) -> Input:
        return self.query_one("#bar-input", Input)

    def open(self, mode: Mode, value: str = "", names: Names | None = None, error: str = "") -> None:
        """Show the bar with `value` typed (and `error` under it: a command that was refused)."""
        self.mode = mode
        self.names = names if names is not None else self.names
        self.prompt.placeholder = "command (Tab completes, Esc closes)" if mode == "command" else "filter rows"
        self.prompt.value = value
        self.prompt.cursor_position = len(value)
        self.hint(error)
        self.set_class(mode == "filter", "filter")
        self.display = True
        self.prompt.focus()

    def close(self) -> None:
        """Esc: a filter is dropped (Enter keeps it), a half-typed command is discarded."""
        if self.mode == "filter":
            self.post_message(self.FilterChanged(""))
        self.hide()

    def hide(self) -> None:
        self.display = False
        self.post_message(self.Closed())

    def hint(self, text: str) -> None:
        hint = self.query_one("#bar-hint", Static)
        hint.update(text)
        hint.display = bool(text)

    def show_error(self, column: int, message: str) -> None:
        """A caret under the column the parser blamed (the prompt has no prefix, so columns line up)."""
        self.hint(" " * max(column - 1, 0) + "^ " + message)

    def candidates(self, value: str) -> list[str]:
        return complete_line(value, self.names)

    def complete(self) -> None:
        if self.mode != "command":
            return
        value = self.prompt.value
        candidates = self.candidates(value)
        completed = apply_completion(value, candidates)
        self.prompt.value = completed
        self.prompt.cursor_position = len(completed)
        self.hint("  ".join(candidates[:12]) if len(candidates) > 1 else "")

    @on(Input.Changed, "#bar-input")
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.mode == "filter":
            self.post_message(self.FilterChanged(event.value))

    @on(Input.Submitted, "#bar-input")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Submitted(self.mode, event.value))
