"""Typed errors shared across the core.

Every error the core raises on purpose derives from `KineticError`, so the CLI, `--script` and the TUI
can show a one-line message for these and keep a traceback only for genuine bugs (or `--debug`).
Validation problems are also `ValueError`s (the public API documents `ValueError` for bad arguments):
`ValidationError` subclasses both so callers may catch either.
"""


class KineticError(Exception):
    """Base of every deliberate, user-facing error."""


class ValidationError(KineticError, ValueError):
    """An argument is malformed; the message names the field and the allowed values."""


class PathNotFoundError(KineticError, FileNotFoundError, ValueError):
    """A local path the user named does not exist: a `FileNotFoundError` as in Kinetic, and still a
    `ValueError` like every other bad argument."""


class ArgumentTypeError(ValidationError, TypeError):
    """An argument has the wrong type where Kinetic raises TypeError (volumes, a map input for its mode); a
    ValidationError still, so callers catching either keep working."""


class NotFoundError(KineticError, LookupError):
    """An id, name, group or version does not exist; the message names what does."""


def one_line(exc: BaseException) -> str:
    """The first line of an error's message: what notifications, `--script` and events show."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
