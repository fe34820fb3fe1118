"""The command language (SPEC 4): one grammar for `--script`, the console's `:` bar and key bindings."""
from kinetic_tui.core.commands.grammar import VERBS, Verb
from kinetic_tui.core.commands.help import help_text
from kinetic_tui.core.commands.parser import Command, ParseError, complete, parse_line, parse_script, verbs

__all__ = ["VERBS", "Command", "ParseError", "Verb", "complete", "help_text", "parse_line", "parse_script",
           "verbs"]
