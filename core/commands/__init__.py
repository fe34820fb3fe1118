"""The command language: one grammar for `--script`, the console's `:` bar, key bindings and the CLI."""

from kinetic_tui.core.commands.grammar import Verb
from kinetic_tui.core.commands.parser import Command, ParseError, complete, parse_line, parse_script, verbs
from kinetic_tui.core.commands.verbs import VERBS, help_text

__all__ = ["VERBS", "Command", "ParseError", "Verb", "complete", "help_text", "parse_line", "parse_script", "verbs"]
