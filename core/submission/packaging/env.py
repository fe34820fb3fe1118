"""Environment capture: which of the client's variables travel in the job payload."""

from __future__ import annotations

import fnmatch
import os
import warnings
from collections.abc import Iterable

from kinetic_tui.core.errors import ValidationError

# Client-side process configuration that breaks a job when it overrides the job's own environment: every
# name Kinetic's wildcard blocklist holds, and the LD_*, CONDA_* and TMP* families it lists members of.
NEVER_WILDCARD = (
    "PATH",
    "HOME",
    "PYTHONPATH",
    "LD_*",
    "VIRTUAL_ENV",
    "CONDA_*",
    "SHELL",
    "TMP*",
    "TEMP",
    "HOSTNAME",
    "USER",
    "LOGNAME",
    "SSH_AUTH_SOCK",
    "KUBERNETES_SERVICE_HOST",
    "KERAS_BACKEND",
)
SENSITIVE_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "CREDENTIAL")


class SensitiveEnvWarning(UserWarning):
    """A captured environment variable looks like a secret; its value travels inside the payload."""


def capture_env(patterns: Iterable[str] | None) -> tuple[dict[str, str], list[str]]:
    """Return `(captured vars, warning messages)` for exact names and `PREFIX*` patterns.

    Wildcards never capture the machine-specific variables in NEVER_WILDCARD (an exact name still
    does: it was asked for). Each captured name that looks like a secret is also reported with
    `warnings.warn(..., SensitiveEnvWarning)`; a missing exact name is only listed in the messages.
    """
    if patterns is None:
        return {}, []
    if isinstance(patterns, (str, bytes)):
        raise ValidationError(
            f"capture_env_vars must be a list of names or PREFIX* patterns, got the string {patterns!r}"
        )
    patterns = list(patterns)
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern or "*" in pattern[:-1]:
            raise ValidationError(
                f"capture_env_vars entry {pattern!r} is invalid: use an exact name or PREFIX* ('*' only at the end)"
            )
    captured: dict[str, str] = {}
    messages = []
    for pattern in patterns:
        if pattern.endswith("*"):
            captured.update(
                (name, value)
                for name, value in os.environ.items()
                if name.startswith(pattern[:-1]) and not _never_wildcard(name)
            )
        elif pattern in os.environ:
            captured[pattern] = os.environ[pattern]
        else:
            messages.append(f"capture_env_vars: {pattern!r} is not set and is not captured")
    for name in sorted(captured):
        if any(word in name.upper() for word in SENSITIVE_WORDS):
            message = f"capturing {name!r}, which looks like a secret: its value travels in the job payload"
            warnings.warn(message, SensitiveEnvWarning, stacklevel=2)
            messages.append(message)
    return dict(sorted(captured.items())), messages


def _never_wildcard(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, blocked) for blocked in NEVER_WILDCARD)
