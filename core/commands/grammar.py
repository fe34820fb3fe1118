"""The shapes of the command language's verb table and the typed values its arguments take.

A verb is data (`Verb`): its positionals and flags with types and help, whether it mutates, whether it
starts work, and the Console call it makes. The table itself is `kinetic_tui.core.commands.verbs`; the
parser, the executor, `help`, completion, the TUI's read-only filter and the click CLI all read it, so a
verb gains a flag in exactly one place. Value converters raise `ValidationError` with a message that says
what was expected; the parser adds the flag name, line and column.

Argument keys in `Command.args` are the positional's name or the flag's name in snake_case
(`--checkpoint-every` -> `checkpoint_every`, `--no-archive-existing` -> `no_archive_existing`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.registry import Stage
from kinetic_tui.core.validation import JOB_ID_SHAPE, MAX_SECONDS, int_bounds, require_job_id

if TYPE_CHECKING:
    from kinetic_tui.core.console import Console

JOB_STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
SHOW_KINDS = ("job", "training", "study", "model", "endpoint", "pipeline", "pool")
# Kinds of workspace objects an argument can name, for completion (the console's and the shell's)
OBJECT_KINDS = ("job", "pool", "training", "study", "group", "endpoint", "pipeline", "function")
BY_KIND = "by-kind"  # `names` of `show KIND NAME`'s NAME: the object kind is the KIND argument's
# (console, the command's args, its --wait/--detach choice) -> the result of the Console call
Handler = Callable[["Console", Mapping[str, Any], "bool | None"], Awaitable[Any]]


@dataclass(frozen=True)
class ValueType:
    """How one argument's text becomes a typed value and back; `choices` feed help and completion.

    `render` is the inverse of `convert` (for K=V types it takes one `(key, value)` item), so
    `Command.describe()` prints a line that parses back to the same command.
    """

    metavar: str
    expected: str
    convert: Callable[[str], Any]
    choices: tuple[str, ...] = ()
    render: Callable[[Any], str] = str
    bounds: tuple[float, float] | None = None  # the smallest and largest value a number may take


@dataclass(frozen=True)
class Positional:
    """A word after the verb, bound by position; `name` is its key in `Command.args`."""

    name: str
    type: ValueType
    help: str
    metavar: str
    required: bool = True
    rest: bool = False  # last positional only: every remaining word, joined by one space (`help pool add`)
    names: str = ""  # the kind of workspace object it names (one of OBJECT_KINDS, or BY_KIND), for completion


@dataclass(frozen=True)
class Flag:
    """A `--name` argument; `default` fills `Command.args` when it is not given."""

    name: str
    type: ValueType | None  # None: a switch, True when given
    help: str
    default: Any = None
    required: bool = False
    repeatable: bool = False  # K=V pairs: each occurrence adds one key to a dict
    names: str = ""  # the kind of workspace object its value names, for completion
    short: str = ""  # the CLI's one-letter alias (`-n`); the command language itself reads only `--name`
    key: str = field(init=False)  # its name in Command.args

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.name[2:].replace("-", "_"))

    @property
    def metavar(self) -> str:
        return self.type.metavar if self.type else ""


_WAIT_SWITCHES = (
    Flag("--wait", None, "wait until the work settles (the default in scripts)", False),
    Flag("--detach", None, "return as soon as the work started (the default in the command bar)", False),
)
WAIT_FLAGS = tuple(flag.name for flag in _WAIT_SWITCHES)  # --wait first: it sets Command.wait to True


@dataclass(frozen=True)
class Verb:
    """One command: its arguments, the help line that `help`, the palette and the CLI show, and its call.

    `mutates` is False only for verbs that change nothing (the read-only console allows exactly those);
    True is the default so that a new verb is hidden from a read-only console until declared harmless.
    `run` makes the Console call with the parsed arguments.
    """

    name: str
    help: str
    positionals: tuple[Positional, ...] = ()
    flags: tuple[Flag, ...] = ()
    starts_work: bool = False  # accepts --wait / --detach, recorded as Command.wait
    mutates: bool = True
    run: Handler = field(kw_only=True, repr=False, compare=False)
    flag_table: Mapping[str, Flag] = field(init=False, repr=False, compare=False)
    fixed_positionals: int = field(init=False, repr=False, compare=False)  # those before a `rest` one

    def __post_init__(self) -> None:
        table = {flag.name: flag for flag in self.flags + (_WAIT_SWITCHES if self.starts_work else ())}
        object.__setattr__(self, "flag_table", MappingProxyType(table))
        has_rest = bool(self.positionals) and self.positionals[-1].rest
        object.__setattr__(self, "fixed_positionals", len(self.positionals) - has_rest)

    def flag_names(self) -> list[str]:
        """Every flag this verb accepts, in the order error messages and completion show them."""
        names = sorted(flag.name for flag in self.flags)
        return names + list(WAIT_FLAGS) if self.starts_work else names

    def usage(self) -> str:
        """The usage notation (`pool add NAME --accelerator ACC --nodes N [--spot]`), built from the table."""
        parts = [self.name]
        for pos in self.positionals:
            word = f"{pos.metavar}..." if pos.rest else pos.metavar
            parts.append(word if pos.required else f"[{word}]")
        for flag in self.flags:
            word = f"{flag.name} {flag.metavar}".rstrip() + (" ..." if flag.repeatable else "")
            parts.append(word if flag.required else f"[{word}]")
        if self.starts_work:
            parts.append("[--wait | --detach]")
        return " ".join(parts)


_MAX_ECHO = 40


def echo(text: str) -> str:
    """User text inside a message: repr'd so it stays on one line, truncated so it cannot flood it."""
    return repr(text if len(text) <= _MAX_ECHO else text[:_MAX_ECHO] + "...")


# --- value types --------------------------------------------------------------------------------------

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_IDENT_PATH = r"[^\W\d]\w*(?:\.[^\W\d]\w*)*"
_REFERENCE = re.compile(rf"{_IDENT_PATH}:{_IDENT_PATH}")
_JSON_KINDS: Mapping[type, str] = MappingProxyType(
    {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
)


def integer(minimum: int, maximum: int, metavar: str = "N") -> ValueType:
    """ASCII digits only: `int()` alone would also take `1_000`, ` 7` and Arabic-Indic digits. Every
    integer has an upper bound, so a value the store or a loop cannot hold fails here, naming the flag."""
    expected = f"an integer {int_bounds(minimum, maximum)}"

    def convert(text: str) -> int:
        if (text.isascii() and text.isdigit()) or _INT.fullmatch(text):  # the first test is the fast path
            try:
                value = int(text)
            except ValueError:  # more digits than int() accepts
                pass
            else:
                if minimum <= value <= maximum:
                    return value
        raise ValidationError(f"expected {expected}, got {echo(text)}")

    return ValueType(metavar, expected, convert, bounds=(minimum, maximum))


_SECONDS_EXPECTED = f"a number of seconds >= 0 and <= {MAX_SECONDS:.0f}"


def _seconds(text: str) -> float:
    if _FLOAT.fullmatch(text):
        value = float(text)
        if value <= MAX_SECONDS:
            return value
    raise ValidationError(f"expected {_SECONDS_EXPECTED}, got {echo(text)}")


def _name(text: str) -> str:
    if not text.strip():
        raise ValidationError(f"expected a non-empty name, got {echo(text)}")
    return text


def _reject_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite_float(text: str) -> float:
    """`1e999` parses as infinity, which JSON cannot hold: refused as NaN and Infinity are."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:_MAX_ECHO]} is out of range for a number")
    return value


def _json_loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)


def _load_json(text: str, expected: str) -> Any:
    try:
        return _json_loads(text)
    except RecursionError:
        raise ValidationError(f"expected {expected}, got JSON nested too deeply") from None
    except ValueError as exc:
        reason = str(exc).splitlines()[0]
        raise ValidationError(f"expected {expected}, got invalid JSON ({reason}) in {echo(text)}") from None


def dump_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _render_loose(value: Any, reserved: str = "") -> str:
    """Bare text when it reads back as the same string (`adam`), JSON otherwise (`"1"`, `0.1`, `""`: an empty
    bare value is refused as missing)."""
    if isinstance(value, str) and value and _loose(value) == value and not any(char in value for char in reserved):
        return value
    return dump_json(value)


def _render_hp(item: tuple[str, Any]) -> str:
    return f"{item[0]}={_render_loose(item[1])}"


def _render_param(item: tuple[str, Any]) -> str:
    return f"{item[0]}={dump_json(item[1])}"


def _render_space(item: tuple[str, list[Any]]) -> str:
    return f"{item[0]}=" + ",".join(_render_loose(value, ',"[]{}') for value in item[1])


def _loose(text: str) -> Any:
    """K=V values: JSON when the text is JSON (`0.1`, `true`, `[1,2]`), otherwise the text itself."""
    try:
        return _json_loads(text)
    except (ValueError, RecursionError):
        return text


def json_of(kind: type | None) -> ValueType:
    """JSON of one kind (`list`, `dict`) or of any kind (None); NaN and Infinity are refused, as in JSON."""
    expected = f"a JSON {_JSON_KINDS[kind]}" if kind else "a JSON value"

    def convert(text: str) -> Any:
        value = _load_json(text, expected)
        if kind is not None and type(value) is not kind:
            got = "null" if value is None else _JSON_KINDS[type(value)]
            raise ValidationError(f"expected {expected}, got a JSON {got}: {echo(text)}")
        return value

    return ValueType("JSON", expected, convert, render=dump_json)


def _split_pair(text: str, expected: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not _KEY.fullmatch(key):
        raise ValidationError(f"expected {expected} with K a name such as learning_rate, got {echo(text)}")
    return key, value


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside JSON strings and brackets, so `lr=[1,2],"a,b"` has two values."""
    items, depth, start, in_string, escaped = [], 0, 0, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth <= 0:
            items.append(text[start:index])
            start = index + 1
    items.append(text[start:])
    return items


def _hp_pair(text: str) -> tuple[str, Any]:
    key, value = _split_pair(text, "K=V")
    return key, _loose(value)


def _param_pair(text: str) -> tuple[str, Any]:
    key, value = _split_pair(text, "K=JSON")
    return key, _load_json(value, f"a JSON value for {echo(key)}")


def _space_pair(text: str) -> tuple[str, list[Any]]:
    key, values = _split_pair(text, "K=V1,V2")
    items = _split_top_level(values)
    if any(not item for item in items):
        raise ValidationError(f"expected K=V1,V2 with no empty value, got {echo(text)}")
    return key, [_loose(item) for item in items]


def choice(metavar: str, options: Iterable[str]) -> ValueType:
    """Case-insensitive input, canonical output (`production` -> `Production`)."""
    canonical = {option.lower(): option for option in options}
    expected = "one of " + ", ".join(canonical.values())

    def convert(text: str) -> str:
        try:
            return canonical[text.lower()]
        except KeyError:
            raise ValidationError(f"expected {expected}, got {echo(text)}") from None

    return ValueType(metavar, expected, convert, tuple(canonical.values()))


def _accelerator(text: str) -> str:
    """Checked at parse time so a script with a bad accelerator fails before anything runs."""
    try:
        return str(parse_accelerator(text))
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def _reference(text: str) -> str:
    if not _REFERENCE.fullmatch(text):
        raise ValidationError(f"expected MODULE:NAME such as pkg.module:func, got {echo(text)}")
    return text


def _function(text: str) -> str:
    """MODULE:FUNC, or a saved submission's name (no ':')."""
    return _reference(text) if ":" in text else _name(text)


def _job_id(text: str) -> str:
    """Checked at parse time: an id becomes a path, so a glob or `..` must not reach a file."""
    try:
        return require_job_id(text)
    except ValidationError:
        raise ValidationError(f"expected {JOB_ID_SHAPE}, got {echo(text)}") from None


NAME = ValueType("NAME", "a non-empty name", _name)
JOB_ID = ValueType("JOB", JOB_ID_SHAPE, _job_id)
ACCELERATOR = ValueType("ACC", "an accelerator such as cpu, l4x2 or v5litepod-2x4", _accelerator)
REFERENCE = ValueType("MODULE:NAME", "a MODULE:NAME reference", _reference)
FUNCTION = ValueType("MODULE:FUNC", "a MODULE:FUNC reference or the NAME of a saved submission", _function)
HP = ValueType("K=V", "K=V (V is JSON when it parses)", _hp_pair, render=_render_hp)
SPACE = ValueType("K=V1,V2", "K=V1,V2 (each V is JSON when it parses)", _space_pair, render=_render_space)
PARAM = ValueType("K=JSON", "K=JSON", _param_pair, render=_render_param)
SECONDS = ValueType("SECONDS", _SECONDS_EXPECTED, _seconds, bounds=(0, MAX_SECONDS))
STAGE = choice("STAGE", [stage.value for stage in Stage])
