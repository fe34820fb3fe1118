"""`help` and `help VERB` text, built from the verb table's entries so it can never drift from the parser.

`flag_notes` is shared with the click CLI, so `kinetic-tui VERB --help` and `help VERB` say the same.
"""

from __future__ import annotations

from collections.abc import Iterable

from kinetic_tui.core.commands.grammar import WAIT_FLAGS, Flag, Verb

_WIDTH = 28


def _row(left: str, right: str) -> str:
    return f"  {left:<{_WIDTH}} {right}" if len(left) < _WIDTH else f"  {left}\n  {'':<{_WIDTH}} {right}"


def overview(verbs: Iterable[Verb]) -> str:
    """Every verb with its help line, and how lines are written."""
    lines = ["Commands, one per line; `help VERB` explains one.", ""]
    lines += [_row(verb.name, verb.help) for verb in verbs]
    lines += [
        "",
        "Quote with '...' or \"...\" as in a shell; `#` starts a comment. Flags go anywhere after the",
        "verb, as --flag VALUE or --flag=VALUE. Verbs that start work take --wait or --detach.",
    ]
    return "\n".join(lines)


def flag_notes(flag: Flag) -> str:
    """The flag's help, what its value must be, and whether it is required, repeatable or defaulted."""
    notes = [flag.help]
    if flag.type is not None:
        notes.append(flag.type.expected)
    if flag.required:
        notes.append("required")
    if flag.repeatable:
        notes.append("repeatable")
    elif flag.type is not None and flag.default is not None:
        notes.append(f"default {flag.type.render(flag.default)}")
    return "; ".join(notes)


def _flag_row(flag: Flag) -> str:
    return _row(f"{flag.name} {flag.metavar}".rstrip(), flag_notes(flag))


def verb_help(verb: Verb) -> str:
    """`usage: ...`, the verb's help line, then every argument and flag."""
    lines = [f"usage: {verb.usage()}", verb.help]
    if verb.positionals:
        lines += ["", "arguments:"]
        lines += [
            _row(pos.metavar, f"{pos.help}; {pos.type.expected}" + ("" if pos.required else "; optional"))
            for pos in verb.positionals
        ]
    flags = [_flag_row(flag) for flag in verb.flags]
    if verb.starts_work:
        flags += [_row(name, verb.flag_table[name].help) for name in WAIT_FLAGS]
    if flags:
        lines += ["", "flags:", *flags]
    return "\n".join(lines)
