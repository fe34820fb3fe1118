"""Options many commands share, named as Kinetic's CLI names them so its users' command lines keep working.

- `--project/--zone/--cluster` (and `--namespace` on `jobs ...`) override the active profile for one
  command: they become this process's explicit arguments to every `resolve_infra()` (`choose_infra`), so
  `config show` reports them as `argument` and the command-language path sees them too. On a local
  profile jobs still run on this machine: the values are only what resolution reports and what jobs
  submitted by the command record, and the command says so on stderr.
- `-y/--yes` wherever Kinetic has it; where this product never asks, it is accepted and changes nothing.
- `--cleanup-timeout/--cleanup-poll-interval`: as Kinetic, how long `cancel`, `cleanup` and `result`'s
  cleanup wait for what ran the job to be gone (local: its processes and working directory; GKE: its
  workload object), polling at the interval; the values go to `ctx.meta` (`cleanup_timing`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click

from kinetic_tui.core.commands.grammar import Flag

F = TypeVar("F", bound=Callable[..., Any])
INFRA_META = "kinetic.infra"  # ctx.meta key: the infra overrides the command was given
LOCAL_NOTE = (
    "note: {flags}: these choose a GKE target; the local backend runs jobs on this machine, so here they "
    "only change what `config show` reports and what jobs record"
)
_VALUE = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")  # the profiles' value rule: these end up in bucket names
_INFRA_HELP = {
    "project": "GCP project for this command (overrides the profile and KINETIC_PROJECT)",
    "zone": "GCP zone for this command (overrides the profile and KINETIC_ZONE)",
    "cluster": "GKE cluster for this command (overrides the profile and KINETIC_CLUSTER)",
    "namespace": "Kubernetes namespace for this command (overrides the profile and KINETIC_NAMESPACE)",
}
CLEANUP_TIMING_HELP = "how long to wait, polling at the interval, for the job's workload to be gone"
TIMING_META = "kinetic.cleanup_timing"  # ctx.meta key: {"timeout": s, "poll_interval": s}
TIMING_DEFAULTS = {"timeout": 180.0, "poll_interval": 2.0}  # Kinetic's
MAX_WAIT = 86400.0  # a day: the largest timing value accepted


def _choose(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Record one override and hand all of them so far to the resolver, before the command body runs."""
    from kinetic_tui.core.profiles import choose_infra

    if value is not None and not _VALUE.fullmatch(value):
        raise click.BadParameter(
            f"{value!r}: expected lowercase letters, digits, '.', '_' or '-' (starting with a letter or digit)"
        )
    chosen = ctx.meta.setdefault(INFRA_META, {})
    if value is not None:
        chosen[param.name or ""] = value
    choose_infra(**chosen)
    return value


def with_params(params: Sequence[click.Parameter]) -> Callable[[F], F]:
    """Decorate a command with ready-made parameters, in the order given (as stacked `@click.option`s)."""

    def decorate(func: F) -> F:
        memo: list[click.Parameter] = func.__dict__.setdefault("__click_params__", [])
        memo.extend(reversed(params))  # click reverses the memo: decorators apply bottom-up
        return func

    return decorate


def infra_params(namespace: bool = False) -> list[click.Parameter]:
    """The override options (their values reach the resolver, not the command's callback)."""
    fields = ("project", "zone", "cluster", "namespace") if namespace else ("project", "zone", "cluster")
    return [
        click.Option([f"--{field}"], callback=_choose, expose_value=False, is_eager=True, help=_INFRA_HELP[field])
        for field in fields
    ]


def infra_options(namespace: bool = False) -> Callable[[F], F]:
    return with_params(infra_params(namespace))


def note_local_overrides() -> None:
    """On a local profile, say on stderr what the given overrides do there (nothing cluster-related); an
    unresolvable profile is left to the command to report."""
    from kinetic_tui.core.backends.registry import profile_has_stack
    from kinetic_tui.core.errors import KineticError
    from kinetic_tui.core.profiles import resolve_infra

    given = click.get_current_context().meta.get(INFRA_META) or {}
    if not given:
        return
    try:
        if profile_has_stack(resolve_infra()):
            return
    except KineticError:
        return
    click.echo(LOCAL_NOTE.format(flags=", ".join(f"--{field}" for field in given)), err=True)


def yes_option(help_text: str) -> Callable[[F], F]:
    """`-y/--yes` where the command asks before acting: the callback gets `yes`."""
    return click.option("--yes", "-y", is_flag=True, help=help_text)


NEVER_ASKS = click.option("--yes", "-y", is_flag=True, expose_value=False, help="accepted as Kinetic's; never asks")


def cleanup_timing_params() -> list[click.Parameter]:
    """Kinetic's `--cleanup-timeout` and `--cleanup-poll-interval` (see the module docstring)."""
    return [
        click.Option(
            [f"--cleanup-{key.replace('_', '-')}"],
            type=click.FloatRange(0.0, MAX_WAIT, min_open=key == "poll_interval"),
            default=default,
            show_default=True,
            expose_value=False,
            callback=lambda ctx, param, value, key=key: ctx.meta.setdefault(TIMING_META, {}).update({key: value}),
            help=CLEANUP_TIMING_HELP,
        )
        for key, default in TIMING_DEFAULTS.items()
    ]


def cleanup_timing() -> dict[str, float]:
    """The running command's cleanup timing, as `JobHandle.wait_removed` takes it."""
    return {**TIMING_DEFAULTS, **click.get_current_context().meta.get(TIMING_META, {})}


def cli_words(args: Sequence[str], shorts: Iterable[Flag], dropped: Iterable[click.Parameter]) -> list[str]:
    """A verb's arguments as the command language reads them: each flag's short alias spelled as its long
    name (`-n5`, `-fn 5`), and the CLI's own options (`dropped`, already applied by click) removed."""
    by_letter = {flag.short[1:]: flag for flag in shorts if flag.short}
    valued = {name for param in dropped if isinstance(param, click.Option) and not param.is_flag for name in param.opts}
    switches = {name for param in dropped if isinstance(param, click.Option) and param.is_flag for name in param.opts}
    words: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        index += 1
        if word == "--":
            return words + list(args[index - 1 :])
        name = word.partition("=")[0]
        if name in valued:
            index += 0 if "=" in word else 1
            continue
        if word in switches:
            continue
        if word.startswith("-") and not word.startswith("--") and len(word) > 1 and word[1] in by_letter:
            expanded, consumed = _expand_short(word[1:], by_letter, args[index:])
            words += expanded
            index += consumed
            continue
        words.append(word)
    return words


def _expand_short(letters: str, by_letter: dict[str, Flag], rest: Sequence[str]) -> tuple[list[str], int]:
    """`fn5` -> (['--follow', '--tail', '5'], 0); a valued flag takes the rest of the word or the next one."""
    words: list[str] = []
    for position, letter in enumerate(letters):
        flag = by_letter.get(letter)
        if flag is None:  # not ours: the command language names the bad flag
            return [*words, f"-{letters[position:]}"], 0
        words.append(flag.name)
        if flag.type is not None:
            value = letters[position + 1 :]
            if value:
                return [*words, value], 0
            return ([*words, rest[0]], 1) if rest else (words, 0)
    return words, 0
