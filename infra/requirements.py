"""Requirement filtering for image tags, so that only changes pip would notice change a tag:

- comments (`#` at a line start or after whitespace), blank lines and surrounding whitespace go;
  `\\` line continuations are joined;
- project names are PEP 503-normalised (`Scikit_Learn` == `scikit-learn`), extras and version specifiers
  are sorted and stripped of spaces (`numpy >= 1, < 2` == `numpy<2,>=1`), markers keep single spaces;
- `-e`/`--editable` lines and local paths (`.`, `./x`, `../x`, `/x`, `file:`) are dropped: the job's own
  code travels in context.zip, and a build has no access to the client's disk;
- `kinetic-tui` is dropped: the runner needs nothing of the client package;
- `-r`/`-c` includes are refused (a ValidationError naming the line): the build cannot read them;
- the remaining lines are deduplicated and sorted (pip resolves them as a set).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kinetic_tui.core.errors import ValidationError

_DROPPED_PROJECTS = frozenset({"kinetic-tui"})

_INCLUDE = re.compile(r"(-r|--requirement|-c|--constraint)(\s|=|$)")
_LOCAL = re.compile(r"(-e|--editable)(\s|=|$)|\.{1,2}(/|$)|/|file:")
_COMMENT = re.compile(r"(?:^|\s)#.*")
_OPTIONS = re.compile(r"\s+(?=--)")
_SEPARATORS = re.compile(r"[-_.]+")
_REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*(.*)")


def filter_requirements(text: str) -> tuple[str, ...]:
    """The requirement lines that matter to pip, normalised (rules in the module docstring)."""
    kept: set[str] = set()
    for number, line in _logical_lines(text):
        if _INCLUDE.match(line):
            raise ValidationError(
                f"requirements line {number} {line!r} includes another file, which an image build cannot "
                "read; put its requirements in this file"
            )
        if _LOCAL.match(line):
            continue
        normalised = line if line.startswith("-") else _normalise_requirement(line)
        if normalised is not None:
            kept.add(" ".join(normalised.split()))
    return tuple(sorted(kept))


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first physical line number, line) with comments stripped and `\\` continuations joined."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _COMMENT.sub("", raw) if "#" in raw else raw
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            yield start, line
    if pending.strip():
        yield start, pending.strip()


def _pep503(name: str) -> str:
    return _SEPARATORS.sub("-", name.strip()).lower()


def _normalise_requirement(line: str) -> str | None:
    """PEP 503 name, sorted extras and specifiers; None for a project the image must not install.

    Per-requirement options (`--hash=...` from pip-compile) are kept, sorted, after the requirement.
    """
    head, *options = _OPTIONS.split(line) if "--" in line else (line,)
    requirement, _, marker = head.partition(";")
    match = _REQUIREMENT.fullmatch(requirement.strip())
    if match is None:  # a URL or archive name: nothing to normalise but whitespace
        return " ".join([head, *sorted(options)])
    name, extras, rest = match.groups()
    name = _pep503(name)
    if name in _DROPPED_PROJECTS:
        return None
    extras_text = ""
    if extras and extras.strip():
        extras_text = "[" + ",".join(sorted({_pep503(extra) for extra in extras.split(",")})) + "]"
    rest = rest.strip()
    if rest.startswith("@"):
        spec = " @ " + rest[1:].strip()
    else:
        spec = ",".join(sorted(part.replace(" ", "") for part in rest.split(",") if part.strip()))
    marker_text = f"; {' '.join(marker.split())}" if marker.strip() else ""
    return " ".join([f"{name}{extras_text}{spec}{marker_text}", *sorted(options)])
