"""One click command per verb of the command language, generated from the verb table.

Each command declares the verb's positionals and flags as click parameters, so `kinetic-tui VERB --help`
lists every flag with its value and help, and shell completion offers the verbs, their flags, choice
values and the names of workspace objects (read cheaply from state.db).

The command language's parser stays the one judge of the words: a command hands its arguments, exactly
as typed, to `run_line`, so it runs, fails and exits as the same line does in a script (a line that does
not parse exits 2 with the parser's one-line error). Click's own parse serves `--help`, completion and
`--json`; when click refuses the arguments, the parser is asked anyway and says what is wrong in its words.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click
from click.shell_completion import CompletionItem

from kinetic_tui.cli.options import cli_words, note_local_overrides
from kinetic_tui.cli.output import JSON_HELP, run_line
from kinetic_tui.core.commands.grammar import Flag, Positional, Verb
from kinetic_tui.core.commands.help import flag_notes
from kinetic_tui.core.commands.verbs import FAMILIES, VERBS, positional_kind

_WORDS = "kinetic.words"  # ctx.meta key: the command's arguments as typed

if TYPE_CHECKING:
    _TextParamType = click.ParamType[str]
else:  # ParamType is generic from click 8.4 on; the requirement allows 8.1, where subscripting it fails
    _TextParamType = click.ParamType


class VerbValue(_TextParamType):
    """A verb argument as click shows and completes it; the text passes through unconverted."""

    name = "text"

    def __init__(self, argument: Positional | Flag) -> None:
        self.argument = argument
        self.choices = argument.type.choices if argument.type else ()

    def convert(self, value: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
        return value

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        found = [choice for choice in self.choices if choice.lower().startswith(incomplete.lower())]
        kind = self._kind(ctx)
        if kind:
            from kinetic_tui.core.store.names import object_names

            found += object_names(kind, incomplete)
        return [CompletionItem(word) for word in found]

    def _kind(self, ctx: click.Context) -> str:
        argument, command = self.argument, ctx.command
        if isinstance(argument, Flag) or not isinstance(command, VerbCommand):
            return argument.names
        positionals = command.verb.positionals
        index = positionals.index(argument)
        typed = [str(ctx.params.get(pos.name) or "").lower() for pos in positionals[:index]]
        return positional_kind(command.verb, index, typed)


class VerbCommand(click.Command):
    """The click face of one verb (see the module docstring for who judges its arguments). `extra` are the
    CLI's own options (`--project`, ...): click applies them, and they are removed from the words."""

    def __init__(
        self,
        verb: Verb,
        name: str | None = None,
        extra: Sequence[click.Parameter] = (),
        after: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.verb = verb
        self.extra = tuple(extra)
        self.after = after  # run with click's parsed values once the verb succeeded
        super().__init__(
            name or verb.name.split()[-1],
            callback=self._run,
            params=[*_params(verb), *self.extra],
            help=_help(verb),
            short_help=verb.help,
            no_args_is_help=False,
        )

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_WORDS] = list(args)
        if ctx.resilient_parsing:  # completion: click's partial parse is all there is
            return super().parse_args(ctx, args)
        try:
            return super().parse_args(ctx, args)
        except click.BadParameter as exc:
            if exc.param in self.extra:  # the CLI's own option: the command language never sees it
                raise
            return []  # the parser explains the problem when the words run
        except click.BadOptionUsage as exc:  # e.g. an option without its value
            if exc.option_name in {name for param in self.extra for name in param.opts}:
                raise
            return []
        except click.UsageError:
            return []

    def _run(self, **parsed: Any) -> None:
        run_line(*self.typed_line())
        if self.after is not None:
            self.after(parsed)

    def typed_line(self) -> tuple[str, bool]:
        """The command-language line of the arguments as typed, and whether `--json` was given."""
        typed = click.get_current_context().meta[_WORDS]
        if self.extra:
            note_local_overrides()
        words, as_json = split_json_flag(cli_words(typed, self.verb.flags, self.extra))
        return shlex.join([*self.verb.name.split(), *words]), as_json


def split_json_flag(args: list[str]) -> tuple[list[str], bool]:
    """The words for the command language, and whether `--json` was given: as click reads a flag, every
    `--json` before a `--` counts, and `--` itself only ends the options."""
    end = args.index("--") if "--" in args else len(args)
    words = [word for word in args[:end] if word != "--json"] + args[end + 1 :]
    return words, len(words) < len(args) - (end < len(args))


def _params(verb: Verb) -> list[click.Parameter]:
    params: list[click.Parameter] = [
        click.Argument(
            [pos.name], type=VerbValue(pos), metavar=pos.metavar, required=pos.required, nargs=-1 if pos.rest else 1
        )
        for pos in verb.positionals
    ]
    for flag in verb.flag_table.values():
        names = [flag.name, flag.short] if flag.short else [flag.name]
        if flag.type is None:
            params.append(click.Option(names, is_flag=True, help=flag.help))
        else:
            params.append(
                click.Option(
                    names,
                    type=VerbValue(flag),
                    metavar=flag.metavar,
                    multiple=flag.repeatable,
                    help=flag_notes(flag),
                )
            )
    params.append(click.Option(["--json", "as_json"], is_flag=True, help=JSON_HELP))
    return params


def _help(verb: Verb) -> str:
    """The verb's help line and its positionals (click lists options itself, but not arguments' help)."""
    if not verb.positionals:
        return verb.help
    rows = [
        f"  {pos.metavar:<12} {pos.help}; {pos.type.expected}" + ("" if pos.required else "; optional")
        for pos in verb.positionals
    ]
    return "\n\n".join([verb.help, "\b\nArguments:\n" + "\n".join(rows)])


def add_verbs(root: click.Group) -> None:
    """A command for every verb that `root` does not already have as a workspace command (`status`,
    `pool add` and the like do more on a gke profile, and `jobs list` is the `jobs` verb)."""
    for verb in VERBS.values():
        *family, word = verb.name.split()
        parent = root
        if family:
            found = root.commands.get(family[0])
            if not isinstance(found, click.Group):
                found = click.Group(family[0], help=f"{family[0]} commands: {', '.join(FAMILIES[family[0]])}")
                root.add_command(found)
            parent = found
        if word not in parent.commands:
            parent.add_command(VerbCommand(verb))
