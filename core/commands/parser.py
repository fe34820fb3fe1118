"""Tokenising and parsing command lines into typed `Command` values, by the verb table.

Quoting follows `shlex.split` (POSIX mode) exactly, but the tokenizer is our own because error messages
must point at a column of the original line, which shlex cannot report. A `#` that starts a token outside
quotes begins a comment; inside a word (`a#b`) it is literal, as in a shell.

A token is a flag when its raw text starts with `--`; quoting it (`'--x'`) makes it a plain value, which
is how a name that begins with dashes is passed. Lines without quotes, backslashes or `#` are split
with `str.split` (a fast path: scripts are mostly such lines).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kinetic_tui.core.commands.grammar import WAIT_FLAGS, Flag, Verb, echo
from kinetic_tui.core.commands.verbs import FAMILIES, FIRST_WORDS, VERBS, unknown_verb_message
from kinetic_tui.core.errors import KineticError, ValidationError

Token = tuple[str, int, int]  # (value, start, end): start/end are 0-based indices into the raw line

_WHITESPACE = " \t\r\n"  # shlex's set: other characters, \v and \f included, belong to words
# Lines free of quotes, backslashes, `#` and of whitespace that str.split() knows but shlex does not
_NEEDS_SLOW_PATH = re.compile(r"[^\x00-\x0a\x0d\x20-\x7f]|[\"'\\#]")
_RUN = re.compile(r"[^ \t\r\n\"'\\]+")


class ParseError(KineticError):
    """A line that does not parse; `line` is 1-based and may be reset by whoever knows the script line."""

    def __init__(self, message: str, column: int, token: str | None = None, line: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.column = column
        self.token = token
        self.line = line

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}: {self.message}"

    def __reduce__(self) -> tuple[type, tuple[str, int, str | None, int]]:
        return ParseError, (self.message, self.column, self.token, self.line)  # survives worker processes


@dataclass(frozen=True)
class Command:
    """One parsed line. `args` holds every positional and flag by snake_case name, defaults filled in.

    `wait` is None when neither `--wait` nor `--detach` was given: the caller applies its own default
    (scripts wait, the command bar detaches). JSON values inside `args` are plain lists and dicts.
    """

    verb: str
    args: Mapping[str, Any] = field(hash=False)
    wait: bool | None = None
    text: str = field(default="", compare=False)  # equal commands do the same thing however typed

    def to_json(self) -> dict[str, Any]:
        return {"verb": self.verb, "args": dict(self.args), "wait": self.wait, "text": self.text}

    def describe(self) -> str:
        """The canonical line for this command (defaults omitted); it parses back to an equal command."""
        verb = VERBS[self.verb]
        parts = [verb.name]
        for pos in verb.positionals:
            if pos.required or self.args.get(pos.name) is not None:  # `invoke E M null` has a None record
                parts.append(_quote(pos.type.render(self.args[pos.name])))
        for flag in verb.flags:
            value = self.args.get(flag.key, flag.default)
            if value == flag.default:
                continue
            if flag.type is None:
                parts.append(flag.name)
            elif flag.repeatable:
                parts.extend(f"{flag.name} {_quote(flag.type.render(item))}" for item in value.items())
            else:
                parts.append(f"{flag.name} {_quote(flag.type.render(value))}")
        if self.wait is not None:
            parts.append(WAIT_FLAGS[0] if self.wait else WAIT_FLAGS[1])
        return " ".join(parts)


def _quote(text: str) -> str:
    quoted = shlex.quote(text)
    return f"'{text}'" if quoted.startswith("--") else quoted  # unquoted, it would read as a flag


# --- tokenizer -----------------------------------------------------------------------------------------


def tokenize(line: str) -> tuple[list[Token], int]:
    """Tokens of `line` and the index where its content ends (a comment's `#`, or the line's length)."""
    if _NEEDS_SLOW_PATH.search(line) is not None:
        return _tokenize_quoted(line)
    tokens, end = [], 0
    for word in line.split():
        start = line.find(word, end)
        end = start + len(word)
        tokens.append((word, start, end))
    return tokens, len(line)


def _tokenize_quoted(line: str) -> tuple[list[Token], int]:
    tokens: list[Token] = []
    index, length = 0, len(line)
    while index < length:
        char = line[index]
        if char in _WHITESPACE:
            index += 1
            continue
        if char == "#":
            return tokens, index
        start, parts = index, []
        while index < length and line[index] not in _WHITESPACE:
            char = line[index]
            if char == "'":
                close = line.find("'", index + 1)
                if close < 0:
                    raise ParseError("unterminated single quote", index + 1, line[start:])
                parts.append(line[index + 1 : close])
                index = close + 1
            elif char == '"':
                index = _double_quoted(line, index, parts, start)
            elif char == "\\":
                if index + 1 == length:
                    raise ParseError("backslash at the end of the line escapes nothing", index + 1, line[start:])
                parts.append(line[index + 1])
                index += 2
            else:
                run = _RUN.match(line, index)
                assert run is not None  # `char` is neither whitespace, a quote nor a backslash: a run starts here
                parts.append(run.group())
                index = run.end()
        tokens.append(("".join(parts), start, index))
    return tokens, length


def _double_quoted(line: str, quote: int, parts: list[str], start: int) -> int:
    """Append the text of the double-quoted section at `quote`; only `\\"` and `\\\\` are escapes there."""
    index, length = quote + 1, len(line)
    while index < length:
        char = line[index]
        if char == '"':
            return index + 1
        if char == "\\" and index + 1 < length and line[index + 1] in '"\\':
            parts.append(line[index + 1])
            index += 2
        else:
            parts.append(char)
            index += 1
    raise ParseError("unterminated double quote", quote + 1, line[start:])


# --- parser --------------------------------------------------------------------------------------------


def parse_line(text: str, line_no: int = 1) -> Command | None:
    """Parse one line into a Command; None for a blank or comment-only line."""
    try:
        tokens, end = tokenize(text)
        if not tokens:
            return None
        verb, first_arg = _resolve_verb(tokens)
        args, wait = _bind(verb, text, end, tokens, first_arg)
    except ParseError as exc:
        exc.line = line_no
        raise
    return Command(verb.name, MappingProxyType(args), wait, text[:end].strip())


def parse_script(text: str) -> list[tuple[int, Command]]:
    """Parse every line before anything runs, so a script with one bad line runs nothing."""
    commands = []
    for line_no, line in enumerate(text.split("\n"), start=1):
        command = parse_line(line, line_no)
        if command is not None:
            commands.append((line_no, command))
    return commands


def verbs() -> list[str]:
    return list(VERBS)


def _resolve_verb(tokens: list[Token]) -> tuple[Verb, int]:
    """The verb named by the first one or two tokens, and the index of its first argument token."""
    word, start, end = tokens[0]
    subcommands = FAMILIES.get(word)
    if subcommands is None:
        verb = VERBS.get(word)
        if verb is None or " " in word:
            raise ParseError(unknown_verb_message(word), start + 1, word)
        return verb, 1
    choices = ", ".join(f"{word} {sub}" for sub in subcommands)
    if len(tokens) < 2:
        raise ParseError(f"{echo(word)} needs a subcommand; valid: {choices}", end + 1)
    sub, sub_start, _ = tokens[1]
    verb = VERBS.get(f"{word} {sub}")
    if verb is None:
        raise ParseError(f"unknown subcommand {echo(sub)} for {echo(word)}; valid: {choices}", sub_start + 1, sub)
    return verb, 2


def _walk(
    verb: Verb,
    line: str,
    tokens: list[Token],
    index: int,
) -> Iterator[tuple[Token, str | None, Flag | None, str | None, int]]:
    """Classify argument tokens: yields (token, flag name or None for a positional, flag, value, value start).

    A valued flag takes its value from `--flag=value` or from the next token unless that one is a flag;
    the value is None when missing. Shared by the parser and completion so both read a line alike.
    """
    count, is_at, table = len(tokens), line.startswith, verb.flag_table
    while index < count:
        token = tokens[index]
        index += 1
        if not is_at("--", token[1]):
            yield token, None, None, None, token[1]
            continue
        name, equals, inline = token[0].partition("=")
        flag = table.get(name)
        if equals or flag is None or flag.type is None:
            at_value = token[1] + len(name) + 1 if is_at(name + "=", token[1]) else token[1]
            yield token, name, flag, inline if equals else None, at_value
        elif index < count and not is_at("--", tokens[index][1]):
            yield token, name, flag, tokens[index][0], tokens[index][1]
            index += 1
        else:
            yield token, name, flag, None, token[1]


def _bad_value(exc: ValidationError, label: str, text: str, start: int) -> ParseError:
    return ParseError(f"{label}: {exc}", start + 1, text)


def _bind(
    verb: Verb,
    line: str,
    end: int,
    tokens: list[Token],
    index: int,
) -> tuple[dict[str, Any], bool | None]:
    """Typed arguments of `verb` with defaults filled in, and the --wait/--detach choice.

    Values are converted left to right, so the error reported is the leftmost one.
    """
    args: dict[str, Any] = {}
    wait: bool | None = None
    specs, fixed = verb.positionals, verb.fixed_positionals
    position, rest = 0, []
    for token, name, flag, value, at in _walk(verb, line, tokens, index):
        if name is None:
            if position < fixed:
                spec = specs[position]
                try:
                    args[spec.name] = spec.type.convert(token[0])
                except ValidationError as exc:
                    raise _bad_value(exc, spec.metavar, token[0], at) from None
                position += 1
            elif fixed < len(specs):
                rest.append(token)
            else:
                raise ParseError(
                    f"unexpected argument {echo(token[0])} for {verb.name!r}; usage: {verb.usage()}",
                    token[1] + 1,
                    token[0],
                )
            continue
        if flag is None:
            raise ParseError(
                f"unknown flag {echo(name)} for {verb.name!r}; valid: {', '.join(verb.flag_names())}",
                token[1] + 1,
                name,
            )
        kind = flag.type
        if kind is None and value is not None:
            raise ParseError(f"flag {name} takes no value", at + 1, value)
        if kind is not None and value is None:
            raise ParseError(f"flag {name} needs a value: {kind.expected}", at + 1, name)
        if name in WAIT_FLAGS:
            wait = _wait_choice(name, wait, token)
            continue
        if flag.key in args and not flag.repeatable:
            raise ParseError(f"flag {name} given twice for {verb.name!r}", token[1] + 1, name)
        converted: Any = True  # a switch (a typed flag without a value was refused above)
        if kind is not None and value is not None:
            try:
                converted = kind.convert(value)
            except ValidationError as exc:
                raise _bad_value(exc, name, value, at) from None
        if flag.repeatable:
            bucket = args.setdefault(flag.key, {})
            if converted[0] in bucket:
                raise ParseError(f"{name}: key {echo(converted[0])} given twice", at + 1, value)
            bucket[converted[0]] = converted[1]
        else:
            args[flag.key] = converted
    if rest:
        spec, words = specs[fixed], " ".join(token[0] for token in rest)
        try:
            args[spec.name] = spec.type.convert(words)
        except ValidationError as exc:
            raise _bad_value(exc, spec.metavar, words, rest[0][1]) from None
    _fill_defaults(verb, args, len(line[:end].rstrip()) + 1)
    return args, wait


def _wait_choice(name: str, wait: bool | None, token: Token) -> bool:
    if wait is not None:
        problem = "given twice" if wait == (name == WAIT_FLAGS[0]) else "and --wait/--detach exclude each other"
        raise ParseError(f"flag {name} {problem}", token[1] + 1, name)
    return name == WAIT_FLAGS[0]


def _fill_defaults(verb: Verb, args: dict[str, Any], end_column: int) -> None:
    for spec in verb.positionals:
        if spec.name not in args:
            if spec.required:
                raise ParseError(f"missing {spec.metavar} for {verb.name!r}; usage: {verb.usage()}", end_column)
            args[spec.name] = None
    for flag in verb.flags:
        if flag.key not in args:
            if flag.required:
                raise ParseError(
                    f"missing required flag {flag.name} for {verb.name!r}; usage: {verb.usage()}", end_column
                )
            default = flag.default
            args[flag.key] = type(default)(default) if isinstance(default, (list, dict)) else default


# --- completion ----------------------------------------------------------------------------------------


def complete(prefix_text: str) -> list[str]:
    """Words that could replace the last (partial) word of a line being typed: a verb, a subcommand, a
    flag of the verb, or a value of a choice-typed argument. Never raises: a line that cannot be
    completed (open quote, comment, unknown verb) has no candidates.
    """
    try:
        tokens, end = tokenize(prefix_text)
    except ParseError:
        return []
    if end < len(prefix_text):
        return []
    partial, flag_like = "", False
    if tokens and tokens[-1][2] == len(prefix_text):
        partial, start, _ = tokens.pop()
        flag_like = prefix_text.startswith("-", start)
    lowered = partial.lower()
    return sorted(
        word for word in _candidates(prefix_text, tokens, partial, flag_like) if word.lower().startswith(lowered)
    )


def _verb_words(words: list[str]) -> tuple[str, ...] | None:
    """Candidates for the next word of a verb name, or None once `words` already name a verb."""
    if not words:
        return FIRST_WORDS
    if len(words) == 1 and words[0] in FAMILIES:
        return FAMILIES[words[0]]
    return None


def _candidates(line: str, done: list[Token], partial: str, flag_like: bool) -> tuple[str, ...] | list[str]:
    words = _verb_words([token[0] for token in done[:2]])
    if words is not None:
        return words
    try:
        verb, index = _resolve_verb(done)
    except ParseError:
        return ()
    positional_words, used, pending = [], set(), None
    for token, name, flag, value, _ in _walk(verb, line, done, index):
        if name is None:
            positional_words.append(token[0])
        else:
            used.add(name)
        pending = flag.type if flag is not None and value is None else None
    if pending is not None:
        return pending.choices
    if flag_like and "=" in partial:  # `--status=RU`
        name = partial.partition("=")[0]
        flag = verb.flag_table.get(name)
        return [f"{name}={choice}" for choice in flag.type.choices] if flag and flag.type else []
    unused = [
        name
        for name in verb.flag_names()
        if (name not in used or verb.flag_table[name].repeatable)
        and not (name in WAIT_FLAGS and used.intersection(WAIT_FLAGS))
    ]
    if flag_like:
        return unused
    specs = verb.positionals
    if specs and specs[-1].rest:
        return _verb_words(positional_words) or ()
    if len(positional_words) < len(specs):
        return specs[len(positional_words)].type.choices
    return unused
