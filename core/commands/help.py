"""`help` and `help VERB` text, generated from the verb table so it can never drift from the parser."""
from __future__ import annotations

from kinetic_tui.core.commands.grammar import FAMILIES, VERBS, WAIT_FLAGS, Flag, Verb, unknown_verb_message
from kinetic_tui.core.errors import NotFoundError

_WIDTH = 28


def help_text(verb: str | None = None) -> str:
    """The overview without an argument; for a verb, its usage and every argument; for a family such
    as `pool`, every verb in it."""
    if verb is None:
        return _overview()
    if verb in FAMILIES:
        return "\n\n".join(_verb_help(VERBS[f"{verb} {sub}"]) for sub in FAMILIES[verb])
    if verb not in VERBS:
        raise NotFoundError(unknown_verb_message(verb))
    return _verb_help(VERBS[verb])


def _row(left: str, right: str) -> str:
    return f"  {left:<{_WIDTH}} {right}" if len(left) < _WIDTH else f"  {left}\n  {'':<{_WIDTH}} {right}"


def _overview() -> str:
    lines = ["Commands, one per line; `help VERB` explains one.", ""]
    lines += [_row(verb.name, verb.help) for verb in VERBS.values()]
    lines += [
        "",
        "Quote with '...' or \"...\" as in a shell; `#` starts a comment. Flags go anywhere after the",
        "verb, as --flag VALUE or --flag=VALUE. Verbs that start work take --wait or --detach.",
    ]
    return "\n".join(lines)


def _flag_row(flag: Flag) -> str:
    left = f"{flag.name} {flag.metavar}".rstrip()
    notes = [flag.help]
    if flag.type is not None:
        notes.append(flag.type.expected)
    if flag.required:
        notes.append("required")
    if flag.repeatable:
        notes.append("repeatable")
    elif flag.type is not None and flag.default is not None:
        notes.append(f"default {flag.type.render(flag.default)}")
    return _row(left, "; ".join(notes))


def _verb_help(verb: Verb) -> str:
    lines = [f"usage: {verb.usage()}", verb.help]
    if verb.positionals:
        lines += ["", "arguments:"]
        lines += [_row(pos.metavar, f"{pos.help}; {pos.type.expected}" + ("" if pos.required else "; optional"))
                  for pos in verb.positionals]
    flags = [_flag_row(flag) for flag in verb.flags]
    if verb.starts_work:
        flags += [_row(name, verb.flag_table[name].help) for name in WAIT_FLAGS]
    if flags:
        lines += ["", "flags:", *flags]
    return "\n".join(lines)
