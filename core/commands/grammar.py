"""The verb table of the command language (SPEC 4) and the typed values its arguments take.

The table is data, not code: the parser, `help` and the command bar's completion all read it, so a verb
gains a flag in exactly one place. Value converters raise `ValidationError` with a message that says
what was expected; the parser adds the flag name, line and column.

Argument keys in `Command.args` are the positional's name or the flag's name in snake_case
(`--checkpoint-every` -> `checkpoint_every`, `--no-archive-existing` -> `no_archive_existing`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from types import MappingProxyType
from typing import Any

from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.registry import Stage
from kinetic_tui.core.platform.tuning import STRATEGIES

JOB_STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
SHOW_KINDS = ("job", "training", "study", "model", "endpoint", "pipeline", "pool")


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


@dataclass(frozen=True)
class Positional:
    """A word after the verb, bound by position; `name` is its key in `Command.args`."""

    name: str
    type: ValueType
    help: str
    metavar: str
    required: bool = True
    rest: bool = False  # last positional only: every remaining word, joined by one space (`help pool add`)


@dataclass(frozen=True)
class Flag:
    """A `--name` argument; `default` fills `Command.args` when it is not given."""

    name: str
    type: ValueType | None  # None: a switch, True when given
    help: str
    default: Any = None
    required: bool = False
    repeatable: bool = False  # K=V pairs: each occurrence adds one key to a dict
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
    """One command: its arguments, and the help line that `help` and the command palette show."""

    name: str
    help: str
    positionals: tuple[Positional, ...] = ()
    flags: tuple[Flag, ...] = ()
    starts_work: bool = False  # accepts --wait / --detach, recorded as Command.wait
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
        """The SPEC 4 notation (`pool add NAME --accelerator ACC --nodes N [--spot]`), built from the table."""
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
    {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"})


def integer(minimum: int, metavar: str = "N") -> ValueType:
    """ASCII digits only: `int()` alone would also take `1_000`, ` 7` and Arabic-Indic digits."""
    expected = f"an integer >= {minimum}"

    def convert(text: str) -> int:
        if (text.isascii() and text.isdigit()) or _INT.fullmatch(text):  # the first test is the fast path
            try:
                value = int(text)
            except ValueError:  # more digits than int() accepts
                pass
            else:
                if value >= minimum:
                    return value
        raise ValidationError(f"expected {expected}, got {echo(text)}")

    return ValueType(metavar, expected, convert)


def _seconds(text: str) -> float:
    if _FLOAT.fullmatch(text):
        value = float(text)
        if value != float("inf"):
            return value
    raise ValidationError(f"expected a number of seconds >= 0, got {echo(text)}")


def _name(text: str) -> str:
    if not text.strip():
        raise ValidationError(f"expected a non-empty name, got {echo(text)}")
    return text


def _reject_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _load_json(text: str, expected: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValidationError(f"expected {expected}, got JSON nested too deeply") from None
    except ValueError as exc:
        reason = str(exc).splitlines()[0]
        raise ValidationError(f"expected {expected}, got invalid JSON ({reason}) in {echo(text)}") from None


def dump_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _render_loose(value: Any, reserved: str = "") -> str:
    """Bare text when it reads back as the same string (`adam`), JSON otherwise (`"1"`, `0.1`)."""
    if isinstance(value, str) and _loose(value) == value and not any(char in value for char in reserved):
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
        return json.loads(text, parse_constant=_reject_constant)
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


def _verb_topic(text: str) -> str:
    if text not in VERBS and text not in FAMILIES:
        raise ValidationError(unknown_verb_message(text))
    return text


NAME = ValueType("NAME", "a non-empty name", _name)
ACCELERATOR = ValueType("ACC", "an accelerator such as cpu, l4x2 or v5litepod-2x4", _accelerator)
REFERENCE = ValueType("MODULE:NAME", "a MODULE:NAME reference", _reference)
HP = ValueType("K=V", "K=V (V is JSON when it parses)", _hp_pair, render=_render_hp)
SPACE = ValueType("K=V1,V2", "K=V1,V2 (each V is JSON when it parses)", _space_pair, render=_render_space)
PARAM = ValueType("K=JSON", "K=JSON", _param_pair, render=_render_param)
SECONDS = ValueType("SECONDS", "a number of seconds >= 0", _seconds)
TOPIC = ValueType("VERB", "a verb", _verb_topic)
STAGE = choice("STAGE", [stage.value for stage in Stage])


def _pos(name: str, metavar: str, text: str, kind: ValueType = NAME, required: bool = True) -> Positional:
    return Positional(name, kind, text, metavar, required)


def _flag(name: str, kind: ValueType | None, text: str, default: Any = None, **extra: Any) -> Flag:
    """Switches default to False; valued flags to `default` (None: not given)."""
    return Flag(name, kind, text, False if kind is None and default is None else default, **extra)


def _pipeline_params() -> Flag:
    return _flag("--param", PARAM, "override a pipeline parameter", {}, repeatable=True)


_JOB = _pos("job", "JOB", "job id")
_ENDPOINT = _pos("endpoint", "ENDPOINT", "endpoint name")
_TRAINING = _pos("training", "TRAINING", "training job name")

_TABLE = (
    Verb("pools", "list accelerator pools with nodes in use and queued jobs"),
    Verb("pool add", "add a pool of N nodes with one accelerator (emulated on the local backend)",
         (_pos("name", "NAME", "pool name"),),
         (_flag("--accelerator", ACCELERATOR, "accelerator of every node", required=True),
          _flag("--nodes", integer(1), "number of nodes", required=True),
          _flag("--spot", None, "spot (preemptible) nodes"))),
    Verb("pool remove", "remove a pool", (_pos("name", "NAME", "pool name"),)),
    Verb("jobs", "list jobs, newest first",
         flags=(_flag("--status", choice("S", JOB_STATUSES), "only jobs in this status"),)),
    Verb("submit", "run MODULE:FUNC as a job on a pool",
         (_pos("ref", "MODULE:FUNC", "function to run", REFERENCE),),
         (_flag("--accelerator", ACCELERATOR, "accelerator (default: the function's own, else cpu)"),
          _flag("--args", json_of(list), "positional arguments", []),
          _flag("--kwargs", json_of(dict), "keyword arguments", {}),
          _flag("--name", NAME, "display name")), starts_work=True),
    Verb("status", "show a job's status", (_JOB,)),
    Verb("logs", "print a job's log",
         (_JOB,),
         (_flag("--tail", integer(0), "only the last N lines"),
          _flag("--follow", None, "keep printing new lines until the job ends"))),
    Verb("wait", "wait until a job ends", (_JOB,),
         (_flag("--timeout", SECONDS, "give up after this long (the job keeps running)"),)),
    Verb("result", "show a job's result or remote traceback", (_JOB,)),
    Verb("cancel", "cancel a job", (_JOB,)),
    Verb("train", "start a managed training job",
         (_pos("name", "NAME", "training job name"),),
         (_flag("--hp", HP, "hyperparameter", {}, repeatable=True),
          _flag("--epochs", integer(1), "epochs to train", 5),
          _flag("--checkpoint-every", integer(1, "K"), "checkpoint every K epochs", 1),
          _flag("--pool", NAME, "pool to run on (default: any pool that fits)"),
          _flag("--interrupt-before-epoch", integer(1, "E"), "stop before epoch E, as a preemption would")),
         starts_work=True),
    Verb("interrupt", "stop a running training job (a spot preemption)", (_TRAINING,)),
    Verb("resume", "continue a stopped training job from its checkpoint", (_TRAINING,), starts_work=True),
    Verb("tune", "run a hyperparameter study",
         (_pos("name", "NAME", "study name"),),
         (_flag("--space", SPACE, "values to search for one hyperparameter", {}, repeatable=True,
                required=True),
          _flag("--strategy", choice("S", STRATEGIES), "search strategy", required=True),
          _flag("--max-trials", integer(1), "trial budget", required=True),
          _flag("--seed", integer(0), "seed of the random strategy", 0),
          _flag("--pool", NAME, "pool the trials run on (default: any pool that fits)")), starts_work=True),
    Verb("register", "register a training job's artifact as a new model version",
         (_pos("group", "GROUP", "model group"),),
         (_flag("--from-training", NAME, "completed training job", required=True),)),
    Verb("promote", "move a model version to another stage",
         (_pos("group", "GROUP", "model group"), _pos("version", "VERSION", "version number", integer(1)),
          _pos("stage", "STAGE", "target stage", STAGE)),
         (_flag("--no-archive-existing", None, "refuse instead of archiving the current Production"),)),
    Verb("models", "list model groups, or one group's versions",
         (_pos("group", "GROUP", "model group", required=False),)),
    Verb("endpoint create", "create a serving endpoint for a model group",
         (_pos("name", "NAME", "endpoint name"),),
         (_flag("--model", NAME, "model group to serve", required=True),
          _flag("--min", integer(1), "minimum instances", 1),
          _flag("--max", integer(1), "maximum instances", 5),
          _flag("--target", integer(1), "target concurrency per instance", 10),
          _flag("--scale-out-cooldown", integer(0, "T"), "ticks between scale-outs", 3),
          _flag("--scale-in-cooldown", integer(0, "T"), "ticks between scale-ins", 5),
          _flag("--max-loaded-models", integer(1), "models kept loaded (LRU)", 3))),
    Verb("scale", "change an endpoint's scaling bounds", (_ENDPOINT,),
         (_flag("--min", integer(1), "minimum instances"),
          _flag("--max", integer(1), "maximum instances"),
          _flag("--target", integer(1), "target concurrency per instance"))),
    Verb("observe", "feed one concurrency observation to the autoscaler",
         (_ENDPOINT, _pos("concurrency", "CONCURRENCY", "requests in flight", integer(0))),
         (_flag("--tick", integer(0, "T"), "tick of the observation (default: the endpoint's clock)"),)),
    Verb("load", "drive an endpoint with a load pattern", (_ENDPOINT,),
         (_flag("--concurrency", integer(0), "requests in flight per tick", required=True),
          _flag("--ticks", integer(1, "T"), "number of ticks", required=True)), starts_work=True),
    Verb("invoke", "send one record to a model of an endpoint",
         (_ENDPOINT, _pos("model", "MODEL", "model name"), _pos("record", "JSON", "the record", json_of(None)))),
    Verb("pipeline register", "register the pipeline defined at MODULE:ATTR",
         (_pos("ref", "MODULE:ATTR", "pipeline object", REFERENCE),)),
    Verb("pipeline run", "run a pipeline", (_pos("name", "NAME", "pipeline name"),), (_pipeline_params(),),
         starts_work=True),
    Verb("rerun", "run a pipeline again with its last parameters, plus overrides",
         (_pos("pipeline", "PIPELINE", "pipeline name"),), (_pipeline_params(),), starts_work=True),
    Verb("pipelines", "list pipelines and their runs"),
    Verb("show", "show one object in detail",
         (_pos("kind", "KIND", "what to show", choice("KIND", SHOW_KINDS)),
          _pos("name", "NAME", "its name or id"))),
    Verb("help", "list the verbs, or explain one",
         (Positional("verb", TOPIC, "verb to explain", "VERB", required=False, rest=True),)),
)

VERBS: Mapping[str, Verb] = MappingProxyType({verb.name: verb for verb in _TABLE})
# first word of a multi-word verb -> its second words
FAMILIES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    first: tuple(name.split(" ", 1)[1] for name in VERBS if name.startswith(first + " "))
    for first in {name.split(" ", 1)[0] for name in VERBS if " " in name}
})
FIRST_WORDS = tuple(sorted({name.split(" ", 1)[0] for name in VERBS}))


def unknown_verb_message(word: str) -> str:
    """One line naming the bad verb, the closest real one and every valid verb."""
    close = get_close_matches(word.lower(), list(VERBS) + list(FAMILIES), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown verb {echo(word)}{hint}; valid: {', '.join(VERBS)}"
