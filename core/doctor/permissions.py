"""The home and what lies under it are owner-only: captured secret values, logs and results live there.

Checked by walking the home with lstat (symlinks are not followed: what they point at is not ours). A path
owned by another user cannot be repaired here; one open to group or others is tightened by `--repair` to
its owner bits (files 0600, directories 0700 for what the product writes). The home's own 0700 already
hides its contents, so tightening a file a job chose to share takes nothing away from anyone.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from kinetic_tui.core.doctor.report import Finding

CHECK = "permissions"


@dataclass(frozen=True)
class Exposed:
    """Paths under the home open to group or others, and paths another user owns."""

    home_mode: int
    loose: list[Path]
    foreign: list[Path]


def scan(home: Path) -> Exposed:
    uid = os.geteuid()
    loose: list[Path] = []
    foreign: list[Path] = []
    home_mode = stat.S_IMODE(home.lstat().st_mode)
    for root, dirs, files in os.walk(home):
        for name in (*dirs, *files):
            path = Path(root) / name
            try:
                info = path.lstat()
            except OSError:  # removed while we walked
                continue
            if stat.S_ISLNK(info.st_mode):
                continue
            if info.st_uid != uid:
                foreign.append(path)
            elif stat.S_IMODE(info.st_mode) & 0o077:
                loose.append(path)
    return Exposed(home_mode, loose, foreign)


def finding(home: Path, found: Exposed) -> Finding:
    """A problem when the home is open to others or holds another user's files. Files open to group or others
    inside a 0700 home are reported but are no problem: nobody else can reach them, and a library client's
    process writes with its user's own umask by design (we never change a process we do not own)."""
    if found.home_mode & 0o077:
        loose = f"; {_count(found.loose)} under it too (e.g. {_shown(home, found.loose)})" if found.loose else ""
        return Finding(
            CHECK, False, f"{home} is {found.home_mode:04o}, not 0700{loose}", "--repair makes them owner-only"
        )
    if found.foreign:
        return Finding(
            CHECK,
            False,
            f"{_count(found.foreign)} owned by another user (e.g. {_shown(home, found.foreign)})",
            f"chown them to this user (uid {os.geteuid()})",
        )
    if found.loose:
        return Finding(
            CHECK,
            True,
            f"{home} is 0700; {_count(found.loose)} inside it are open to group or others but unreachable to them "
            f"(e.g. {_shown(home, found.loose)}; --repair makes them owner-only)",
        )
    return Finding(CHECK, True, f"{home} is 0700 and everything under it is owner-only")


def repair(home: Path, found: Exposed) -> list[str]:
    actions = []
    if found.home_mode & 0o077:
        home.chmod(found.home_mode & 0o700)
        actions.append(f"tightened {home} from {found.home_mode:04o} to {found.home_mode & 0o700:04o}")
    tightened = []
    for path in found.loose:
        try:
            path.chmod(stat.S_IMODE(path.lstat().st_mode) & 0o700)
        except OSError as exc:
            actions.append(f"could not tighten {path}: {exc.strerror or exc}")
            continue
        tightened.append(path)
    if tightened:
        actions.append(f"made {_count(tightened)} owner-only (e.g. {_shown(home, tightened)})")
    return actions


def _count(paths: list[Path]) -> str:
    return f"{len(paths)} path" + ("" if len(paths) == 1 else "s")


def _shown(home: Path, paths: list[Path]) -> str:
    named = [p for p in paths if p.name.startswith("state.db")] or paths
    return str(named[0].relative_to(home))
