"""Argument checks shared across the core: each refuses bad input with a one-line error naming the field.

Values arrive from keys, scripts, JSON records and Python callers alike, so the checks are strict about
types (a bool is not a count, NaN is not a number) and their messages say what was expected.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from kinetic_tui.core.errors import ValidationError


def require_name(field: str, value: object) -> str:
    """Names become keys, table rows and command arguments, so blank or non-string names are refused."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{field}: expected a non-empty string, got {value!r}")
    return value


JOB_ID_SHAPE = "job-<8 hex digits>, like job-0123abcd"
GROUP_ID_SHAPE = "grp-<8 hex digits>, like grp-0123abcd (or group-<8 hex digits> from earlier versions)"
_JOB_ID = re.compile(r"job-[0-9a-f]{8}")
# new batches get Kinetic's `grp-` ids; `group-` ids of batches created before stay attachable
_GROUP_ID = re.compile(r"(?:grp|group)-[0-9a-f]{8}")


def require_job_id(value: object, field: str = "job id") -> str:
    """Ids become paths and lookup keys, so anything but the exact shape (a glob, `..`, None) is refused
    before a file is touched."""
    return _require_id(field, value, _JOB_ID, JOB_ID_SHAPE)


def is_job_id(value: object) -> bool:
    """True for a string of the exact job id shape (a directory name under the home, say)."""
    return isinstance(value, str) and bool(_JOB_ID.fullmatch(value))


def require_group_id(value: object, field: str = "batch id") -> str:
    """A batch's group id, held to its shape for the same reason as a job id."""
    return _require_id(field, value, _GROUP_ID, GROUP_ID_SHAPE)


def _require_id(field: str, value: object, pattern: re.Pattern[str], shape: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        shown = repr(value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "...")
        raise ValidationError(f"{field}: expected {shape}, got {shown}")
    return value


# The documented upper bound of every number a user gives (the command language's help and the Python
# API hold the same ones): far above real use, and below where a value would overflow SQLite's 64-bit
# integers, lose integer precision as a float, or start a runaway job (a million epochs, not 10**23).
MAX_NODES = 10_000  # nodes of a pool
MAX_EPOCHS = 1_000_000  # epochs of a training, and its checkpoint interval
MAX_TRIALS = 100_000  # a study's trial budget
MAX_SEED = 2**63 - 1  # a study's seed, as SQLite stores it
MAX_VERSION = 2**63 - 1  # a model version number
MAX_INSTANCES = 10_000  # an endpoint's instance bounds
MAX_CONCURRENCY = 1_000_000_000  # requests in flight, observed or targeted per instance
MAX_LOAD_CONCURRENCY = 256  # requests `load` really sends per tick: one thread each
MAX_TICK = 2**53  # ticks and cooldowns: ticks are compared as floats, exact up to 2**53
MAX_LOAD_TICKS = 1_000_000  # ticks one `load` drives
MAX_LOADED_MODELS = 1_000  # models an endpoint keeps loaded
MAX_LISTED = 10_000_000  # jobs one listing shows
MAX_TAIL_LINES = 10_000_000  # lines `logs --tail` keeps
MAX_SECONDS = 31_536_000.0  # a timeout: one year
MAX_STEP_RETRIES = 100  # retries of one pipeline step


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)([smhdw]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_AGE_SECONDS = 100 * 365 * 86400.0  # an age: a century


def parse_duration(field: str, text: str) -> float:
    """`30d`, `12h`, `90m`, `3600s` or plain seconds, as seconds."""
    found = _DURATION.fullmatch(text.strip())
    if found is not None:
        value = float(found[1]) * _UNIT_SECONDS[found[2]]
        if value <= MAX_AGE_SECONDS:
            return value
    raise ValidationError(
        f"{field}: expected a duration such as 30d, 12h, 90m or 3600s (units s, m, h, d, w; at most 100 years), "
        f"got {text!r}"
    )


def int_bounds(minimum: int, maximum: int | None) -> str:
    """`>= 1 and <= 10000`: the range an integer must fall in, as messages and help show it."""
    return f">= {minimum}" if maximum is None else f">= {minimum} and <= {maximum}"


def require_int(field: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """Counts must be real integers: a bool or a float would silently change the arithmetic."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{field}: expected an integer {int_bounds(minimum, maximum)}, got {value!r}")
    if value < minimum:
        raise ValidationError(f"{field}: must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValidationError(f"{field}: must be {int_bounds(minimum, maximum)}, got {value}")
    return value


def require_number(
    field: str,
    value: object,
    *,
    minimum: float | None = None,
    exclusive: bool = False,
    maximum: float | None = None,
) -> float:
    """Finite real numbers only: NaN would make every comparison false and corrupt the state machine."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f"{field}: expected a finite number, got {value!r}")
    if minimum is not None and (value <= minimum if exclusive else value < minimum):
        bound = f"> {minimum}" if exclusive else f">= {minimum}"
        raise ValidationError(f"{field}: must be {bound}, got {value}")
    if maximum is not None and value > maximum:
        raise ValidationError(f"{field}: must be <= {maximum}, got {value}")
    return value


def known_names(names: Iterable[str], limit: int = 10) -> str:
    """A short list of what exists, for not-found messages that must stay on one line."""
    ordered = sorted(names)
    if not ordered:
        return "none"
    shown = ", ".join(ordered[:limit])
    extra = len(ordered) - limit
    return f"{shown} (+{extra} more)" if extra > 0 else shown


def positive_int(field: str, value: Any, maximum: int | None = None) -> int:
    """A count of at least one, in the `NAME must be an integer >= 1` form training and tuning report."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{field} must be an integer >= 1, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValidationError(f"{field} must be an integer {int_bounds(1, maximum)}, got {value!r}")
    return value


def json_copy(field: str, value: Any) -> Any:
    """Deep-copy a value that will be hashed or persisted, so a bad value fails up front, not at completion."""
    try:
        json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{field} must be JSON-serialisable: {exc}") from None
    return copy.deepcopy(value)
